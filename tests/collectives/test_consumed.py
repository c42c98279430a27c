"""``Collectives.all_reduce_consumed``: an all-reduce whose sums a consumer may use up where they are made.

The consumer must see every rank's array in rank order (views of the peers' shared-memory segments
only while it runs), the batch must be checked on every rank before anything is consumed, and what it
declines comes back as ``all_reduce`` gives it, with the same bits. Batches it does not take (small ones,
another algorithm) send nothing, so the caller's ``all_reduce`` can go on at the same sequence number.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from interdist.collectives.algorithms import AG, CONSUME_MIN_BYTES, RB, RS, Collectives
from interdist.errors import ReplicaMismatchError
from interdist.reduce_op import ReduceOp

from ._harness import run_threads, shm_group

BIG = CONSUME_MIN_BYTES // 4  # float32 elements: the smallest batch it takes


def _data(rank: int, n: int, dtype: Any = np.float32) -> np.ndarray:
    return (np.random.default_rng(7 + rank).normal(size=n) * 100).astype(dtype)


@pytest.mark.parametrize("world", [2, 3])
def test_the_consumer_sees_every_ranks_array_in_rank_order_and_declined_ones_come_back_reduced(world: int) -> None:
    def body(rank: int, coll: Collectives) -> Any:
        seen: list[tuple[int, list[np.ndarray]]] = []

        def consume(i: int, parts: list[np.ndarray]) -> bool:
            seen.append((i, [np.array(p) for p in parts]))  # copies: the views go after the call
            return i == 0  # the first used up here, the second declined

        arrays = [_data(rank, BIG), _data(rank + 10, BIG)]
        out = coll.all_reduce_consumed(1, 1, arrays, ReduceOp.SUM, "test", consume)
        return out, seen

    results = run_threads(shm_group(world), body, algorithm=AG)
    for res in results:
        assert not isinstance(res, BaseException), res
        out, seen = res
        assert [i for i, _ in seen] == [0, 1]
        for i, parts in seen:
            assert len(parts) == world
            for r, p in enumerate(parts):
                np.testing.assert_array_equal(p, _data(r + 10 * i, BIG))
        assert out[0] is None  # consumed
        expected = _data(10, BIG) + _data(11, BIG)  # float32 adds in rank order
        for r in range(2, world):
            expected = expected + _data(r + 10, BIG)
        np.testing.assert_array_equal(out[1], expected)


def test_reduce_broadcast_offers_the_roots_sum_to_the_other_ranks() -> None:
    """Reduce-broadcast: the root reduces and sends as before (its consumer is not called, its result is the
    sum); each other rank's consumer gets ``[the root's sum]``, a view of the root's packet, and what it
    declines comes back as a copy of that sum."""
    calls: dict[int, list[np.ndarray]] = {}

    def body(rank: int, coll: Collectives) -> Any:
        def consume(i: int, parts: list[np.ndarray]) -> bool:
            assert len(parts) == 1
            calls.setdefault(rank, []).append(np.array(parts[0]))
            return i == 0

        return coll.all_reduce_consumed(1, 1, [_data(rank, BIG), _data(rank + 10, BIG)], ReduceOp.SUM, "t", consume)

    results = run_threads(shm_group(3), body, algorithm=RB)
    sums = [(_data(0 + k, BIG) + _data(1 + k, BIG)) + _data(2 + k, BIG) for k in (0, 10)]
    root, *others = results
    assert not isinstance(root, BaseException), root
    for got, expected in zip(root, sums, strict=True):
        np.testing.assert_array_equal(got, expected)
    assert 0 not in calls
    for rank, res in enumerate(others, start=1):
        assert not isinstance(res, BaseException), res
        assert res[0] is None
        np.testing.assert_array_equal(res[1], sums[1])
        assert len(calls[rank]) == 2
        for seen, expected in zip(calls[rank], sums, strict=True):
            np.testing.assert_array_equal(seen, expected)


def test_batches_it_does_not_take_send_nothing() -> None:
    """Small batches, a MEAN and another algorithm: None on every rank, nothing sent; the all_reduce after it at the
    same step and sequence number gets the right sums (no stray packet was taken for its own)."""

    def body(rank: int, coll: Collectives) -> Any:
        def consume(i: int, parts: list[np.ndarray]) -> bool:
            raise AssertionError("not called")

        small = [np.full(16, rank + 1.0, np.float32)]
        got_small = coll.all_reduce_consumed(1, 1, small, ReduceOp.SUM, "test", consume)
        got_mean = coll.all_reduce_consumed(1, 1, [_data(rank, BIG)], ReduceOp.MEAN, "test", consume)
        coll.algorithm = RS
        got_rs = coll.all_reduce_consumed(1, 1, [_data(rank, BIG)], ReduceOp.SUM, "test", consume)
        after = coll.all_reduce(1, 1, small, ReduceOp.SUM, "test")
        return got_small, got_mean, got_rs, after

    for res in run_threads(shm_group(2), body, algorithm=AG):
        assert not isinstance(res, BaseException), res
        got_small, got_mean, got_rs, after = res
        assert got_small is None and got_mean is None and got_rs is None
        np.testing.assert_array_equal(after[0], np.full(16, 3.0, np.float32))


def test_a_mismatch_fails_every_rank_before_anything_is_consumed() -> None:
    consumed: list[int] = []

    def body(rank: int, coll: Collectives) -> Any:
        def consume(i: int, parts: list[np.ndarray]) -> bool:
            consumed.append(rank)
            return True

        return coll.all_reduce_consumed(1, 1, [_data(rank, BIG + rank)], ReduceOp.SUM, "test", consume)

    results = run_threads(shm_group(2), body, algorithm=AG)
    assert all(isinstance(r, ReplicaMismatchError) for r in results), results
    assert consumed == []
