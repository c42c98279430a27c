"""``Strategy.reduce`` arithmetic on components that are all at hand.

Shared by the notebook (default strategy) and the replicas (inside ``merge_call``),
so the rules are written once. ``np.ndarray`` here stands for CuPy arrays too (a GPU
replica's values): ``xp`` is ``numpy`` or ``cupy``, so what it returns is typed ``Any``.
"""

from __future__ import annotations

from typing import Any, cast

import numpy as np

from interdist._convert import as_array
from interdist._gpu import any_cupy, same_place, xp_of
from interdist.errors import ReplicaMismatchError
from interdist.reduce_op import ReduceOp

#: ``Strategy.reduce``'s axis: None (across replicas only), one dimension, or several (TF's reduce_sum axis).
Axis = int | tuple[int, ...] | None


def check_axis(a: np.ndarray, axis: int) -> int:
    rank = a.ndim
    if not -rank <= axis < rank:
        raise ValueError(f"axis {axis} is out of range for a value of rank {rank} (shape {a.shape})")
    return axis % rank


def reduce_axes(a: np.ndarray, axis: Any) -> tuple[int, ...]:
    """``Strategy.reduce``'s ``axis``: an int or a tuple of ints (TF's ``reduce_sum`` axis), as dimensions of ``a``.

    As TF 2.21: a list is a ``TypeError`` (TF hashes it: "unhashable type: 'list'"), so is a float or
    a string; a dimension out of range, or named twice, is a ``ValueError``.
    """
    if isinstance(axis, list):
        raise TypeError(f"unhashable type: 'list': give several axes as a tuple, e.g. axis={tuple(axis)!r}")
    items = axis if isinstance(axis, tuple) else (axis,)
    for x in items:
        if isinstance(x, (bool, np.bool_)) or not isinstance(x, (int, np.integer)):
            raise TypeError(f"axis must be an int or a tuple of ints, but got {axis!r}")
    axes = tuple(check_axis(a, int(x)) for x in items)
    if len(set(axes)) != len(axes):
        raise ValueError(f"Invalid reduction arguments: axis {axis!r} names a dimension twice")
    return axes


def local_numer_denom(value: Any, op: ReduceOp, axis: Axis) -> tuple[np.ndarray, int]:
    """What one replica contributes: its value summed over ``axis`` (an int or a tuple), and over how many elements."""
    a = as_array(value)
    if axis is None:
        return a, 1
    axes = reduce_axes(a, axis)
    return np.sum(a, axis=axes, dtype=a.dtype if a.dtype.kind == "f" else None).astype(
        _sum_dtype(a.dtype), copy=False
    ), int(np.prod([a.shape[i] for i in axes], dtype=np.int64))


def _sum_dtype(dtype: np.dtype[Any]) -> Any:
    return dtype


def combine(op: ReduceOp, parts: list[tuple[np.ndarray, int]], axis: Axis) -> np.ndarray:
    """Reduce the replicas' contributions (in rank order)."""
    numers = [p[0] for p in parts]
    if len(numers) > 1:
        check_dtypes([as_array(n).dtype for n in numers])
        kind = as_array(numers[0]).dtype.kind
        if kind not in "iufc":
            raise ValueError(
                f"Cannot {op.value} values of dtype {as_array(numers[0]).dtype.name} across replicas (TF has no "
                f"{op.value} kernel for it); cast them to a number first"
            )
    if axis is None or op == ReduceOp.SUM:
        return reduce_arrays(numers, op if axis is None else ReduceOp.SUM)
    numer = reduce_arrays(numers, ReduceOp.SUM)
    denom = sum(p[1] for p in parts)
    xp = xp_of(numer)  # numpy, or cupy for a GPU replica's values
    if numer.dtype.kind in "fc":  # complex keeps its dtype (and its imaginary part), as floats do
        return _divide(numer, denom)
    return cast("np.ndarray", xp.asarray(numer / denom, dtype=truediv_dtype(numer.dtype)))  # TF's truediv


def reduce_components(op: ReduceOp, components: list[Any], axis: Axis) -> np.ndarray:
    return combine(op, [local_numer_denom(c, op, axis) for c in components], axis)


def reduce_non_distributed(op: ReduceOp, value: Any, num_replicas: int) -> Any:
    """TF's ``reduce_non_distributed_value``: one value standing for every replica."""
    if op == ReduceOp.MEAN or num_replicas == 1:
        return value
    a = as_array(value)
    if not hasattr(value, "device") and a.dtype.kind in "biuf" and np.all(a == 0):
        return np.zeros(a.shape, dtype=a.dtype)
    raise ValueError(f"A non-DistributedValues value {value!r} cannot be reduced with the given reduce op {op}.")


