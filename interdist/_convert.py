"""Turning Python values into arrays the way ``tf.convert_to_tensor`` does.

TF's defaults differ from NumPy's: Python ints become int32 (int64 when they do
not fit), Python floats float32. Values that already have a dtype keep it.

``np.ndarray`` in the signatures here stands for CuPy arrays too (a GPU replica's values):
CuPy mirrors NumPy's API, and the array-module helpers of ``_gpu`` return ``Any``.
"""

from __future__ import annotations

import math
import zlib
from typing import Any, cast

import numpy as np

from interdist import _gpu
from interdist._gpu import is_cupy

_INT32 = np.iinfo(np.int32)


def _python_dtype(x: Any) -> Any:
    if isinstance(x, bool):
        return np.bool_
    if isinstance(x, int):
        return np.int32 if _INT32.min <= x <= _INT32.max else np.int64
    if isinstance(x, float):
        return np.float32
    if isinstance(x, complex):
        return np.complex128
    return None


def _leaves(x: Any) -> list[Any]:
    if isinstance(x, (list, tuple)):
        out: list[Any] = []
        for v in x:
            out.extend(_leaves(v))
        return out
    return [x]


def as_array(x: Any, dtype: Any = None) -> np.ndarray:
    """``x`` as an ndarray with TF's default dtypes for Python numbers (CuPy arrays stay CuPy arrays)."""
    if is_cupy(x):  # a GPU replica's value: stays on its device
        return cast("np.ndarray", x if dtype is None else x.astype(dtype, copy=False))
    if hasattr(x, "__array__") and not isinstance(x, np.ndarray):
        x = np.asarray(x)
    if isinstance(x, np.ndarray):
        return x if dtype is None else x.astype(dtype, copy=False)
    if isinstance(x, np.generic):
        return np.asarray(x) if dtype is None else np.asarray(x, dtype=dtype)
    if dtype is None:
        leaves = _leaves(x)
        kinds = {_python_dtype(v) for v in leaves}
        if not leaves and isinstance(x, (list, tuple)):
            dtype = np.float32  # TF: tf.constant([]) and tf.Variable([]) are float32 (NumPy's default is float64)
        elif None not in kinds and kinds:
            if np.float32 in kinds:
                dtype = np.float32
            elif np.int64 in kinds:
                dtype = np.int64
            elif np.int32 in kinds:
                dtype = np.int32
            else:
                dtype = kinds.pop()
    return np.asarray(x, dtype=dtype)


def is_array_like(x: Any) -> bool:
    """Numbers, NumPy values and anything with ``__array__``."""
    return isinstance(x, (int, float, complex, bool, np.ndarray, np.generic)) or hasattr(x, "__array__")


_SMALL_INTS = range(-5, 257)


def dtype_of(x: Any) -> np.dtype[Any]:
    """The dtype of an array or scalar wherever it lives (a CuPy array's without a copy to the host, which
    CuPy refuses), else NumPy's for the value (``np.asarray(x).dtype``)."""
    dtype: np.dtype[Any] = (
        np.dtype(x.dtype) if is_cupy(x) or isinstance(x, (np.ndarray, np.generic)) else np.asarray(x).dtype
    )
    return dtype


def same_object_across(values: list[Any]) -> bool:
    """Would TF's replica threads have returned the very same object from each replica?

    TF's ``regroup`` hands back one value, not a ``PerReplica``, when all replicas
    return the identical object. Across processes identity is lost, so interdist
    treats as identical the values CPython shares between threads: ``None``,
    booleans, small ints and equal strings.
    """
    v0 = values[0]
    if v0 is None or isinstance(v0, (bool, str)):
        return all(type(v) is type(v0) and v == v0 for v in values)
    if type(v0) is int and v0 in _SMALL_INTS:
        return all(type(v) is int and v == v0 for v in values)
    return False


