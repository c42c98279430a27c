"""Two replicas on one host: a large all-reduce pipelined through a small ring of shared memory, compiled.

The all-gather-reduce of ``algorithms.py`` copies each rank's whole array into a shared-memory segment that
the peer then reads: 4 MB written where the peer has just read it, and read where the peer has just written
it, a collective at a time; in a training step that copy took 0.65-0.78 ms against 0.14 ms alone (2 cores,
one memory bus). Here each rank writes its array in chunks of ``CHUNK_BYTES`` into a ring of ``SLOTS`` of them
and the peer adds each chunk to its own as it comes, into the result, in compiled code (``_ring_kernels.py``,
numba): the ring stays in the caches and no copy of the whole array is made. A 4 MB all-reduce on 2 replicas
took 0.65-1.09 ms against 1.95 before (docs/performance.md, "The sixth run").

It serves ``all_reduce`` (SUM and MEAN: the MEAN's division after the sum, as the all-gather-reduce does), whose
results are new arrays: a ring that stops half-way (the peer died) leaves nothing of the step anywhere. It also
serves the optimizers' consumed all-reduce (``Collectives.all_reduce_consumed``), where the all-gather-reduce
updates each copy in place as the sum is made, once every contribution has come. A ring of a few chunks cannot
wait for that, so there the consumer offers a ``RingUpdate``: SGD's step, ``w - sum * lr``, written into a new
array as the sum comes, made the copy (``commit``) only once every array of the batch went through; a peer that
dies half-way leaves every copy as it was. Updating the copy in place as the sum came would tear it; keeping a
backup of it as it went cost as much as the ring saved (docs/performance.md, "The sixth run"); the new array a
step costs no more than the in-place write ("The seventh run").

What it takes: two replicas in the group, on one host (the shared-memory transport's local peer), numba
(the ``fast`` extra; without it the all-gather-reduce runs as before), a float32 or float64 batch of
C-contiguous NumPy arrays of at least ``MIN_BYTES`` where the all-gather-reduce would run (``AUTO``'s choice
at 2 replicas on one host), and ``interdist.collectives.ring`` not turned off. Which way a collective goes is
agreed in it: each rank sends a small *hello* (``HELLO``: the batch's description, the ring it made or
mapped) where it would send its contribution; when both said hello over the same ring, the chunks go
through the ring, else each sends its contribution under the collective's negated sequence number and the
all-gather-reduce goes on from there (``Collectives._all_gather_reduce``), so two ranks that differ (one
without numba, a ring not mapped yet) still meet. The first large all-reduce maps the ring (rank 0 makes it
and names it in its hello; rank 1 maps it after), so it is the second that uses it.

Waits are bounded: the kernel returns after ``SPIN_SLICE`` looks without progress, and the caller checks for
an abort of the step and the collective's timeout before it goes on. Only the two ranks' own chunks cross
the ring, after both said hello, so a wait there is the peer's copy of one chunk, unless it died or froze;
then the step's abort (the notebook's fault detection) or the timeout ends it, and the ring, left half-way,
is not used again by this rank (its hellos say so, and the peer's path falls back with it).
"""

from __future__ import annotations

import functools
import struct
import time
from collections.abc import Callable
from multiprocessing import shared_memory
from typing import Any, NamedTuple

import numpy as np

from interdist import _jit, config
from interdist.collectives.segments import _close, _unlink, attach_pair_segment, create_pair_segment, shm_available
from interdist.errors import CollectiveAbortedError, CollectiveTimeoutError

#: Bytes of one chunk (a slot of the ring). Measured with two plain processes running a C prototype of the
#: exchange inside the benchmark's SGD step, 1M float32 (5 alternated runs): 64 KB 1.69-1.95 ms a step, 256 KB
#: 1.44-1.66 ms, 1 MB 1.83-1.88 ms.
CHUNK_BYTES = 256 << 10
#: Slots of each rank's ring: a rank runs up to this many chunks ahead of its peer.
SLOTS = 4
_LINE = 64
_COUNTERS = 4 * _LINE  # head[0], head[1], tail[0], tail[1]: one cache line each (_ring_kernels.HEAD, TAIL)
SIZE = _COUNTERS + 2 * SLOTS * CHUNK_BYTES
#: Looks at a counter without progress before the kernel returns to its caller (who checks for an abort of
#: the step and the timeout, then goes on): ~1-5 ms on the development machine.
SPIN_SLICE = 1 << 17
#: Bytes of a batch from which a ring all-reduce is taken (below, the all-gather-reduce's one copy costs less
#: than the hellos and the compiled call).
MIN_BYTES = 1 << 20

#: The algorithm a ring all-reduce reports (``Timing``): an all-gather-reduce, pipelined through the ring.
RING_ALGORITHM = "all-gather-reduce"

HELLO = b"RNG1"
_HELLO_HEAD = struct.Struct("<4sBH")  # magic, usable (0/1), length of the ring's name; then the name, the description
DTYPES = ("float32", "float64")


class RingUpdate(NamedTuple):
    """What a consumer of an all-reduce (``Collectives.all_reduce_consumed``) offers the ring: SGD's step of a
    copy, ``out = w - sum * lr``, computed as the sum comes; ``commit()`` makes ``out`` the copy once every
    array of the batch went through (nothing is committed when the ring stops half-way: all or nothing)."""

    w: np.ndarray
    lr: Any
    out: np.ndarray
    commit: Callable[[], None]


