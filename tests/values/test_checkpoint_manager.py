"""CheckpointManager (``tf.train.CheckpointManager``) and property tests of save -> restore.

The properties run on variables outside any strategy (no cluster, so hypothesis can try many
cases); one test repeats the round trip on a Mirrored strategy's variables.
"""

from __future__ import annotations

import json
import os
import unicodedata
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import interdist as idist
from interdist.checkpoint import latest_checkpoint

DTYPES = [
    "float16",
    "float32",
    "float64",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "bool",
    "complex64",
    "complex128",
]
# names a user may give: unicode, '/', '..', '.', spaces, case-only twins, very long ones
NAME_PARTS = st.one_of(
    st.text(min_size=1, max_size=12),
    st.sampled_from(["..", ".", "x/y", "x_y", "X_Y", "a/../b", "/abs", "sp ace", "ü", "Ü", "名前", "\\", "~"]),
)
ARRAYS = st.sampled_from(DTYPES).flatmap(
    lambda dt: hnp.arrays(np.dtype(dt), hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=4))
)
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    """Equal bit for bit where it matters: NaNs in the same places count as equal."""
    return a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b, equal_nan=a.dtype.kind in "fc")


@SETTINGS
@given(items=st.dictionaries(NAME_PARTS, ARRAYS, min_size=1, max_size=6))
def test_save_then_restore_is_the_identity(
    tmp_path_factory: pytest.TempPathFactory, items: dict[str, np.ndarray]
) -> None:
    folded = {unicodedata.normalize("NFC", k) for k in items}
    assume(len(folded) == len(items))  # kwargs names are identifiers-as-given; keep them distinct
    variables = {name: idist.Variable(value) for name, value in items.items()}
    path = idist.Checkpoint(**variables).save(tmp_path_factory.mktemp("ck") / "ckpt")
    # every file stays inside the checkpoint, whatever the names
    assert sorted(os.listdir(path)) == ["index.json"] + [f"v{i:06d}.npy" for i in range(len(items))]
    for var in variables.values():  # scribble over everything, then restore
        var.assign(np.ones_like(np.asarray(var)))
    idist.Checkpoint(**variables).restore(path)
    for name, value in items.items():
        assert _same(np.asarray(variables[name]), value), name


@SETTINGS
@given(
    shapes=st.tuples(
        hnp.array_shapes(min_dims=0, max_dims=2, max_side=3), hnp.array_shapes(min_dims=0, max_dims=2, max_side=3)
    ),
    dtypes=st.tuples(st.sampled_from(DTYPES), st.sampled_from(DTYPES)),
)
def test_restore_refuses_a_different_shape_or_dtype_and_assigns_nothing(
    tmp_path_factory: pytest.TempPathFactory, shapes: tuple[tuple[int, ...], ...], dtypes: tuple[str, str]
) -> None:
    assume(shapes[0] != shapes[1] or dtypes[0] != dtypes[1])
    saved = idist.Variable(np.zeros(shapes[0], dtypes[0]))
    path = idist.Checkpoint(a=idist.Variable(np.float32(5.0)), w=saved).save(tmp_path_factory.mktemp("ck") / "c")
    a = idist.Variable(np.float32(1.0))
    other = idist.Variable(np.zeros(shapes[1], dtypes[1]))
    with pytest.raises(ValueError, match="'w'"):
        idist.Checkpoint(a=a, w=other).restore(path)
    assert float(a) == 1.0  # checked before anything was assigned


def test_two_spellings_of_one_path_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="'x/y'"):
        idist.Checkpoint(**{"x/y": idist.Variable(1.0), "x": {"y": idist.Variable(2.0)}}).save(tmp_path / "c")
    assert not list(tmp_path.iterdir())  # nothing written


def test_round_trip_on_mirrored_variables(mirrored2: idist.MirroredStrategy, tmp_path: Path) -> None:
    with mirrored2.scope():
        w = idist.Variable(np.arange(6, dtype=np.float64).reshape(2, 3), name="w")
        n = idist.Variable(np.int64(7), name="n")
    path = idist.Checkpoint(**{"layer/w": w, "LAYER/w": n}).save(tmp_path / "ckpt")
    w.assign(np.zeros((2, 3)))
    n.assign(np.int64(0))
    idist.Checkpoint(**{"layer/w": w, "LAYER/w": n}).restore(path)
    assert [np.asarray(c).tolist() for c in mirrored2.experimental_local_results(w)] == [
        [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]
    ] * 2
    assert [int(c) for c in mirrored2.experimental_local_results(n)] == [7, 7]


def test_manager_keeps_the_last_n_and_finds_the_latest(tmp_path: Path) -> None:
    v = idist.Variable(np.float32(0.0))
    manager = idist.CheckpointManager(idist.Checkpoint(v=v), tmp_path / "run", max_to_keep=3)
    assert manager.latest_checkpoint is None and manager.checkpoints == []
    paths = []
    for step in range(5):
        v.assign(float(step))
        paths.append(manager.save())
    assert [Path(p).name for p in paths] == ["ckpt-1", "ckpt-2", "ckpt-3", "ckpt-4", "ckpt-5"]
    assert manager.checkpoints == paths[2:]
    assert manager.latest_checkpoint == paths[4]
    assert sorted(os.listdir(tmp_path / "run")) == ["checkpoint.json", "ckpt-3", "ckpt-4", "ckpt-5"]
    assert latest_checkpoint(tmp_path / "run") == paths[4]
    v.assign(-1.0)
    assert manager.restore_or_initialize() == paths[4] and float(v) == 4.0
    idist.Checkpoint(v=v).restore(manager.checkpoints[0])
    assert float(v) == 2.0


