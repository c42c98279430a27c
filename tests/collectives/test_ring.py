"""Two replicas on one host: large all-reduces pipelined through a ring of shared memory (collectives/ring.py).

What must hold: the ring gives the all-gather-reduce's bits (SUM and MEAN), it is used from the second large
all-reduce of a pair on, two ranks that disagree about it (one without numba, a ring not mapped yet, one
broken) still meet in the all-gather-reduce, a batch mismatch fails both ranks as before, the optimizers'
consumed all-reduce never takes it, and every wait in the compiled exchange ends: at the collective's
timeout, or at once when the step is aborted.
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
from interdist.collectives.algorithms import AG, Collectives
from interdist.collectives.reducing import _reduce_owned
from interdist.errors import CollectiveAbortedError, CollectiveTimeoutError, ReplicaMismatchError
from interdist.reduce_op import ReduceOp

from ._harness import run_threads, shm_group

pytestmark = pytest.mark.skipif(bool(ring.unavailable_reason()), reason=ring.unavailable_reason() or "ring")

CHUNK32 = ring.CHUNK_BYTES // 4  # float32 elements of a chunk
BIG = ring.MIN_BYTES // 4 + 12_345  # float32 elements: above the threshold, not a whole number of chunks


def _data(seed: int, n: int, dtype: Any = np.float32) -> np.ndarray:
    return (np.random.default_rng(seed).normal(size=n) * 100).astype(dtype)


def _pair() -> tuple[ring.Ring, ring.Ring]:
    made = ring.Ring.create()
    assert made is not None
    attached = ring.Ring.attach(made.name)
    assert attached is not None
    return made, attached


def _both(fn: Any) -> list[Any]:
    """``fn(rank)`` on two threads at once (the kernel releases the GIL); each result or exception."""
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


def _used(coll: Collectives) -> int:
    """Chunks of its peer's this rank consumed through the ring so far (-1: no ring)."""
    got = coll.transport._ring
    return -1 if got is None else int(got.state[1])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("n", [1, CHUNK32 - 1, CHUNK32, 3 * CHUNK32 + 5, BIG])