def enabled() -> bool:
    """``interdist.collectives.ring`` (a Dask config key; default on)."""
    return bool(config.get("collectives.ring"))


@functools.cache
def unavailable_reason() -> str:
    """Why this process cannot run ring all-reduces ("" when it can)."""
    if not shm_available():
        return "this platform has no named POSIX shared memory"
    return _jit.unavailable_reason()


@functools.cache
def kernels() -> Any:
    """The compiled module (``_ring_kernels``); numba compiles it on first use, or loads it from its cache."""
    from interdist.collectives import _ring_kernels

    return _ring_kernels


class Ring:
    """The shared-memory segment of a pair: both ranks' rings and counters. Rank 0 makes it, rank 1 maps it."""

    def __init__(self, shm: shared_memory.SharedMemory, rank: int) -> None:
        self.shm = shm
        self.name: str = shm.name
        self.rank = rank
        buf = shm.buf
        assert buf is not None
        self.counters = np.ndarray((_COUNTERS // 8,), np.int64, buf, 0)
        span = SLOTS * CHUNK_BYTES
        self._rings = [np.ndarray((span,), np.uint8, buf, _COUNTERS + r * span) for r in (0, 1)]
        self.state = np.zeros(2, np.int64)  # chunks this rank published, chunks of the peer's it consumed
        self.broken = False  # an exchange stopped half-way: never used again

    @classmethod
    def create(cls) -> Ring | None:
        shm = create_pair_segment("ring", SIZE)
        return None if shm is None else cls(shm, 0)

    @classmethod
    def attach(cls, name: str) -> Ring | None:
        shm = attach_pair_segment(name, SIZE)  # (its other user made it: the name goes)
        return None if shm is None else cls(shm, 1)

    def rings(self, dtype: np.dtype[Any]) -> tuple[np.ndarray, np.ndarray]:
        """(this rank's ring, the peer's), as ``dtype``."""
        return self._rings[self.rank].view(dtype), self._rings[1 - self.rank].view(dtype)

    def close(self) -> None:
        _unlink(self.shm)  # (made and never mapped by the peer: its name would outlive both processes)
        self.counters = None  # type: ignore[assignment]
        self._rings = []
        _close(self.shm)


def hello(ring: Ring | None, description: bytes) -> bytes:
    """The header of this rank's hello: whether it can use ``ring``, and which ring it is."""
    usable = ring is not None and not ring.broken
    name = ring.name.encode() if ring is not None else b""
    return _HELLO_HEAD.pack(HELLO, int(usable), len(name)) + name + description


def is_hello(header: bytes) -> bool:
    return header[:4] == HELLO


def read_hello(header: bytes) -> tuple[bool, str, bytes]:
    """(usable, ring name, description) of a peer's hello."""
    _, usable, n = _HELLO_HEAD.unpack_from(header, 0)
    at = _HELLO_HEAD.size
    return bool(usable), bytes(header[at : at + n]).decode(), bytes(header[at + n :])


def exchange(
    ring: Ring,
    mine: np.ndarray,
    out: np.ndarray,
    aborted: Any,
    deadline: float,
    what: str,
    update: tuple[np.ndarray, Any] | None = None,
) -> None:
    """``out = a0 + a1`` (in rank order): ``mine`` summed with the peer's array of the same size through ``ring``;
    with ``update = (w, lr)``, ``out = w - (a0 + a1) * lr`` instead (``w``: ``mine``'s size and dtype, ``lr``
    that dtype's scalar), the sum never written whole. ``aborted()`` is the step's abort reason or None; a wait
    past ``deadline`` (``time.monotonic``) raises ``CollectiveTimeoutError``."""
    k = kernels()
    flat, target = mine.reshape(-1), out.reshape(-1)
    w, lr = (update[0].reshape(-1), update[1]) if update is not None else (flat[:0], flat.dtype.type(0))
    ring_me, ring_pe = ring.rings(flat.dtype)
    chunk = CHUNK_BYTES // flat.itemsize
    n = -(-flat.size // chunk)
    base = int(ring.state[1])
    try:
        while True:
            done = k.exchange(
                flat,
                target,
                ring_me,
                ring_pe,
                ring.counters,
                ring.state,
                base,
                chunk,
                SLOTS,
                ring.rank,
                SPIN_SLICE,
                w,
                lr,
            )
            if done >= n:
                return
            reason = aborted()
            if reason is not None:
                raise CollectiveAbortedError(f"{what} was aborted: {reason}")
            if time.monotonic() >= deadline:
                raise CollectiveTimeoutError(
                    f"{what} timed out in the middle of its exchange with replica {1 - ring.rank} "
                    f"({done} of {n} chunks); see interdist.config.set_collective_timeout"
                )
    except BaseException:
        ring.broken = True  # half-way: the counters no longer match the peer's
        raise


def ring_eligible(transport: Any, world_size: int, arrays: list[np.ndarray]) -> bool:
    """Whether this rank offers a ring for this batch (the peer may not: the hellos settle it)."""
    if world_size != 2 or sum(a.nbytes for a in arrays) < MIN_BYTES or not hasattr(transport, "ring_possible"):
        return False  # (the cheap tests first: numba is imported by the first batch that passes them)
    if not enabled() or unavailable_reason() or not transport.ring_possible():
        return False  # (no numba, the ring turned off, another host, shared memory off, a broken ring: no hello)
    first = arrays[0].dtype
    return first.name in DTYPES and all(a.dtype == first and a.flags.c_contiguous for a in arrays)
