"""A full disk while saving (issue 25): a clear ENOSPC error, nothing half-written, nothing listed.

The disk is filled by making the write fail as a full disk makes it fail: NumPy's short write
(``OSError: 60000 requested and 11232 written``, no errno) for an array, ENOSPC for the list file.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

import numpy as np
import pytest

import interdist as idist


def _leftovers(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if ".tmp-" in p.name)


def test_an_array_that_does_not_fit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ckpt = idist.Checkpoint(w=idist.Variable(np.ones(3, np.float32)))
    first = ckpt.save(tmp_path / "ckpt")

    def short_write(*args: object, **kwargs: object) -> None:
        raise OSError("60000 requested and 11232 written")

    monkeypatch.setattr(np, "save", short_write)
    with pytest.raises(OSError, match="No space left on device while writing checkpoint") as info:
        ckpt.save(tmp_path / "ckpt")
    assert info.value.errno == errno.ENOSPC
    assert _leftovers(tmp_path) == []
    assert idist.train.latest_checkpoint(tmp_path) == first  # the last good one, still named


def test_a_list_that_does_not_fit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """CheckpointManager: the checkpoint is written, its list is not: all or nothing."""
    manager = idist.train.CheckpointManager(
        idist.train.Checkpoint(w=idist.Variable(np.ones(3, np.float32))), tmp_path, max_to_keep=2
    )
    first = manager.save()
    real = os.fsync

    def full(fd: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(OSError, match="No space left on device while writing the checkpoint list") as info:
        manager.save()
    assert info.value.errno == errno.ENOSPC
    monkeypatch.setattr(os, "fsync", real)
    assert _leftovers(tmp_path) == []
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith(".")) == ["checkpoint.json", "ckpt-1"]
    assert manager.latest_checkpoint == first and manager.checkpoints == [first]
    second = manager.save()  # the disk has room again: saving goes on
    assert manager.checkpoints == [first, second]


def test_checkpoint_save_that_cannot_be_recorded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ckpt = idist.train.Checkpoint(w=idist.Variable(np.ones(3, np.float32)))
    first = ckpt.save(tmp_path / "ckpt")
    real = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (_ for _ in ()).throw(OSError(errno.ENOSPC, "No space left")))
    with pytest.raises(OSError, match="No space left on device") as info:
        ckpt.save(tmp_path / "ckpt")
    assert info.value.errno == errno.ENOSPC
    monkeypatch.setattr(os, "fsync", real)
    assert not (tmp_path / "ckpt-2").exists() and _leftovers(tmp_path) == []
    assert idist.train.latest_checkpoint(tmp_path) == first and ckpt.save_counter == 1
    assert ckpt.save(tmp_path / "ckpt").endswith("ckpt-2")