def convert_for_variable(value: Any, dtype: np.dtype[Any], shape: tuple[int, ...], name: str) -> np.ndarray:
    """``value`` as the variable's dtype and shape, or the error TF gives."""
    if isinstance(value, (np.ndarray, np.generic)) and value.dtype != dtype and value.dtype.kind in "fc":
        # Values that carry a dtype must match, as TF's convert_to_tensor(value, dtype) requires.
        raise ValueError(
            f"Tensor conversion requested dtype {dtype.name} for a value of dtype {value.dtype.name} "
            f"(assigning to variable {name})"
        )
    a = as_array(value)
    if a.dtype != dtype:
        if a.dtype.kind == "f" and dtype.kind in "iub":
            raise TypeError(
                f"Cannot convert {value!r} of dtype {a.dtype.name} to the dtype {dtype.name} of variable {name}"
            )
        if a.dtype.kind in "c" and dtype.kind != "c":
            raise TypeError(f"Cannot convert a complex value to the dtype {dtype.name} of variable {name}")
        a = a.astype(dtype)
    if a.shape != tuple(shape):
        raise ValueError(f"Shapes {tuple(shape)} and {a.shape} are incompatible (assigning to variable {name})")
    return a


def apply_op(op: str, current: np.ndarray, value: np.ndarray, in_place: bool = False) -> np.ndarray:
    """``current`` after the update ``op`` with ``value`` (already converted to its dtype and shape).

    ``in_place``: the caller is the only holder of ``current``, so a NumPy array that owns its
    writable memory is updated where it is (one pass over it, no new allocation: a fresh
    array of a few MB costs as much again in page faults); otherwise a new array is returned.
    """
    if _gpu.is_cupy(current):
        value = _gpu.to_device(value)  # a GPU replica's copy stays on its device
    elif (
        in_place
        and type(current) is np.ndarray
        and current.base is None
        and current.flags.writeable
        and isinstance(value, (np.ndarray, np.generic))
        and value.dtype == current.dtype
        and value.shape == current.shape
    ):
        if op == "assign":
            np.copyto(current, value)
        elif op == "assign_add":
            np.add(current, value, out=current)
        elif op == "assign_sub":
            np.subtract(current, value, out=current)
        else:
            raise ValueError(f"unknown variable update {op!r}")
        return current
    if op == "assign":
        return cast("np.ndarray", _gpu.copy(value))
    if op == "assign_add":
        return cast("np.ndarray", _gpu.asarray(current + value, dtype=current.dtype))
    if op == "assign_sub":
        return cast("np.ndarray", _gpu.asarray(current - value, dtype=current.dtype))
    raise ValueError(f"unknown variable update {op!r}")


def small_values(value: Any, limit: int) -> tuple[float, ...]:
    """The elements of a real-valued array of at most ``limit`` of them, flattened; () for any other value."""
    if not is_array_like(value):
        return ()
    a = as_array(value)
    if a.size > limit or a.dtype.kind not in "biuf":
        return ()
    return tuple(float(x) for x in _gpu.to_host(a).ravel().tolist())


def _block_sums(flat: Any, blocks: int) -> tuple[np.ndarray, np.ndarray]:
    """Sums (as float64) and element counts of ``blocks`` contiguous blocks of a flat array (the remainder
    in the last).

    float32 and float16 values are summed in float32, everything else in float64. Converting 1M float32
    to float64 block by block took twice as long as the float32 sum (0.33 vs 0.15 ms alone, 0.65 ms with
    two replicas sharing the memory bus): it was the biggest cost of a step's events. The sum is
    NumPy's pairwise sum (relative error ~1e-7 log2(n) of the sum of magnitudes), the same bits for
    equal copies wherever they lie in memory (tests/dashboard/test_pictures.py); a float32 sum that
    overflows is done again in float64.
    """
    xp = _gpu.xp_of(flat)  # on the GPU for CuPy values: only the sums come back
    n = int(flat.size)
    k = n // blocks
    acc = xp.float32 if flat.dtype in (xp.float32, xp.float16) else xp.float64
    while True:
        with np.errstate(over="ignore"):
            sums = np.asarray(_gpu.to_host(flat[: k * blocks].reshape(blocks, k).sum(axis=1, dtype=acc)), np.float64)
            counts = np.full(blocks, k, dtype=np.float64)
            if n > k * blocks:
                sums[-1] += float(flat[k * blocks :].sum(dtype=acc))
                counts[-1] += n - k * blocks
        if acc == xp.float64 or np.isfinite(sums).all():
            return sums, counts
        acc = xp.float64  # a float32 sum overflowed (or the values are not finite: the same again)


