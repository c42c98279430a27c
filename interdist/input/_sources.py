"""Source datasets: ``range``, ``from_tensor_slices``, ``from_tensors``, ``from_generator``, text files."""

from __future__ import annotations

import builtins
import contextlib
import contextvars
import operator
import os
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

from interdist import _nest
from interdist.input import _values
from interdist.input.dataset import UNKNOWN_CARDINALITY, Dataset, register_node
from interdist.input.spec import TensorSpec, spec_of

#: The ``TensorSliceDataset`` whose elements a ``batch`` is gathering as rows (``TensorSliceDataset.rows``).
_rows_of: contextvars.ContextVar[Any] = contextvars.ContextVar("interdist_rows_of", default=None)


class _Row:
    """A row number of a ``TensorSliceDataset``, standing for its element on the way to a ``batch``."""

    __slots__ = ("i",)

    def __init__(self, i: int) -> None:
        self.i = i


@register_node
class RangeDataset(Dataset):
    """``Dataset.range``: NumPy scalars ``start, start + step, ...`` below ``stop``."""

    def __init__(self, *args: int, output_type: Any = None) -> None:
        super().__init__()
        if not 1 <= len(args) <= 3:
            raise TypeError(f"range() takes 1 to 3 positional arguments ({len(args)} given)")
        try:
            # operator.index accepts Python and NumPy integers but not floats,
            # as TF refuses to convert 2.5 to an int64.
            bounds = [operator.index(a) for a in args]
        except TypeError:
            raise TypeError(f"range() arguments must be integers, got {args!r}") from None
        if len(bounds) == 1:
            bounds = [0, bounds[0], 1]
        elif len(bounds) == 2:
            bounds.append(1)
        if bounds[2] == 0:
            raise ValueError("step must be a non-zero integer.")
        self._range = builtins.range(*bounds)
        self._dtype = np.dtype(np.int64 if output_type is None else output_type)

    def _iterate(self) -> Iterator[Any]:
        scalar = self._dtype.type
        return (scalar(i) for i in self._range)

    def _cardinality(self) -> int:
        return len(self._range)

    def _compute_element_spec(self) -> Any:
        return TensorSpec((), self._dtype)


@register_node
class TensorSliceDataset(Dataset):
    """``Dataset.from_tensor_slices``: rows of the leading axis of every leaf."""

    def __init__(self, tensors: Any) -> None:
        super().__init__()
        self._value = _values.normalize(tensors)
        leaves = _nest.flatten(self._value)
        if not leaves:
            raise ValueError("from_tensor_slices() needs at least one component")
        sizes = []
        for leaf in leaves:
            if np.ndim(leaf) == 0:
                raise ValueError("Unbatching a tensor is only supported for rank >= 1")
            sizes.append(np.shape(leaf)[0])
        for size in sizes[1:]:
            if size != sizes[0]:
                raise ValueError(f"Dimensions {sizes[0]} and {size} are not compatible")
        self._length: int = sizes[0]

    def _iterate(self) -> Iterator[Any]:
        leaves = _nest.flatten(self._value)
        for i in builtins.range(self._length):
            if _rows_of.get() is self:  # a batch above gathers its rows (``rows``)
                yield _Row(i)
                continue
            yield _nest.pack_sequence_as(self._value, [_values.copy_leaf(leaf[i]) for leaf in leaves])

    def gatherable(self) -> bool:
        """Whether a batch of this dataset's elements can be read as rows of its arrays (``rows``, ``gather``): every
        leaf a NumPy array of numbers or booleans. (A batch of strings stacked element by element is as wide as its
        longest string, a row of an object array may be a list that ``batch`` stacks into a new axis.)"""
        return all(type(leaf) is np.ndarray and leaf.dtype.kind in "biufc" for leaf in _nest.flatten(self._value))

    @contextlib.contextmanager
    def rows(self) -> Iterator[None]:
        """While in it, this dataset yields ``_Row``s (its row numbers) instead of its elements, to the transforms
        that only reorder, repeat or drop elements between it and a ``batch`` (``BatchDataset``), which then gathers
        a batch's rows in one copy: the elements are never made (``next`` of a distributed iterator over batches of
        64 in a notebook's training loop: 0.18-0.26 ms against 0.78-1.0). Set around each pull of a batch only, in
        this thread's context."""
        token = _rows_of.set(self)
        try:
            yield
        finally:
            _rows_of.reset(token)

    def gather(self, chunk: list[Any]) -> Any:
        """The batch of ``chunk``: the rows read in ``rows`` taken from the arrays (what ``batch`` stacks: the same
        values, dtypes and shapes), or elements as they came (a planned read does not go through ``_iterate``)."""
        if all(type(e) is _Row for e in chunk):
            index = np.fromiter((e.i for e in chunk), np.intp, len(chunk))
            leaves = _nest.flatten(self._value)
            return _nest.pack_sequence_as(self._value, [leaf.take(index, axis=0) for leaf in leaves])
        leaves = _nest.flatten(self._value)
        return _values.stack_elements(
            [
                _nest.pack_sequence_as(self._value, [_values.copy_leaf(leaf[e.i]) for leaf in leaves])
                if type(e) is _Row
                else e
                for e in chunk
            ]
        )

    def _cardinality(self) -> int:
        return self._length

    def _compute_element_spec(self) -> Any:
        return _nest.map_structure(lambda s: s.unbatched(), spec_of(self._value))


