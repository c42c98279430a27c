"""A notebook killed (SIGKILL) in the middle of a checkpoint save leaves its temporary directory; the
next save into that directory, or a ``CheckpointManager`` opening it, removes it (issue 17: "nothing
left behind"), and only what no live process is writing."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

import interdist as idist
from interdist import checkpoint

from .test_inject import _KILLED_SAVE  # the notebook program killed in the middle of its second save


def _hidden(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.startswith("."))


def test_a_killed_save_is_cleaned_up_by_the_next_manager_and_save(tmp_path: Path) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-c", _KILLED_SAVE, str(tmp_path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == -9, err.decode()[-2000:]
    tag = checkpoint._host_tag()
    left = _hidden(tmp_path)
    assert len(left) == 1 and left[0].startswith(f".ckpt-2.tmp-{proc.pid}-{tag}-"), left
    assert (tmp_path / left[0] / "v000000.npy").is_file()  # half a save
    # Beside it: a save in progress in this (live) process, one from another host, and two named the old
    # way (no pid): one fresh, one older than STALE_AFTER.
    mine = tmp_path / f".ckpt-7.tmp-{os.getpid()}-{tag}-abcd1234"
    elsewhere = tmp_path / f".ckpt-8.tmp-{proc.pid}-{'0' * 12}-abcd1234"
    fresh, aged = tmp_path / ".ckpt-5.tmp-k2j3h4g5", tmp_path / ".ckpt-6.tmp-q9w8e7r6"
    for d in (mine, elsewhere, fresh, aged):
        d.mkdir()
    old = time.time() - checkpoint.STALE_AFTER - 60
    os.utime(aged, (old, old))

    a, b = idist.Variable(np.float32(0.0)), idist.Variable(np.zeros(4))
    manager = idist.CheckpointManager(idist.Checkpoint(a=a, b=b), str(tmp_path), max_to_keep=2)
    assert _hidden(tmp_path) == sorted(p.name for p in (mine, elsewhere, fresh))  # the dead writer's and the aged
    assert manager.restore_or_initialize() == str(tmp_path / "ckpt-1")
    assert float(a) == 1.0

    # A plain Checkpoint.save into the directory cleans up too (the writer above is still gone).
    dead = tmp_path / f".ckpt-9.tmp-{proc.pid}-{tag}-zzzz9999"
    dead.mkdir()
    path = idist.Checkpoint(a=a, b=b).save(str(tmp_path / "other"))
    assert not dead.exists() and mine.exists() and os.path.isdir(path)
    assert manager.save().endswith("ckpt-2")
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith(".")) == [
        "checkpoint.json", "ckpt-1", "ckpt-2", "other-1"
    ]
    assert _hidden(tmp_path) == sorted(p.name for p in (mine, elsewhere, fresh))  # nothing new left behind
