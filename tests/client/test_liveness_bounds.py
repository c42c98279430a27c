"""A liveness check never waits on a scheduler that stopped answering: it gives up within its bound and
finds no frozen replica (the step's own replies come from the replicas; issue 25, item 2)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterator
from typing import Any

import pytest

from interdist.client import liveness


def test_a_silent_scheduler_does_not_hold_a_check(monkeypatch: pytest.MonkeyPatch) -> None:
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(n_workers=1, processes=False, dashboard_address=None) as cluster:
        with distributed.Client(cluster) as client:
            live = liveness.Liveness(client, list(client.scheduler_info()["workers"]))
            assert live.frozen([0]) == {}  # an answering scheduler: checked, nothing frozen

            async def silent(**kwargs: Any) -> dict[str, Any]:
                await asyncio.sleep(3600)  # a SIGSTOPped scheduler: the call never returns
                return {}

            monkeypatch.setattr(client.scheduler, "identity", silent)
            monkeypatch.setattr(liveness, "SCHEDULER_TIMEOUT", 0.5)
            t0 = time.monotonic()
            assert live.frozen([0]) == {}
            assert time.monotonic() - t0 < 5.0  # the bound (0.5 s), with room for a loaded machine


def test_the_pids_of_a_clusters_workers_are_learned() -> None:
    """A cluster interdist did not start (cluster="tcp://..."): the workers' pids are asked of them. The call
    used to pass timeout= to os.getpid, which every worker logged as a TypeError, and no pid was learned."""
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(n_workers=2, processes=True, dashboard_address=None) as cluster:
        with distributed.Client(cluster.scheduler_address) as client:  # an address: no cluster object to ask
            addresses = list(client.scheduler_info()["workers"])
            live = liveness.Liveness(client, addresses)
            live.learn_pids(timeout=30)
            pids = client.run(lambda: __import__("os").getpid())
            assert live._pids == {a: pids[a] for a in addresses}


def test_a_stopped_pooled_worker_is_named_when_a_strategy_is_made() -> None:
    """issue 25: MirroredStrategy() on a pooled cluster with a stopped worker waited > 100 s for it to join.
    The join is watched as a step is: ReplicaFrozenError naming the replica, and the workers go back to the
    pool, so the next strategy (once the worker runs again) is made as usual."""
    import os
    import signal

    import numpy as np

    import interdist as idist
    from interdist.config import settings

    idist.config.set_logical_cpu_devices(2)
    s = idist.MirroredStrategy()
    pid = [w.pid for w in s.client.cluster.workers.values()][1]
    s.close()
    before = settings.frozen_after
    settings.frozen_after = 2.0
    os.kill(pid, signal.SIGSTOP)
    try:
        with pytest.raises(idist.errors.ReplicaFrozenError, match=r"replica 1 .* did not join the strategy.*stopped"):
            idist.MirroredStrategy()
    finally:
        os.kill(pid, signal.SIGCONT)
        settings.frozen_after = before
    s = idist.MirroredStrategy()  # the pool's workers again, the resumed one included
    try:
        with s.scope():
            v = idist.Variable(np.ones(2, np.float32))
        assert np.asarray(s.reduce("SUM", s.run(lambda: v * 2.0), axis=None)).tolist() == [4.0, 4.0]
    finally:
        s.close()
    # The workers left the group that was never made: replica code runs on their main threads again, where
    # Ctrl-C can reach it (it ran on a thread of its own for good, and could not be interrupted).
    import threading

    with idist.MirroredStrategy() as s:
        def where() -> str:
            rank = int(idist.get_replica_context().replica_id_in_sync_group)
            return f"replica {rank} on the main thread: {threading.current_thread() is threading.main_thread()}"

        shown = [str(x) for x in s.experimental_local_results(s.run(where))]
        assert shown == ["replica 0 on the main thread: True", "replica 1 on the main thread: True"]


@contextlib.contextmanager
def _stopped_worker(
    monkeypatch: pytest.MonkeyPatch, scheduler_timeout: float, frozen_after: float
) -> Iterator[tuple[liveness.Liveness, int]]:
    """A 1-worker process cluster whose scheduler never answers ``identity`` again (bounded by
    ``scheduler_timeout``), its worker stopped (SIGSTOP, resumed at the end): its ``Liveness`` and pid."""
    import os
    import signal

    from interdist.config import settings

    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(n_workers=1, processes=True, dashboard_address=None) as cluster:
        with distributed.Client(cluster.scheduler_address) as client:
            live = liveness.Liveness(client, list(client.scheduler_info()["workers"]))
            live.learn_pids(timeout=30)
            (pid,) = live._pids.values()

            async def silent(**kwargs: Any) -> dict[str, Any]:
                await asyncio.sleep(3600)  # a stopped or overloaded scheduler
                return {}

            monkeypatch.setattr(client.scheduler, "identity", silent)
            monkeypatch.setattr(liveness, "SCHEDULER_TIMEOUT", scheduler_timeout)
            monkeypatch.setattr(settings, "frozen_after", frozen_after)
            os.kill(pid, signal.SIGSTOP)
            try:
                while not liveness._stopped(pid):  # the stop has taken effect
                    time.sleep(0.01)
                yield live, pid
            finally:
                os.kill(pid, signal.SIGCONT)


def _check_until_frozen(live: liveness.Liveness, bound: float = 60.0) -> tuple[dict[int, Any], float]:
    """A check a second, as a waiting step does, until rank 0 is found frozen: what was found, and when."""
    start = time.monotonic()
    found: dict[int, Any] = {}
    while not found and time.monotonic() - start < bound:
        found = live.frozen([0])
        if not found:
            time.sleep(liveness.CHECK_EVERY)
    return found, time.monotonic() - start


def test_a_stopped_worker_is_found_while_the_scheduler_is_silent(monkeypatch: pytest.MonkeyPatch) -> None:
    """A check that gets no answer from the scheduler still reads the local workers' process state, and a
    slow check does not restart the count of how long a worker was stopped."""
    with _stopped_worker(monkeypatch, scheduler_timeout=0.5, frozen_after=1.0) as (live, _):
        found, _ = _check_until_frozen(live, bound=30)
        assert 0 in found and "stopped" in found[0].reason


def test_a_stopped_worker_is_named_without_waiting_for_a_slow_scheduler(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 25: a freeze is named within ``frozen_after`` + 1 s. A check that first waited for a slow
    scheduler spaced the checks out by its bound, so the freeze was named seconds late. A process seen
    stopped is now told by its state alone: with a scheduler that takes 30 s to answer, the checks still
    come a second apart and name the worker once it has been stopped for ``frozen_after``."""
    with _stopped_worker(monkeypatch, scheduler_timeout=30.0, frozen_after=2.0) as (live, _):
        found, took = _check_until_frozen(live)
        assert 0 in found and "stopped" in found[0].reason
        assert took < 30.0  # below one scheduler wait (30 s): named at frozen_after, give or take a check
        assert found[0].stopped_s >= 2.0
