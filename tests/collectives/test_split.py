"""A reduce-broadcast split between one owner per core (``collectives/split.py``).

Where ``AUTO`` chooses reduce-broadcast and the group has owners (replicas pinned round the cores), every
rank must end with the bits the root's whole sum gives (``reduce_arrays`` in rank order), whichever op,
dtype and shapes, over the in-process transport and through real shared-memory segments (where an owner
writes its sum straight into the segment); a consumer gets the owners' chunks in order; a mismatch raises
``ReplicaMismatchError`` on every rank before anything is consumed; a named algorithm is never split.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from interdist._reduction import reduce_arrays
from interdist.collectives import algorithms, base, split
from interdist.collectives.algorithms import AUTO, CONSUME_MIN_BYTES, RB, Collectives
from interdist.collectives.shared_memory import SharedMemoryTransport
from interdist.collectives.split import SplitMixin
from interdist.errors import ReplicaMismatchError
from interdist.reduce_op import ReduceOp

from ._harness import IN_PROCESS, run_threads, shm_group

SHAPES = [(300, 71), (5,), (), (0, 3), (4099,)]  # a chunk of each owner, a few elements, a scalar, nothing


def _batch(rank: int, dtype: Any) -> list[np.ndarray]:
    rng = np.random.default_rng(100 + rank)
    return [np.asarray((rng.normal(size=shape) * 1e3).astype(dtype)) for shape in SHAPES]


@pytest.fixture
def split_calls(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """AUTO's choice forced to reduce-broadcast (its threshold at one element) and split from one element (not
    where the cost model would: ``test_the_model_decides_from_which_size_the_sum_is_split``), and the ranks that
    split."""
    monkeypatch.setattr(algorithms, "RB_MIN_ELEMENTS_ONE_HOST", 1)
    monkeypatch.setattr(split, "SPLIT_MIN_ELEMENTS", 1)
    # Frames of these batches' sizes would travel whole in their header (the small path, which does not split:
    # the cost model splits from far larger sums); each array's own rule alone here, with layouts made anew.
    monkeypatch.setattr(base, "FRAME_INBAND_MAX", 0)
    monkeypatch.setattr(base, "_LAYOUTS", {})
    calls: list[int] = []
    real = SplitMixin._split_reduce_broadcast

    def spy(self: Any, *args: Any, **kwargs: Any) -> Any:
        calls.append(self.rank)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(SplitMixin, "_split_reduce_broadcast", spy)
    return calls


@pytest.mark.parametrize("backend", sorted(IN_PROCESS))
@pytest.mark.parametrize(("world", "owners"), [(3, 2), (4, 2), (5, 3), (3, 3)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64])
@pytest.mark.parametrize("op", [ReduceOp.SUM, ReduceOp.MEAN])
def test_every_rank_gets_the_bits_of_the_whole_sum(
    split_calls: list[int], backend: str, world: int, owners: int, dtype: Any, op: ReduceOp
) -> None:
    def body(rank: int, coll: Collectives) -> list[np.ndarray]:
        coll.owners = owners
        return coll.all_reduce(1, 0, _batch(rank, dtype), op, "test")

    results = run_threads(IN_PROCESS[backend](world), body)
    assert sorted(split_calls) == list(range(world))
    for i, shape in enumerate(SHAPES):
        want = reduce_arrays([_batch(r, dtype)[i] for r in range(world)], op)
        for res in results:
            assert not isinstance(res, BaseException), res
            got = res[i]
            assert got.shape == shape and got.dtype == want.dtype
            assert got.tobytes() == want.tobytes()
            assert got.flags.writeable  # the caller's own array, not a view of a segment


def test_a_consumer_gets_the_owners_chunks_in_order_and_what_it_declines_comes_back_whole(
    split_calls: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    written: list[bool] = []  # each owner's sum, written straight into its segment (no copy in)
    real_written = SharedMemoryTransport.send_written

    def spy_written(self: Any, *args: Any) -> bool:
        written.append(real_written(self, *args))
        return written[-1]

    monkeypatch.setattr(SharedMemoryTransport, "send_written", spy_written)
    big = CONSUME_MIN_BYTES // 4 + 7  # float32 elements: a batch all_reduce_consumed takes; uneven chunks

    def data(rank: int, i: int) -> np.ndarray:
        return (np.random.default_rng(rank + 10 * i).normal(size=big) * 100).astype(np.float32)

    class Consumer:
        def __init__(self) -> None:
            self.seen: list[tuple[int, list[np.ndarray]]] = []

        def __call__(self, i: int, parts: list[np.ndarray]) -> bool:  # (reduce-broadcast's: not called here)
            raise AssertionError("the split path offers chunks, not parts")

        def chunks(self, i: int, pieces: list[np.ndarray]) -> bool:
            self.seen.append((i, [np.array(p) for p in pieces]))  # copies: the views go after the call
            return i == 0

    def body(rank: int, coll: Collectives) -> Any:
        coll.owners = 2
        consume = Consumer()
        out = coll.all_reduce_consumed(1, 0, [data(rank, 0), data(rank, 1)], ReduceOp.SUM, "test", consume)
        return out, consume.seen

    results = run_threads(shm_group(4), body)
    assert sorted(split_calls) == [0, 1, 2, 3] and written == [True, True]
    sums = [reduce_arrays([data(r, i) for r in range(4)], ReduceOp.SUM) for i in range(2)]
    for res in results:
        assert not isinstance(res, BaseException), res
        out, seen = res
        assert out[0] is None and out[1].tobytes() == sums[1].tobytes()
        assert [i for i, _ in seen] == [0, 1]
        for i, pieces in seen:
            assert [p.size for p in pieces] == [big // 2, big - big // 2]  # owner 0's chunk, then owner 1's
            assert np.concatenate(pieces).tobytes() == sums[i].tobytes()


@pytest.mark.parametrize("backend", sorted(IN_PROCESS))
def test_a_mismatch_raises_on_every_rank_and_nothing_is_consumed(split_calls: list[int], backend: str) -> None:
    consumed: list[int] = []

    class Consumer:
        def __call__(self, i: int, parts: list[np.ndarray]) -> bool:
            raise AssertionError("not called")

        def chunks(self, i: int, pieces: list[np.ndarray]) -> bool:
            consumed.append(i)
            return True

    def body(rank: int, coll: Collectives) -> Any:
        coll.owners = 2
        shape = (CONSUME_MIN_BYTES // 4,) if rank != 3 else (CONSUME_MIN_BYTES // 8, 2)  # replica 3 differs
        return coll.all_reduce_consumed(1, 0, [np.ones(shape, np.float32)], ReduceOp.SUM, "test", Consumer())

    results = run_threads(IN_PROCESS[backend](4), body)
    assert sorted(split_calls) == [0, 1, 2, 3]
    for res in results:
        assert isinstance(res, ReplicaMismatchError), res
        assert "(262144,)" in str(res) and "(131072, 2)" in str(res)  # each replica's shape named
    assert consumed == []


def test_a_named_algorithm_or_a_single_owner_is_never_split(split_calls: list[int]) -> None:
    def body(rank: int, coll: Collectives) -> list[np.ndarray]:
        coll.owners = 2
        return coll.all_reduce(1, 0, _batch(rank, np.float32), ReduceOp.SUM, "test")

    for algorithm in (RB, algorithms.AG, algorithms.RS):  # cross_device_ops named it (and its root)
        results = run_threads(shm_group(3), body, algorithm=algorithm)
        for i in range(len(SHAPES)):
            want = reduce_arrays([_batch(r, np.float32)[i] for r in range(3)], ReduceOp.SUM)
            assert all(res[i].tobytes() == want.tobytes() for res in results)
    assert split_calls == []

    def one_owner(rank: int, coll: Collectives) -> Any:
        return coll.all_reduce(1, 0, _batch(rank, np.float32), ReduceOp.SUM, "test")

    results = run_threads(shm_group(3), one_owner, algorithm=AUTO)  # (owners stays 1, as where nothing is pinned)
    assert split_calls == [] and all(not isinstance(r, BaseException) for r in results)


def test_a_rank_that_never_comes_is_named_by_every_rank_waiting_for_it(split_calls: list[int]) -> None:
    def body(rank: int, coll: Collectives) -> Any:
        coll.owners = 2
        if rank == 3:
            return "absent"
        return coll.all_reduce(1, 0, _batch(rank, np.float32), ReduceOp.SUM, "test")

    results = run_threads(shm_group(4), body, timeout=1.0)
    assert results[3] == "absent"
    for r in (0, 1):  # the owners wait for its chunks; rank 2 for the owners, which never answer
        assert isinstance(results[r], TimeoutError) and "3" in str(results[r]), results[r]
    assert isinstance(results[2], TimeoutError), results[2]


def test_the_model_decides_from_which_size_the_sum_is_split(
    split_calls: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without a threshold (``interdist.collectives.split-min-elements``) the cost model's ``split_pays`` decides:
    at 4 replicas and 2 owners not a 256 KB batch (reduce-broadcast's root sums it alone), a 4 MB one; with a
    threshold, from that many elements. The same bits either way."""
    sizes = {"256 KB": 1 << 16, "4 MB": 1 << 20}

    def data(rank: int, elements: int) -> np.ndarray:
        return (np.random.default_rng(rank).normal(size=elements) * 100).astype(np.float32)

    def body(rank: int, coll: Collectives, elements: int) -> Any:
        coll.owners = 2
        return coll.all_reduce(1, 0, [data(rank, elements)], ReduceOp.SUM, "test")[0]

    for label, threshold, splits in (("256 KB", None, False), ("4 MB", None, True), ("256 KB", 1 << 15, True),
                                     ("4 MB", 1 << 21, False)):
        monkeypatch.setattr(split, "SPLIT_MIN_ELEMENTS", threshold)
        split_calls.clear()
        results = run_threads(shm_group(4), lambda r, c, e=sizes[label]: body(r, c, e))
        assert sorted(split_calls) == ([0, 1, 2, 3] if splits else []), (label, threshold)
        want = reduce_arrays([data(r, sizes[label]) for r in range(4)], ReduceOp.SUM)
        assert all(res.tobytes() == want.tobytes() for res in results), (label, threshold)


