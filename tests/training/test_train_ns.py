"""``idist.train``: ``tf.train``'s checkpoint names (``Checkpoint``, ``CheckpointManager``, ``latest_checkpoint``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

import interdist as idist
import interdist.train
from interdist import checkpoint, train


def test_the_namespace_holds_tfs_names() -> None:
    assert train.__all__ == ["Checkpoint", "CheckpointManager", "latest_checkpoint"]
    assert train.Checkpoint is idist.Checkpoint is checkpoint.Checkpoint
    assert train.CheckpointManager is idist.CheckpointManager
    assert interdist.train is train
    assert idist.train.latest_checkpoint is train.latest_checkpoint


def test_latest_checkpoint_as_tf(tmp_path: Path) -> None:
    """TF 2.21: ``tf.train.latest_checkpoint(d)`` is the prefix the last save wrote, None where nothing was."""
    assert train.latest_checkpoint(tmp_path) is None
    assert train.latest_checkpoint(str(tmp_path / "nowhere")) is None
    v = idist.Variable(np.float32(3.0))
    ckpt = train.Checkpoint(v=v)
    ckpt.save(str(tmp_path / "ckpt"))
    path = ckpt.save(str(tmp_path / "ckpt"))
    assert train.latest_checkpoint(str(tmp_path)) == path == str(tmp_path / "ckpt-2")
    v.assign(0.0)
    ckpt.restore(train.latest_checkpoint(tmp_path))
    assert float(v) == 3.0
    manager = train.CheckpointManager(ckpt, tmp_path / "run", max_to_keep=1)
    assert train.latest_checkpoint(tmp_path / "run") is None
    saved = manager.save()
    assert train.latest_checkpoint(tmp_path / "run") == saved == manager.latest_checkpoint


def test_latest_filename_names_the_state_file(tmp_path: Path) -> None:
    path = train.Checkpoint(v=idist.Variable(1.0)).save(tmp_path / "ckpt")
    assert train.latest_checkpoint(tmp_path, latest_filename="checkpoint.json") == path
    assert train.latest_checkpoint(tmp_path, latest_filename="checkpoint") is None  # TF's name: not written here
