"""Dask arrays and DataFrames as dataset sources.

The reference for every value is the same pipeline over NumPy arrays, whose
splitting follows TF 2.21 (pinned in test_rebatch.py and the recorded TF cases).
"""

from __future__ import annotations

import os
import re
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest

import interdist as idist
from interdist.input import _dask
from interdist.input import plan as row_plan

da = pytest.importorskip("dask.array")

Dataset = idist.data.Dataset

X = np.arange(46, dtype=np.float32).reshape(23, 2)
Y = np.arange(23, dtype=np.int64) % 3

PIPELINES: dict[str, Callable[[Any], Any]] = {
    "batch": lambda d: d.batch(4),
    "batch_drop": lambda d: d.batch(5, drop_remainder=True),
    "map_batch_repeat_take": lambda d: d.map(lambda x, y: (x * 2, y + 1)).batch(5).repeat(2).take(7),
    "skip_take_shard": lambda d: d.skip(3).take(15).shard(2, 1).batch(3),
    "batch_shard_prefetch": lambda d: d.batch(3).shard(2, 0).prefetch(2),
}


def as_lists(value: Any) -> Any:
    if isinstance(value, tuple):
        return tuple(as_lists(v) for v in value)
    if isinstance(value, dict):
        return {k: as_lists(v) for k, v in value.items()}
    return np.asarray(value).tolist()


def local(strategy: Any, per_replica: Any) -> list[Any]:
    return [as_lists(v) for v in strategy.experimental_local_results(per_replica)]


def dask_xy(chunks: int = 7) -> tuple[Any, Any]:
    return da.from_array(X, chunks=(chunks, 2)), da.from_array(Y, chunks=chunks)


# -- in one process --------------------------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(PIPELINES))
def test_same_elements_as_numpy(name: str) -> None:
    build = PIPELINES[name]
    want = [as_lists(e) for e in build(Dataset.from_tensor_slices((X, Y)))]
    got = [as_lists(e) for e in build(Dataset.from_tensor_slices(dask_xy()))]
    assert got == want


def test_unbatched_and_filtered_pipelines_read_row_by_row() -> None:
    want = [as_lists(e) for e in Dataset.from_tensor_slices(X).filter(lambda r: r[0] % 4 == 0)]
    got = [as_lists(e) for e in Dataset.from_tensor_slices(dask_xy()[0]).filter(lambda r: r[0] % 4 == 0)]
    assert got == want == [[0.0, 1.0], [4.0, 5.0], [8.0, 9.0], [12.0, 13.0], [16.0, 17.0], [20.0, 21.0],
                           [24.0, 25.0], [28.0, 29.0], [32.0, 33.0], [36.0, 37.0], [40.0, 41.0], [44.0, 45.0]]


def test_spec_and_cardinality_without_computing() -> None:
    calls = []

    def block(b: np.ndarray) -> np.ndarray:
        calls.append(1)
        return b

    x = da.from_array(X, chunks=(7, 2)).map_blocks(block, dtype=np.float32)
    calls.clear()  # map_blocks itself probes the function on an empty block
    ds = Dataset.from_tensor_slices((x, da.from_array(Y, chunks=7))).batch(4)
    assert ds.element_spec == Dataset.from_tensor_slices((X, Y)).batch(4).element_spec
    assert ds.cardinality() == 6
    assert calls == []


def test_dataframe_is_a_dict_of_columns() -> None:
    pd = pytest.importorskip("pandas")
    dd = pytest.importorskip("dask.dataframe")
    frame = pd.DataFrame({"a": np.arange(10, dtype=np.float64), "b": np.arange(10, dtype=np.int64) * 10})
    ddf = dd.from_pandas(frame, npartitions=3)
    want = [as_lists(e) for e in Dataset.from_tensor_slices(dict(frame.items())).batch(4)]
    got = [as_lists(e) for e in Dataset.from_tensor_slices(ddf).batch(4)]
    assert got == want
    assert list(Dataset.from_tensor_slices(ddf).element_spec) == ["a", "b"]