@register_node
class TensorDataset(Dataset):
    """``Dataset.from_tensors``: the whole value as a single element."""

    def __init__(self, tensors: Any) -> None:
        super().__init__()
        self._value = _values.normalize(tensors)

    def _iterate(self) -> Iterator[Any]:
        yield _nest.map_structure(_values.copy_leaf, self._value)

    def _cardinality(self) -> int:
        return 1

    def _compute_element_spec(self) -> Any:
        return spec_of(self._value)


def _as_shape(shape: Any) -> tuple[int | None, ...]:
    """An ``output_shapes`` entry as a shape (``tf.TensorShape``'s reading: an int is a rank-1 shape)."""
    if shape is None:
        raise NotImplementedError(
            "from_generator without output_shapes gives components of unknown rank, which interdist's TensorSpec "
            "cannot describe: pass output_shapes (None for an unknown dimension) or output_signature"
        )
    if isinstance(shape, int):
        return (shape,)
    return tuple(shape)


def _up_to(shallow: Any, value: Any, fn: Callable[[Any, Any], Any]) -> Any:
    """``fn(leaf, part)`` for every leaf of ``shallow``, ``part`` being what ``value`` holds there.

    ``tf.data``'s ``map_structure_up_to``: ``value`` must have ``shallow``'s tuples and dicts down
    to ``shallow``'s leaves (the same types, lengths and keys); below them anything goes, and a
    list is data, never structure. Raises ``TypeError`` otherwise.
    """
    if isinstance(shallow, dict):
        if not isinstance(value, dict) or sorted(value) != sorted(shallow):
            raise TypeError("structure mismatch")
        return {k: _up_to(shallow[k], value[k], fn) for k in shallow}
    if isinstance(shallow, tuple):
        if not isinstance(value, type(shallow)) or len(value) != len(shallow):
            raise TypeError("structure mismatch")
        items = [_up_to(a, b, fn) for a, b in zip(shallow, value, strict=True)]
        return type(shallow)(*items) if hasattr(type(shallow), "_fields") else type(shallow)(items)
    return fn(shallow, value)


def _format_types(signature: Any) -> str:
    """A signature's dtypes as TF prints ``output_types``: ``(tf.int32, tf.float32)``."""
    if isinstance(signature, dict):
        return "{" + ", ".join(f"{k!r}: {_format_types(v)}" for k, v in signature.items()) + "}"
    if isinstance(signature, tuple):
        inner = ", ".join(_format_types(v) for v in signature)
        return f"({inner},)" if len(signature) == 1 else f"({inner})"
    return f"tf.{signature.dtype.name}"


def _convert_yielded(spec: TensorSpec, value: Any) -> Any:
    """One yielded component converted to ``spec``'s dtype and checked against its shape (TF's rules)."""
    try:
        # np.array casts as TF's np.asarray(value, dtype) does (1.7 -> int32 1), and copies: elements are private.
        arr = np.array(value, dtype=spec.dtype)
    except (TypeError, ValueError):
        raise ValueError(
            "`generator` yielded an element that could not be converted to the expected type. The expected "
            f"type was {spec.dtype.name}, but the yielded element was {value}."
        ) from None
    if not spec.is_compatible_with(TensorSpec(arr.shape, spec.dtype)):
        raise ValueError(
            f"`generator` yielded an element of shape {arr.shape} where an element of shape {spec.shape} was expected."
        )
    return arr[()] if arr.ndim == 0 else arr


def generator_signature(output_types: Any, output_shapes: Any, output_signature: Any) -> Any:
    """The element signature ``from_generator`` was given, as a structure of :class:`TensorSpec` (TF's checks)."""
    if output_signature is not None:
        if output_types is not None:
            raise TypeError(
                "The `output_types` argument can not be used together with the `output_signature` argument."
            )
        if output_shapes is not None:
            raise TypeError(
                "The `output_shapes` argument can not be used together with the `output_signature` argument."
            )
        _check_signature(output_signature)
        return output_signature
    if output_types is None:
        raise TypeError(
            "To specify the output signature you need to provide either the `output_signature` argument or the "
            "`output_types` argument."
        )
    if output_shapes is None:
        return _up_to(output_types, output_types, lambda dtype, _: TensorSpec(_as_shape(None), dtype))
    try:
        return _up_to(output_types, output_shapes, lambda dtype, shape: TensorSpec(_as_shape(shape), dtype))
    except TypeError:
        raise ValueError(
            f"`output_shapes` {output_shapes!r} does not have the structure of `output_types` {output_types!r}"
        ) from None


