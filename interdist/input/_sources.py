"""Source datasets: ``range``, ``from_tensor_slices``, ``from_tensors``, text files."""

from __future__ import annotations

import builtins
import operator
import os
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from interdist import _nest
from interdist.input import _values
from interdist.input.dataset import UNKNOWN_CARDINALITY, Dataset, register_node
from interdist.input.spec import TensorSpec, spec_of


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
            yield _nest.pack_sequence_as(self._value, [_values.copy_leaf(leaf[i]) for leaf in leaves])

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
