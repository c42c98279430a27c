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


def test_nothing_is_left_behind() -> None:
    """After the suite's strategies close and their clusters shut down: no shared-memory segment of ours
    and no control-socket directory of this process."""
    from interdist.client import cluster

    cluster.shutdown_all()
    time.sleep(0.5)
    mine = [p for p in glob.glob("/dev/shm/idist-*") if os.path.exists(p)]
    assert mine == [], mine
    dirs = glob.glob(os.path.join(tempfile.gettempdir(), f"*idist*{os.getpid()}-*"))
    assert dirs == [], dirs