def test_bad_sources() -> None:
    with pytest.raises(TypeError, match="Cannot mix Dask collections"):
        Dataset.from_tensor_slices((dask_xy()[0], Y))
    with pytest.raises(ValueError, match="Dimensions 23 and 5 are not compatible"):
        Dataset.from_tensor_slices((dask_xy()[0], da.zeros(5, chunks=5)))
    with pytest.raises(ValueError, match="rank >= 1"):
        Dataset.from_tensor_slices(da.from_array(np.float32(1.0)))


# -- distributed -----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def mirrored4() -> Iterator[Any]:
    s = idist.MirroredStrategy([f"CPU:{i}" for i in range(4)])
    yield s
    s.close()


@pytest.mark.parametrize("name", sorted(PIPELINES))
def test_distributed_values_match_numpy(mirrored4: Any, name: str) -> None:
    build = PIPELINES[name]
    x, y = dask_xy()
    x, y = mirrored4.client.persist([x, y])
    want = [local(mirrored4, b) for b in mirrored4.experimental_distribute_dataset(
        build(Dataset.from_tensor_slices((X, Y))))]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # read on the workers: no fallback warning
        got = [local(mirrored4, b) for b in mirrored4.experimental_distribute_dataset(
            build(Dataset.from_tensor_slices((x, y))))]
    assert got == want


def test_tf_split_of_the_last_batch(mirrored4: Any) -> None:
    rows = da.arange(10, chunks=3)
    got = [local(mirrored4, b) for b in mirrored4.experimental_distribute_dataset(
        Dataset.from_tensor_slices(rows).batch(4))]
    # TF 2.21: ceil(L / n) rows per replica until they run out; a short last batch is re-divided.
    assert got == [[[0], [1], [2], [3]], [[4], [5], [6], [7]], [[8], [9], [], []]]


def test_each_replica_reads_only_its_rows_on_its_worker(mirrored4: Any, tmp_path: Any) -> None:
    def block(b: np.ndarray) -> np.ndarray:
        with open(tmp_path / f"{os.getpid()}-{b[0, 0]}", "w"):
            pass
        return b

    x = da.from_array(np.arange(800, dtype=np.float32).reshape(400, 2), chunks=(50, 2))
    x = x.map_blocks(block, dtype=np.float32)
    ds = mirrored4.experimental_distribute_dataset(Dataset.from_tensor_slices(x).batch(16))
    it = iter(ds)
    total = 0.0
    for batch in it:
        total += sum(float(np.asarray(v).sum()) for v in mirrored4.experimental_local_results(
            mirrored4.run(lambda b: b.sum(), args=(batch,))))
    assert total == float(np.arange(800).sum())
    rows = [r.value for r in mirrored4._system(_rows_read, it._key)]
    assert rows == [100, 100, 100, 100]  # 4 rows of every batch of 16, no more
    pids = {int(p.name.split("-")[0]) for p in tmp_path.iterdir()}
    worker_pids = set(mirrored4.client.run(os.getpid).values())
    assert pids and pids <= worker_pids and os.getpid() not in pids  # computed by the cluster, never here


def _rows_read(replica: Any, key: str) -> int:
    return int(replica.store[key].stats["rows"])


def test_chunks_are_global_batches(mirrored4: Any) -> None:
    x = da.arange(11, chunks=(4, 4, 3))
    got = [local(mirrored4, b) for b in mirrored4.experimental_distribute_dataset(x)]
    assert got == [[[0], [1], [2], [3]], [[4], [5], [6], [7]], [[8], [9], [10], []]]