def test_the_exchange_gives_numpys_sum_in_rank_order(n: int, dtype: Any) -> None:
    pair = _pair()
    try:
        mine = [_data(r, n, dtype) for r in (0, 1)]

        def rank(r: int) -> Any:
            outs = []
            for _ in range(2):  # twice: the counters go on from where they were
                out = np.empty(n, dtype)
                ring.exchange(pair[r], mine[r], out, lambda: None, time.monotonic() + 30, "t")
                outs.append(out)
            return outs

        results = _both(rank)
        total = np.add(mine[0], mine[1])  # the all-gather-reduce's sum: float adds in rank order
        for res in results:
            assert not isinstance(res, BaseException), res
            for out in res:
                assert np.array_equal(out, total)
        chunks = -(-n // (ring.CHUNK_BYTES // np.dtype(dtype).itemsize))
        assert [int(x) for x in pair[0].state] == [2 * chunks, 2 * chunks]  # cumulative over both
    finally:
        for p in pair:
            p.close()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("n", [CHUNK32 - 1, 3 * CHUNK32 + 5, BIG])
def test_the_exchange_with_an_update_writes_sgds_step_with_numpys_bits(n: int, dtype: Any) -> None:
    # out = w - (a0 + a1) * lr: the all-gather-reduce's sum, then SGD's two ufuncs (assign_sub(g * lr))
    pair = _pair()
    try:
        mine = [_data(r, n, dtype) for r in (0, 1)]
        w = _data(7, n, dtype)
        lr = np.dtype(dtype).type(0.1)
        kept = w.copy()

        def rank(r: int) -> Any:
            out = np.empty(n, dtype)
            ring.exchange(pair[r], mine[r], out, lambda: None, time.monotonic() + 30, "t", (w, lr))
            summed = np.empty(n, dtype)  # then a plain sum: the ring's counters go on
            ring.exchange(pair[r], mine[r], summed, lambda: None, time.monotonic() + 30, "t")
            return out, summed

        results = _both(rank)
        total = np.add(mine[0], mine[1])
        expected = np.subtract(w, np.multiply(total, lr))
        for res in results:
            assert not isinstance(res, BaseException), res
            assert res[0].dtype == dtype and np.array_equal(res[0], expected)
            assert np.array_equal(res[1], total)
        assert np.array_equal(w, kept)  # w is read, never written
    finally:
        for p in pair:
            p.close()


def test_a_wait_in_the_ring_ends_at_the_deadline_or_at_once_on_an_abort() -> None:
    pair = _pair()
    try:
        a = _data(0, 3 * CHUNK32)
        t0 = time.monotonic()
        with pytest.raises(CollectiveTimeoutError, match="timed out in the middle of its exchange with replica 1"):
            ring.exchange(pair[0], a, np.empty_like(a), lambda: None, time.monotonic() + 0.3, "all_reduce #1")
        assert time.monotonic() - t0 < 5
        assert pair[0].broken  # half-way: its hellos say so from now on
        assert not ring.read_hello(ring.hello(pair[0], b""))[0]
        t0 = time.monotonic()
        with pytest.raises(CollectiveAbortedError, match="all_reduce #2 was aborted: replica 0 failed"):
            ring.exchange(pair[1], a, np.empty_like(a), lambda: "replica 0 failed", t0 + 60, "all_reduce #2")
        assert time.monotonic() - t0 < 5
        assert pair[1].broken
    finally:
        for p in pair:
            p.close()


@pytest.mark.parametrize("op", [ReduceOp.SUM, ReduceOp.MEAN])
def test_a_pair_uses_the_ring_from_its_second_large_all_reduce_with_the_same_bits(op: ReduceOp) -> None:
    def body(rank: int, coll: Collectives) -> Any:
        out = []
        for call in range(3):
            got = coll.all_reduce(1, call + 1, [_data(rank + call, BIG), _data(rank + call, 3)], op, "t")
            out.append((got, _used(coll)))
        return out

    for res in run_threads(shm_group(2), body, algorithm=AG, timeout=30):
        assert not isinstance(res, BaseException), res
        for call, (got, _) in enumerate(res):
            for i, n in enumerate([BIG, 3]):
                want = _reduce_owned([_data(call, n), _data(1 + call, n)], op)  # the all-gather-reduce's
                assert got[i].dtype == want.dtype and np.array_equal(got[i], want), (call, i)
        per_call = -(-BIG // CHUNK32) + 1  # the large array's chunks, and the small one's
        assert [used for _, used in res] == [0, per_call, 2 * per_call]  # the first maps the ring


def test_ranks_that_disagree_about_the_ring_meet_in_the_all_gather_reduce(monkeypatch: pytest.MonkeyPatch) -> None:
    """Rank 1 offers no ring (no numba there, say), rank 0 does: both get the sum, in either direction."""
    real = ring.ring_eligible
    monkeypatch.setattr(ring, "ring_eligible", lambda t, w, a: t.rank != 1 and real(t, w, a))

    def body(rank: int, coll: Collectives) -> Any:
        return [coll.all_reduce(1, call + 1, [_data(rank + call, BIG)], ReduceOp.SUM, "t") for call in range(3)]

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
            got = coll.all_reduce(1, call + 1, [_data(rank + call, BIG)], ReduceOp.SUM, "t")
            out.append((got[0], _used(coll)))
        return out

    for res in run_threads(shm_group(2), body, algorithm=AG, timeout=30):
        assert not isinstance(res, BaseException), res
        for call, (got, _) in enumerate(res):
            assert np.array_equal(got, np.add(_data(call, BIG), _data(1 + call, BIG)))
        per_call = -(-BIG // CHUNK32)
        assert [used for _, used in res] == [0, per_call, per_call, per_call]  # calls 2 and 3: all-gather-reduce


def test_a_batch_mismatch_fails_both_ranks_as_before() -> None:
    def body(rank: int, coll: Collectives) -> Any:
        coll.all_reduce(1, 1, [_data(rank, BIG)], ReduceOp.SUM, "t")  # maps the ring
        n = BIG if rank == 0 else BIG + 1
        return coll.all_reduce(1, 2, [_data(rank, n)], ReduceOp.SUM, "all_reduce #2")

    for res in run_threads(shm_group(2), body, algorithm=AG, timeout=30):
        assert isinstance(res, ReplicaMismatchError), res
        assert f"({BIG},)" in str(res) and f"({BIG + 1},)" in str(res)


def test_different_reduce_ops_fail_both_ranks_through_the_hellos() -> None:
    def body(rank: int, coll: Collectives) -> Any:
        coll.all_reduce(1, 1, [_data(rank, BIG)], ReduceOp.SUM, "t")  # maps the ring
        return coll.all_reduce(1, 2, [_data(rank, BIG)], ReduceOp.SUM if rank == 0 else ReduceOp.MEAN, "t")

    for res in run_threads(shm_group(2), body, algorithm=AG, timeout=30):
        assert isinstance(res, ReplicaMismatchError) and "different reduce ops" in str(res), res


def test_the_consumed_all_reduce_takes_the_ring_and_commits_its_updates_after_the_whole_batch() -> None:
    """The optimizers' fused all-reduce: the first call maps the ring (the all-gather-reduce gives the consumer
    every rank's part); from the second, the ring writes each ``RingUpdate``'s new copy as the sum comes and
    commits them all once the batch went through; an array offered no update gets its sum back."""
    chunks = -(-BIG // CHUNK32)

    def body(rank: int, coll: Collectives) -> Any:
        log: list[Any] = []

        class Consumer:
            def __call__(self, i: int, parts: list[np.ndarray]) -> bool:
                log.append(("parts", i, len(parts)))
                return False

            def ring_update(self, i: int, a: np.ndarray) -> ring.RingUpdate | None:
                if i == 1:
                    return None
                w = np.full(a.size, 10, a.dtype)
                out = np.empty_like(a)
                return ring.RingUpdate(w, a.dtype.type(0.5), out, lambda: log.append(("commit", _used(coll), out)))

        results = []
        for call in range(3):
            arrays = [_data(rank + call, BIG), _data(rank + call + 10, BIG)]
            results.append(coll.all_reduce_consumed(1, call + 1, arrays, ReduceOp.SUM, "t", Consumer()))
        return log, results

    for res in run_threads(shm_group(2), body, algorithm=AG, timeout=30):
        assert not isinstance(res, BaseException), res
        log, results = res
        assert log[:2] == [("parts", 0, 2), ("parts", 1, 2)]  # the first: the all-gather-reduce (no ring yet)
        assert [entry[:2] for entry in log[2:]] == [("commit", 2 * chunks), ("commit", 4 * chunks)]  # after both
        for call, got in enumerate(results):
            a = [_data(r + call, BIG) for r in (0, 1)]
            b = [_data(r + call + 10, BIG) for r in (0, 1)]
            assert np.array_equal(got[1], np.add(b[0], b[1]))
            if call == 0:
                assert np.array_equal(got[0], np.add(a[0], a[1]))
            else:
                assert got[0] is None
                out = log[1 + call][2]
                assert np.array_equal(out, np.float32(10) - np.add(a[0], a[1]) * np.float32(0.5))


def test_an_update_that_cannot_be_made_fails_before_the_ring_moves_and_leaves_it_usable() -> None:
    """The consumer's ``ring_update`` runs after the hellos and before the first chunk of the batch: when it
    raises (on both ranks: the same code), for the batch's second array, not even the first moved; the next
    collective goes through the same ring."""
    chunks = -(-BIG // CHUNK32)

    class Refusing:
        def __call__(self, i: int, parts: list[np.ndarray]) -> bool:
            return False

        def ring_update(self, i: int, a: np.ndarray) -> ring.RingUpdate | None:
            if i == 1:
                raise ValueError("no update here")
            return None

    def body(rank: int, coll: Collectives) -> Any:
        outs: list[Any] = []
        for call in range(3):
            arrays = [_data(rank + call, BIG), _data(rank + call + 10, BIG)]
            consume = Refusing() if call == 1 else (lambda i, p: False)
            try:
                outs.append(coll.all_reduce_consumed(1, call + 1, arrays, ReduceOp.SUM, "t", consume))
            except ValueError as exc:
                outs.append(str(exc))
        return outs, _used(coll), coll.transport._ring.broken

    for res in run_threads(shm_group(2), body, algorithm=AG, timeout=30):
        assert not isinstance(res, BaseException), res
        outs, used, broken = res
        assert outs[1] == "no update here"
        assert used == 2 * chunks and not broken  # only the third call's two arrays went through the ring
        for call in (0, 2):
            assert np.array_equal(outs[call][0], np.add(_data(call, BIG), _data(1 + call, BIG)))
            assert np.array_equal(outs[call][1], np.add(_data(call + 10, BIG), _data(1 + call + 10, BIG)))


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


def test_no_hello_where_no_ring_can_be() -> None:
    """A peer on another host, shared memory off, or a ring of this peer's left broken: no hello (a message
    round for nothing); a replaced peer gets one again."""
    from interdist.collectives.local import local_group
    from interdist.collectives.shared_memory import SharedMemoryTransport

    far = [SharedMemoryTransport(t, is_local=lambda d: False, threshold=1024) for t in local_group(2)]
    off = [SharedMemoryTransport(t, threshold=-1) for t in local_group(2)]
    group = shm_group(2)
    try:
        batch = [np.zeros(BIG, np.float32)]
        assert not ring.ring_eligible(far[0], 2, batch)
        assert not ring.ring_eligible(off[0], 2, batch)
        assert ring.ring_eligible(group[0], 2, batch)
        assert not ring.ring_eligible(group[0], 2, [np.zeros(BIG, np.int64)])  # (floats only)
        ids = {1: "worker-a"}
        group[0].inner.peer_id = lambda dst: ids.get(dst, str(dst))  # type: ignore[method-assign]
        made = group[0].pair_ring()
        assert made is not None
        made.broken = True
        assert not ring.ring_eligible(group[0], 2, batch)
        ids[1] = "worker-b"
        assert ring.ring_eligible(group[0], 2, batch)
    finally:
        for t in far + off + group:
            t.close()
