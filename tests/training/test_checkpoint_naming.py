"""Checkpoints are named as TF names them (``ckpt-1``, ``ckpt-2``) and ``latest_checkpoint`` finds the one
saved last, as ``tf.train.latest_checkpoint`` (TF 2.21's behaviour, checked, in each test's docstring)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np

import interdist as idist
from interdist.checkpoint import latest_checkpoint


def test_save_numbers_from_1_without_padding(tmp_path: Path) -> None:
    """TF: ``Checkpoint.save(d/"model")`` twice gives ``d/model-1``, ``d/model-2``; latest is ``model-2``."""
    v = idist.Variable(np.float32(1.0))
    ckpt = idist.Checkpoint(v=v)
    assert ckpt.save_counter == 0
    first, second = ckpt.save(tmp_path / "model"), ckpt.save(tmp_path / "model")
    assert (first, second) == (str(tmp_path / "model-1"), str(tmp_path / "model-2"))
    assert ckpt.save_counter == 2
    assert latest_checkpoint(tmp_path) == second
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint.json", "model-1", "model-2"]


def test_latest_follows_every_save_of_the_directory(tmp_path: Path) -> None:
    """TF: a manager's save then a Checkpoint.save into the same directory: each is the latest in turn;
    ``write`` is not recorded."""
    v = idist.Variable(np.float32(1.0))
    ckpt = idist.Checkpoint(v=v)
    manager = idist.CheckpointManager(ckpt, tmp_path, max_to_keep=2)
    by_manager = manager.save()
    assert Path(by_manager).name == "ckpt-1" and latest_checkpoint(tmp_path) == by_manager
    by_save = ckpt.save(tmp_path / "model")
    assert latest_checkpoint(tmp_path) == by_save == str(tmp_path / "model-1")
    ckpt.write(tmp_path / "elsewhere")
    assert latest_checkpoint(tmp_path) == by_save
    assert manager.checkpoints == [by_manager]  # the manager's list is kept
    assert Path(idist.CheckpointManager(ckpt, tmp_path, max_to_keep=2).save()).name == "ckpt-2"
    assert Path(latest_checkpoint(tmp_path) or "").name == "ckpt-2"


def test_nothing_saved_is_none(tmp_path: Path) -> None:
    """TF: None for an empty directory, a missing one, and when the latest was deleted since."""
    assert latest_checkpoint(tmp_path) is None
    assert latest_checkpoint(tmp_path / "missing") is None
    path = idist.Checkpoint(v=idist.Variable(1.0)).save(tmp_path / "ckpt")
    assert latest_checkpoint(tmp_path) == path
    shutil.rmtree(path)
    assert latest_checkpoint(tmp_path) is None


def test_restore_sets_the_save_counter(tmp_path: Path) -> None:
    """TF: a new Checkpoint restored from ``ckpt-2`` saves ``ckpt-3`` next; from ``ckpt-1``, ``ckpt-2`` again."""
    v = idist.Variable(np.float32(1.0))
    ckpt = idist.Checkpoint(v=v)
    first = ckpt.save(tmp_path / "ckpt")
    second = ckpt.save(tmp_path / "ckpt")
    again = idist.Checkpoint(v=v)
    again.restore(second)
    assert again.save_counter == 2 and Path(again.save(tmp_path / "ckpt")).name == "ckpt-3"
    other = idist.Checkpoint(v=v)
    other.restore(first)
    assert Path(other.save(tmp_path / "ckpt")).name == "ckpt-2"


def test_old_zero_padded_checkpoints_are_still_read(tmp_path: Path) -> None:
    """Directories an older interdist named ``ckpt-000001`` (no ``latest`` recorded): adopted in number
    order, restored, and the numbering goes on after them."""
    v = idist.Variable(np.float32(1.0))
    ckpt = idist.Checkpoint(v=v)
    ckpt.write(tmp_path / "ckpt-000001")
    v.assign(2.0)
    ckpt.write(tmp_path / "ckpt-000002")
    assert latest_checkpoint(tmp_path) == str(tmp_path / "ckpt-000002")
    manager = idist.CheckpointManager(ckpt, tmp_path, max_to_keep=3)
    assert [Path(p).name for p in manager.checkpoints] == ["ckpt-000001", "ckpt-000002"]
    v.assign(0.0)
    ckpt.restore(manager.checkpoints[0])
    assert float(v) == 1.0
    assert Path(manager.save()).name == "ckpt-3"
    assert Path(latest_checkpoint(tmp_path) or "").name == "ckpt-3"


def test_a_state_file_of_an_older_version_is_read(tmp_path: Path) -> None:
    """A manager's list without a ``latest`` record: its newest checkpoint."""
    v = idist.Variable(np.float32(1.0))
    manager = idist.CheckpointManager(idist.Checkpoint(v=v), tmp_path, max_to_keep=3)
    manager.save()
    manager.save()
    state = json.loads((tmp_path / "checkpoint.json").read_text())
    assert state["latest"] == "ckpt-2"
    del state["latest"]
    (tmp_path / "checkpoint.json").write_text(json.dumps(state))
    assert Path(latest_checkpoint(tmp_path) or "").name == "ckpt-2"


def test_latest_never_points_outside_the_directory(tmp_path: Path) -> None:
    inner = tmp_path / "inner"
    v = idist.Variable(np.float32(1.0))
    idist.Checkpoint(v=v).save(inner / "ckpt")
    idist.Checkpoint(v=v).write(tmp_path / "ckpt-9")
    state = json.loads((inner / "checkpoint.json").read_text())
    state["latest"] = "../ckpt-9"
    (inner / "checkpoint.json").write_text(json.dumps(state))
    assert latest_checkpoint(inner) is None


def test_a_foreign_state_file_is_left_alone_by_save(tmp_path: Path) -> None:
    (tmp_path / "checkpoint.json").write_text(json.dumps({"model_checkpoint_path": "x"}))
    path = idist.Checkpoint(v=idist.Variable(1.0)).save(tmp_path / "ckpt")
    assert Path(path).name == "ckpt-1"
    assert json.loads((tmp_path / "checkpoint.json").read_text()) == {"model_checkpoint_path": "x"}