def _check_signature(signature: Any) -> None:
    if isinstance(signature, dict):
        for v in signature.values():
            _check_signature(v)
    elif isinstance(signature, tuple):
        for v in signature:
            _check_signature(v)
    elif not isinstance(signature, TensorSpec):
        raise TypeError(
            "`output_signature` must contain objects that are subclass of `tf.TypeSpec` but found "
            f"{type(signature)} which is not."
        )


@register_node
class GeneratorDataset(Dataset):
    """``Dataset.from_generator``: the elements ``generator(*args)`` yields, checked against a signature.

    The generator is called afresh for every iteration, in the process that iterates: the
    notebook for ``experimental_distribute_dataset``, each replica's worker for
    ``distribute_datasets_from_function`` (the dataset travels there by cloudpickle, which
    pickles a notebook's function or closure by value).
    """

    def __init__(
        self,
        generator: Callable[..., Any],
        output_types: Any = None,
        output_shapes: Any = None,
        args: Any = None,
        output_signature: Any = None,
    ) -> None:
        super().__init__()
        if not callable(generator):
            raise TypeError("`generator` must be a Python callable.")
        self._signature = generator_signature(output_types, output_shapes, output_signature)
        self._generator = generator
        # As TF converts args to tensors and hands the generator their NumPy values.
        self._args = () if args is None else tuple(_values.to_leaf(a) for a in args)

    def _iterate(self) -> Iterator[Any]:
        for value in iter(self._generator(*self._args)):
            try:
                _up_to(self._signature, value, lambda spec, part: None)  # the structure first, as TF
            except TypeError:
                raise ValueError(
                    "`generator` yielded an element that did not match the expected structure. The expected "
                    f"structure was {_format_types(self._signature)}, but the yielded element was {value}."
                ) from None
            yield _up_to(self._signature, value, _convert_yielded)

    def _cardinality(self) -> int:
        return UNKNOWN_CARDINALITY

    def _compute_element_spec(self) -> Any:
        return self._signature


@register_node
class TextLineDataset(Dataset):
    """One element per line of each file, in file order (``tf.data.TextLineDataset``).

    Lines are decoded as UTF-8 and yielded as ``np.str_`` without their line
    terminator (``\\n`` or ``\\r\\n``); empty lines are kept. Files are opened
    only when iterating, so a missing file raises ``FileNotFoundError`` then.
    Because the data comes from files, FILE auto-sharding can split the file
    list across workers.

    Parameters
    ----------
    filenames : str, path-like, or sequence of them
        The files to read.
    compression_type : None or ""
        Only uncompressed files are supported.
    buffer_size, num_parallel_reads, name
        Accepted for TF compatibility; ignored.

    Examples
    --------
    >>> import interdist as idist, os, tempfile
    >>> with tempfile.TemporaryDirectory() as d:
    ...     path = os.path.join(d, "lines.txt")
    ...     with open(path, "w") as f:
    ...         _ = f.write("first\\nsecond\\n")
    ...     list(idist.data.TextLineDataset(path).as_numpy_iterator())
    [np.str_('first'), np.str_('second')]
    """

    def __init__(
        self,
        filenames: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
        compression_type: str | None = None,
        buffer_size: int | None = None,
        num_parallel_reads: int | None = None,
        name: str | None = None,
    ) -> None:
        if compression_type not in (None, ""):
            raise NotImplementedError("TextLineDataset only reads uncompressed files")
        if isinstance(filenames, (str, os.PathLike)):
            files: tuple[str, ...] = (os.fspath(filenames),)
        else:
            files = tuple(os.fspath(f) for f in filenames)
        super().__init__(source_files=files)

    @property
    def filenames(self) -> tuple[str, ...]:
        """The files this dataset reads, in order."""
        assert self._source_files is not None
        return self._source_files

    def _iterate(self) -> Iterator[Any]:
        for path in self.filenames:
            with open(path, "rb") as f:
                for raw in f:
                    line = raw[:-1] if raw.endswith(b"\n") else raw
                    if line.endswith(b"\r"):
                        line = line[:-1]
                    yield np.str_(line.decode("utf-8"))

    def _cardinality(self) -> int:
        # Like TF: counting lines would mean reading every file.
        return UNKNOWN_CARDINALITY

    def _compute_element_spec(self) -> Any:
        return TensorSpec((), np.str_)

    def _with_files(self, files: tuple[str, ...]) -> TextLineDataset:
        """The same reader over another file list (used by FILE sharding)."""
        return TextLineDataset(files)
