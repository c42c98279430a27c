"""``Dataset``: the part of ``tf.data.Dataset`` that tf.distribute relies on.

A dataset is a lazy, re-iterable pipeline over NumPy values: each
``iter(ds)`` starts from the beginning. It is a plain graph of Python
objects (each transformation holds its input dataset), so it pickles with
cloudpickle and can be shipped to Dask workers; iteration state lives only
in the generators that ``iter`` creates, never in the dataset.

The constructors and transformations mirror TF's names, argument order and
conventions: ``range`` yields ``np.int64`` scalars, tuple elements are
unpacked into ``map``/``filter`` arguments, ``cardinality`` uses
``INFINITE_CARDINALITY`` (-1) and ``UNKNOWN_CARDINALITY`` (-2), and errors
TF reports as ``InvalidArgumentError`` are ``ValueError`` here.

The concrete node classes live in ``_sources`` and ``_transforms``; this
module defines the shared interface.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from interdist.input import _values
from interdist.input.options import Options

INFINITE_CARDINALITY = -1
"""``cardinality()`` of a dataset that never ends (``tf.data.INFINITE_CARDINALITY``).

>>> import interdist as idist
>>> idist.data.Dataset.range(3).repeat().cardinality() == idist.data.INFINITE_CARDINALITY
True
"""

UNKNOWN_CARDINALITY = -2
"""``cardinality()`` when the length cannot be known without iterating.

>>> import interdist as idist
>>> idist.data.Dataset.range(3).filter(lambda x: x > 0).cardinality() == idist.data.UNKNOWN_CARDINALITY
True
"""

AUTOTUNE = -1
"""``tf.data.AUTOTUNE``; accepted as a ``prefetch`` buffer size.

>>> import interdist as idist
>>> list(idist.data.Dataset.range(3).prefetch(idist.data.AUTOTUNE).as_numpy_iterator())
[np.int64(0), np.int64(1), np.int64(2)]
"""


# The node classes (``_sources``, ``_transforms``, ``_dask``) subclass Dataset and register themselves
# here; Dataset's methods build them by name, so this module never imports its subclasses.
# ``input/__init__.py`` imports every node module (distributed's ``_register_transports`` pattern).
_NODES: dict[str, type[Dataset]] = {}
# Reads a pipeline by its row plan when it has one (``plan.py``), else None: set by that module.
_plan_reader: Callable[[Dataset], Iterator[Any] | None] | None = None

_D = TypeVar("_D", bound="type[Dataset]")


def register_node(cls: _D) -> _D:
    """Class decorator: make a node class known to Dataset's methods by its name."""
    _NODES[cls.__name__] = cls
    return cls


def set_plan_reader(reader: Callable[[Dataset], Iterator[Any] | None]) -> None:
    global _plan_reader
    _plan_reader = reader


def _node(name: str) -> Callable[..., Dataset]:
    return _NODES[name]


