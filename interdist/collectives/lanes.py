"""Lanes: small packets to a replica on this host through shared memory, with no system call.

A packet to a peer on this host goes over its channel (a Unix socket, ``mailbox.py``): a
``sendmsg`` on one side, ``poll`` and ``recv`` on the other, ~10-20 us of the two replicas'
time for a 4 KB all_reduce on 2 cores. A lane is a ring of slots in a shared-memory segment, one
per (sender, receiver) pair, that the sender writes and the receiver reads while it spins
(``Mailbox``): a published packet is seen at the next look, and costs a copy of its bytes on each
side. A packet longer than a slot (a frame with arrays of their own: 28 KB-256 KB) takes as many
consecutive slots as its bytes fill, wrapping round the ring. Packets that do not fit the ring, or find it
too full, take the channel as before (the mailbox keys packets by step, seq and sender, so the order
between the two ways does not matter).

The sender makes the lane and offers it over the channel (a packet of ``OFFER_STEP`` naming the
segment); the receiver maps it, unlinks its name (no segment outlives the two processes) and says
so in the lane (``attached``). Until then, and for good where the receiver cannot map it (a
container with its own /dev/shm), the sender uses the channel.

Words (int64, each on a cache line of its own, each with one writer): ``head`` (packets published,
the sender's), ``tail`` (packets consumed, the receiver's), ``attached`` and ``asleep`` (the
receiver's). A receiver about to block sets ``asleep``, then looks at ``head`` once more; a sender
that published looks at ``asleep`` and, when set, writes a packet of ``NUDGE_STEP`` to the channel,
which only wakes the receiver. (A sender that finds its receiver blocked before it publishes sends
the packet itself on the socket, which wakes it as before: replicas that outnumber the cores block
rather than spin, and the lane would only add the nudge.) Between each store and the following
load stands a full fence, so one of the two sees the other (Dekker): no wake-up is lost. The
fence is a lock's atomic read-modify-write, a full barrier on x86-64, and plain stores keep their
order there (total store order), which the slots rely on (a packet's bytes before ``head``): lanes
are used on x86-64 only. A receiver blocked with lanes still looks at them every ``RECHECK_S``.
"""

from __future__ import annotations

import contextlib
import platform
import struct
import threading
from multiprocessing import shared_memory
from typing import Any

from interdist.collectives.segments import _close, _unlink, attach_pair_segment, create_pair_segment, shm_available

#: Steps no collective has (they are below every mailbox's floor): a channel packet of ``NUDGE_STEP``
#: only wakes its reader; one of ``OFFER_STEP`` hands it the sender's lane (the header: its name).
NUDGE_STEP = -(1 << 63)
OFFER_STEP = NUDGE_STEP + 1

SLOTS = 8
SLOT_BYTES = 32 << 10
_LINE_WORDS = 8  # int64 words per 64-byte cache line
_HEAD, _TAIL, _ATTACHED, _ASLEEP = 0, _LINE_WORDS, 2 * _LINE_WORDS, 3 * _LINE_WORDS
_SLOTS_AT = 4 * 8 * _LINE_WORDS
_SLOT_HEAD = struct.Struct("<qqqIIH")  # step, seq, src, header length, reference length, buffers
_LENGTH = struct.Struct("<Q")  # each buffer's length, after the head
SLOT_DATA = SLOT_BYTES - _SLOT_HEAD.size  # what a packet of one slot holds
RING = SLOTS * SLOT_BYTES
SIZE = _SLOTS_AT + RING
MAX_BUFFERS = 64  # (their lengths stay in the packet's first slot)

#: How long a receiver blocked in ``poll`` waits at most before it looks at its lanes again (seconds):
#: a bound in case a wake-up were lost all the same (the fence makes that impossible on x86-64).
RECHECK_S = 0.05

#: Off: every packet takes the channel (tests and benchmarks compare the two).
ENABLED = True


def available() -> bool:
    """Whether lanes may be used in this process: x86-64 (see the module's text) with POSIX shared memory."""
    return ENABLED and platform.machine().lower() in ("x86_64", "amd64") and shm_available()


_fence_lock = threading.Lock()


