"""The shared-memory transport beyond the contract (test_contract.py runs that on it): segment
hygiene and reuse, every algorithm through segments, replaced peers, senders running ahead.

Ranks are threads here (``_harness.py``; the control messages go through the in-process
transport), but every packet over the threshold really goes through a POSIX shared-memory
segment, mapped and unlinked exactly as between worker processes.
"""

from __future__ import annotations

import glob
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

import interdist as idist

from interdist.collectives import algorithms
from interdist.collectives.algorithms import Collectives
from interdist.collectives.base import Packet
from interdist.collectives.local import LocalTransport, local_group
from interdist.collectives.shared_memory import PREFIX, SharedMemoryTransport, sweep_stale
from interdist.errors import CollectiveTimeoutError, ReplicaMismatchError
from interdist.reduce_op import ReduceOp

from ._harness import THRESHOLD, run_threads
from ._harness import shm_group as _group


def _segments() -> set[str]:
    return {p for p in glob.glob(f"/dev/shm/{PREFIX}*") if "-probe-" not in p}  # not the momentary probes


@pytest.fixture(autouse=True)
def _no_segment_leaked() -> Iterator[None]:
    before = _segments()
    yield
    assert _segments() - before == set(), "a shared-memory segment outlived its test"


_run = run_threads


@pytest.fixture(params=["all-gather", "reduce-scatter", "reduce-broadcast"])
def algorithm(request: Any, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setattr(algorithms, "RB_MIN_ELEMENTS_ONE_HOST", 1 << 62)
    if request.param == "reduce-scatter":
        monkeypatch.setattr(algorithms, "RS_MIN_ELEMENTS", 0)
        monkeypatch.setattr(algorithms, "RS_MIN_ELEMENTS_ONE_HOST", 0)
    if request.param == "reduce-broadcast":  # used from 3 replicas on (2 keep all-gather-reduce)
        monkeypatch.setattr(algorithms, "RB_MIN_ELEMENTS_ONE_HOST", 0)
    return str(request.param)


@pytest.mark.parametrize("world", [2, 3, 4])
def test_reduce_broadcast_is_chosen_from_three_replicas_on_one_host(
    world: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(algorithms, "RB_MIN_ELEMENTS_ONE_HOST", 1000)
    colls: list[Any] = []

    def body(r: int, c: Any) -> Any:
        colls.append(c)
        small = c.all_reduce(1, 1, [np.ones(999, np.float32)], ReduceOp.SUM, "t")[0]
        a1 = c.last_timing.algorithm
        big = c.all_reduce(1, 2, [np.full(1000, r + 1.0)], ReduceOp.SUM, "t")[0]
        return small, a1, big, c.last_timing.algorithm

    out = _run(_group(world), body)
    for small, a1, big, a2 in out:
        assert a1 == algorithms.AG and a2 == (algorithms.RB if world >= 3 else algorithms.AG)
        assert small.tolist() == [float(world)] * 999 and big.tolist() == [world * (world + 1) / 2] * 1000


@pytest.mark.parametrize("world", [2, 3, 4])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64])
@pytest.mark.parametrize("op", [ReduceOp.SUM, ReduceOp.MEAN])
@pytest.mark.parametrize("size", [3, 50_001])  # in-band / through a segment
def test_all_reduce_closed_form(world: int, dtype: Any, op: ReduceOp, size: int, algorithm: str) -> None:
    base = np.arange(size) % 7
    out = _run(_group(world), lambda r, c: c.all_reduce(1, 1, [(base * (r + 1)).astype(dtype)], op, "t")[0])
    total = world * (world + 1) // 2 * base
    expected = total if op == ReduceOp.SUM else total / world
    want_dtype = np.dtype(dtype) if op == ReduceOp.SUM or np.dtype(dtype).kind == "f" else np.float64
    for r in range(world):
        assert not isinstance(out[r], BaseException), out[r]
        assert out[r].dtype == want_dtype and out[r].shape == (size,)
        assert np.allclose(out[r], expected)
        assert out[r].tobytes() == out[0].tobytes()


def test_mixed_dtypes_across_ranks_raise_on_every_rank(algorithm: str) -> None:
    # TF never casts across replicas (round-7 cases mixed.all_reduce.*): every rank raises, none hangs.
    arrays = [np.ones(30_000, np.float32), np.full(30_000, 2, np.float64)]
    out = _run(_group(2), lambda r, c: c.all_reduce(1, 1, [arrays[r]], ReduceOp.SUM, "t"))
    assert all(type(o) is ReplicaMismatchError for o in out)
    assert all("replica 0: float32, replica 1: float64" in str(o) for o in out)