class Dataset:
    """A lazy, re-iterable sequence of elements (nested NumPy values).

    Create one with :meth:`range`, :meth:`from_tensor_slices`,
    :meth:`from_tensors` or :class:`TextLineDataset`, then chain
    transformations, each of which returns a new dataset.

    Examples
    --------
    >>> [x.tolist() for x in Dataset.range(5).batch(2)]
    [[0, 1], [2, 3], [4]]
    """

    # Upstream dataset of a transformation; None for a source.
    _input: Dataset | None
    # Files a FILE auto-shard can split; None when the data is not read from files.
    _source_files: tuple[str, ...] | None
    # Options in effect (merged along the pipeline by with_options).
    _opts: Options
    # Cached element_spec; None until first computed (a spec is never None).
    _spec: Any

    def __init__(
        self,
        input_dataset: Dataset | None = None,
        source_files: tuple[str, ...] | None = None,
    ) -> None:
        self._input = input_dataset
        if input_dataset is None:
            self._source_files = source_files
            self._opts = Options()
        else:
            self._source_files = input_dataset._source_files
            self._opts = input_dataset._opts
        self._spec = None

    # ------------------------------------------------------------------ hooks

    def _iterate(self) -> Iterator[Any]:
        """A fresh iterator over the elements (subclasses implement)."""
        raise NotImplementedError

    def _cardinality(self) -> int:
        """Number of elements, or one of the cardinality constants."""
        raise NotImplementedError

    def _compute_element_spec(self) -> Any:
        """The element spec (subclasses implement; cached by ``element_spec``)."""
        raise NotImplementedError

    def _with_input(self, new_input: Dataset) -> Dataset:
        """A shallow copy of this transformation reading from ``new_input``."""
        clone = copy.copy(self)
        clone._input = new_input
        clone._source_files = new_input._source_files
        clone._opts = new_input._opts
        clone._spec = None
        return clone

    def _replace_source(self, fn: Callable[[Dataset], Dataset]) -> Dataset:
        """Rebuild the pipeline with its source dataset replaced by ``fn(source)``."""
        if self._input is None:
            return fn(self)
        return self._with_input(self._input._replace_source(fn))

    def _with_files(self, files: tuple[str, ...]) -> Dataset:
        """This source reading ``files`` instead (FILE sharding); file readers override."""
        raise ValueError(f"{type(self).__name__} does not read files")

    # ----------------------------------------------------------- constructors

    @staticmethod
    def range(*args: int, output_type: Any = None) -> Dataset:
        """``range(stop)``, ``range(start, stop)`` or ``range(start, stop, step)``.

        Elements are NumPy scalars of ``output_type`` (default ``np.int64``,
        as TF). ``step == 0`` raises ``ValueError``.
        """
        return _node("RangeDataset")(*args, output_type=output_type)

    @staticmethod
    def from_tensor_slices(tensors: Any) -> Dataset:
        """One element per row of the leading axis of every leaf of ``tensors``.

        Raises ``ValueError`` if a leaf is a scalar or the leaves' leading
        dimensions differ (TF: "Dimensions 3 and 4 are not compatible").

        Leaves may also be Dask arrays, Series or DataFrames (a DataFrame
        gives a dict of its columns): nothing is computed until rows are read,
        and a distributed pipeline reads each replica's rows on its own worker
        (see ``interdist.input._dask``).
        """
        if _values.contains_dask(tensors):
            return _node("DaskSliceDataset")(tensors)
        return _node("TensorSliceDataset")(tensors)

    @staticmethod
    def from_tensors(tensors: Any) -> Dataset:
        """A dataset of exactly one element, ``tensors`` (lists become arrays)."""
        return _node("TensorDataset")(tensors)

    @staticmethod
    def from_generator(
        generator: Callable[..., Any],
        output_types: Any = None,
        output_shapes: Any = None,
        args: Any = None,
        output_signature: Any = None,
        name: str | None = None,
    ) -> Dataset:
        """The elements ``generator(*args)`` yields (``tf.data.Dataset.from_generator``).

        ``generator`` is a callable returning an iterable; it is called again for every
        iteration, in the process that iterates (on the workers for a dataset made by
        ``distribute_datasets_from_function``; it travels there by cloudpickle). Describe the
        elements with ``output_signature``, a tuple/dict structure of :class:`TensorSpec`, or
        with ``output_types`` (dtypes) and ``output_shapes`` (shapes, ``None`` for an unknown
        dimension; ``output_types`` alone, which TF reads as unknown ranks, is not supported).
        Every yielded component is converted to its dtype as TF does (``np.asarray(value, dtype)``:
        ``1.7`` becomes ``int32`` 1) and checked against its shape; a mismatch raises ``ValueError``
        (TF: ``InvalidArgumentError``) when that element is read. ``args`` are converted like
        dataset values (a Python int becomes ``np.int32``). Cardinality is unknown.

        Examples
        --------
        >>> import numpy as np
        >>> from interdist.data import TensorSpec
        >>> def gen():
        ...     for i in range(3):
        ...         yield i, [float(i)] * 2
        >>> ds = Dataset.from_generator(gen, output_signature=(TensorSpec((), np.int32), TensorSpec((2,), np.float32)))
        >>> [(i.tolist(), x.tolist()) for i, x in ds.batch(2)]
        [([0, 1], [[0.0, 0.0], [1.0, 1.0]]), ([2], [[2.0, 2.0]])]
        >>> ds.element_spec
        (TensorSpec(shape=(), dtype=tf.int32, name=None), TensorSpec(shape=(2,), dtype=tf.float32, name=None))
        """
        return _node("GeneratorDataset")(generator, output_types, output_shapes, args, output_signature)

    # -------------------------------------------------------- transformations

    def batch(
        self,
        batch_size: int,
        drop_remainder: bool = False,
        num_parallel_calls: int | None = None,
        deterministic: bool | None = None,
        name: str | None = None,
    ) -> Dataset:
        """Stack ``batch_size`` consecutive elements along a new leading axis.

        The last, shorter batch is kept unless ``drop_remainder``. The spec's
        batch dimension is ``batch_size`` with ``drop_remainder=True`` and
        ``None`` otherwise. ``num_parallel_calls``, ``deterministic`` and
        ``name`` are accepted for TF compatibility and ignored.
        """
        return _node("BatchDataset")(self, batch_size, drop_remainder)

    def unbatch(self, name: str | None = None) -> Dataset:
        """Split every element along its leading axis into separate elements."""
        return _node("UnbatchDataset")(self)

    def map(
        self,
        map_func: Callable[..., Any],
        num_parallel_calls: int | None = None,
        deterministic: bool | None = None,
        name: str | None = None,
    ) -> Dataset:
        """Apply ``map_func`` to every element.

        A plain-tuple element is unpacked into positional arguments (as TF);
        a namedtuple or dict is passed whole. The function may also be called
        on zero-filled probe elements when ``element_spec`` is first needed,
        the counterpart of TF tracing it.
        """
        return _node("MapDataset")(self, map_func)

    def filter(self, predicate: Callable[..., Any], name: str | None = None) -> Dataset:
        """Keep the elements for which ``predicate`` returns a scalar ``True``.

        A predicate result that is not a scalar bool raises ``ValueError``.
        """
        return _node("FilterDataset")(self, predicate)

    def repeat(self, count: int | None = None, name: str | None = None) -> Dataset:
        """Repeat the dataset ``count`` times; ``None`` or ``-1`` repeats forever."""
        return _node("RepeatDataset")(self, count)

    def take(self, count: int, name: str | None = None) -> Dataset:
        """At most the first ``count`` elements; ``-1`` takes all."""
        return _node("TakeDataset")(self, count)

    def skip(self, count: int, name: str | None = None) -> Dataset:
        """Drop the first ``count`` elements; ``-1`` drops all."""
        return _node("SkipDataset")(self, count)

    def shard(self, num_shards: int, index: int, name: str | None = None) -> Dataset:
        """Every ``num_shards``-th element, starting with element ``index``.

        Raises ``ValueError`` unless ``num_shards > 0`` and
        ``0 <= index < num_shards``.
        """
        return _node("ShardDataset")(self, num_shards, index)

    def shuffle(
        self,
        buffer_size: int,
        seed: int | None = None,
        reshuffle_each_iteration: bool | None = None,
        name: str | None = None,
    ) -> Dataset:
        """Randomly shuffle through a buffer of ``buffer_size`` elements.

        With a ``seed`` the sequence of orders is reproducible; by default
        each new iteration draws a new order (``reshuffle_each_iteration``).
        """
        return _node("ShuffleDataset")(self, buffer_size, seed, reshuffle_each_iteration)

    def prefetch(self, buffer_size: int, name: str | None = None) -> Dataset:
        """Semantically a pass-through; ``buffer_size`` must be ``>= 0`` or ``AUTOTUNE``."""
        return _node("PrefetchDataset")(self, buffer_size)

    def enumerate(self, start: int = 0, name: str | None = None) -> Dataset:
        """Pair every element with its ``np.int64`` position: ``(i, element)``."""
        return _node("EnumerateDataset")(self, start)

    def with_options(self, options: Options, name: str | None = None) -> Dataset:
        """The same elements with ``options`` merged over the current options."""
        return _node("OptionsDataset")(self, options)

    def apply(self, transformation_func: Callable[[Dataset], Dataset]) -> Dataset:
        """``transformation_func(self)``, for chaining custom transformations."""
        result = transformation_func(self)
        if not isinstance(result, Dataset):
            raise TypeError("`transformation_func` must return a Dataset")
        return result

    def reduce(self, initial_state: Any, reduce_func: Callable[[Any, Any], Any]) -> Any:
        """Fold the elements: ``state = reduce_func(state, element)``."""
        state = _values.normalize(initial_state)
        for element in self:
            state = _values.normalize_fn_output(reduce_func(state, element))
        return state

    # ------------------------------------------------------------- inspection

    def options(self) -> Options:
        """A copy of the options in effect for this dataset."""
        return copy.deepcopy(self._opts)

    def cardinality(self) -> int:
        """Number of elements, ``INFINITE_CARDINALITY`` or ``UNKNOWN_CARDINALITY``."""
        return self._cardinality()

    @property
    def element_spec(self) -> Any:
        """Nested structure of :class:`TensorSpec` describing one element."""
        if self._spec is None:
            self._spec = self._compute_element_spec()
        return self._spec

    def as_numpy_iterator(self) -> Iterator[Any]:
        """An iterator over the elements (they already are NumPy values)."""
        return iter(self)

    def __iter__(self) -> Iterator[Any]:
        planned = _plan_reader(self) if _plan_reader is not None else None
        return planned if planned is not None else self._iterate()

    def __len__(self) -> int:
        n = self.cardinality()
        if n == INFINITE_CARDINALITY:
            raise TypeError("The dataset is infinite.")
        if n == UNKNOWN_CARDINALITY:
            raise TypeError("The dataset length is unknown.")
        return n

    def __bool__(self) -> bool:
        # Without this, truth testing would fall back to __len__ and raise for
        # infinite datasets; TF datasets are always truthy.
        return True

    def __repr__(self) -> str:
        return f"<{type(self).__name__} element_spec={self.element_spec!r}>"


__all__ = [
    "AUTOTUNE",
    "INFINITE_CARDINALITY",
    "UNKNOWN_CARDINALITY",
    "Dataset",
    "Options",
    "register_node",
    "set_plan_reader",
]