def test_dataframe_partitions_distributed(mirrored2: Any) -> None:
    pd = pytest.importorskip("pandas")
    dd = pytest.importorskip("dask.dataframe")
    frame = pd.DataFrame({"a": np.arange(9, dtype=np.float64), "b": np.arange(9, dtype=np.int64) * 10})
    ddf = dd.from_pandas(frame, npartitions=2)  # partitions of 5 and 4 rows
    got = [local(mirrored2, b) for b in mirrored2.experimental_distribute_dataset(ddf)]
    assert got == [
        [{"a": [0.0, 1.0, 2.0], "b": [0, 10, 20]}, {"a": [3.0, 4.0], "b": [30, 40]}],
        [{"a": [5.0, 6.0], "b": [50, 60]}, {"a": [7.0, 8.0], "b": [70, 80]}]]


def test_run_steps_matches_step_by_step(mirrored2: Any) -> None:
    x = da.from_array(X, chunks=(5, 2))

    def fn(b: Any) -> Any:
        return b.sum()

    step_by_step = [local(mirrored2, mirrored2.run(fn, args=(b,))) for b in mirrored2.experimental_distribute_dataset(
        Dataset.from_tensor_slices(x).batch(6))]
    it = iter(mirrored2.experimental_distribute_dataset(Dataset.from_tensor_slices(x).batch(6)))
    assert local(mirrored2, mirrored2.run_steps(fn, it, steps=3)) == step_by_step[2]
    assert local(mirrored2, mirrored2.run_steps(fn, it, steps=3)) == step_by_step[3]
    with pytest.raises(StopIteration):
        mirrored2.run_steps(fn, it, steps=3)


def test_dataset_fn_reads_dask_on_the_workers(mirrored2: Any) -> None:
    x = da.from_array(X, chunks=(7, 2))

    def dataset_fn(ctx: Any) -> Any:
        return Dataset.from_tensor_slices(x).batch(ctx.get_per_replica_batch_size(8))

    got = [local(mirrored2, b) for b in mirrored2.distribute_datasets_from_function(dataset_fn)]
    want = [local(mirrored2, b) for b in mirrored2.distribute_datasets_from_function(
        lambda ctx: Dataset.from_tensor_slices(X).batch(ctx.get_per_replica_batch_size(8)))]
    assert got == want
    assert got[0] == [X[0:4].tolist(), X[4:8].tolist()]  # PER_WORKER: replica r takes every n-th batch


def test_other_pipelines_fall_back_to_the_notebook_with_a_warning(mirrored2: Any) -> None:
    x = da.from_array(X, chunks=(7, 2))
    want = [local(mirrored2, b) for b in mirrored2.experimental_distribute_dataset(
        Dataset.from_tensor_slices(X).batch(4).map(lambda b: b - b.mean()))]
    with pytest.warns(UserWarning, match="read in the notebook"):
        got = [local(mirrored2, b) for b in mirrored2.experimental_distribute_dataset(
            Dataset.from_tensor_slices(x).batch(4).map(lambda b: b - b.mean()))]
    assert got == want


def test_a_failing_chunk_names_the_replica_and_leaves_the_strategy_usable(mirrored2: Any) -> None:
    def block(b: np.ndarray) -> np.ndarray:
        if b[0, 0] >= 20:
            raise OSError("disk gone")
        return b

    x = da.from_array(X, chunks=(5, 2)).map_blocks(block, dtype=np.float32)
    it = iter(mirrored2.experimental_distribute_dataset(Dataset.from_tensor_slices(x).batch(4)))
    # The error keeps its type (as TF re-raises a replica's error) and names the replica and the step.
    with pytest.raises(OSError, match="disk gone") as info:
        for _ in range(10):
            next(it)
    notes = "\n".join(getattr(info.value, "__notes__", []))
    assert re.search(r"^OSError on replica \d of 2 in .* \(step \d+\)", notes, re.M), notes
    assert local(mirrored2, mirrored2.run(lambda: np.float32(1.0))) == [1.0, 1.0]


