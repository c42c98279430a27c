"""Batch splitting and worker sharding (expected values measured on TF 2.21)."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from interdist.data import AutoShardPolicy, Dataset, Options, TensorSpec, TextLineDataset
from interdist.input.rebatch import (
    batch_sizes_for_replicas,
    rebatch_element_spec,
    shard_for_worker,
    split_batch,
    split_for_replicas,
    static_batch_size,
)


def as_lists(ds: Dataset) -> list[Any]:
    return [np.asarray(e).tolist() for e in ds]


def distribute(ds: Dataset, num_replicas: int) -> list[list[list[int]]]:
    """What MirroredStrategy's distributed dataset yields, as nested lists."""
    return [[p.tolist() for p in split_for_replicas(batch, num_replicas)] for batch in ds]


# ------------------------------------------------------------ batch sizes


@pytest.mark.parametrize(
    "global_batch,replicas,expected",
    [
        (4, 3, [2, 2, 0]),
        (8, 2, [4, 4]),
        (6, 4, [2, 2, 2, 0]),
        (2, 2, [1, 1]),
        (5, 4, [2, 2, 1, 0]),
        (0, 2, [0, 0]),
        (3, 1, [3]),
    ],
)
def test_batch_sizes_for_replicas(global_batch: int, replicas: int, expected: list[int]) -> None:
    assert batch_sizes_for_replicas(global_batch, replicas) == expected


