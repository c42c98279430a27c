"""The fault-injection suite (issue 17, item 4): each kind of fault at each named point, through the
public hook ``idist.debug.inject``, on 2 and 4 replicas.

For every case: the notebook gets a clear error naming the replica (or, for a slow replica, the right
result), within bounded time, never a hang; the strategy is usable afterwards; a mirrored variable's
copies are equal afterwards (the post-fault check would raise ``DivergedCopiesError`` otherwise); and
at the end no worker process, shared-memory segment or control-socket directory of the suite is left.
The figures (time to error per case) are printed for docs/reliability.md (``pytest -s``).
"""

from __future__ import annotations

import glob
import os
import tempfile
import time
from collections.abc import Iterator

import numpy as np
import pytest

import interdist as idist
from interdist.config import settings

pytestmark = pytest.mark.timeout(180)

POINTS = ["step", "all_reduce", "update"]


@pytest.fixture(scope="module", params=[2, 4], ids=["2-replicas", "4-replicas"])
def strategy(request: pytest.FixtureRequest) -> Iterator[idist.MirroredStrategy]:
    s = idist.MirroredStrategy([f"CPU:{i}" for i in range(request.param)])
    yield s
    s.close()


@pytest.fixture(autouse=True)
def _fast_detection(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(settings, "frozen_after", 1.5)


def _step(v: idist.MirroredVariable) -> object:
    def step() -> object:
        ctx = idist.get_replica_context()
        total = ctx.all_reduce("SUM", np.float32(ctx.replica_id_in_sync_group + 1))
        v.assign_add(1.0)  # MEAN: every copy + 1, or none
        return total

    return step


def _usable(s: idist.MirroredStrategy, v: idist.MirroredVariable, timeout: float = 60.0) -> float:
    """Wait until the strategy takes steps again (a frozen replica must resume, a killed one restart);
    check a step's result and that the variable's copies are equal; the seconds it took."""
    t0 = time.monotonic()
    while True:
        try:
            out = s.run(_step(v))
            break
        except RuntimeError as e:  # "still running step N": a frozen replica not back yet
            if "still running" not in str(e) or time.monotonic() - t0 > timeout:
                raise
            time.sleep(0.25)
    n = s.num_replicas_in_sync
    assert [float(x) for x in s.experimental_local_results(out)] == [n * (n + 1) / 2] * n
    copies = [float(c) for c in s.experimental_local_results(v)]
    assert len(set(copies)) == 1, copies
    return time.monotonic() - t0


@pytest.mark.parametrize("at", POINTS)
@pytest.mark.parametrize("fault", ["raise", "slow", "freeze", "kill"])
def test_fault(strategy: idist.MirroredStrategy, fault: str, at: str) -> None:
    s, n = strategy, strategy.num_replicas_in_sync
    victim = n - 1
    with s.scope():
        v = idist.Variable(np.float32(0.0), aggregation=idist.VariableAggregation.MEAN)
    idist.debug.inject(s, replica=victim, fault=fault, at=at, seconds=4.0 if fault == "freeze" else 2.0)
    t0 = time.monotonic()
    if fault == "slow":
        out = s.run(_step(v))
        took = time.monotonic() - t0
        assert took >= 2.0 and [float(x) for x in s.experimental_local_results(out)] == [n * (n + 1) / 2] * n
        print(f"\n[faults] {n} replicas, slow at {at}: no error, step took {took:.2f} s")
        _usable(s, v)
        return
    expected = {"raise": idist.errors.InjectedFaultError, "freeze": idist.errors.ReplicaFrozenError,
                "kill": idist.WorkerLostError}[fault]
    with pytest.raises(expected) as info:
        s.run(_step(v))
    took = time.monotonic() - t0
    assert f"replica {victim}" in str(info.value) or getattr(info.value, "interdist_replica", None) == victim
    bound = {"raise": 3.0, "freeze": settings.frozen_after + 4.0, "kill": 10.0}[fault]
    assert took < bound, (fault, at, took)
    if fault == "kill":  # the worker is started again and the variables copied there, with a warning
        with pytest.warns(UserWarning, match=f"replica\\(s\\) \\[{victim}\\] .* restarted"):
            back = _usable(s, v)
    else:
        back = _usable(s, v)
    print(f"\n[faults] {n} replicas, {fault} at {at}: {type(info.value).__name__} after {took:.2f} s; "
          f"usable again after {back:.2f} s")


@pytest.mark.parametrize("fault", ["raise", "slow", "freeze", "kill"])
def test_fault_during_checkpoint_save(strategy: idist.MirroredStrategy, fault: str, tmp_path: object) -> None:
    """``at="checkpoint_save"``: the fault fires in the middle of ``Checkpoint.save`` (after the first
    variable's file). The save fails with the replica's error and leaves nothing: the previous checkpoint
    is still the latest and restores; the strategy is usable afterwards."""
    s, n = strategy, strategy.num_replicas_in_sync
    victim = n - 1
    with s.scope():
        v = idist.Variable(np.float32(0.0), aggregation=idist.VariableAggregation.MEAN)
        w = idist.Variable(np.arange(3, dtype=np.float32), aggregation=idist.VariableAggregation.MEAN)
    manager = idist.CheckpointManager(idist.Checkpoint(v=v, w=w), str(tmp_path), max_to_keep=3)
    _ = v.assign(5.0)
    first = manager.save()
    _ = v.assign(6.0)
    idist.debug.inject(s, replica=victim, fault=fault, at="checkpoint_save", seconds=4.0 if fault == "freeze" else 2.0)
    t0 = time.monotonic()
    if fault == "slow":
        second = manager.save()
        took = time.monotonic() - t0
        assert took >= 2.0 and manager.latest_checkpoint == second
        print(f"\n[faults] {n} replicas, slow at checkpoint_save: no error, the save took {took:.2f} s")
        _usable(s, v)
        return
    expected = {"raise": idist.errors.InjectedFaultError, "freeze": idist.errors.ReplicaFrozenError,
                "kill": idist.WorkerLostError}[fault]
    with pytest.raises(expected) as info:
        manager.save()
    took = time.monotonic() - t0
    assert f"replica {victim}" in str(info.value) or getattr(info.value, "interdist_replica", None) == victim
    assert took < {"raise": 3.0, "freeze": settings.frozen_after + 4.0, "kill": 10.0}[fault], took
    assert manager.checkpoints == [first]
    assert sorted(os.listdir(str(tmp_path))) == ["checkpoint.json", os.path.basename(first)]  # nothing half-written
    if fault == "kill":
        with pytest.warns(UserWarning, match=f"replica\\(s\\) \\[{victim}\\] .* restarted"):
            back = _usable(s, v)
    else:
        back = _usable(s, v)
    manager.restore_or_initialize()
    assert [float(c) for c in s.experimental_local_results(v)] == [5.0] * n
    print(f"\n[faults] {n} replicas, {fault} at checkpoint_save: {type(info.value).__name__} after {took:.2f} s; "
          f"usable again after {back:.2f} s")


_KILLED_SAVE = """
import os, signal, sys
import numpy as np
import interdist as idist
from interdist import checkpoint

a, b = idist.Variable(np.float32(1.0)), idist.Variable(np.arange(4.0))
manager = idist.CheckpointManager(idist.Checkpoint(a=a, b=b), sys.argv[1], max_to_keep=2)
manager.save()
a.assign(2.0)
sha = checkpoint._sha256
calls = []

def dying(path):
    calls.append(path)
    if len(calls) == 2:  # the second variable of this save: the notebook is killed mid-save
        os.kill(os.getpid(), signal.SIGKILL)
    return sha(path)

checkpoint._sha256 = dying
manager.save()
"""


def test_a_killed_save_leaves_the_previous_checkpoint(tmp_path: object) -> None:
    """The notebook itself killed (SIGKILL) in the middle of a save: the index is written last and the
    directory renamed into place only when complete, so the previous checkpoint stays the latest, whole."""
    import subprocess
    import sys

    directory = str(tmp_path)
    proc = subprocess.run([sys.executable, "-c", _KILLED_SAVE, directory], capture_output=True, timeout=120)
    assert proc.returncode == -9, proc.stderr.decode()[-2000:]
    assert idist.checkpoint.latest_checkpoint(directory) == os.path.join(directory, "ckpt-1")
    assert not os.path.exists(os.path.join(directory, "ckpt-2"))
    a, b = idist.Variable(np.float32(0.0)), idist.Variable(np.zeros(4))
    idist.CheckpointManager(idist.Checkpoint(a=a, b=b), directory, max_to_keep=2).restore_or_initialize()
    assert float(a) == 1.0 and np.asarray(b).tolist() == [0.0, 1.0, 2.0, 3.0]


def test_nothing_is_left_behind() -> None:
    """After the suite's strategies close and their clusters shut down: no shared-memory segment of ours
    and no control-socket directory of this process."""
    from interdist.client import cluster

    cluster.shutdown_all()
    time.sleep(0.5)
    mine = [p for p in glob.glob("/dev/shm/idist-*") if os.path.exists(p) and "-probe-" not in p]
    assert mine == [], mine
    dirs = glob.glob(os.path.join(tempfile.gettempdir(), f"*idist*{os.getpid()}-*"))
    assert dirs == [], dirs