def test_plan_window_reads(mirrored2: Any) -> None:
    plan = row_plan.plan_of(Dataset.from_tensor_slices(da.arange(100, chunks=10)).batch(10))
    assert plan is not None
    stats: dict[str, int] = {}
    batches = list(row_plan.iterate_plan(plan, rank=1, num_replicas=2, window_rows=20, stats=stats))
    assert [b.tolist() for b in batches[:2]] == [[5, 6, 7, 8, 9], [15, 16, 17, 18, 19]]
    # Windows of 1, 2, 4, then 4 steps (20 rows) at most: 1 + 2 + 4 + 3 steps of 5 rows.
    assert stats == {"rows": 50, "reads": 4}


def test_sharded_numpy_pipelines_map_only_the_rows_they_keep() -> None:
    seen: list[list[float]] = []

    def f(row: np.ndarray) -> np.ndarray:
        seen.append(row.tolist())
        return row * 3

    ds = Dataset.from_tensor_slices(X).map(f).batch(4).shard(3, 1)
    got = [as_lists(b) for b in ds]
    assert got == [(X[4:8] * 3).tolist(), (X[16:20] * 3).tolist()]
    # One probe on zeros (finding the element spec, as TF traces), then only the 8 rows kept.
    assert seen == [[0.0, 0.0]] + X[4:8].tolist() + X[16:20].tolist()


def _set_input_timeout(seconds: float) -> None:
    from interdist.config import settings

    settings.input_timeout = seconds


def test_a_stuck_read_raises_instead_of_hanging(mirrored2: Any) -> None:
    import time

    def block(b: np.ndarray) -> np.ndarray:
        time.sleep(3)
        return b

    x = da.from_array(X, chunks=(23, 2)).map_blocks(block, dtype=np.float32)
    mirrored2.client.run(_set_input_timeout, 0.5)
    try:
        it = iter(mirrored2.experimental_distribute_dataset(Dataset.from_tensor_slices(x).batch(4)))
        t0 = time.perf_counter()
        with pytest.raises(TimeoutError, match="no batch from this replica's Dask read"):
            next(it)
        assert time.perf_counter() - t0 < 3
    finally:
        mirrored2.client.run(_set_input_timeout, 300.0)
    assert local(mirrored2, mirrored2.run(lambda: np.float32(2.0))) == [2.0, 2.0]


# -- rows read from the holder's memory (input/_direct.py) -----------------------------------------
def _direct_stats(dask_worker: Any) -> dict[str, int]:
    from interdist.input import _direct

    return dict(_direct.stats)


def _set_direct(dask_worker: Any, on: bool) -> None:
    _dask._direct_reads = on


def _direct_delta(strategy: Any, before: dict[str, dict[str, int]]) -> dict[str, int]:
    after = strategy.client.run(_direct_stats, workers=strategy._group.addresses)
    return {k: sum(after[w][k] - before[w][k] for w in after) for k in ("rows", "windows", "fallbacks")}


@pytest.mark.parametrize("batch", [8, 12])  # 4 replicas: 2 or 3 rows each of every batch, across chunks of 7
def test_rows_of_persisted_chunks_come_from_their_holders(mirrored4: Any, batch: int) -> None:
    from distributed import futures_of

    x, y = mirrored4.client.persist(list(dask_xy()))
    mirrored4.client.gather(futures_of([x, y]))  # in memory before the first read
    build = lambda d: d.map(lambda a, b: (a * 2, b + 1)).batch(batch).repeat(2)  # noqa: E731
    want = [local(mirrored4, b) for b in mirrored4.experimental_distribute_dataset(
        build(Dataset.from_tensor_slices((X, Y))))]
    before = mirrored4.client.run(_direct_stats, workers=mirrored4._group.addresses)
    got = [local(mirrored4, b) for b in mirrored4.experimental_distribute_dataset(
        build(Dataset.from_tensor_slices((x, y))))]
    assert got == want
    delta = _direct_delta(mirrored4, before)
    assert delta["windows"] > 0 and delta["fallbacks"] == 0
    assert delta["rows"] == 2 * 23  # each row once per epoch, across the replicas
    # The same through Dask, for comparison.
    mirrored4.client.run(_set_direct, on=False, workers=mirrored4._group.addresses)
    try:
        before = mirrored4.client.run(_direct_stats, workers=mirrored4._group.addresses)
        again = [local(mirrored4, b) for b in mirrored4.experimental_distribute_dataset(
            build(Dataset.from_tensor_slices((x, y))))]
        assert again == want and _direct_delta(mirrored4, before)["windows"] == 0
    finally:
        mirrored4.client.run(_set_direct, on=True, workers=mirrored4._group.addresses)