def test_different_reduce_ops_raise_on_every_rank(algorithm: str) -> None:
    ops = [ReduceOp.SUM, ReduceOp.MEAN]
    out = _run(_group(2), lambda r, c: c.all_reduce(1, 1, [np.ones(30_000, np.float32)], ops[r], "t"))
    assert all(type(o) is ReplicaMismatchError and "replica 1: MEAN" in str(o) for o in out)


def test_shape_mismatch_raises_on_every_rank(algorithm: str) -> None:
    out = _run(_group(2), lambda r, c: c.all_reduce(1, 1, [np.ones(30_000 + r)], ReduceOp.SUM, "t"))
    assert all(isinstance(o, ValueError) and "different shapes" in str(o) for o in out)


def test_large_exchange_and_broadcast_are_private_copies() -> None:
    transports = _group(3)

    def body(r: int, c: Collectives) -> Any:
        got = c.exchange(1, 1, np.full(20_000, r, np.float64), "x")
        b = c.broadcast(1, 2, np.full(20_000, 7.0), root=1, what="b")
        # the senders' segments are reused by the next collective: what we got must not change
        c.exchange(1, 3, np.full(20_000, -1.0), "x")
        return got, b

    out = _run(transports, body)
    for got, b in out:
        assert [float(g[0]) for g in got] == [0.0, 1.0, 2.0] and all(g.flags.writeable for g in got)
        assert np.all(b == 7.0)


def test_segments_are_reused_not_created_per_message() -> None:
    transports = _group(2)
    _run(
        transports,
        lambda r, c: [c.all_reduce(1, s, [np.ones(50_000)], ReduceOp.SUM, "t") for s in range(20)],
        close=False,
    )
    assert all(len(slots) <= 2 for t in transports for slots in t._slots.values())
    assert _segments() == set() or all(not p.endswith("probe") for p in _segments())
    for t in transports:
        t.close()


def test_delivered_segments_are_unlinked_at_once() -> None:
    # The receiver removes the name the first time it maps a segment: nothing is left in
    # /dev/shm even while the group is open (and so nothing after a crash).
    before = _segments()
    transports = _group(2)
    _run(transports, lambda r, c: c.all_reduce(1, 1, [np.ones(50_000)], ReduceOp.SUM, "t"), close=False)
    assert _segments() - before == set()
    for t in transports:
        t.close()


def test_timeout_while_a_segment_is_pending() -> None:
    before = _segments()
    transports = _group(2)

    def body(r: int, c: Collectives) -> Any:
        if r == 1:
            return "absent"
        return c.all_reduce(1, 1, [np.ones(50_000)], ReduceOp.SUM, "all_reduce #1 of step 1")

    t0 = time.monotonic()
    out = _run(transports, body, timeout=0.3, close=False)
    assert isinstance(out[0], CollectiveTimeoutError) and "[1]" in str(out[0])
    assert time.monotonic() - t0 < 5
    assert len(_segments() - before) == 1  # rank 0's segment waits, unread, in rank 1's mailbox
    transports[1].mailbox.begin_step(2)  # the step moved on: the receiver drops it
    assert _segments() - before == set()
    for t in transports:
        t.close()


def test_closing_the_sender_unlinks_what_nobody_mapped() -> None:
    before = _segments()
    transports = _group(2)
    transports[0].send_packet([1], 1, 1, Packet(b"", [np.ones(10_000).data]))
    assert len(_segments() - before) == 1
    transports[0].close()
    assert _segments() - before == set()
    transports[1].close()


class _Broken(LocalTransport):
    def send_packet(self, *args: Any, **kwargs: Any) -> None:
        raise ConnectionError("peer gone")


def test_failed_send_unlinks_its_own_segment() -> None:
    before = _segments()
    t = SharedMemoryTransport(_Broken(0, 2, local_group(2)[0]._mailboxes), threshold=THRESHOLD)
    with pytest.raises(ConnectionError):
        t.send_packet([1], 1, 1, Packet(b"", [np.ones(10_000).data]))
    assert _segments() - before == set()
    t.close()


def test_small_packets_keep_the_normal_path() -> None:
    transports = _group(2, threshold=1 << 20)
    _run(transports, lambda r, c: c.all_reduce(1, 1, [np.ones(50_000)], ReduceOp.SUM, "t"), close=False)
    assert all(not t._slots for t in transports)
    for t in transports:
        t.close()


def test_sweep_removes_segments_of_dead_processes() -> None:
    from multiprocessing import shared_memory

    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True, check=True
    )
    name = f"{PREFIX}{int(dead.stdout)}-stale"
    shm = shared_memory.SharedMemory(name=name, create=True, size=64)
    from multiprocessing import resource_tracker

    resource_tracker.unregister(shm._name, "shared_memory")  # type: ignore[attr-defined]
    shm.close()
    assert f"/dev/shm/{name}" in _segments()
    sweep_stale()
    assert f"/dev/shm/{name}" not in _segments()


