"""A replica's thread on one core where its group's replicas on the host are as many as the cores or more
(``worker/affinity.py``): which core, which thread, and every core again when its group is done."""

from __future__ import annotations

import os
import queue
from typing import Any

import numpy as np
import pytest

from interdist.client import step_paths
from interdist.client.step_paths import StepPathsMixin
from interdist.worker.affinity import core_for, reduce_owners
from interdist.worker.thread import ReplicaThread

pytestmark = pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="no sched_setaffinity here")

HOST_A = [f"tls://10.0.0.1:{port}" for port in (4001, 4002, 4003, 4004)]
HOST_B = [f"tls://10.0.0.2:{port}" for port in (4001, 4002)]


def test_the_replicas_of_a_host_go_round_its_cores_in_rank_order() -> None:
    assert [core_for(r, HOST_A, [0, 1]) for r in range(4)] == [0, 1, 0, 1]
    assert [core_for(r, HOST_A[:3], [4, 7]) for r in range(3)] == [4, 7, 4]  # the worker's cores, not 0..n
    assert [core_for(r, HOST_A[:2], [2, 3]) for r in range(2)] == [2, 3]  # exactly as many as the cores


def test_fewer_replicas_on_a_host_than_its_cores_are_not_pinned() -> None:
    assert [core_for(r, HOST_A, list(range(8))) for r in range(4)] == [None] * 4
    # four replicas, but two on each host of two cores each: as many as the cores there
    peers = [HOST_A[0], HOST_B[0], HOST_A[1], HOST_B[1]]
    assert [core_for(r, peers, [0, 1]) for r in range(4)] == [0, 0, 1, 1]
    assert [core_for(r, peers, [0, 1, 2]) for r in range(4)] == [None] * 4
    assert core_for(0, ["not an address"], [0]) is None  # nothing to count replicas by


def test_a_large_sum_is_split_between_one_owner_per_core_only_where_the_whole_group_is_pinned_on_one_host() -> None:
    assert reduce_owners(HOST_A, [0, 1]) == 2  # 4 replicas round 2 cores: ranks 0 and 1, on different cores
    assert reduce_owners(HOST_A + HOST_A, [4, 5, 7]) == 3  # 8 replicas round 3 cores
    assert reduce_owners(HOST_A[:3], [4, 7]) == 1  # a core holding one replica: the root alone (measured)
    assert reduce_owners(HOST_A, [0, 1, 2, 3]) == 1
    assert reduce_owners(HOST_A, list(range(8))) == 1  # fewer replicas than cores: not pinned, the root alone
    assert reduce_owners(HOST_A, [0]) == 1  # one core: nothing to split between
    assert reduce_owners([HOST_A[0], HOST_B[0], HOST_A[1], HOST_B[1]], [0, 1]) == 1  # two hosts
    assert reduce_owners(["not an address", "nor this"], [0, 1]) == 1


def _on_thread(ex: ReplicaThread, fn: Any) -> Any:
    got: queue.SimpleQueue[Any] = queue.SimpleQueue()
    ex.call(fn, (), lambda result, error: got.put(error or result))
    return got.get(timeout=10)


def test_a_pinned_thread_runs_on_its_core_and_gets_its_cores_back() -> None:
    cores = os.sched_getaffinity(0)
    ex = ReplicaThread("interdist-test-pin")
    try:
        core = max(cores)
        ex.pin(core)
        assert _on_thread(ex, lambda: os.sched_getaffinity(0)) == {core}
        assert os.sched_getaffinity(0) == cores  # the thread's own affinity: not the caller's
        ex.pin(min(cores))  # pinned again (a new group): unpin still gives back the cores before the first pin
        ex.unpin()
        assert _on_thread(ex, lambda: os.sched_getaffinity(0)) == cores
        ex.unpin()  # not pinned: nothing changes
        assert _on_thread(ex, lambda: os.sched_getaffinity(0)) == cores
    finally:
        ex.shutdown()


def _cores() -> list[int]:
    return sorted(os.sched_getaffinity(0))


def _owners() -> Any:
    import numpy as np

    import interdist as idist

    return np.int64(idist.get_replica_context()._replica.collectives.owners)  # type: ignore[attr-defined]


@pytest.fixture
def as_many_replicas_as_cores() -> int:
    n = len(os.sched_getaffinity(0))
    if n > 4:
        pytest.skip(f"{n} cores here: a strategy of as many replicas would take too long to start")
    return max(n, 2)


def test_a_strategy_with_a_replica_per_core_pins_each_to_its_own(as_many_replicas_as_cores: int) -> None:
    import dask

    import interdist as idist

    n = as_many_replicas_as_cores
    cores = _cores()
    with idist.MirroredStrategy([f"CPU:{i}" for i in range(n)]) as s:
        got = list(s.experimental_local_results(s.run(_cores)))
        known = dict(s._group.pinned)  # what each replica answered when it joined: the notebook's send order
        owners = [int(o) for o in s.experimental_local_results(s.run(_owners))]
    assert got == [[cores[i % len(cores)]] for i in range(n)]
    assert known == {i: cores[i % len(cores)] for i in range(n)}
    assert owners == [1] * n  # a replica per core: no large sum is split (two replicas a core at least)
    # the same workers (pooled) serve the next strategy: with every core, the setting off or one replica
    with (
        dask.config.set({"interdist.replica.pin-threads": False}),
        idist.MirroredStrategy([f"CPU:{i}" for i in range(n)]) as s,
    ):
        assert list(s.experimental_local_results(s.run(_cores))) == [cores] * n
        assert s._group.pinned == {}
        assert [int(o) for o in s.experimental_local_results(s.run(_owners))] == [1] * n  # not pinned: the root alone
    with idist.MirroredStrategy(["CPU:0"]) as s:
        assert list(s.experimental_local_results(s.run(_cores))) == [cores]


