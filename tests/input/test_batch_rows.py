"""``batch`` of ``from_tensor_slices`` through ``shuffle``, ``repeat``, ``take``, ``skip``, ``shard``, ``prefetch`` and
``with_options``: its batches gathered as rows of the arrays (``TensorSliceDataset.rows``) are exactly the batches of
the elements, one by one (what ``batch`` stacks), for every structure and dtype."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import interdist as idist
from interdist import _nest
from interdist.input._sources import _Row

D = idist.data.Dataset
rng = np.random.default_rng(7)
X = rng.normal(size=(23, 3, 2)).astype(np.float32)
Y = rng.integers(0, 10, 23)
NAMES = np.array([f"n{i}" for i in range(23)])


def _stacked(elements: list[Any]) -> Any:
    """What ``batch`` makes of ``elements``: each component stacked (the reference, by hand)."""
    columns = list(zip(*[_nest.flatten(e) for e in elements], strict=True))
    return _nest.pack_sequence_as(elements[0], [np.stack([np.asarray(v) for v in col]) for col in columns])


def _same(got: Any, want: Any) -> None:
    g, w = _nest.flatten(got), _nest.flatten(want)
    assert len(g) == len(w) and type(got) is type(want)
    for a, b in zip(g, w, strict=True):
        assert type(a) is np.ndarray and a.dtype == b.dtype and a.shape == b.shape
        np.testing.assert_array_equal(a, b)


PIPES: list[tuple[str, Callable[[Any], Any]]] = [
    ("repeat", lambda d: d.repeat(3)),
    ("shuffle(seed)", lambda d: d.shuffle(8, seed=3)),
    ("shuffle(seed).repeat", lambda d: d.shuffle(30, seed=4).repeat(2)),
    ("repeat.shuffle(seed)", lambda d: d.repeat(2).shuffle(5, seed=5)),
    ("skip.take", lambda d: d.skip(2).take(15)),
    ("shard", lambda d: d.shard(3, 1)),
    ("prefetch.with_options", lambda d: d.prefetch(2).with_options(idist.data.Options())),
]


@pytest.mark.parametrize("value", [X, (X, Y), {"x": X, "name": NAMES, "y": Y}], ids=["array", "tuple", "dict"])
@pytest.mark.parametrize("name,pipe", PIPES, ids=[p[0] for p in PIPES])
@pytest.mark.parametrize("drop", [False, True])
def test_gathered_batches_are_the_stacked_elements(
    value: Any, name: str, pipe: Callable[[Any], Any], drop: bool
) -> None:
    # Two pipelines of their own (a seeded shuffle's epoch counts its node's iterations): one batched, one not.
    batched = pipe(D.from_tensor_slices(value)).batch(4, drop_remainder=drop)
    elements = list(pipe(D.from_tensor_slices(value)))
    want = [_stacked(elements[i : i + 4]) for i in range(0, len(elements), 4)]
    if drop:
        want = [w for w in want if len(_nest.flatten(w)[0]) == 4]
    got = list(batched)
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        _same(g, w)


def test_a_seeded_shuffle_reshuffles_each_epoch_as_before() -> None:
    """Iterating the batched dataset again is the shuffle's next epoch, with the order the elements would have."""
    batched = D.from_tensor_slices(Y).shuffle(23, seed=9).batch(23)
    plain = D.from_tensor_slices(Y).shuffle(23, seed=9)
    for _ in range(3):
        (got,) = list(batched)
        np.testing.assert_array_equal(got, np.array(list(plain)))
    (first,), (second,) = list(batched), list(batched)
    assert sorted(first) == sorted(second) == sorted(Y) and not np.array_equal(first, second)


def test_rows_never_leave_the_batch() -> None:
    """Between two batches, and everywhere else, the same dataset yields its elements, not row numbers."""
    source = D.from_tensor_slices((X, Y))
    shuffled = source.shuffle(4, seed=1)
    it = iter(shuffled.repeat().batch(5))
    other = iter(shuffled)
    for _ in range(6):
        batch = next(it)
        assert batch[0].shape == (5, 3, 2)
        element = next(other)
        assert not isinstance(element, _Row) and element[0].shape == (3, 2)
        assert not any(isinstance(e, _Row) for e in _nest.flatten(next(iter(source))))


def test_a_map_between_is_not_gathered_and_still_right() -> None:
    """A transform that looks at elements (``map``) is between: the elements are made and stacked, as always."""
    got = list(D.from_tensor_slices(Y).map(lambda v: v * 2).repeat(2).batch(10))
    want = np.concatenate([Y, Y]) * 2
    np.testing.assert_array_equal(np.concatenate(got), want)
    assert [len(b) for b in got] == [10, 10, 10, 10, 6]


def test_strings_are_batched_element_by_element() -> None:
    """Not gathered: a batch of strings stacked element by element is as wide as its longest one."""
    names = np.array(["a", "bbb", "cc", "d"])
    got = list(D.from_tensor_slices(names).repeat(2).batch(2))
    assert [b.dtype.str for b in got] == ["<U3", "<U2", "<U3", "<U2"]


def test_a_distributed_dataset_splits_the_gathered_batches(mirrored2: idist.MirroredStrategy) -> None:
    """The notebook's training loop: ``from_tensor_slices((x, y)).shuffle(...).repeat().batch(...)`` distributed."""
    s = mirrored2
    ds = D.from_tensor_slices((X, Y)).shuffle(23, seed=2).repeat().batch(8)
    ref = iter(D.from_tensor_slices((X, Y)).shuffle(23, seed=2).repeat())
    it = iter(s.experimental_distribute_dataset(ds))
    for _ in range(4):
        images, labels = next(it)
        parts = [next(ref) for _ in range(8)]
        for r, (x_r, y_r) in enumerate(
            zip(s.experimental_local_results(images), s.experimental_local_results(labels), strict=True)
        ):
            want = _stacked(parts[4 * r : 4 * r + 4])
            assert np.asarray(x_r).shape == (4, 3, 2) and np.asarray(y_r).shape == (4,)  # (and _same asserts)
            _same((np.asarray(x_r), np.asarray(y_r)), want)
