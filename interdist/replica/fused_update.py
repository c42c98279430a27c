"""An optimizer's update of a replica's copy in one pass over memory: ``v.assign_sub(g * lr)``, tiled.

NumPy evaluates ``v -= g * lr`` as two passes over the parameters: ``g * lr`` into a temporary as
large as ``v``, then the subtraction, reading the temporary back. For 1M float32 parameters that is
20 MB of memory traffic where 12 MB (read ``v`` and ``g``, write ``v``) would do, and a training step of
two replicas on one memory bus is bound by that traffic (docs/performance.md). Here the same two ufuncs
run tile by tile, the temporary one tile that stays in the cache: the same operations on the same
values in the same order, so the same bits. Measured on the 2-core development machine (1M float32,
medians): the update alone 0.62 ms against 0.84–0.95 ms; the SGD step of ``benchmarks/bench_peers.py``
inside a run of 2 replicas 4.10 ms against 4.66 ms (6 interleaved rounds of 40 steps each way).

Only where ``assign_sub`` itself would write in place: inside ``extended.update`` (what
``apply_gradients`` does), on a NumPy copy that owns its memory and that no read still holds (copy on
write: ``ReplicaVariable._local``), with a gradient of the copy's dtype and shape. Anything else returns
None and the optimizer calls ``assign_sub`` as before.
"""

from __future__ import annotations

import functools
import sys
from typing import Any

import numpy as np

from interdist import _context, _jit
from interdist.collectives.ring import RingUpdate
from interdist.replica.variable import _SOLE_HOLDER, ReplicaVariable, UnreadVariable

#: Bytes of one tile: the temporary stays in L2 (measured 32–128 KiB all within 5% on the development machine).
TILE_BYTES = 128 << 10
#: Below this many bytes one pass of each ufunc costs less than the loop: NumPy's two-step path.
MIN_BYTES = 1 << 20
#: Where numba is installed (the ``fast`` extra), copies of these dtypes are updated by a compiled kernel
#: (``_update_kernels.py``: one pass, no temporary, NumPy's bits) instead of the ufuncs tile by tile.
COMPILED_DTYPES = ("float32", "float64")


@functools.cache
def _update_kernels() -> Any:
    from interdist.replica import _update_kernels as kernels

    return kernels


def assign_sub_scaled(var: Any, grad: Any, lr: Any) -> Any | None:
    """``var.assign_sub(grad * lr)`` done tile by tile in place, or None when only ``assign_sub`` may do it."""
    return UnreadVariable(var) if sum_assign_sub_scaled(var, [grad], lr) else None