class _Replaceable(LocalTransport):
    generation = 0

    def peer_id(self, dst: int) -> str:
        return f"{dst}.{self.generation}"


def test_a_replaced_peer_gets_new_segments() -> None:
    # A restarted worker never mapped the old segments (their names are gone): fresh ones.
    boxes = local_group(2)[0]._mailboxes
    inners = [_Replaceable(r, 2, boxes) for r in range(2)]
    transports = [SharedMemoryTransport(t, threshold=THRESHOLD) for t in inners]
    old: list[Any] = []
    for seq in (1, 2):
        out = _run(
            transports,
            lambda r, c, seq=seq: c.all_reduce(1, seq, [np.ones(50_000) * r], ReduceOp.SUM, "t")[0],
            close=False,
        )
        assert all(np.all(o == 1.0) for o in out)
        if seq == 1:
            old = list(transports[0]._slots[(1,)])  # slots are kept by the local ranks reading them
            inners[0].generation = 1
    assert transports[0]._slots[(1,)] and not set(transports[0]._slots[(1,)]) & set(old)
    for t in transports:
        t.close()


def test_broadcast_root_running_ahead_of_slow_receivers() -> None:
    # The root needs nothing back, so it may send many messages before a receiver maps any:
    # none of its segments may be taken back in the meantime.
    def body(r: int, c: Collectives) -> Any:
        if r != 0:
            time.sleep(0.3)
        return [float(c.broadcast(1, s, np.full(50_000, float(s)), root=0, what="b")[-1]) for s in range(12)]

    out = _run(_group(3), body)
    assert out == [[float(s) for s in range(12)]] * 3


def test_one_segment_per_send_to_several_local_peers() -> None:
    # 4 ranks: each all_reduce message is written once, into one segment all three peers map.
    transports = [SharedMemoryTransport(t, threshold=THRESHOLD) for t in local_group(4)]
    for seq in (1, 2, 3):
        out = _run(
            transports,
            lambda r, c, seq=seq: c.all_reduce(1, seq, [np.full(50_000, r + seq, np.float64)], ReduceOp.SUM, "t")[0],
            close=False,
            algorithm=algorithms.AG,  # AUTO may pick reduce-broadcast for 4 replicas (cost_model.py)
        )
        assert all(np.array_equal(o, np.full(50_000, 6.0 + 4 * seq)) for o in out)
    for r, t in enumerate(transports):
        peers = tuple(p for p in range(4) if p != r)
        assert set(t._slots) == {peers}  # no per-peer copies
        assert len(t._slots[peers]) == 1 and t._slots[peers][0].free  # reused, released by all three
    for t in transports:
        t.close()
    assert not [n for n in os.listdir("/dev/shm") if n.startswith(f"idist-{os.getpid()}-")]


def test_large_segments_are_given_back_after_the_step(mirrored2: idist.MirroredStrategy) -> None:
    """Review: "a 1 GiB all-reduce pins 2 GiB until close". Segments above KEEP_BYTES now go after the
    program that used them (the reader's mapping by the end of the next one); small ones stay for reuse."""
    import json

    from interdist.collectives.shared_memory import KEEP_BYTES

    n = (KEEP_BYTES + (8 << 20)) // 4

    def big() -> object:
        return idist.get_replica_context().all_reduce("SUM", np.ones(n, np.float32))[:1]

    def small() -> object:
        return idist.get_replica_context().all_reduce("SUM", np.ones(300_000, np.float32))[:1]

    def held(replica: object) -> str:
        t = replica.transport  # type: ignore[attr-defined]
        slots = [s.capacity for ss in t._slots.values() for s in ss]
        mapped = [shm.size for shm, _ in t._mapped.values()]
        return json.dumps({"slots": slots, "mapped": mapped})

    def ring(on: bool) -> None:  # two replicas' large all-reduces go through the ring (ring.py), not segments
        import dask

        dask.config.set({"interdist.collectives.ring": on})

    mirrored2.run(ring, args=(False,))
    try:
        out = mirrored2.run(big)
        assert [float(np.asarray(v)[0]) for v in mirrored2.experimental_local_results(out)] == [2.0, 2.0]
        mirrored2.run(small)
        mirrored2.run(small)
    finally:
        mirrored2.run(ring, args=(True,))
    for m in mirrored2._system(held):
        h = json.loads(m.value)
        assert all(c <= KEEP_BYTES for c in h["slots"]) and all(sz <= KEEP_BYTES + (1 << 20) for sz in h["mapped"]), h
        assert h["slots"], h  # the small collective's segment is kept for reuse
