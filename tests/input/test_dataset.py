"""Dataset semantics against TensorFlow 2.21's ``tf.data`` (values checked with real TF)."""

from __future__ import annotations

import builtins
import collections
from pathlib import Path
from typing import Any

import cloudpickle  # type: ignore[import-untyped]
import numpy as np
import pytest

from interdist.data import (
    INFINITE_CARDINALITY,
    UNKNOWN_CARDINALITY,
    AutoShardPolicy,
    Dataset,
    Options,
    TensorSpec,
    TextLineDataset,
)

Point = collections.namedtuple("Point", "x y")


def as_lists(ds: Dataset) -> list[Any]:
    return [np.asarray(e).tolist() for e in ds]


# ---------------------------------------------------------------- sources


@pytest.mark.parametrize(
    "args", [(5,), (2, 10), (2, 10, 3), (10, 2, -3), (5, 2), (0, 10, -1), (-3, 3)]
)
def test_range_matches_python_range(args: tuple[int, ...]) -> None:
    ds = Dataset.range(*args)
    assert as_lists(ds) == list(builtins.range(*args))
    assert ds.cardinality() == len(builtins.range(*args))


def test_range_yields_int64_scalars() -> None:
    first = next(iter(Dataset.range(3)))
    assert type(first) is np.int64
    assert Dataset.range(3).element_spec == TensorSpec((), np.int64)


def test_range_output_type() -> None:
    assert Dataset.range(3, output_type=np.int32).element_spec == TensorSpec((), np.int32)


def test_range_bad_arguments() -> None:
    with pytest.raises(ValueError):
        Dataset.range(0, 5, 0)
    with pytest.raises(TypeError):
        Dataset.range(2.5)  # type: ignore[arg-type]


def test_from_tensor_slices_structures() -> None:
    x = np.arange(6, dtype=np.float32).reshape(3, 2)
    ds = Dataset.from_tensor_slices({"b": np.arange(3), "a": x})
    assert ds.cardinality() == 3
    assert ds.element_spec == {"b": TensorSpec((), np.int64), "a": TensorSpec((2,), np.float32)}
    elems = list(ds)
    assert [e["b"] for e in elems] == [0, 1, 2]
    np.testing.assert_array_equal(elems[2]["a"], [4.0, 5.0])

    nt = Dataset.from_tensor_slices(Point(np.arange(2), np.arange(2.0)))
    assert nt.element_spec == Point(TensorSpec((), np.int64), TensorSpec((), np.float64))
    assert isinstance(next(iter(nt)), Point)


def test_from_tensor_slices_python_lists_follow_tf_dtypes() -> None:
    # TF: Python ints -> int32, floats -> float32, ints beyond int32 -> int64.
    assert Dataset.from_tensor_slices([1, 2, 3]).element_spec == TensorSpec((), np.int32)
    assert Dataset.from_tensor_slices([1.0, 2.0]).element_spec == TensorSpec((), np.float32)
    assert Dataset.from_tensor_slices([[1, 2], [3, 4]]).element_spec == TensorSpec((2,), np.int32)
    assert Dataset.from_tensor_slices([1, 2**40]).element_spec == TensorSpec((), np.int64)
    assert as_lists(Dataset.from_tensor_slices(([1, 2], [3, 4]))) == [[1, 3], [2, 4]]


def test_from_tensor_slices_errors() -> None:
    with pytest.raises(ValueError, match="Dimensions 3 and 4 are not compatible"):
        Dataset.from_tensor_slices((np.zeros(3), np.zeros(4)))
    with pytest.raises(ValueError):
        Dataset.from_tensor_slices(np.float32(3))


def test_from_tensor_slices_empty() -> None:
    ds = Dataset.from_tensor_slices(np.zeros((0, 2)))
    assert ds.cardinality() == 0
    assert ds.element_spec == TensorSpec((2,), np.float64)
    assert list(ds) == []


def test_from_tensors_is_one_element() -> None:
    ds = Dataset.from_tensors([1, 2])
    assert ds.cardinality() == 1
    assert ds.element_spec == TensorSpec((2,), np.int32)
    assert as_lists(ds) == [[1, 2]]
    assert Dataset.from_tensors(3.0).element_spec == TensorSpec((), np.float32)


def test_elements_do_not_share_memory_with_the_source() -> None:
    source = np.zeros((2, 3))
    ds = Dataset.from_tensor_slices(source)
    for row in ds:
        row += 1.0
    assert source.sum() == 0.0
    assert all(r.sum() == 0.0 for r in ds)


# -------------------------------------------------------- transformations