def _has_sketch(a: Any, blocks: int, above: int) -> bool:
    return int(a.size) > max(above, blocks - 1) and a.dtype.kind in "biuf"


def block_means(value: Any, blocks: int, above: int) -> tuple[float, ...]:
    """The means of ``blocks`` contiguous blocks of a real array's flattened elements (the remainder in
    the last block), for an array of more than ``above`` elements; () for any other value."""
    if not is_array_like(value):
        return ()
    a = as_array(value)
    if not _has_sketch(a, blocks, above):
        return ()
    sums, counts = _block_sums(a.reshape(-1), blocks)
    return tuple(float(x) for x in (sums / counts).tolist())


def summarize(value: Any) -> tuple[float, float]:
    """(norm, checksum) of a value, for events: enough to see copies diverge."""
    norm, checksum, _ = summarize_with_sketch(value, 0, 0)
    return norm, checksum


def summarize_with_sketch(value: Any, blocks: int, above: int) -> tuple[float, float, tuple[float, ...]]:
    """(norm, checksum, block means) of a value, for a ``VariableUpdated`` event, in two passes over it.

    The block means are ``block_means(value, blocks, above)`` (``blocks=0``: none); the checksum is
    then the sum of the block sums, so the sketch costs no extra pass.
    """
    if type(value) is np.ndarray:  # a replica's copy: no conversion to look for
        a: Any = value
    elif not is_array_like(value):
        return 0.0, 0.0, ()
    else:
        a = as_array(value)
    if a.dtype.kind not in "biuf" or a.size == 0:
        return 0.0, 0.0, ()
    sketched = bool(blocks) and _has_sketch(a, blocks, above)
    if type(a) is np.ndarray:
        return _host_summary(a, blocks if sketched else 0) if sketched or a.size > SMALL_SUMMARY else _small_summary(a)
    return _array_summary(a, blocks if sketched else 0)


def _array_summary(a: Any, blocks: int) -> tuple[float, float, tuple[float, ...]]:
    """``summarize_with_sketch`` of any array (a CuPy one: on its GPU, only the numbers come back), sketched in
    ``blocks`` (0: none)."""
    xp = _gpu.xp_of(a)
    # Every step summarizes each variable it wrote, so this is on the hot path: no float64 copy
    # of the value (that cost 3.8 ms for 1M float32, 8x the optimizer's update). The checksum is
    # the sum of the block sums (``_block_sums``: float32 values in float32, 0.15 ms for 1M): the
    # same bits for equal copies, which is how the dashboard sees copies diverge. The norm of a large
    # float32 value is BLAS's float32 dot (0.06 ms; relative error ~1e-6, it is only shown), float64
    # where it overflows.
    flat = a.reshape(-1)
    sketch: tuple[float, ...] = ()
    if blocks:
        sums, counts = _block_sums(flat, blocks)
        checksum = float(sums.sum())
        sketch = tuple(float(x) for x in (sums / counts).tolist())
    else:
        checksum = float(xp.sum(flat, dtype=xp.float64))
    return _norm(flat, xp, checksum), checksum, sketch


