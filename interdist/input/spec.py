"""``TensorSpec``: the static description of one dataset component.

A spec records what TensorFlow's ``tf.TensorSpec`` records for a tensor: its
shape, with ``None`` for a dimension that is not known before iteration (the
batch dimension of ``batch(n)`` without ``drop_remainder``), and its dtype.
Here the dtype is a :class:`numpy.dtype`; every text dtype is widened to the
one length-free ``np.str_`` (or ``np.bytes_``) dtype, because a ``tf.string``
has no length either and two batches of strings of different lengths must
still share one spec.
"""

from __future__ import annotations

import operator
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import DTypeLike

from interdist import _nest

Shape = tuple[int | None, ...]


def _canonical_dtype(dtype: DTypeLike) -> np.dtype[Any]:
    """``np.dtype(dtype)`` with the length dropped from text dtypes."""
    dt: np.dtype[Any] = np.dtype(dtype)
    if dt.kind == "U":
        return np.dtype(np.str_)
    if dt.kind == "S":
        return np.dtype(np.bytes_)
    return dt


@dataclass(frozen=True, init=False)
class TensorSpec:
    """Shape and dtype of one component of a dataset element.

    Parameters
    ----------
    shape : iterable of int or None
        The dimensions; ``None`` marks a dimension only known at run time.
    dtype : numpy dtype or anything ``numpy.dtype`` accepts
        Normalised to a :class:`numpy.dtype` (text dtypes lose their length).
    name : str, optional
        Carried along only for parity with ``tf.TensorSpec``.

    Examples
    --------
    >>> TensorSpec((None, 3), "float32")
    TensorSpec(shape=(None, 3), dtype=tf.float32, name=None)
    """

    shape: Shape
    dtype: np.dtype[Any]
    name: str | None

    def __init__(self, shape: Iterable[int | None], dtype: DTypeLike, name: str | None = None) -> None:
        # Frozen (so specs hash and compare by value): assignment has to go
        # through object.__setattr__.
        dims = tuple(None if d is None else operator.index(d) for d in shape)
        if any(d is not None and d < 0 for d in dims):
            raise ValueError(f"TensorSpec dimensions must be >= 0 or None, got {dims}")
        object.__setattr__(self, "shape", dims)
        object.__setattr__(self, "dtype", _canonical_dtype(dtype))
        object.__setattr__(self, "name", name)

    def __repr__(self) -> str:
        # As TF prints it (dtype=tf.float32), so element_spec strings read the same.
        return f"TensorSpec(shape={self.shape!r}, dtype=tf.{self.dtype.name}, name={self.name!r})"

    @property
    def rank(self) -> int:
        """Number of dimensions."""
        return len(self.shape)

    @classmethod
    def from_value(cls, value: Any, name: str | None = None) -> TensorSpec:
        """The spec of a concrete array or scalar (every dimension known)."""
        arr = np.asarray(value)
        return cls(arr.shape, arr.dtype, name)

    def is_compatible_with(self, other: TensorSpec | Any) -> bool:
        """Whether ``other`` (a spec or a value) could be described by ``self``.

        Dtypes must match; ranks must match; a ``None`` dimension on either
        side matches any size.
        """
        spec = other if isinstance(other, TensorSpec) else TensorSpec.from_value(other)
        if spec.dtype != self.dtype or spec.rank != self.rank:
            return False
        return all(a is None or b is None or a == b for a, b in zip(self.shape, spec.shape, strict=True))

    def batched(self, batch_size: int | None) -> TensorSpec:
        """The spec of a stack of elements of this spec (new leading axis)."""
        return TensorSpec((batch_size, *self.shape), self.dtype, self.name)

    def unbatched(self) -> TensorSpec:
        """The spec of one row along the leading axis."""
        if not self.shape:
            raise ValueError("Cannot unbatch an input with scalar components.")
        return TensorSpec(self.shape[1:], self.dtype, self.name)

    def relaxed(self, other: TensorSpec) -> TensorSpec:
        """The most specific spec that describes both ``self`` and ``other``.

        Dimensions that differ become ``None``. Specs of different dtype or
        rank have no common spec here (there is no unknown-rank shape), so
        ``ValueError`` is raised.
        """
        if other.dtype != self.dtype or other.rank != self.rank:
            raise ValueError(f"{self!r} and {other!r} have no common TensorSpec")
        shape = tuple(a if a == b else None for a, b in zip(self.shape, other.shape, strict=True))
        return TensorSpec(shape, self.dtype, self.name)


def spec_of(structure: Any) -> Any:
    """The nested structure of :class:`TensorSpec` describing a value."""
    return _nest.map_structure(TensorSpec.from_value, structure)


def relax_structure(a: Any, b: Any) -> Any:
    """Leaf-wise :meth:`TensorSpec.relaxed` of two spec structures."""
    return _nest.map_structure(lambda x, y: x.relaxed(y), a, b)


def format_shape(shape: Shape) -> str:
    """A shape as TensorFlow prints it in error messages, e.g. ``[None,3]``."""
    return "[" + ",".join("None" if d is None else str(d) for d in shape) + "]"