def test_a_new_manager_continues_where_the_last_one_stopped(tmp_path: Path) -> None:
    """A restarted notebook: numbering goes on and the old checkpoints are adopted (and pruned)."""
    v = idist.Variable(np.float32(1.0))
    first = idist.CheckpointManager(idist.Checkpoint(v=v), tmp_path, max_to_keep=2)
    first.save()
    first.save()
    again = idist.CheckpointManager(idist.Checkpoint(v=v), tmp_path, max_to_keep=2)
    assert again.checkpoints == first.checkpoints
    assert Path(again.save()).name == "ckpt-3"
    assert [Path(p).name for p in again.checkpoints] == ["ckpt-2", "ckpt-3"]
    # without the state file the directory's checkpoints are adopted, in number order
    (tmp_path / "checkpoint.json").unlink()
    third = idist.CheckpointManager(idist.Checkpoint(v=v), tmp_path, max_to_keep=None)
    assert [Path(p).name for p in third.checkpoints] == ["ckpt-2", "ckpt-3"]
    # a checkpoint deleted by hand is not reported as latest
    import shutil

    shutil.rmtree(tmp_path / "ckpt-3")
    assert (
        Path(idist.CheckpointManager(idist.Checkpoint(v=v), tmp_path, max_to_keep=2).latest_checkpoint).name == "ckpt-2"
    )


def test_restore_or_initialize_calls_init_fn_when_there_is_nothing(tmp_path: Path) -> None:
    v = idist.Variable(np.float32(0.0))
    called = []
    manager = idist.CheckpointManager(
        idist.Checkpoint(v=v), tmp_path, max_to_keep=1, init_fn=lambda: called.append(v.assign(3.0))
    )
    assert manager.restore_or_initialize() is None
    assert len(called) == 1 and float(v) == 3.0


def test_keep_checkpoint_every_n_hours_preserves_old_ones(tmp_path: Path) -> None:
    v = idist.Variable(np.float32(0.0))
    manager = idist.CheckpointManager(idist.Checkpoint(v=v), tmp_path, max_to_keep=1, keep_checkpoint_every_n_hours=0.0)
    for _ in range(3):
        manager.save()
    # every checkpoint pushed out of the window is older than 0 h since the last preserved one: kept
    assert sorted(p.name for p in tmp_path.iterdir() if p.is_dir()) == ["ckpt-1", "ckpt-2", "ckpt-3"]
    assert [Path(p).name for p in manager.checkpoints] == ["ckpt-3"]
    state = json.loads((tmp_path / "checkpoint.json").read_text())
    assert state["preserved"] == ["ckpt-1", "ckpt-2"]
    assert Path(idist.CheckpointManager(idist.Checkpoint(v=v), tmp_path, max_to_keep=1).save()).name == "ckpt-4"


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"max_to_keep": 0}, ValueError),
        ({"max_to_keep": -2}, ValueError),
        ({"max_to_keep": 1.5}, TypeError),
        ({"max_to_keep": 1, "checkpoint_name": "../up"}, ValueError),
        ({"max_to_keep": 1, "checkpoint_name": ""}, ValueError),
        ({"max_to_keep": 1, "init_fn": 3}, TypeError),
    ],
)
def test_manager_refuses_bad_arguments(tmp_path: Path, kwargs: dict[str, object], error: type) -> None:
    with pytest.raises(error):
        idist.CheckpointManager(idist.Checkpoint(v=idist.Variable(1.0)), tmp_path, **kwargs)  # type: ignore[arg-type]


def test_manager_needs_a_checkpoint(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match="Checkpoint"):
        idist.CheckpointManager(idist.Variable(1.0), tmp_path, max_to_keep=1)  # type: ignore[arg-type]


def test_a_foreign_state_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "checkpoint.json").write_text(json.dumps({"model_checkpoint_path": "x"}))
    with pytest.raises(ValueError, match="not an interdist checkpoint list"):
        idist.CheckpointManager(idist.Checkpoint(v=idist.Variable(1.0)), tmp_path, max_to_keep=1)
    (tmp_path / "checkpoint.json").write_text("{not json")
    with pytest.raises(ValueError, match="not a readable checkpoint list"):
        latest_checkpoint(tmp_path)


def test_state_file_cannot_point_outside_the_directory(tmp_path: Path) -> None:
    inner = tmp_path / "inner"
    v = idist.Variable(np.float32(1.0))
    idist.CheckpointManager(idist.Checkpoint(v=v), inner, max_to_keep=1).save()
    idist.Checkpoint(v=v).write(tmp_path / "ckpt-9")  # a checkpoint outside the managed directory
    state = json.loads((inner / "checkpoint.json").read_text())
    state["checkpoints"].append({"name": "../ckpt-9", "time": 0.0})
    (inner / "checkpoint.json").write_text(json.dumps(state))
    assert Path(latest_checkpoint(inner) or "").name == "ckpt-1"