def _norm(flat: Any, xp: Any, checksum: float) -> float:
    """The norm of a flat array for its summary: a large float32 one by BLAS's float32 dot (relative error ~1e-6, it
    is only shown), float64 where that overflows (unless the values themselves are not finite: ``checksum``)."""
    if flat.dtype == xp.float32 and flat.size > 4096:
        with np.errstate(over="ignore"):
            sq = float(xp.dot(flat, flat))
        if math.isfinite(sq) or not math.isfinite(checksum):
            return math.sqrt(sq)
    f = flat.astype(xp.float64, copy=False)
    return math.sqrt(float(xp.dot(f, f)))


#: A NumPy copy of at most this many elements is summarized from its values in Python (``_small_summary``).
SMALL_SUMMARY = 16


def _small_summary(a: np.ndarray) -> tuple[float, float, tuple[float, ...]]:
    """A small NumPy copy's (norm, checksum, ()): its values' sum and the root of their squares' sum, added in
    order in float64. 1.1-1.4 us against 7-10 for NumPy's calls, for each small variable a step writes (a bias, a
    step counter, their optimizer slots); a scalar's checksum is its value. The bits differ from NumPy's pairwise
    sum, but every replica's copy is summed this same way, which is all the dashboard's comparison needs."""
    values = a.ravel().tolist()
    return math.sqrt(sum([v * v for v in values], 0.0)), sum(values, 0.0), ()


def _host_summary(a: np.ndarray, blocks: int) -> tuple[float, float, tuple[float, ...]]:
    """``summarize_with_sketch`` of a NumPy copy of more than ``SMALL_SUMMARY`` elements (or one to sketch in
    ``blocks``; 0: none), with the same NumPy operations as the general path, hence its bits
    (tests/dashboard/test_pictures.py compares them), and none of its conversions: 12-15 us a copy of up to ~4,000
    elements against 20-25, where the calls, not the bytes, are the cost (a model's biases and kernels, and their
    optimizer slots, at every step)."""
    flat = a.reshape(-1)
    n = flat.size
    single = flat.dtype == np.float32 or flat.dtype == np.float16
    sketch: tuple[float, ...] = ()
    if blocks:
        k = n // blocks
        acc: Any = np.float32 if single else np.float64
        while True:
            with np.errstate(over="ignore"):
                sums = flat[: k * blocks].reshape(blocks, k).sum(axis=1, dtype=acc).astype(np.float64)
                if n > k * blocks:
                    sums[-1] += float(flat[k * blocks :].sum(dtype=acc))
            checksum = float(sums.sum())
            if acc is np.float64 or math.isfinite(checksum):
                break  # (a float32 sum that overflowed makes the checksum inf or nan: again, in float64)
            acc = np.float64
        means = [x / k for x in sums.tolist()]
        means[-1] = float(sums[-1]) / (k + n - k * blocks)
        sketch = tuple(means)
    else:
        checksum = float(flat.sum(dtype=np.float64))
    return _norm(flat, np, checksum), checksum, sketch


def content_digest(value: Any) -> tuple[str, tuple[int, ...], int]:
    """An array's dtype, shape and the CRC-32 of its bytes: to tell, on either side of the wire, whether an argument
    a replica function returned is still what the notebook sent (``ArgRef``)."""
    a = np.asarray(_gpu.to_host(value), order="C")  # (not ascontiguousarray: it makes a 0-d array 1-d)
    return a.dtype.str, tuple(a.shape), zlib.crc32(a.reshape(-1).view(np.uint8).data)


def same_bits(a: Any, b: Any) -> bool:
    """Whether two arrays have the same dtype, shape and bytes (NaNs by their bits: a copy equals its source)."""
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    xp = _gpu.xp_of(a)
    return bool(xp.array_equal(xp.ascontiguousarray(a).reshape(-1).view(xp.uint8),
                               xp.ascontiguousarray(b).reshape(-1).view(xp.uint8)))  # fmt: skip
