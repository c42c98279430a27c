"""The compiled half of ``ring.py``: the pipelined exchange of two replicas, with numba (imported only here).

Kept apart so that importing ``interdist`` never imports numba: ``ring.kernels()`` imports this module the
first time a ring all-reduce runs, and a process without numba never does (``ring.unavailable_reason``).

The counters are read with acquire loads and written with release stores (LLVM's atomics, through numba's
``intrinsic``): a chunk's bytes are visible to the peer before the count that publishes it, on any CPU,
and the compiler never hoists a load out of a wait loop. The sum is NumPy's add one element at a time, in
rank order (``a0 + a1``), so the bits equal the all-gather-reduce's (``reducing._reduce_owned``).
"""

from __future__ import annotations

from typing import Any

from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

# Words of the counters (int64, each on a cache line of its own; ring.py lays them out).
HEAD = (0, 8)  # chunks rank r published in its ring (written by r)
TAIL = (16, 24)  # chunks of rank r's ring its peer consumed (written by the peer)


@intrinsic
def _load_acquire(typingctx: Any, arr: Any, idx: Any) -> Any:
    sig = types.int64(arr, idx)

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        arrty = signature.args[0]
        ary = context.make_array(arrty)(context, builder, args[0])
        ptr = cgutils.get_item_pointer(context, builder, arrty, ary, [args[1]])
        return builder.load_atomic(ptr, ordering="acquire", align=8)

    return sig, codegen


@intrinsic
def _store_release(typingctx: Any, arr: Any, idx: Any, val: Any) -> Any:
    sig = types.void(arr, idx, types.int64)

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        arrty = signature.args[0]
        ary = context.make_array(arrty)(context, builder, args[0])
        ptr = cgutils.get_item_pointer(context, builder, arrty, ary, [args[1]])
        value = context.cast(builder, args[2], signature.args[2], types.int64)
        builder.store_atomic(value, ptr, ordering="release", align=8)
        return context.get_dummy_value()

    return sig, codegen


@intrinsic
def _sched_yield(typingctx: Any) -> Any:
    sig = types.int32()

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ir.IntType(32), []), "sched_yield")
        return builder.call(fn, [])

    return sig, codegen


@njit(nogil=True, boundscheck=False, inline="always", cache=True)
def _copy(dst: Any, src: Any) -> None:
    for j in range(src.size):
        dst[j] = src[j]


@njit(nogil=True, boundscheck=False, inline="always", cache=True)
def _wait_for(ctr: Any, word: int, at_least: int, max_spins: int) -> bool:
    """Spin until counter ``word`` reaches ``at_least`` (yielding the core every 64 looks): False after
    ``max_spins`` looks without it."""
    spins = 0
    while _load_acquire(ctr, word) < at_least:
        spins += 1
        if spins % 64 == 0:
            _sched_yield()
        if spins > max_spins:
            return False
    return True


@njit(nogil=True, boundscheck=False, inline="always", cache=True)
def _add(a: Any, b: Any, out: Any) -> None:
    for j in range(a.size):
        out[j] = a[j] + b[j]


@njit(nogil=True, boundscheck=False, inline="always", cache=True)
def _add_sub_scaled(a: Any, b: Any, w: Any, lr: Any, out: Any) -> None:
    # _update_kernels.sub_sum_scaled's operations (the same bits), written to ``out`` rather than ``w``
    for j in range(a.size):
        t = a[j] + b[j]
        t = t * lr
        out[j] = w[j] - t


@njit(nogil=True, boundscheck=False, cache=True)
def exchange(
    mine: Any,
    out: Any,
    ring_me: Any,
    ring_pe: Any,
    ctr: Any,
    state: Any,
    base: int,
    chunk: int,
    slots: int,
    rank: int,
    max_spins: int,
    w: Any,
    lr: Any,
) -> int:
    """Sum ``mine`` (this rank's array, flat) and the peer's into ``out`` (flat, ``mine``'s size), chunk by chunk,
    from where ``state`` (chunks this rank published, chunks of the peer's it consumed; cumulative) says it is,
    ``base`` being the count at this array's start. With ``w`` (flat, ``mine``'s size; else an empty array)
    ``out`` gets ``w - sum * lr`` instead, an SGD step's new copy, the sum never written. Returns the chunks of
    this array consumed so far: all of them (done), or fewer when a wait went on for ``max_spins`` looks (the
    caller checks for an abort and calls again)."""
    size = mine.size
    n = (size + chunk - 1) // chunk
    me = rank
    pe = 1 - rank
    head = state[0]
    consumed = state[1]
    while consumed - base < n:
        i = consumed - base
        lo = i * chunk
        m = min(chunk, size - lo)
        if head - base <= i:  # this rank's chunk i is not published yet
            if not _wait_for(ctr, TAIL[me], head - slots + 1, max_spins):  # the peer frees a slot
                state[0] = head
                state[1] = consumed
                return i
            at = (head % slots) * chunk
            _copy(ring_me[at : at + m], mine[lo : lo + m])
            head += 1
            _store_release(ctr, HEAD[me], head)
        if not _wait_for(ctr, HEAD[pe], consumed + 1, max_spins):  # the peer's chunk i comes
            state[0] = head
            state[1] = consumed
            return i
        at = (consumed % slots) * chunk
        theirs = ring_pe[at : at + m]
        if w.size == 0:
            if rank == 0:
                _add(mine[lo : lo + m], theirs, out[lo : lo + m])
            else:
                _add(theirs, mine[lo : lo + m], out[lo : lo + m])
        elif rank == 0:
            _add_sub_scaled(mine[lo : lo + m], theirs, w[lo : lo + m], lr, out[lo : lo + m])
        else:
            _add_sub_scaled(theirs, mine[lo : lo + m], w[lo : lo + m], lr, out[lo : lo + m])
        consumed += 1
        _store_release(ctr, TAIL[pe], consumed)
    state[0] = head
    state[1] = consumed
    return n