@given(st.integers(0, 200), st.integers(1, 16))
def test_batch_sizes_rule(global_batch: int, replicas: int) -> None:
    sizes = batch_sizes_for_replicas(global_batch, replicas)
    per = -(-global_batch // replicas)
    assert len(sizes) == replicas
    assert sum(sizes) == global_batch
    # Full pieces of ceil(B/N) first, then at most one partial, then zeros.
    full, rest = divmod(global_batch, per) if per else (0, 0)
    assert sizes == [per] * full + ([rest] if rest else []) + [0] * (
        replicas - full - (1 if rest else 0)
    )


def test_batch_sizes_bad_arguments() -> None:
    with pytest.raises(ValueError):
        batch_sizes_for_replicas(4, 0)
    with pytest.raises(ValueError):
        batch_sizes_for_replicas(-1, 2)


# ------------------------------------------------------------ split_batch


def test_split_batch_partial_batches() -> None:
    assert [p.tolist() for p in split_batch(np.arange(6), [4, 4])] == [[0, 1, 2, 3], [4, 5]]
    assert [p.tolist() for p in split_batch(np.arange(3), [4, 4])] == [[0, 1, 2], []]


def test_split_batch_empty_piece_keeps_dtype_and_trailing_shape() -> None:
    batch = {"x": np.ones((2, 3, 5), np.float32), "y": np.arange(2, dtype=np.int32)}
    pieces = split_batch(batch, [2, 2, 0])
    assert pieces[1]["x"].shape == (0, 3, 5) and pieces[1]["x"].dtype == np.float32
    assert pieces[2]["y"].shape == (0,) and pieces[2]["y"].dtype == np.int32
    assert pieces[0]["x"].shape == (2, 3, 5)


def test_split_batch_errors() -> None:
    with pytest.raises(ValueError):
        split_batch(np.arange(5), [2, 2])
    with pytest.raises(ValueError):
        split_batch((np.arange(4), np.arange(3)), [2, 2])
    with pytest.raises(ValueError):
        split_batch(np.int64(3), [1, 1])


@st.composite
def batch_and_sizes(draw: st.DrawFn) -> tuple[Any, list[int]]:
    sizes = draw(st.lists(st.integers(0, 6), min_size=1, max_size=6))
    length = draw(st.integers(0, sum(sizes)))
    width = draw(st.integers(1, 3))
    batch = (
        np.arange(length, dtype=np.int64),
        {"f": np.arange(length * width, dtype=np.float32).reshape(length, width)},
    )
    return batch, sizes


@given(batch_and_sizes())
def test_split_batch_properties(case: tuple[Any, list[int]]) -> None:
    batch, sizes = case
    pieces = split_batch(batch, sizes)
    length = len(batch[0])
    assert len(pieces) == len(sizes)
    lengths = [len(p[0]) for p in pieces]
    assert sum(lengths) == length
    assert all(n <= s for n, s in zip(lengths, sizes))
    # Filled in order: every piece before the last non-empty one is full.
    used = [i for i, n in enumerate(lengths) if n]
    if used:
        assert all(lengths[i] == sizes[i] for i in range(used[-1]))
    # Concatenating the pieces gives the batch back, in order, leaf by leaf.
    np.testing.assert_array_equal(np.concatenate([p[0] for p in pieces]), batch[0])
    glued = np.concatenate([p[1]["f"] for p in pieces])
    np.testing.assert_array_equal(glued, batch[1]["f"])
    assert all(p[1]["f"].shape[1:] == batch[1]["f"].shape[1:] for p in pieces)
    assert all(p[1]["f"].dtype == np.float32 for p in pieces)


# ------------------------------------------- split_for_replicas (TF-measured)


def test_distribute_examples_measured_on_tf() -> None:
    assert distribute(Dataset.range(4).batch(2), 2) == [[[0], [1]], [[2], [3]]]
    assert distribute(Dataset.range(8).batch(4), 3) == [
        [[0, 1], [2, 3], []],
        [[4, 5], [6, 7], []],
    ]
    # A short last batch is spread again by its own length.
    assert distribute(Dataset.range(7).batch(4), 3) == [[[0, 1], [2, 3], []], [[4], [5], [6]]]
    assert distribute(Dataset.range(7).batch(4), 2) == [[[0, 1], [2, 3]], [[4, 5], [6]]]
    assert distribute(Dataset.range(9).batch(4), 2)[-1] == [[8], []]
    assert distribute(Dataset.range(14).batch(8), 2)[-1] == [[8, 9, 10], [11, 12, 13]]
    assert distribute(Dataset.range(5).batch(4), 4) == [
        [[0], [1], [2], [3]],
        [[4], [], [], []],
    ]
    assert distribute(Dataset.range(11).batch(5, drop_remainder=True), 4) == [
        [[0, 1], [2, 3], [4], []],
        [[5, 6], [7, 8], [9], []],
    ]


def test_split_for_replicas_structures() -> None:
    x = np.arange(15, dtype=np.float32).reshape(5, 3)
    batch = next(iter(Dataset.from_tensor_slices({"a": x, "b": np.arange(5)}).skip(4).batch(4)))
    pieces = split_for_replicas(batch, 3)
    assert pieces[0]["a"].tolist() == [[12.0, 13.0, 14.0]] and pieces[0]["b"].tolist() == [4]
    assert pieces[1]["a"].shape == (0, 3) and pieces[2]["b"].shape == (0,)


def test_rebatch_element_spec() -> None:
    spec = (TensorSpec((4,), np.int64), TensorSpec((None, 2), np.float32), TensorSpec((), np.int64))
    assert rebatch_element_spec(spec, 2) == (
        TensorSpec((2,), np.int64),
        TensorSpec((None, 2), np.float32),
        TensorSpec((), np.int64),
    )
    assert rebatch_element_spec(TensorSpec((5,), np.int64), 4) == TensorSpec((None,), np.int64)


# ------------------------------------------------------- static_batch_size


def test_static_batch_size() -> None:
    base = Dataset.range(16)
    assert static_batch_size(base.batch(4)) == 4
    chained = base.batch(4).map(lambda x: x).prefetch(2).take(2).repeat().shard(2, 0)
    assert static_batch_size(chained) == 4
    assert static_batch_size(base.batch(4).filter(lambda x: True).skip(1)) == 4
    assert static_batch_size(base.batch(2).batch(3)) == 3
    assert static_batch_size(base) is None
    assert static_batch_size(base.batch(4).unbatch()) is None
    assert static_batch_size(base.batch(4).unbatch().batch(2)) == 2
    assert static_batch_size(base.batch(4, drop_remainder=True)) == 4


# -------------------------------------------------------- shard_for_worker


def _files(tmp_path: Path, n: int) -> list[str]:
    paths = []
    for i in range(n):
        p = tmp_path / f"f{i}.txt"
        p.write_text("".join(f"{i}-{j}\n" for j in range(3)))
        paths.append(str(p))
    return paths


def test_one_worker_changes_nothing_and_warns_nothing() -> None:
    ds = Dataset.range(6).batch(2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for policy in AutoShardPolicy:
            assert shard_for_worker(ds, 1, 0, policy) is ds


def test_off_and_hint_leave_the_dataset_alone() -> None:
    ds = Dataset.range(6)
    assert shard_for_worker(ds, 2, 1, AutoShardPolicy.OFF) is ds
    assert shard_for_worker(ds, 2, 1, AutoShardPolicy.HINT) is ds


def test_data_sharding_shards_the_final_elements() -> None:
    ds = Dataset.range(10).batch(2)
    assert as_lists(shard_for_worker(ds, 2, 1, AutoShardPolicy.DATA)) == [[2, 3], [6, 7]]


def test_auto_without_files_falls_back_to_data_with_a_warning() -> None:
    with pytest.warns(UserWarning, match="DATA"):
        sharded = shard_for_worker(Dataset.range(6), 2, 1, AutoShardPolicy.AUTO)
    assert as_lists(sharded) == [1, 3, 5]


def test_policy_comes_from_the_dataset_options() -> None:
    opts = Options()
    opts.experimental_distribute.auto_shard_policy = AutoShardPolicy.OFF
    ds = Dataset.range(4).with_options(opts)
    assert as_lists(shard_for_worker(ds, 2, 1)) == [0, 1, 2, 3]
    opts.experimental_distribute.auto_shard_policy = AutoShardPolicy.DATA
    assert as_lists(shard_for_worker(Dataset.range(4).with_options(opts), 2, 1)) == [1, 3]


def test_file_sharding_splits_the_file_list(tmp_path: Path) -> None:
    files = _files(tmp_path, 3)
    ds = TextLineDataset(files).map(lambda s: s + "!").batch(2)
    w0 = shard_for_worker(ds, 2, 0, AutoShardPolicy.FILE)
    w1 = shard_for_worker(ds, 2, 1, AutoShardPolicy.AUTO)
    assert w0._source_files == (files[0], files[2])
    assert w1._source_files == (files[1],)
    assert as_lists(w1) == [["1-0!", "1-1!"], ["1-2!"]]
    assert [line for batch in as_lists(w0) for line in batch] == [
        f"{i}-{j}!" for i in (0, 2) for j in range(3)
    ]
    assert ds._source_files == tuple(files)  # the original pipeline is untouched


def test_file_sharding_keeps_options(tmp_path: Path) -> None:
    opts = Options()
    opts.experimental_distribute.auto_shard_policy = AutoShardPolicy.FILE
    ds = TextLineDataset(_files(tmp_path, 2)).with_options(opts).take(1)
    sharded = shard_for_worker(ds, 2, 1)
    assert as_lists(sharded) == ["1-0"]
    assert sharded.options().experimental_distribute.auto_shard_policy is AutoShardPolicy.FILE


def test_file_sharding_errors(tmp_path: Path) -> None:
    files = _files(tmp_path, 3)
    with pytest.raises(ValueError, match="not enough"):
        shard_for_worker(TextLineDataset(files), 4, 0, AutoShardPolicy.FILE)
    with pytest.raises(ValueError, match="not enough"):
        shard_for_worker(TextLineDataset(files), 4, 0, AutoShardPolicy.AUTO)
    with pytest.raises(ValueError, match="unshardable"):
        shard_for_worker(Dataset.range(6), 2, 0, AutoShardPolicy.FILE)
    with pytest.raises(ValueError):
        shard_for_worker(Dataset.range(6), 2, 2, AutoShardPolicy.DATA)
