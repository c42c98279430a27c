"""Two replicas on one host: large all-reduces pipelined through a ring of shared memory (collectives/ring.py).

What must hold: the ring gives the all-gather-reduce's bits in every mode (SGD's update, the sum, the peer's
array), it is used from the second large all-reduce of a pair on, two ranks that disagree about it (one
without numba, a ring not mapped yet, one broken) still meet in the all-gather-reduce, a batch mismatch fails
both ranks as before, and every wait in the compiled exchange ends: at the collective's timeout, or at once
when the step is aborted.
"""

from __future__ import annotations

import sys
import threading
import time
from typing import Any

import numpy as np
import pytest

from interdist import _jit
from interdist.collectives import ring
from interdist.collectives.algorithms import AG, CONSUME_MIN_BYTES, Collectives
from interdist.errors import CollectiveAbortedError, CollectiveTimeoutError, ReplicaMismatchError
from interdist.reduce_op import ReduceOp

from ._harness import run_threads, shm_group

pytestmark = pytest.mark.skipif(bool(ring.unavailable_reason()), reason=ring.unavailable_reason() or "ring")

CHUNK32 = ring.CHUNK_BYTES // 4  # float32 elements of a chunk
BIG = CONSUME_MIN_BYTES // 4 + 12_345  # float32 elements: above the threshold, not a whole number of chunks


def _data(seed: int, n: int, dtype: Any = np.float32) -> np.ndarray:
    return (np.random.default_rng(seed).normal(size=n) * 100).astype(dtype)


def _pair() -> tuple[ring.Ring, ring.Ring]:
    made = ring.Ring.create()
    assert made is not None
    attached = ring.Ring.attach(made.name)
    assert attached is not None
    return made, attached