def sum_assign_sub_scaled(var: Any, parts: list[Any], lr: Any) -> bool:
    """``var.assign_sub((parts[0] + parts[1] + ...) * lr)`` tile by tile in place, the sum never written whole;
    False (nothing done) where only ``assign_sub`` may do it. One part: that array itself (a gradient, or a
    reduce-broadcast root's sum read where it lies, in its shared memory, rather than copied out first).

    What an all-reduce followed by the update does, fused (``Collectives.all_reduce_consumed``): a tile of
    the sum is added up in rank order (``_reduce_owned``'s order, ``((a0 + a1) + a2) + ...``, float32 adds:
    the same bits), scaled and subtracted while it is in the cache. Measured in 2 plain processes on the
    2-core development machine (1M float32, medians of 3 runs): all-reduce then update 1.69-2.05 ms,
    fused 1.32-1.55 ms: the 4 MB sum is neither written nor read back.
    """
    if not parts or not _updating(var):
        return False
    first = parts[0]
    for p in parts:
        if type(p) is not np.ndarray or p.dtype != first.dtype or p.shape != first.shape or not p.flags.c_contiguous:
            return False
    if not _writable_in_place(var, first) or any(np.shares_memory(p, var.raw) for p in parts[1:]):
        return False
    raw: np.ndarray = var.raw
    lr = raw.dtype.type(lr)
    flat, flats = raw.reshape(-1), [p.reshape(-1) for p in parts]
    if len(flats) <= 2 and raw.dtype.name in COMPILED_DTYPES and not _jit.unavailable_reason():
        kernels = _update_kernels()  # one compiled pass, the same operations (_update_kernels.py)
        if len(flats) == 1:
            kernels.sub_scaled(flat, flats[0], lr)
        else:
            kernels.sub_sum_scaled(flat, flats[0], flats[1], lr)
        var._replica.touched.add(var.var_id)
        return True
    step = max(1, TILE_BYTES // raw.itemsize)
    tmp = np.empty(min(step, flat.size), raw.dtype)
    for start in range(0, flat.size, step):
        stop = start + step
        t = tmp[: min(step, flat.size - start)]
        if len(flats) == 1:
            np.multiply(flats[0][start:stop], lr, out=t)
        else:
            np.add(flats[0][start:stop], flats[1][start:stop], out=t)
            for f in flats[2:]:
                np.add(t, f[start:stop], out=t)
            np.multiply(t, lr, out=t)
        out = flat[start:stop]
        np.subtract(out, t, out=out)
    var._replica.touched.add(var.var_id)
    return True


def sub_scaled_chunks(var: Any, pieces: list[Any], lr: Any) -> bool:
    """``var.assign_sub(g * lr)`` in place, where ``g`` comes as consecutive 1-D ``pieces`` of the flat array (a
    split reduce-broadcast's chunks, read where they lie: ``collectives/split.py``), each piece's elements as
    ``assign_sub_scaled`` computes them (the same bits); False (nothing done) where only ``assign_sub`` may."""
    if not pieces or not _updating(var) or not _owned_in_place(var):
        return False
    raw: np.ndarray = var.raw  # (bound only now: _owned_in_place counts the references to it)
    if sum(getattr(p, "size", -1) for p in pieces) != raw.size:
        return False
    for p in pieces:
        if type(p) is not np.ndarray or p.dtype != raw.dtype or p.ndim != 1 or not p.flags.c_contiguous:
            return False
        if np.shares_memory(p, raw):
            return False
    lr = raw.dtype.type(lr)
    flat, at = raw.reshape(-1), 0
    compiled = raw.dtype.name in COMPILED_DTYPES and not _jit.unavailable_reason()
    tile = max(1, TILE_BYTES // raw.itemsize)
    tmp = np.empty(0 if compiled else min(tile, flat.size), raw.dtype)  # (the NumPy tiles' temporary)
    for p in pieces:
        part, at = flat[at : at + p.size], at + p.size
        if compiled:
            _update_kernels().sub_scaled(part, p, lr)  # (one pass: _update_kernels.py)
            continue
        for start in range(0, p.size, tile):
            t = tmp[: min(tile, p.size - start)]
            np.multiply(p[start : start + tile], lr, out=t)
            out = part[start : start + tile]
            np.subtract(out, t, out=out)
    var._replica.touched.add(var.var_id)
    return True


def _updating(var: Any) -> bool:
    """Whether ``var`` is a replica's copy updated here as ``extended.update`` does (outside the replica
    context, where aggregation and faults apply: ``ReplicaVariable._update``)."""
    if not isinstance(var, ReplicaVariable):
        return False
    entry = _context.current()
    return entry.replica_context is None and entry.update_replica_id is not None


def _owned_in_place(var: ReplicaVariable) -> bool:
    """``ReplicaVariable._local``'s in-place test (``apply_op``'s) of the copy itself, at least ``MIN_BYTES`` big."""
    # The count first, as _local takes it: the variable's attribute and this call's argument.
    if sys.getrefcount(var.raw) > _SOLE_HOLDER:
        return False  # a read of the copy is alive: assign_sub makes a new array (copy on write)
    raw = var.raw
    return (
        type(raw) is np.ndarray
        and raw.base is None
        and raw.flags.writeable
        and raw.flags.c_contiguous
        and raw.nbytes >= MIN_BYTES
    )


def _writable_in_place(var: ReplicaVariable, grad: np.ndarray) -> bool:
    """``_owned_in_place``, for a gradient of the copy's dtype and shape that is not a view of it."""
    if not _owned_in_place(var):
        return False
    raw = var.raw
    return (
        grad.dtype == raw.dtype
        and grad.shape == raw.shape
        and grad.flags.c_contiguous
        and not np.shares_memory(grad, raw)
    )


def ring_swap(var: Any, grad: Any, lr: Any, done: Any) -> Any | None:
    """SGD's ``var.assign_sub(grad * lr)`` as a ring all-reduce can make it (``ring.RingUpdate``): the summed
    gradient's step written into a new array as the sum comes, which ``commit`` makes the copy once the whole
    batch went through; ``done()`` is the optimizer's bookkeeping of the step. None where it cannot.

    The copy is never written half-way, so a peer that dies in the middle of the ring leaves it as it was (the
    in-place update of the all-gather-reduce starts only once every contribution has come; a ring of a few
    chunks cannot wait for that). The old copy is freed at the commit unless a read of it is still alive
    (which then keeps what it read, as copy on write does). A new array a step costs no more than writing in
    place: in two plain processes, alternated, 1.20-1.37 ms a step against 1.48-1.61 in place and 1.53-1.82
    into a second array kept from step to step (docs/performance.md, "The seventh run").
    """
    if not _updating(var):
        return None
    raw = var.raw
    if (
        type(raw) is not np.ndarray
        or type(grad) is not np.ndarray
        or raw.dtype != grad.dtype
        or raw.shape != grad.shape
        or raw.dtype.name not in COMPILED_DTYPES
        or not raw.flags.c_contiguous
    ):
        return None
    out = np.empty_like(raw)  # (C order, owning its memory: a copy read_only_view can view)

    def commit() -> None:
        var.raw = out
        var._replica.touched.add(var.var_id)
        done()

    return RingUpdate(raw, raw.dtype.type(lr), out, commit)
