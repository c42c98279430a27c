"""notebooks/10_training_a_cnn.ipynb: the TF tutorial's CNN trains on 4 CPU replicas, with the dashboard open.

The notebook is executed headless with nbclient, once per module, in a fresh kernel (as in test_lessons.py);
its ``check-*`` cells print JSON lines of facts, which the tests below read: the loss falls epoch after epoch,
the accuracy ends well above chance, the replicas' summed gradients are the gradient of the global batch's
mean, every weight's four copies are equal after training, and the dashboard saw every step and collective.
20-45 s on the 2-core machine at load 6-10 (6-20 s of it training), most of the rest starting the workers.
"""

from __future__ import annotations

import itertools
import math
from pathlib import Path
from typing import Any

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

from tests.notebooks._lesson_runs import _executed, executed, facts  # noqa: E402 - after the importorskips

NOTEBOOK = Path(__file__).resolve().parents[2] / "notebooks" / "10_training_a_cnn.ipynb"
REPLICAS, EPOCHS, STEPS = 4, 3, 3 * 1024 // 64
PARAMS = 320 + 18_496 + 102_464 + 650  # the tutorial's CNN, as Keras counts it


@pytest.fixture(scope="module")
def run() -> tuple[Any, float]:
    """The notebook, executed (its directory as the working directory), and how long it took: one run per
    session, shared with test_lessons.py's run of every notebook."""
    nb = executed(NOTEBOOK.name)
    return nb, _executed[NOTEBOOK.name][1]


def test_saved_without_outputs_and_shaped_as_a_lesson() -> None:
    nb = nbformat.read(NOTEBOOK, as_version=4)
    nbformat.validate(nb)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert all(not c.outputs and c.execution_count is None for c in code), "saved with outputs"
    assert nb.cells[0].cell_type == "markdown" and nb.cells[0].source.startswith("# 10 ")
    assert not any("assert " in c.source for c in code), "lessons tell, tests check"
    assert ".close()" in code[-1].source, "the last cell closes the strategy"
    checks = [i for i, c in enumerate(nb.cells) if any(t.startswith("check-") for t in c.metadata.get("tags", []))]
    closing = nb.cells.index(code[-1])
    assert checks and checks == list(range(checks[0], closing)), "the check cells come last, before the closing cell"
    head = nb.cells[checks[0] - 1]
    assert head.cell_type == "markdown" and "## For the course's tests" in head.source
    # the dashboard opens before the training loop runs
    source = [c.source for c in code]
    opened = next(i for i, s in enumerate(source) if "strategy.dashboard()" in s)
    trained = next(i for i, s in enumerate(source) if "strategy.run(train_step" in s)
    assert opened < trained
    text = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
    assert "docs/porting.md" in text and "docs/autodiff.md" in text


@pytest.mark.timeout(300)
def test_runs_without_errors_in_time(run: tuple[Any, float]) -> None:
    nb, took = run
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert all(c.execution_count for c in code), "a cell did not run"
    outputs = [o for c in code for o in c.get("outputs", [])]
    assert not [o for o in outputs if o.get("output_type") == "error"]
    stderr = [o["text"] for o in outputs if o.get("output_type") == "stream" and o.get("name") == "stderr"]
    assert not [t for t in stderr if "Traceback" in t or "Error" in t], stderr
    print(f"\n[lessons] {NOTEBOOK.name}: {took:.1f} s")
    assert took < 120, f"{NOTEBOOK.name} took {took:.0f} s"


def test_the_cnn_learns_on_four_replicas(run: tuple[Any, float]) -> None:
    f = facts(run[0], "check-training")
    assert f["num_replicas_in_sync"] == REPLICAS
    assert [d.rsplit("/", 1)[-1] for d in f["devices"]] == [f"device:CPU:{i}" for i in range(REPLICAS)]
    assert f["global_batch"] == 64 and f["per_replica_batch"] == 64 // REPLICAS and f["epochs"] == EPOCHS
    assert f["steps"] == len(f["step_losses"]) == STEPS == EPOCHS * f["examples"] // f["global_batch"]
    assert f["params"] == PARAMS
    losses, accuracies = f["epoch_losses"], f["epoch_accuracies"]
    assert len(losses) == len(accuracies) == EPOCHS
    assert abs(f["step_losses"][0] - math.log(10)) < 0.2  # untrained: about chance's crossentropy
    assert all(a > b for a, b in itertools.pairwise(losses)), losses  # the loss falls every epoch
    assert losses[-1] < 0.85 * losses[0], losses
    assert all(a < b for a, b in itertools.pairwise(accuracies)), accuracies
    assert accuracies[-1] > 0.5, accuracies  # chance is 0.1
    # each epoch's loss is the mean of its steps' (the sums of the replicas' parts)
    per_epoch = STEPS // EPOCHS
    for e, loss in enumerate(losses):
        assert loss == pytest.approx(sum(f["step_losses"][e * per_epoch : (e + 1) * per_epoch]) / per_epoch)


def test_summed_replica_gradients_are_the_gradient_of_the_global_mean(run: tuple[Any, float]) -> None:
    g = facts(run[0], "check-gradients")
    assert g["summed_shapes"] == [[3, 3, 1, 32], [32], [3, 3, 32, 64], [64], [1600, 64], [64], [64, 10], [10]]
    assert g["grad_size"] > 1e-3 and g["grad_gap"] < 1e-4 * g["grad_size"]  # equal, but for float32 rounding
    assert g["local_ratio"] == pytest.approx(REPLICAS, rel=1e-4)  # each replica's own mean: 4 times too large


def test_every_weights_copies_are_equal_after_training(run: tuple[Any, float]) -> None:
    m = facts(run[0], "check-mirrored")
    assert len(m["variables"]) == 8 and m["variables"][0] == "sequential/conv2d/kernel:0"
    assert m["copies"] == [REPLICAS] * 8
    assert m["copies_equal"] == [True] * 8  # bit for bit
    assert m["diverged"] == []


def test_the_dashboard_saw_every_step_and_all_reduce(run: tuple[Any, float]) -> None:
    d = facts(run[0], "check-dashboard")
    assert d["steps_finished"] == STEPS + 1  # the training steps, and the gradient check's run
    ops = d["timeline_ops"]
    # per replica and training step: apply_gradients' one batched all-reduce of the gradients (no merge_call exchange)
    assert ops["all_reduce"] == REPLICAS * STEPS and "merge_call" not in ops
    assert d["timeline_replicas"] == list(range(REPLICAS))
    assert d["max_nbytes"]["all_reduce"] > 0.9 * 4 * PARAMS  # all the gradients, float32
    assert d["timings"] >= REPLICAS * STEPS  # every all-reduce (and the check's reduces)
    assert d["diverged"] == [] and d["chips"] == ["done"] * REPLICAS
    assert d["shown_replicas"] == list(range(REPLICAS)) and d["shown_variables"] >= 8
    scalars = d["scalars"]  # each replica's own loss, logged every step: four falling lines
    assert sorted(scalars) == [str(r) for r in range(REPLICAS)]
    assert all(len(v) == STEPS for v in scalars.values())
    assert len({tuple(v) for v in scalars.values()}) == REPLICAS  # different images, different losses
    assert all(sum(v[-8:]) < 0.85 * sum(v[:8]) for v in scalars.values())