def gather_components(components: list[Any], axis: int) -> np.ndarray:
    """``Strategy.gather``: concatenate along ``axis`` (shapes must agree elsewhere)."""
    arrays = same_place([as_array(c) for c in components])  # all on the GPU if one is
    check_dtypes([a.dtype for a in arrays], "gather")
    if any(a.ndim == 0 for a in arrays):
        raise ValueError("gather requires values of rank >= 1; got a scalar")
    ax = check_axis(arrays[0], axis)
    try:
        return np.concatenate(arrays, axis=ax)
    except ValueError as e:
        raise ValueError(f"Cannot gather values of shapes {[a.shape for a in arrays]} along axis {axis}: {e}") from None


def reduce_arrays(values: list[Any], op: ReduceOp) -> np.ndarray:
    """SUM or MEAN of same-shaped arrays, added in rank order (deterministic).

    CuPy arrays (GPU replicas) are reduced on their device, the same way.
    """
    if any_cupy(values):
        arrays, xp = same_place(list(values)), xp_of(*values)
    else:
        arrays, xp = [np.asarray(v) for v in values], np
    check_dtypes([a.dtype for a in arrays])
    check_shapes([tuple(a.shape) for a in arrays])
    dtype = arrays[0].dtype
    total = xp.array(arrays[0], dtype=dtype, copy=True)
    for a in arrays[1:]:
        total = total + a
    total = cast("np.ndarray", xp.asarray(total, dtype=dtype))
    if op == ReduceOp.MEAN:
        return mean_of_sum(total, len(arrays))
    return total


def _by_replica(items: list[Any]) -> str:
    return ", ".join(f"replica {r}: {x}" for r, x in enumerate(items))


def check_dtypes(dtypes: list[Any], what: str = "reduce") -> None:
    """Every replica's value has the same dtype (TF never casts across replicas: it fails)."""
    first = dtypes[0] if dtypes else None
    if all(d is first for d in dtypes):  # the common case (NumPy's dtypes of one kind are one object), without
        return  # ``dtype.name``, which NumPy computes in Python (8 of a reduce's ~40 us in a notebook)
    names = [np.dtype(d).name for d in dtypes]
    if len(set(names)) > 1:
        raise ReplicaMismatchError(
            f"Cannot {what} values of different dtypes across replicas ({_by_replica(names)}); "
            "give every replica the same dtype, e.g. with np.asarray(x, dtype=np.float32)"
        )


def check_shapes(shapes: list[tuple[int, ...]], what: str = "reduce") -> None:
    if len(set(shapes)) > 1:
        raise ReplicaMismatchError(
            f"Cannot {what} values of different shapes across replicas ({_by_replica(list(shapes))}); "
            "give every replica a value of the same shape"
        )


def truediv_dtype(dtype: Any) -> Any:
    """The float dtype of TF's ``truediv`` of integers: float32 for 8- and 16-bit integers, float64 for
    32- and 64-bit ones (TF 2.21: ``reduce("MEAN")`` of int8 values gives float32, of int32 float64)."""
    return np.float32 if np.dtype(dtype).itemsize <= 2 else np.float64


def mean_of_sum(total: np.ndarray, n: int) -> np.ndarray:
    """``total / n`` as TF's ``_simple_reduce`` computes it for MEAN.

    TF divides with ``/``: floats keep their dtype, integers become floats (``truediv_dtype``).
    """
    xp = xp_of(total)  # numpy, or cupy for a GPU replica's values
    if not np.issubdtype(total.dtype, np.inexact):
        return cast("np.ndarray", xp.asarray(total / n, dtype=truediv_dtype(total.dtype)))
    return _divide(total, n)


def _divide(total: np.ndarray, n: int) -> np.ndarray:
    """``total / n`` in ``total``'s (float or complex) dtype, each element correctly rounded as TF's division
    gives it: a complex number's two parts each divided by the real ``n`` (NumPy's complex division by
    ``n + 0j`` multiplies by ``1 / n``, one ulp off in about half the elements of a complex64 mean)."""
    xp = xp_of(total)
    if total.dtype.kind != "c":
        return cast("np.ndarray", xp.asarray(total / xp.asarray(n, dtype=total.dtype), dtype=total.dtype))
    real = xp.asarray(n, dtype=total.real.dtype)
    out = xp.empty_like(xp.asarray(total))
    out.real = total.real / real
    out.imag = total.imag / real
    return cast("np.ndarray", out)
