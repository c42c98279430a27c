"""The inline dashboard is never behind at the end of a cell, and repairs show at once (a real kernel).

The dashboard redraws at most five times a second from a thread of its own, so before this a cell that
read (or closed) it right after a loop saw the state of a few steps earlier: lesson 01's check saw 5 of
20 steps in 1 of 3 Run Alls, and "DIVERGED" stayed after ``resync_variables`` until the next run.
Each cell below reads the dashboard with no sleep before it.
"""

from __future__ import annotations

import json

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")
pytest.importorskip("jupyter_bokeh")

CELLS = [
    """import json, warnings
import numpy as np
import interdist as idist
strategy = idist.MirroredStrategy(["CPU:0", "CPU:1"])
with strategy.scope():
    w = idist.Variable(np.zeros(2, np.float32), name="w", aggregation=idist.VariableAggregation.MEAN)
    bias = idist.Variable(np.float32(0.0), name="bias")  # NONE: replica-dependent updates make it drift
dash = strategy.dashboard()
dash""",
    """def step():
    w.assign_add(np.ones(2, np.float32))
    return idist.get_replica_context().all_reduce("SUM", np.float32(1.0))
for _ in range(20):
    strategy.run(step)""",
    """m = dash.dashboard.model
print(json.dumps({"steps": m.steps_finished, "runs": m.runs,
                  "progress_rows": len(dash.dashboard.views["progress"].source.data["step"])}))""",
    """def drift():
    bias.assign_add(np.float32(idist.get_replica_context().replica_id_in_sync_group))
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    strategy.run(drift)""",
    """print(json.dumps({"diverged": [m.variables[v].name for v in m.diverged_since]}))
copied = strategy.resync_variables(from_replica=0)""",
    """rows = dash.dashboard.views["replica-values"].source.data
status = {f"{v}/{r}": s for v, r, s in zip(rows["variable"], rows["replica"], rows["status"])}
print(json.dumps({"copied": copied, "diverged": [m.variables[v].name for v in m.diverged_since],
                  "bias": status["bias/1"], "values": [rows["values"][i] for i, v in enumerate(rows["variable"])
                                                       if v == "bias"]}))""",
    """for _ in range(5):
    strategy.run(step)
dash.dashboard.close()
print(json.dumps({"steps_after_close": m.steps_finished}))
strategy.close()""",
]


def out(cell: object) -> dict[str, object]:
    text = "".join(o.get("text", "") for o in cell.outputs if o.get("output_type") == "stream")  # type: ignore[attr-defined]
    return json.loads(next(line for line in text.splitlines() if line.startswith("{")))


@pytest.mark.timeout(240)
def test_each_cell_ends_with_the_dashboard_current() -> None:
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in CELLS])
    nbclient.NotebookClient(nb, timeout=180, kernel_name="python3").execute()
    errors = [o for c in nb.cells for o in c.outputs if o.get("output_type") == "error"]
    assert not errors, errors
    # the cell after the loop sees all 20 steps (and the redraw that drew them: the progress plot's rows)
    assert out(nb.cells[2]) == {"steps": 20, "runs": 20, "progress_rows": 20}
    assert out(nb.cells[4]) == {"diverged": ["bias"]}
    repaired = out(nb.cells[5])
    assert repaired["copied"] == ["w", "bias"] and repaired["diverged"] == []
    assert repaired["bias"].startswith("repaired (resync)")
    assert repaired["values"] == ["0", "0"]  # replica 1's copy shows replica 0's value at once
    assert out(nb.cells[6]) == {"steps_after_close": 26}  # 20 + drift + 5: close() drew what came before it
