"""The arithmetic of ``all_reduce`` on the arrays at hand: which dtypes it takes, and the sums.

Every rank adds the contributions in rank order, so every rank gets the same bits as
``_reduction.reduce_arrays`` (tests/collectives/test_reduction_bits.py).
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from interdist import _jit
from interdist._reduction import check_dtypes, check_shapes, mean_of_sum, reduce_arrays
from interdist.errors import ReplicaMismatchError
from interdist.reduce_op import ReduceOp

#: The dtypes TF's collective all-reduce accepts across replicas (bool is refused with its own message).
COLLECTIVE_DTYPES = ("float16", "float32", "float64", "int32", "int64")

_ALLOWED_DTYPES: set[str] = set()  # dtype strings found acceptable (``_check_collective_dtypes``)


def check_batches(all_metas: list[tuple[list[tuple[int, ...]], list[str], str]]) -> None:
    """Every rank's (shapes, dtypes, reduce op), in rank order, agree (``Collectives._check``); else the same
    ``ReplicaMismatchError`` on every rank."""
    ops = [m[2] for m in all_metas]
    if len(set(ops)) > 1:
        raise ReplicaMismatchError(
            "Replicas passed different reduce ops to one all_reduce ("
            + ", ".join(f"replica {r}: {o}" for r, o in enumerate(ops))
            + "); every replica must pass the same reduce_op"
        )
    if len({len(m[0]) for m in all_metas}) > 1:
        raise ReplicaMismatchError(
            "Cannot all_reduce batches of different lengths across replicas: "
            f"{[len(m[0]) for m in all_metas]}; give every replica the same structure"
        )
    for i in range(len(all_metas[0][0])):
        check_dtypes([m[1][i] for m in all_metas], "all_reduce")
        check_shapes([tuple(m[0][i]) for m in all_metas], "all_reduce")
        _check_collective_dtypes([all_metas[0][1][i]], all_metas[0][2])


def _check_collective_dtypes(dtypes: list[str], op: str) -> None:
    """What ``Collectives._check`` says of dtypes that agree on every rank: TF's collective dtypes only."""
    for d in dtypes:
        if d in _ALLOWED_DTYPES:
            continue
        dtype = np.dtype(d)
        if dtype.kind != "b" and dtype.name not in COLLECTIVE_DTYPES:
            # TF 2.21's CollectiveReduceV2 takes these only: InvalidArgumentError ("Value for attr 'T' of
            # uint8 is not in the list of allowed values") for int8/16, unsigned, complex, strings, objects.
            raise ValueError(
                f"all_reduce cannot {op} values of dtype {dtype.name}: TF's collective all-reduce takes "
                f"{', '.join(COLLECTIVE_DTYPES)} only; cast them first (e.g. x.astype(np.int32))"
            )
        _ALLOWED_DTYPES.add(d)


def _dtypes(arrays: list[np.ndarray]) -> list[str]:
    """The dtypes a rank announces with its shapes (a few bytes in the first message)."""
    return [a.dtype.str for a in arrays]


def _reduce_owned(values: list[Any], op: ReduceOp) -> np.ndarray:
    """``reduce_arrays`` with the same bits, adding in place into one fresh array.

    ``reduce_arrays`` allocates a new array per addition; a fresh 16 MB array costs
    ~3 ms of page faults here (2 cores), so the running total is reused. In-place
    ``np.add`` runs the same elementwise loop on the same dtype as ``total + a``
    (``total`` already has the result dtype), so every element is bitwise the same.
    """
    arrays = [np.asarray(v) for v in values]
    dtype = np.result_type(*arrays)
    if dtype.kind not in "biufc" or arrays[0].ndim == 0:
        return reduce_arrays(arrays, op)
    check_shapes([a.shape for a in arrays])
    if len(arrays) > 2 and arrays[0].size >= _BLOCK and all(a.dtype == dtype and a.flags.c_contiguous for a in arrays):
        total = _blocked_sum(arrays)
    else:
        if len(arrays) > 1 and arrays[0].dtype == dtype:
            total = np.add(arrays[0], arrays[1])  # copy-then-add in one pass: same loop, same bits
            rest = arrays[2:]
        else:
            total = np.array(arrays[0], dtype=dtype, copy=True)
            rest = arrays[1:]
        for a in rest:
            np.add(total, a, out=total)
    if op == ReduceOp.MEAN:
        if dtype.kind == "f":
            np.true_divide(total, np.asarray(len(arrays), dtype=dtype), out=total)
            return np.asarray(total)
        return mean_of_sum(total, len(arrays))  # complex (each part by the real count) and integers
    return np.asarray(total)


# Elements per block of a blocked sum: 256 KB of float32, which stays in a core's L2 cache.
_BLOCK = 1 << 16
#: Where numba is installed (the ``fast`` extra), sums of three arrays or more of these dtypes run as one compiled
#: pass (``_sum_kernels.py``: the same additions, the same bits); two arrays are one ``np.add`` already.
COMPILED_DTYPES = frozenset(("float32", "float64", "int32", "int64"))


@functools.cache
def _sum_kernels() -> Any:
    from interdist.collectives import _sum_kernels as kernels

    return kernels


def _compiled(out: np.ndarray, flats: list[np.ndarray]) -> bool:
    """Whether ``_blocked_sum`` of ``flats`` into ``out`` runs compiled: numba here, three arrays or more of one of
    ``COMPILED_DTYPES``, every one contiguous."""
    dtype = out.dtype
    return (
        len(flats) > 2
        and dtype.name in COMPILED_DTYPES
        and out.flags.c_contiguous
        and all(f.dtype == dtype and f.flags.c_contiguous for f in flats)
        and not _jit.unavailable_reason()
    )


def _read_only(a: np.ndarray) -> np.ndarray:
    """A read-only view of ``a``: the kernel's parts are then of one numba type (segments' views are read-only)."""
    v = a.view()
    v.flags.writeable = False
    return v


def _blocked_sum(arrays: list[np.ndarray], total: np.ndarray | None = None) -> np.ndarray:
    """``((a0 + a1) + a2) + ...`` a cache-sized block at a time: the same additions in the same
    order for every element (so the same bits), but the running total of a block stays in cache
    between additions instead of going to memory and back once per array (4 replicas, 16 MB:
    a third of the memory traffic of whole-array passes). Into ``total`` when given (contiguous,
    of the arrays' dtype and size: a split reduce-broadcast owner's segment, ``split.py``). Compiled, in one pass,
    where it can be (``_compiled``)."""
    total = np.empty_like(arrays[0]) if total is None else total
    out, flats = total.reshape(-1), [a.reshape(-1) for a in arrays]
    if _compiled(out, flats):
        _sum_kernels().sum_into(out, tuple(map(_read_only, flats)))  # (one pass, the same additions)
        return total
    for lo in range(0, out.size, _BLOCK):
        hi = lo + _BLOCK
        o = out[lo:hi]
        np.add(flats[0][lo:hi], flats[1][lo:hi], out=o)
        for f in flats[2:]:
            np.add(o, f[lo:hi], out=o)
    return total