@pytest.mark.parametrize("smaller", [1000, 1 << 18])  # the small path's; reduce-broadcast's root alone
def test_a_replica_whose_batch_is_not_split_is_named_not_unpickled(
    split_calls: list[int], monkeypatch: pytest.MonkeyPatch, smaller: int
) -> None:
    """A mismatch whose batches fall on both sides of the split's threshold: the other replica's packet is not the
    split's (a frame of another path), and owner 0 reads it as one, so the mismatch is named (no UnpicklingError);
    the ranks waiting on the replica's path, which never comes, are named by their time-out (bounded)."""
    monkeypatch.setattr(split, "SPLIT_MIN_ELEMENTS", 1 << 20)

    def body(rank: int, coll: Collectives) -> Any:
        coll.owners = 2
        shape = (smaller,) if rank == 3 else (1 << 21,)
        return coll.all_reduce(1, 0, [np.ones(shape, np.float32)], ReduceOp.SUM, "test")

    results = run_threads(shm_group(4), body, timeout=1.0)
    assert sorted(split_calls) == [0, 1, 2]
    for r in (0, 3):
        assert isinstance(results[r], ReplicaMismatchError), results[r]
        assert "(2097152,)" in str(results[r]) and f"({smaller},)" in str(results[r])
    for r in (1, 2):  # owner 1 waits for replica 3's chunk; replica 2 for owner 1
        assert isinstance(results[r], TimeoutError) and "waiting for replica(s)" in str(results[r]), results[r]