@pytest.mark.filterwarnings("ignore:the replica function .* pickles to:UserWarning")  # (its arrays are the test)
def test_two_replicas_a_core_split_their_large_sums_between_one_owner_per_core() -> None:
    """Every rank knows the owners (ranks 0 .. cores - 1); a 4 MB all-reduce, split between them through
    shared memory between the workers, gives every replica the bits of the sum in rank order."""
    import interdist as idist

    cores = _cores()
    if len(cores) > 2:
        pytest.skip(f"{len(cores)} cores here: a strategy of twice as many replicas would take too long to start")
    n = 2 * len(cores)
    parts = [np.random.default_rng(r).normal(size=1 << 20).astype(np.float32) for r in range(n)]

    def all_reduce() -> Any:
        ctx = idist.get_replica_context()
        return ctx.all_reduce("sum", parts[ctx.replica_id_in_sync_group])

    with idist.MirroredStrategy([f"CPU:{i}" for i in range(n)]) as s:
        owners = [int(o) for o in s.experimental_local_results(s.run(_owners))]
        sums = [np.asarray(v) for v in s.experimental_local_results(s.run(all_reduce))]
    assert owners == [len(cores) if len(cores) > 1 else 1] * n
    want = parts[0] + parts[1]
    for p in parts[2:]:
        want = want + p
    assert all(v.tobytes() == want.tobytes() for v in sums)


class _Group(StepPathsMixin):
    def __init__(self, world_size: int) -> None:
        self.world_size = world_size
        self.pinned = {}


def test_the_notebook_sends_to_the_replicas_of_its_own_core_last(monkeypatch: pytest.MonkeyPatch) -> None:
    group = _Group(4)
    for rank, answer in enumerate([{"joined": True, "core": 0}, {"joined": True, "core": 1}, "OK", None]):
        group.note_core(rank, answer)  # (earlier workers answered "OK")
    assert group.pinned == {0: 0, 1: 1}
    monkeypatch.setattr(step_paths, "_current_cpu", lambda: 0)
    assert group._send_plan()[0] == [1, 2, 3, 0]  # rank 0 woken last: it takes this core once it has its program
    monkeypatch.setattr(step_paths, "_current_cpu", lambda: 1)
    assert group._send_plan()[0] == [0, 2, 3, 1]
    monkeypatch.setattr(step_paths, "_current_cpu", lambda: None)  # not known here: rank order
    assert group._send_plan() == ([0, 1, 2, 3], {})
    group.note_core(0, {"joined": True, "core": None})  # joined again unpinned (a replaced worker)
    group.note_core(1, {"joined": True, "core": None})
    assert group.pinned == {} and group._send_plan() == ([0, 1, 2, 3], {})


def test_only_a_replica_alone_on_a_core_not_the_notebooks_is_asked_to_wait_awake(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import dask

    group = _Group(3)
    for rank, core in enumerate([0, 1, 0]):
        group.note_core(rank, {"joined": True, "core": core})
    monkeypatch.setattr(step_paths, "_current_cpu", lambda: 0)
    assert group._send_plan() == ([1, 0, 2], {1: 300e-6})  # ranks 0 and 2 share core 0 (the notebook's too)
    monkeypatch.setattr(step_paths, "_current_cpu", lambda: 1)
    assert group._send_plan() == ([0, 2, 1], {})  # rank 1 is alone, but on the notebook's core
    group = _Group(2)
    with dask.config.set({"interdist.replica.wait-spin-us": 50}):
        for rank in (0, 1):
            group.note_core(rank, {"joined": True, "core": rank})
        assert group._send_plan() == ([0, 1], {0: 50e-6})  # read at the first program after the replicas joined
    with dask.config.set({"interdist.replica.wait-spin-us": 0}):
        assert group._send_plan() == ([0, 1], {0: 50e-6})  # not again until they join again (a recovery)
        group.note_core(0, {"joined": True, "core": 0})
        assert group._send_plan() == ([0, 1], {})  # 0: no spinning


def test_the_current_cpu_is_one_this_thread_may_run_on() -> None:
    cpu = step_paths._current_cpu()
    assert cpu in os.sched_getaffinity(0)  # (this module runs where sched_setaffinity exists: Linux)


def _caught_spinning(group: str) -> int:
    """On a replica: the programs its thread took while it spun (``ReplicaThread.caught_spinning``)."""
    from distributed import Worker

    from interdist.worker.plugin import PLUGIN_NAME

    (worker,) = list(Worker._instances)
    return int(worker.plugins[PLUGIN_NAME].executors[group].caught_spinning)


def test_replicas_alone_on_their_cores_take_the_notebooks_next_program_awake(as_many_replicas_as_cores: int) -> None:
    """A loop of empty ``run`` calls: after each program, a replica pinned alone to a core other than the
    notebook's spins (for up to 5 s here: the next program comes well within them) and takes the next program
    awake; with ``interdist.replica.wait-spin-us: 0`` none does."""
    import dask

    import interdist as idist

    n = as_many_replicas_as_cores
    for spin_us, expect_some in ((5e6, True), (0, False)):
        with (
            dask.config.set({"interdist.replica.wait-spin-us": spin_us}),
            idist.MirroredStrategy([f"CPU:{i}" for i in range(n)]) as s,
        ):
            group = s._group.group_id
            before = sum(s.experimental_local_results(s.run(_caught_spinning, args=(group,))))
            for _ in range(20):
                s.run(lambda: None)
            after = sum(s.experimental_local_results(s.run(_caught_spinning, args=(group,))))
        # each of the 21 programs after the first count asked one replica at least to spin, and the next came
        assert (after - before >= 21) if expect_some else (after == before), (spin_us, before, after)