def fence() -> None:
    """A full memory barrier on x86-64: a store before it reaches other cores before a load after it."""
    with _fence_lock:
        pass


class Lane:
    """One direction of one pair: written by the sender that made it, read by one receiver."""

    def __init__(self, shm: shared_memory.SharedMemory) -> None:
        self.shm = shm
        self.name: str = shm.name
        buf = shm.buf
        assert buf is not None
        self.buf: Any = buf
        self.words: Any = buf.cast("q")
        self.count = 0  # the sender's packets published, or the receiver's packets consumed

    @classmethod
    def create(cls) -> Lane | None:
        """A new lane (``None`` when no segment can be made here)."""
        shm = create_pair_segment("lane", SIZE)
        return None if shm is None else cls(shm)

    @classmethod
    def attach(cls, name: str) -> Lane | None:
        """The receiver's side of the lane ``name`` (``None`` when it cannot be mapped from here)."""
        shm = attach_pair_segment(name, SIZE)  # (its only reader mapped it: the name goes)
        if shm is None:
            return None
        lane = cls(shm)
        lane.words[_ATTACHED] = 1
        return lane

    # -- the sender's side ----------------------------------------------------------
    def put(self, step: int, seq: int, src: int, header: Any, ref: bytes, buffers: Any = ()) -> bool:
        """Publish a packet (its ``buffers``, if any, after its header and reference); False when the lane
        cannot take it (not attached, too full, longer than the ring)."""
        words = self.words
        n, m = len(header), len(ref)
        if buffers:
            return self._put_long(step, seq, src, header, ref, [memoryview(b).cast("B") for b in buffers])
        if n + m > SLOT_DATA:
            return self._put_long(step, seq, src, header, ref, [])
        if not words[_ATTACHED] or self.count - words[_TAIL] >= SLOTS:
            return False
        buf = self.buf
        at = _SLOTS_AT + (self.count % SLOTS) * SLOT_BYTES
        _SLOT_HEAD.pack_into(buf, at, step, seq, src, n, m, 0)
        at += _SLOT_HEAD.size
        buf[at : at + n] = header
        if m:
            buf[at + n : at + n + m] = ref
        self.count += 1
        words[_HEAD] = self.count  # after the bytes (stores keep their order on x86-64)
        return True

    def _put_long(self, step: int, seq: int, src: int, header: Any, ref: bytes, buffers: list[memoryview]) -> bool:
        """``put`` of a packet that takes more than one slot, or has buffers of its own."""
        words = self.words
        lengths = [b.nbytes for b in buffers]
        start = _SLOT_HEAD.size + _LENGTH.size * len(lengths)  # (from the first slot's start)
        slots = -(-(start + len(header) + len(ref) + sum(lengths)) // SLOT_BYTES)
        if len(lengths) > MAX_BUFFERS or slots > SLOTS:
            return False  # (never fits)
        if not words[_ATTACHED] or self.count + slots - words[_TAIL] > SLOTS:
            return False
        buf = self.buf
        first = (self.count % SLOTS) * SLOT_BYTES
        _SLOT_HEAD.pack_into(buf, _SLOTS_AT + first, step, seq, src, len(header), len(ref), len(lengths))
        for i, size in enumerate(lengths):
            _LENGTH.pack_into(buf, _SLOTS_AT + first + _SLOT_HEAD.size + _LENGTH.size * i, size)
        at = first + start
        for part in (header, ref, *buffers):
            at = self._write(at, part)
        self.count += slots
        words[_HEAD] = self.count  # after the bytes (stores keep their order on x86-64)
        return True

    def _write(self, at: int, part: Any) -> int:
        """Copy ``part`` into the ring from offset ``at`` (wrapping at its end); the offset after it."""
        size = len(part) if isinstance(part, bytes) else memoryview(part).nbytes
        if not size:
            return at
        at %= RING
        head = min(size, RING - at)
        buf = self.buf
        if head == size:
            buf[_SLOTS_AT + at : _SLOTS_AT + at + size] = part
        else:
            view = memoryview(part).cast("B")
            buf[_SLOTS_AT + at : _SLOTS_AT + RING] = view[:head]
            buf[_SLOTS_AT : _SLOTS_AT + size - head] = view[head:]
        return at + size

    def publish(self, step: int, seq: int, src: int, header: Any, ref: bytes, buffers: Any = ()) -> int:
        """What a sender does (``DaskTransport``): 0 when the lane did not take the packet (its receiver
        blocks in ``poll``, or ``put`` refused it), 1 when published, 2 when published to a receiver that
        went to sleep meanwhile (it needs a nudge)."""
        if self.words[_ASLEEP] or not self.put(step, seq, src, header, ref, buffers):
            return 0
        return 2 if self.receiver_asleep() else 1

    def receiver_asleep(self) -> bool:
        """After a ``put``: whether the receiver blocks without looking (it needs a nudge)."""
        fence()
        return bool(self.words[_ASLEEP])

    def receiver_blocked(self) -> bool:
        """Before a ``put``, without a fence: whether the receiver blocks in ``poll`` now (then a packet
        on the socket wakes it and is read at once: cheaper than a lane's packet and a nudge)."""
        return bool(self.words[_ASLEEP])

    # -- the receiver's side ----------------------------------------------------------
    def ready(self) -> bool:
        """Whether a packet waits (the receiver's look while it spins)."""
        return bool(self.words[_HEAD] != self.count)

    def take(self) -> list[tuple[int, int, int, bytes, bytes, list[bytearray]]]:
        """The packets published since the last take: (step, seq, src, header, reference, buffers), each
        buffer a private, writable copy."""
        out: list[tuple[int, int, int, bytes, bytes, list[bytearray]]] = []
        words, buf = self.words, self.buf
        head = words[_HEAD]
        while self.count < head:
            first = (self.count % SLOTS) * SLOT_BYTES
            at = _SLOTS_AT + first
            step, seq, src, n, m, k = _SLOT_HEAD.unpack_from(buf, at)
            at += _SLOT_HEAD.size
            if not k and n + m <= SLOT_DATA:  # one slot
                out.append((step, seq, src, bytes(buf[at : at + n]), bytes(buf[at + n : at + n + m]) if m else b"", []))
                self.count += 1
            else:
                lengths = [_LENGTH.unpack_from(buf, at + _LENGTH.size * i)[0] for i in range(k)]
                at = first + _SLOT_HEAD.size + _LENGTH.size * k
                header, at = self._read(at, bytearray(n))
                ref, at = self._read(at, bytearray(m))
                buffers = []
                for size in lengths:
                    b, at = self._read(at, bytearray(size))
                    buffers.append(b)
                out.append((step, seq, src, bytes(header), bytes(ref), buffers))
                self.count += -(-(_SLOT_HEAD.size + _LENGTH.size * k + n + m + sum(lengths)) // SLOT_BYTES)
            words[_TAIL] = self.count  # the slots may be written again
        return out

    def _read(self, at: int, into: bytearray) -> tuple[bytearray, int]:
        """Fill ``into`` from the ring from offset ``at`` (wrapping at its end); it, and the offset after it."""
        size = len(into)
        if not size:
            return into, at
        at %= RING
        head = min(size, RING - at)
        buf = self.buf
        into[:head] = buf[_SLOTS_AT + at : _SLOTS_AT + at + head]
        if head < size:
            into[head:] = buf[_SLOTS_AT : _SLOTS_AT + size - head]
        return into, at + size

    def sleep(self, asleep: bool) -> None:
        """Say whether this receiver blocks (the fence after setting it is the caller's)."""
        self.words[_ASLEEP] = int(asleep)

    def __del__(self) -> None:
        # Never closed (a process leaving without its group's close): let the segment's own
        # finalizer unmap it, which it cannot while this view of it is alive.
        words = getattr(self, "words", None)
        if words is not None:
            with contextlib.suppress(BufferError, ValueError):
                words.release()

    def close(self) -> None:
        """Unmap it; its name goes first (the sender's, in case the receiver never mapped it), whatever holds
        the mapping: a name left behind outlives both processes in /dev/shm."""
        _unlink(self.shm)
        words, self.words = self.words, None
        self.buf = None
        if words is None:
            return
        try:
            words.release()
        except BufferError:  # a slice of it is alive in a reader: the mapping goes with the slice
            return
        _close(self.shm)
