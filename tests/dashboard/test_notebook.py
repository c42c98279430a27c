"""The quickstart notebook runs top to bottom and its dashboard cell carries BokehJS with the widget.

What the lesson teaches is checked in ``tests/notebooks/test_lessons.py`` (from its ``check-*`` cells).
"""

from __future__ import annotations

from pathlib import Path

import pytest

NOTEBOOK = Path(__file__).resolve().parents[2] / "notebooks" / "01_quickstart.ipynb"


@pytest.mark.timeout(240)
def test_quickstart_notebook_runs() -> None:
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")
    nb = nbformat.read(NOTEBOOK, as_version=4)
    assert "strategy.close()" in nb.cells[-1].source  # lessons end by closing their strategy
    client = nbclient.NotebookClient(nb, timeout=180, kernel_name="python3",
                                     resources={"metadata": {"path": str(NOTEBOOK.parent)}})
    client.execute()
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    assert not [o for o in outputs if o.get("output_type") == "error"]
    widget = [o for o in outputs if "application/vnd.jupyter.widget-view+json" in o.get("data", {})]
    assert widget, "the dashboard cell shows a widget"
    # ... after the output that loads BokehJS (inline: no CDN), saved with the same cell so a reload loads it again
    cell = next(c for c in nb.cells if c.cell_type == "code" and widget[0] in c.outputs)
    loader = [o for o in cell.outputs if "application/vnd.bokehjs_load.v0+json" in o.get("data", {})]
    assert len(loader) == 1 and cell.outputs.index(loader[0]) < cell.outputs.index(widget[0])
    js = loader[0]["data"]["application/vnd.bokehjs_load.v0+json"]
    assert js == loader[0]["data"]["application/javascript"] and "Bokeh" in js and "cdn.bokeh.org" not in js
    assert "text/html" not in loader[0]["data"]  # no "BokehJS successfully loaded" banner