def test_batch_keeps_or_drops_the_remainder() -> None:
    assert as_lists(Dataset.range(5).batch(2)) == [[0, 1], [2, 3], [4]]
    assert as_lists(Dataset.range(5).batch(2, drop_remainder=True)) == [[0, 1], [2, 3]]


@pytest.mark.parametrize("n,b", [(10, 3), (9, 3), (0, 4), (2, 5)])
def test_batch_cardinality(n: int, b: int) -> None:
    assert Dataset.range(n).batch(b).cardinality() == -(-n // b)
    assert Dataset.range(n).batch(b, drop_remainder=True).cardinality() == n // b


def test_batch_element_spec_batch_dim_is_none_without_drop_remainder() -> None:
    assert Dataset.range(9).batch(3).element_spec == TensorSpec((None,), np.int64)
    assert Dataset.range(9).batch(3, True).element_spec == TensorSpec((3,), np.int64)
    nested = Dataset.range(10).batch(2).batch(3, drop_remainder=True)
    assert nested.element_spec == TensorSpec((3, None), np.int64)


def test_batch_of_tuples_stacks_each_component() -> None:
    a, b = next(iter(Dataset.from_tensor_slices((np.arange(4), np.arange(4.0))).batch(3)))
    assert a.dtype == np.int64 and a.tolist() == [0, 1, 2]
    assert b.dtype == np.float64 and b.tolist() == [0.0, 1.0, 2.0]


def test_batch_errors() -> None:
    with pytest.raises(ValueError):
        Dataset.range(4).batch(0)
    ragged = Dataset.range(3).map(lambda x: np.zeros(int(x) + 1)).batch(2)
    with pytest.raises(ValueError, match="different shapes"):
        list(ragged)


def test_unbatch() -> None:
    ds = Dataset.range(7).batch(3).unbatch()
    assert as_lists(ds) == list(builtins.range(7))
    assert ds.element_spec == TensorSpec((), np.int64)
    assert ds.cardinality() == UNKNOWN_CARDINALITY  # batch dim unknown, as in TF
    assert Dataset.range(9).batch(3, True).unbatch().cardinality() == 9
    with pytest.raises(ValueError, match="scalar"):
        Dataset.range(3).unbatch()
    with pytest.raises(ValueError):
        list(Dataset.from_tensors((np.zeros(2), np.zeros(3))).unbatch())


def test_repeat() -> None:
    assert as_lists(Dataset.range(3).repeat(2)) == [0, 1, 2, 0, 1, 2]
    assert as_lists(Dataset.range(2).repeat().take(5)) == [0, 1, 0, 1, 0]
    assert as_lists(Dataset.range(0).repeat().take(3)) == []  # must terminate


def test_repeat_cardinality() -> None:
    unknown = Dataset.range(3).filter(lambda x: True)
    assert Dataset.range(3).repeat().cardinality() == INFINITE_CARDINALITY
    assert Dataset.range(3).repeat(-5).cardinality() == INFINITE_CARDINALITY
    assert Dataset.range(3).repeat(2).cardinality() == 6
    assert Dataset.range(0).repeat().cardinality() == 0
    assert Dataset.range(3).repeat(0).cardinality() == 0
    assert unknown.repeat().cardinality() == INFINITE_CARDINALITY
    assert unknown.repeat(2).cardinality() == UNKNOWN_CARDINALITY


@pytest.mark.parametrize("index", [0, 1, 2])
def test_shard(index: int) -> None:
    ds = Dataset.range(10).shard(3, index)
    assert as_lists(ds) == list(builtins.range(10))[index::3]
    assert ds.cardinality() == len(builtins.range(10)[index::3])


@pytest.mark.parametrize("num_shards,index", [(0, 0), (3, 3), (3, -1), (-1, 0)])
def test_shard_bad_arguments(num_shards: int, index: int) -> None:
    with pytest.raises(ValueError):
        Dataset.range(10).shard(num_shards, index)


def test_shard_of_infinite_and_unknown() -> None:
    assert Dataset.range(3).repeat().shard(2, 0).cardinality() == INFINITE_CARDINALITY
    unknown = Dataset.range(3).filter(lambda x: True).shard(2, 0)
    assert unknown.cardinality() == UNKNOWN_CARDINALITY


def test_map_unpacks_plain_tuples_only() -> None:
    pairs = Dataset.from_tensor_slices((np.arange(3), np.arange(3) * 10))
    assert as_lists(pairs.map(lambda a, b: a + b)) == [0, 11, 22]
    points = Dataset.from_tensor_slices(Point(np.arange(3), np.arange(3) * 10))
    assert as_lists(points.map(lambda p: p.x + p.y)) == [0, 11, 22]
    dicts = Dataset.from_tensor_slices({"a": np.arange(3)})
    assert as_lists(dicts.map(lambda d: d["a"] * 2)) == [0, 2, 4]


def test_map_output_conversion_and_spec() -> None:
    assert Dataset.range(3).map(lambda x: 1.0).element_spec == TensorSpec((), np.float32)
    assert Dataset.range(3).map(lambda x: 1).element_spec == TensorSpec((), np.int32)
    # A top-level list is a tuple of components; a nested list is one array.
    pair = Dataset.range(3).map(lambda x: [x, x])
    assert pair.element_spec == (TensorSpec((), np.int64), TensorSpec((), np.int64))
    nested = Dataset.range(3).map(lambda x: {"z": x, "a": [x, x]})
    assert nested.element_spec == {"z": TensorSpec((), np.int64), "a": TensorSpec((2,), np.int64)}
    reshaped = Dataset.range(10).batch(3).map(lambda x: x.reshape(-1, 1))
    assert reshaped.element_spec == TensorSpec((None, 1), np.int64)
    assert reshaped.cardinality() == 4
    with pytest.raises(ValueError):
        list(Dataset.range(3).map(lambda x: None))


def test_map_spec_falls_back_to_real_data_when_probes_fail() -> None:
    def needs_positive(x: np.int64) -> np.float64:
        if x <= 0:
            raise ZeroDivisionError
        return np.float64(1.0 / x)

    assert Dataset.range(1, 4).map(needs_positive).element_spec == TensorSpec((), np.float64)


def test_filter() -> None:
    assert as_lists(Dataset.range(10).filter(lambda x: x % 3 == 0)) == [0, 3, 6, 9]
    pairs = Dataset.from_tensor_slices((np.arange(4), np.arange(4) * 2))
    assert as_lists(pairs.filter(lambda a, b: a > 1)) == [[2, 4], [3, 6]]
    assert Dataset.range(10).filter(lambda x: True).cardinality() == UNKNOWN_CARDINALITY
    assert Dataset.range(3).repeat().filter(lambda x: True).cardinality() == UNKNOWN_CARDINALITY
    with pytest.raises(ValueError, match="predicate"):
        list(Dataset.range(10).filter(lambda x: x))
    with pytest.raises(ValueError, match="predicate"):
        list(Dataset.range(10).batch(2).filter(lambda x: x > 0))


def test_take_and_skip() -> None:
    assert as_lists(Dataset.range(10).take(3)) == [0, 1, 2]
    assert as_lists(Dataset.range(10).skip(7)) == [7, 8, 9]
    assert as_lists(Dataset.range(4).take(-1)) == [0, 1, 2, 3]
    assert as_lists(Dataset.range(4).skip(-1)) == []
    assert as_lists(Dataset.range(4).take(0)) == []


def test_take_and_skip_cardinality() -> None:
    unknown = Dataset.range(10).filter(lambda x: True)
    forever = Dataset.range(3).repeat()
    assert [Dataset.range(10).take(n).cardinality() for n in (3, 30, -1)] == [3, 10, 10]
    assert forever.take(5).cardinality() == 5
    assert forever.take(-1).cardinality() == INFINITE_CARDINALITY
    assert unknown.take(3).cardinality() == UNKNOWN_CARDINALITY
    assert [Dataset.range(10).skip(n).cardinality() for n in (3, 30, -1)] == [7, 0, 0]
    assert forever.skip(5).cardinality() == INFINITE_CARDINALITY


def test_prefetch_is_a_pass_through() -> None:
    assert as_lists(Dataset.range(3).prefetch(2)) == [0, 1, 2]
    assert Dataset.range(3).prefetch(-1).cardinality() == 3
    assert as_lists(Dataset.range(3).prefetch(0)) == [0, 1, 2]
    with pytest.raises(ValueError):
        Dataset.range(3).prefetch(-2)


def test_shuffle_is_a_permutation() -> None:
    values = as_lists(Dataset.range(50).shuffle(7))
    assert sorted(values) == list(builtins.range(50))


def test_shuffle_with_seed_is_reproducible() -> None:
    first = [as_lists(Dataset.range(20).shuffle(5, seed=42)) for _ in range(2)]
    assert first[0] == first[1]
    ds = Dataset.range(20).shuffle(20, seed=42)
    epochs = [as_lists(ds) for _ in range(2)]
    again = Dataset.range(20).shuffle(20, seed=42)
    assert epochs == [as_lists(again) for _ in range(2)]
    assert epochs[0] != epochs[1]  # reshuffled each iteration, like TF's default


def test_shuffle_without_reshuffle_repeats_the_order() -> None:
    ds = Dataset.range(20).shuffle(20, reshuffle_each_iteration=False)
    assert as_lists(ds) == as_lists(ds)


def test_shuffle_buffer_of_one_keeps_the_order() -> None:
    assert as_lists(Dataset.range(6).shuffle(1, seed=0)) == list(builtins.range(6))
    assert Dataset.range(6).shuffle(3).cardinality() == 6
    with pytest.raises(ValueError):
        Dataset.range(6).shuffle(0)


def test_enumerate_reduce_apply() -> None:
    ds = Dataset.range(3).enumerate(5)
    assert [(int(i), int(x)) for i, x in ds] == [(5, 0), (6, 1), (7, 2)]
    assert ds.element_spec == (TensorSpec((), np.int64), TensorSpec((), np.int64))
    assert Dataset.range(5).reduce(np.int64(0), lambda s, x: s + x) == 10
    assert as_lists(Dataset.range(4).apply(lambda d: d.skip(2))) == [2, 3]


# ------------------------------------------------------------- inspection


def test_len_and_bool() -> None:
    assert len(Dataset.range(3)) == 3
    with pytest.raises(TypeError, match="infinite"):
        len(Dataset.range(3).repeat())
    with pytest.raises(TypeError, match="unknown"):
        len(Dataset.range(3).filter(lambda x: True))
    assert bool(Dataset.range(3).repeat()) is True


def test_reiterable_and_numpy_iterator() -> None:
    ds = Dataset.range(4).map(lambda x: x * 2)
    assert as_lists(ds) == as_lists(ds) == [0, 2, 4, 6]
    assert [int(v) for v in ds.as_numpy_iterator()] == [0, 2, 4, 6]


def test_cloudpickle_round_trip() -> None:
    ds = (
        Dataset.range(10)
        .map(lambda x: x * 2)
        .shuffle(3, seed=1)
        .batch(4)
        .prefetch(1)
        .with_options(Options())
    )
    clone = cloudpickle.loads(cloudpickle.dumps(ds))
    assert as_lists(clone) == as_lists(cloudpickle.loads(cloudpickle.dumps(ds)))
    assert sorted(x for batch in as_lists(clone) for x in batch) == list(builtins.range(0, 20, 2))


def test_text_line_dataset(tmp_path: Path) -> None:
    a = tmp_path / "a.txt"
    a.write_bytes(b"l1\nl2\r\n\nl4")
    b = tmp_path / "b.txt"
    b.write_text("m1\n")
    ds = TextLineDataset([str(a), str(b)])
    lines = list(ds)
    assert lines == ["l1", "l2", "", "l4", "m1"]
    assert all(type(s) is np.str_ for s in lines)
    assert ds.cardinality() == UNKNOWN_CARDINALITY
    assert ds.element_spec == TensorSpec((), np.str_)
    assert ds._source_files == (str(a), str(b))
    assert ds.map(lambda s: s).batch(2)._source_files == (str(a), str(b))
    assert Dataset.range(3).batch(2)._source_files is None
    with pytest.raises(FileNotFoundError):
        list(TextLineDataset(str(tmp_path / "missing.txt")))


def test_options_defaults_merge_and_validation() -> None:
    assert Dataset.range(3).options().experimental_distribute.auto_shard_policy is (
        AutoShardPolicy.AUTO
    )
    data = Options()
    data.experimental_distribute.auto_shard_policy = AutoShardPolicy.DATA
    det = Options()
    det.deterministic = False
    ds = Dataset.range(3).with_options(data).map(lambda x: x).with_options(det)
    merged = ds.options()
    assert merged.experimental_distribute.auto_shard_policy is AutoShardPolicy.DATA
    assert merged.deterministic is False
    off = Options()
    off.experimental_distribute.auto_shard_policy = AutoShardPolicy.OFF
    later = ds.with_options(off).options().experimental_distribute.auto_shard_policy
    assert later is AutoShardPolicy.OFF  # the later with_options wins, as in TF
    with pytest.raises(AttributeError):
        Options().foo = 1
    with pytest.raises(TypeError):
        Options().experimental_distribute.auto_shard_policy = 5  # type: ignore[assignment]


def test_tensor_spec() -> None:
    spec = TensorSpec([None, 3], "float32")
    assert spec.shape == (None, 3) and spec.dtype == np.float32
    assert repr(spec) == "TensorSpec(shape=(None, 3), dtype=tf.float32, name=None)"
    assert spec == TensorSpec((None, 3), np.float32) and hash(spec) == hash(
        TensorSpec((None, 3), np.float32)
    )
    assert spec.is_compatible_with(np.zeros((5, 3), np.float32))
    assert not spec.is_compatible_with(np.zeros((5, 4), np.float32))
    assert TensorSpec((), "<U7") == TensorSpec((), np.str_)