def test_chunks_not_in_memory_are_read_through_dask(mirrored2: Any) -> None:
    x = da.from_array(np.arange(40, dtype=np.float64).reshape(20, 2), chunks=(5, 2)) + 1  # not persisted
    before = mirrored2.client.run(_direct_stats, workers=mirrored2._group.addresses)
    got = [local(mirrored2, b) for b in mirrored2.experimental_distribute_dataset(
        Dataset.from_tensor_slices(x).batch(4))]
    want = [local(mirrored2, b) for b in mirrored2.experimental_distribute_dataset(
        Dataset.from_tensor_slices(np.arange(40, dtype=np.float64).reshape(20, 2) + 1).batch(4))]
    assert got == want
    delta = _direct_delta(mirrored2, before)
    # The first read computes the chunks through Dask. A later window may still find chunks that read
    # left in memory (their release is asynchronous) and read them directly: also correct.
    assert delta["fallbacks"] > 0 and delta["rows"] < 20


def test_holder_answers_a_missing_chunk_with_an_error_not_a_crash() -> None:
    from interdist.input import _direct

    class FakeWorker:
        data: dict[Any, Any] = {("x", 0, 0): np.arange(6.0).reshape(3, 2)}

    ok = _direct.serve_rows(FakeWorker(), {"rid": 1, "key": ("x", 0, 0), "lo": 1, "hi": 3})
    assert ok["ok"] and ok["shape"] == [2, 2]
    np.testing.assert_array_equal(np.frombuffer(ok["data"], ok["dtype"]).reshape(2, 2), [[2.0, 3.0], [4.0, 5.0]])
    picked = _direct.serve_rows(FakeWorker(), {"rid": 2, "key": ("x", 0, 0),
                                               "index": np.array([0, 2], np.int64).tobytes()})
    np.testing.assert_array_equal(np.frombuffer(picked["data"], picked["dtype"]).reshape(2, 2),
                                  [[0.0, 1.0], [4.0, 5.0]])
    missing = _direct.serve_rows(FakeWorker(), {"rid": 3, "key": ("y", 0, 0), "lo": 0, "hi": 1})
    assert missing == {"rid": 3, "ok": False, "message": "KeyError(('y', 0, 0))"}


def test_an_array_deleted_and_persisted_again_reads_at_once(mirrored4: Any) -> None:
    """Re-running a notebook cell: the same keys are released and persisted again while the replicas
    start reading (the scheduler cancels reads of keys in that state for a moment: they are retried)."""
    data = np.arange(16384 * 256, dtype=np.float32).reshape(-1, 256)  # 16 MB: the race needs a busy scheduler
    want = [local(mirrored4, b) for b in mirrored4.experimental_distribute_dataset(
        Dataset.from_tensor_slices(data).map(lambda r: r * 2).batch(1024))]
    for _ in range(3):
        x = mirrored4.client.persist(da.from_array(data, chunks=(2048, 256)))
        got = [local(mirrored4, b) for b in mirrored4.experimental_distribute_dataset(
            Dataset.from_tensor_slices(x).map(lambda r: r * 2).batch(1024))]
        assert got == want
        del x
