"""Turning user values into dataset elements, the way ``tf.data`` does.

``tf.data`` converts everything it is given into tensors. Three of its rules
matter for NumPy users, and all three are reproduced here:

* tuples, namedtuples and dicts are *structure*; a ``list`` is *data* (it is
  converted to one array, so ``from_tensor_slices([1, 2, 3])`` yields three
  scalars) -- except at the top of a ``map`` function's result, where a list
  is read as a tuple (TF 2.x does the same);
* Python numbers become 32-bit: ``int`` -> ``int32`` (``int64`` when it does
  not fit) and ``float`` -> ``float32``, while NumPy values keep their dtype;
* a dataset element never shares memory with the caller's arrays, since TF
  tensors are immutable and an in-place edit in one epoch must not leak into
  the next.

Leaves of elements are ``numpy.ndarray`` for rank >= 1 and NumPy scalars
(``np.generic``) for rank 0, matching what ``as_numpy_iterator`` gives in TF.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from interdist import _nest
from interdist.input.spec import TensorSpec

_INT32 = np.iinfo(np.int32)


def _is_python_data(x: Any) -> bool:
    """True for a Python scalar or a (nested) list/tuple of only those."""
    if isinstance(x, (list, tuple)):
        return all(_is_python_data(v) for v in x)
    return isinstance(x, (bool, int, float, complex, str, bytes))


def to_leaf(value: Any) -> Any:
    """One dataset component: a private ndarray, or a NumPy scalar for rank 0.

    Raises
    ------
    ValueError
        For ``None`` or values NumPy can only hold as ``object`` (ragged
        lists, arbitrary Python objects), which TF cannot convert either.
    """
    if value is None:
        raise ValueError("None cannot be converted to a dataset component")
    if isinstance(value, np.generic):
        return value
    python_data = _is_python_data(value)
    try:
        arr = np.array(value)  # np.array (not asarray) copies: elements are private
    except ValueError as err:  # ragged nested lists
        raise ValueError(f"Cannot convert {value!r} to a dataset component: {err}") from None
    if arr.dtype == object and not isinstance(value, np.ndarray):
        raise ValueError(f"Cannot convert {value!r} to a dataset component")
    if python_data:
        # TF's conversion of Python numbers: 32-bit unless the value needs 64.
        if arr.dtype.kind == "f" and arr.dtype != np.float32:
            arr = arr.astype(np.float32)
        elif arr.dtype.kind == "i" and (arr.size == 0 or (arr.min() >= _INT32.min and arr.max() <= _INT32.max)):
            arr = arr.astype(np.int32)
    return arr[()] if arr.ndim == 0 else arr


def normalize(structure: Any) -> Any:
    """Convert a user structure into an element: lists become arrays.

    Tuples, namedtuples and dicts are kept as containers; everything else,
    lists included, becomes one leaf via :func:`to_leaf`.
    """
    if isinstance(structure, dict):
        # Built directly: pack_sequence_as would read list values as nesting.
        items = [(k, normalize(v)) for k, v in structure.items()]
        try:
            return type(structure)(items)
        except TypeError:  # dict subclasses with other constructors (defaultdict)
            return dict(items)
    if isinstance(structure, tuple):
        items = [normalize(v) for v in structure]
        if hasattr(type(structure), "_fields"):
            return type(structure)(*items)
        return tuple(items)
    return to_leaf(structure)


def normalize_fn_output(value: Any) -> Any:
    """Convert what a ``map`` function returned into an element.

    A top-level list is a tuple of components here (TF 2.x ``map`` reads it
    so), while lists nested deeper stay data.
    """
    if value is None:
        raise ValueError("The `map` function returned None; it must return a value or a structure of values")
    if type(value) is list:
        value = tuple(value)
    return normalize(value)


def call_with_element(fn: Any, element: Any) -> Any:
    """Call ``fn`` on an element, unpacking a plain tuple into positional args.

    This is TF's rule: only an exact ``tuple`` is unpacked; a namedtuple or
    dict is passed as a single argument.
    """
    if type(element) is tuple:
        return fn(*element)
    return fn(element)


def copy_leaf(leaf: Any) -> Any:
    """A private copy of an element leaf (NumPy scalars are immutable)."""
    return leaf.copy() if isinstance(leaf, np.ndarray) else leaf


def probe_from_spec(spec: Any, unknown_size: int) -> Any:
    """An element of zeros matching ``spec``; ``None`` dimensions get ``unknown_size``.

    Used to find a ``map`` function's output spec without running the
    pipeline, the way TF traces the function on symbolic tensors.
    """

    def make(s: TensorSpec) -> Any:
        shape = tuple(unknown_size if d is None else d for d in s.shape)
        arr = np.zeros(shape, dtype=s.dtype)
        return arr[()] if arr.ndim == 0 else arr

    return _nest.map_structure(make, spec)


def stack_elements(elements: list[Any]) -> Any:
    """Stack same-structured elements along a new leading axis (``batch``).

    Raises
    ------
    ValueError
        When components differ in shape, with TF's wording (its
        ``InvalidArgumentError`` maps to ``ValueError``).
    """
    first = elements[0]
    columns = [_nest.flatten(e) for e in elements]
    stacked: list[Any] = []
    for component in range(len(columns[0])):
        values = [np.asarray(col[component]) for col in columns]
        shape0 = values[0].shape
        for j, v in enumerate(values[1:], start=1):
            if v.shape != shape0:
                raise ValueError(
                    f"Cannot batch tensors with different shapes in component {component}. "
                    f"First element had shape {list(shape0)} and element {j} had shape "
                    f"{list(v.shape)}."
                )
        stacked.append(np.stack(values))
    return _nest.pack_sequence_as(first, stacked)


def is_dask_collection(x: Any) -> bool:
    """True for a Dask array, Series or DataFrame (checked without importing Dask)."""
    module = type(x).__module__ or ""
    return module.startswith("dask") and hasattr(x, "__dask_graph__")


def contains_dask(structure: Any) -> bool:
    """True if any leaf of a tuple/dict structure is a Dask collection."""
    if isinstance(structure, dict):
        return any(contains_dask(v) for v in structure.values())
    if isinstance(structure, tuple):
        return any(contains_dask(v) for v in structure)
    return is_dask_collection(structure)