def _both(fn: Any) -> list[Any]:
    """``fn(rank)`` on two threads at once (the kernels release the GIL); each result or exception."""
    out: list[Any] = [None, None]

    def go(r: int) -> None:
        try:
            out[r] = fn(r)
        except BaseException as e:  # returned to the test
            out[r] = e

    threads = [threading.Thread(target=go, args=(r,)) for r in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return out


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("n", [1, CHUNK32 - 1, CHUNK32, 3 * CHUNK32 + 5, BIG])
def test_every_mode_gives_numpys_bits_in_rank_order(n: int, dtype: Any) -> None:
    pair = _pair()
    try:
        mine = [_data(r, n, dtype) for r in (0, 1)]
        w0 = [_data(10 + r, n, dtype) for r in (0, 1)]
        lr = dtype(0.37)

        def rank(r: int) -> Any:
            w = w0[r].copy()
            summed, theirs = np.empty(n, dtype), np.empty(n, dtype)
            never = lambda: None
            deadline = time.monotonic() + 30
            k = ring.kernels()
            ring.exchange(pair[r], k.UPDATE, mine[r], w, lr, never, deadline, "t")
            ring.exchange(pair[r], k.SUM, mine[r], summed, 0, never, deadline, "t")
            ring.exchange(pair[r], k.GATHER, mine[r], theirs, 0, never, deadline, "t")
            return w, summed, theirs

        results = _both(rank)
        total = np.add(mine[0], mine[1])  # the all-gather-reduce's sum: float adds in rank order
        for r, res in enumerate(results):
            assert not isinstance(res, BaseException), res
            w, summed, theirs = res
            assert np.array_equal(w, w0[r] - total * lr)  # v - sum * lr: two roundings, as NumPy's two ufuncs
            assert np.array_equal(summed, total)
            assert np.array_equal(theirs, mine[1 - r])
        chunks = -(-n // (ring.CHUNK_BYTES // np.dtype(dtype).itemsize))
        assert [int(x) for x in pair[0].state] == [3 * chunks, 3 * chunks]  # cumulative over the 3 exchanges
    finally:
        for p in pair:
            p.close()


def test_a_wait_in_the_ring_ends_at_the_deadline_or_at_once_on_an_abort() -> None:
    pair = _pair()
    try:
        a = _data(0, 3 * CHUNK32)
        k = ring.kernels()
        t0 = time.monotonic()
        with pytest.raises(CollectiveTimeoutError, match="timed out in the middle of its exchange with replica 1"):
            ring.exchange(pair[0], k.SUM, a, np.empty_like(a), 0, lambda: None, time.monotonic() + 0.3, "all_reduce #1")
        assert time.monotonic() - t0 < 5
        assert pair[0].broken  # half-way: its hellos say so from now on
        assert not ring.read_hello(ring.hello(pair[0], b""))[0]
        t0 = time.monotonic()
        with pytest.raises(CollectiveAbortedError, match="all_reduce #2 was aborted: replica 0 failed"):
            ring.exchange(pair[1], k.SUM, a, np.empty_like(a), 0, lambda: "replica 0 failed", t0 + 60, "all_reduce #2")
        assert time.monotonic() - t0 < 5
        assert pair[1].broken
    finally:
        for p in pair:
            p.close()


def _gathering_consumer(seen: list[np.ndarray]) -> Any:
    def consume(i: int, parts: Any) -> bool:
        seen.append(np.add(parts[0], parts[1]))  # a consumer that reads every rank's array
        return i == 0  # the first used up, the second declined: it comes back reduced

    return consume


def test_a_pair_uses_the_ring_from_its_second_large_all_reduce_with_the_same_results() -> None:
    def body(rank: int, coll: Collectives) -> Any:
        out = []
        for call in range(3):
            seen: list[np.ndarray] = []
            arrays = [_data(rank + 10 * call, BIG), _data(rank + 10 * call + 5, BIG)]
            got = coll.all_reduce_consumed(1, call + 1, arrays, ReduceOp.SUM, "t", _gathering_consumer(seen))
            used = coll.transport._ring is not None and int(coll.transport._ring.state[1])
            out.append((got, seen, used))
        return out

    results = run_threads(shm_group(2), body, algorithm=AG, timeout=30)
    for res in results:
        assert not isinstance(res, BaseException), res
        chunks = []
        for call, (got, seen, used) in enumerate(res):
            first = np.add(_data(10 * call, BIG), _data(1 + 10 * call, BIG))
            second = np.add(_data(10 * call + 5, BIG), _data(1 + 10 * call + 5, BIG))
            assert got[0] is None
            assert np.array_equal(got[1], second)
            assert [np.array_equal(s, e) for s, e in zip(seen, [first, second], strict=True)] == [True, True]
            chunks.append(used)
        per_call = 2 * -(-BIG // CHUNK32)
        assert chunks[1:] == [per_call, 2 * per_call]  # the first maps the ring, the next two use it


def test_ranks_that_disagree_about_the_ring_meet_in_the_all_gather_reduce(monkeypatch: pytest.MonkeyPatch) -> None:
    """Rank 1 offers no ring (no numba there, say), rank 0 does: both get the sum, in either direction."""
    real = ring.ring_eligible
    monkeypatch.setattr(ring, "ring_eligible", lambda t, w, a: t.rank != 1 and real(t, w, a))

    def body(rank: int, coll: Collectives) -> Any:
        return [
            coll.all_reduce_consumed(1, call + 1, [_data(rank + call, BIG)], ReduceOp.SUM, "t", lambda i, p: False)
            for call in range(3)
        ]

    for res in run_threads(shm_group(2), body, algorithm=AG, timeout=30):
        assert not isinstance(res, BaseException), res
        for call, got in enumerate(res):
            assert np.array_equal(got[0], np.add(_data(call, BIG), _data(1 + call, BIG)))


def test_a_broken_ring_is_not_used_again_and_the_pair_goes_on() -> None:
    def body(rank: int, coll: Collectives) -> Any:
        out = []
        for call in range(4):
            if call == 2 and rank == 1:
                coll.transport._ring.broken = True  # as after an exchange stopped half-way
            got = coll.all_reduce_consumed(
                1, call + 1, [_data(rank + call, BIG)], ReduceOp.SUM, "t", lambda i, p: False
            )
            out.append((got[0], int(coll.transport._ring.state[1])))
        return out

    for res in run_threads(shm_group(2), body, algorithm=AG, timeout=30):
        assert not isinstance(res, BaseException), res
        for call, (got, _) in enumerate(res):
            assert np.array_equal(got, np.add(_data(call, BIG), _data(1 + call, BIG)))
        per_call = -(-BIG // CHUNK32)
        assert [used for _, used in res] == [0, per_call, per_call, per_call]  # calls 2 and 3: all-gather-reduce


def test_a_batch_mismatch_fails_both_ranks_as_before() -> None:
    def body(rank: int, coll: Collectives) -> Any:
        coll.all_reduce_consumed(1, 1, [_data(rank, BIG)], ReduceOp.SUM, "t", lambda i, p: False)  # maps the ring
        n = BIG if rank == 0 else BIG + 1
        return coll.all_reduce_consumed(1, 2, [_data(rank, n)], ReduceOp.SUM, "all_reduce #2", lambda i, p: False)

    results = run_threads(shm_group(2), body, algorithm=AG, timeout=30)
    for res in results:
        assert isinstance(res, ReplicaMismatchError), res
        assert f"({BIG},)" in str(res) and f"({BIG + 1},)" in str(res)


def test_hello_round_trip() -> None:
    made = ring.Ring.create()
    assert made is not None
    try:
        assert ring.is_hello(ring.hello(made, b"desc"))
        assert ring.read_hello(ring.hello(made, b"desc")) == (True, made.name, b"desc")
        assert ring.read_hello(ring.hello(None, b"d")) == (False, "", b"d")
    finally:
        made.close()


def test_without_numba_no_ring_is_offered(monkeypatch: pytest.MonkeyPatch) -> None:
    ring.unavailable_reason.cache_clear()
    _jit.unavailable_reason.cache_clear()
    monkeypatch.setitem(sys.modules, "numba", None)  # import numba raises ImportError
    try:
        assert "numba is not installed" in ring.unavailable_reason()
        assert not ring.ring_eligible(shm_group(2)[0], 2, [np.zeros(BIG, np.float32)])
    finally:
        ring.unavailable_reason.cache_clear()
        _jit.unavailable_reason.cache_clear()


def test_a_replaced_peer_gets_a_new_ring() -> None:
    group = shm_group(2)
    try:
        ids = {1: "worker-a"}
        group[0].inner.peer_id = lambda dst: ids.get(dst, str(dst))  # type: ignore[method-assign]
        first = group[0].pair_ring()
        assert first is not None and group[0].pair_ring() is first
        ids[1] = "worker-b"  # rank 1's worker was replaced: the old ring's reader is gone
        second = group[0].pair_ring()
        assert second is not None and second.name != first.name
    finally:
        for t in group:
            t.close()


@pytest.mark.parametrize("op", [ReduceOp.SUM, ReduceOp.MEAN])
def test_all_reduce_of_a_large_batch_goes_through_the_ring_with_the_same_bits(op: ReduceOp) -> None:
    from interdist.collectives.reducing import _reduce_owned

    def body(rank: int, coll: Collectives) -> Any:
        out = []
        for call in range(3):
            got = coll.all_reduce(1, call + 1, [_data(rank + call, BIG), _data(rank + call, 3)], op, "t")
            out.append((got, int(coll.transport._ring.state[1]) if coll.transport._ring is not None else -1))
        return out

    for res in run_threads(shm_group(2), body, algorithm=AG, timeout=30):
        assert not isinstance(res, BaseException), res
        for call, (got, _) in enumerate(res):
            for i, (n, dt) in enumerate([(BIG, np.float32), (3, np.float32)]):
                want = _reduce_owned([_data(call, n, dt), _data(1 + call, n, dt)], op)
                assert got[i].dtype == want.dtype and np.array_equal(got[i], want), (call, i)
        per_call = -(-BIG // CHUNK32) + 1  # the float32 array's chunks, and the small one's
        assert [used for _, used in res][1:] == [per_call, 2 * per_call]


def test_different_reduce_ops_fail_both_ranks_through_the_hellos() -> None:
    def body(rank: int, coll: Collectives) -> Any:
        coll.all_reduce(1, 1, [_data(rank, BIG)], ReduceOp.SUM, "t")  # maps the ring
        return coll.all_reduce(1, 2, [_data(rank, BIG)], ReduceOp.SUM if rank == 0 else ReduceOp.MEAN, "t")

    for res in run_threads(shm_group(2), body, algorithm=AG, timeout=30):
        assert isinstance(res, ReplicaMismatchError) and "different reduce ops" in str(res), res
