"""Same-host transport: large packets travel through ``multiprocessing.shared_memory``.

The sender copies a packet's buffers into a segment it owns; a small control
packet naming the segment (and where each buffer lies in it) goes through the
inner transport (Dask comms, or the in-process one in tests); the receiver maps
the segment and reduces or copies straight from it. Small packets, and peers
on other hosts, go through the inner transport unchanged.

Segments are reused, not created per message: a fresh 16 MB segment costs
20.5 ms to write and read (page faults on tmpfs), a reused one 2.4 ms
(measured, 2 cores). A packet for several peers on this host is written
once, into a segment all of them map (a broadcast, and every all-gather of
``all_reduce``): with 4 replicas that is one copy per message instead of three.
Each segment's header (``_Slot``, in ``segments.py``) has a ``retired`` word (the sender will not
write it again) and, per reader, a ``busy`` word (the token of the message it
has not released; the sender reuses a segment only when all are 0) and an
``opened`` word (it mapped the segment). Every word has one writer.

No segment outlives its use: the last reader to map a segment unlinks its
name (the mappings stay valid, the memory goes when every process unmaps it or
exits, crashed or not), and the sender unlinks it again when it retires it; a
sender whose message could not be delivered, or that closes before the
receivers mapped it, unlinks its own; a message dropped unread (timeout, abort, a later step) is mapped, unlinked and
freed by the receiver through ``Mailbox.on_drop``. Names carry the creator's pid:
a segment left by a process killed between creating and handing one over is
removed by the next transport created on that host (``sweep_stale``).
"""

from __future__ import annotations

import functools
import itertools
import os
import secrets
import threading
from collections.abc import Callable
from multiprocessing import shared_memory
from typing import Any

import numpy as np

from interdist import config
from interdist.collectives.base import Packet, Transport
from interdist.collectives.mailbox import Mailbox
from interdist.collectives.ring import Ring
from interdist.collectives.ring_path import PairRing
from interdist.collectives.segments import _ALIGN, _close, _header_words, _Slot, _unlink, _untracked
from interdist.collectives.segments import PREFIX as PREFIX  # (this module's API too)
from interdist.collectives.segments import shm_available as shm_available
from interdist.collectives.segments import sweep_stale as sweep_stale

#: Segments up to this size are kept between collectives for reuse; larger ones are given back after
#: each program (``SharedMemoryTransport.trim``).
KEEP_BYTES = 64 << 20
# Packets with at least this many bytes of array buffers go through shared memory (smaller
# arrays travel inside the pickle, base.INBAND_MAX). Measured inside strategy.run, all_reduce
# on 2 workers (2 busy cores, interleaved A/B, median of 20), shared memory vs Dask comms:
# 16 KB 0.65 vs 1.13 ms, 64 KB 1.5 vs 2.3 ms, 1 MB 3.0 vs 4.3 ms, 4 MB 5.9 vs 20.9 ms,
# 16 MB 14.3 vs 34.5 ms; 4 workers 64 KB 7.8 vs 16.0 ms, 16 MB 86 vs 182 ms. It wins from
# the smallest out-of-band buffer up, so the threshold is that size: ``interdist.collectives.shm-threshold``
# (16 KiB, interdist.yaml), read when a transport is made.
# A packet for one peer only goes through shared memory from this size: since packets to same-host
# peers are read straight off a socket by the waiting replica (mailbox channels), writing the bytes
# there costs less than a segment's copy-in, map and release up to ~256 KB. Measured with
# benchmarks/bench_collective_paths.py (2 replicas, all_reduce, shm vs socket, medians, load ~3 on
# 2 cores): 16 KB 0.25 vs 0.18 ms, 64 KB 0.24 vs 0.19 ms, 256 KB 0.23 vs 0.22 ms, 1 MB 0.55 vs
# 1.19 ms. With several local peers one segment serves them all and wins from 16 KB (4 replicas:
# 16 KB 1.20 vs 1.55 ms, 64 KB 1.10 vs 1.63 ms), so shm-threshold stays the limit there. The key:
# ``interdist.collectives.shm-threshold-one-peer`` (128 KiB).
_tokens = itertools.count(1)


@functools.cache
def _shm_unusable() -> str:
    """Why this process cannot create and map a POSIX shared-memory segment ("" when it can)."""
    if not shm_available():
        return "this platform has no named POSIX shared memory (no _posixshmem)"
    try:
        shm = _untracked(
            shared_memory.SharedMemory(name=f"{PREFIX}{os.getpid()}-check-{secrets.token_hex(4)}", create=True, size=64)
        )
    except OSError as e:
        return f"POSIX shared memory is not usable here ({type(e).__name__}: {e})"
    _unlink(shm)
    _close(shm)
    return ""


class SharedMemoryTransport(PairRing, Transport):
    """Wraps ``inner`` (which carries control packets): big packets to local peers via shared memory."""

    name = "shm"

    @classmethod
    def unavailable_reason(cls) -> str:
        return _shm_unusable()

    @classmethod
    def for_worker(
        cls, worker: Any, group_id: str, rank: int, peers: list[str], mailbox: Mailbox, sockets: bool = True
    ) -> Transport:
        raise ValueError(
            "the 'shm' collectives backend wraps another transport (it carries the control messages); "
            "on Dask workers use 'dask', which already sends large packets to peers on the same host "
            "through shared memory (the Dask config key interdist.collectives.backend)"
        )

    def __init__(
        self, inner: Transport, is_local: Callable[[int], bool] | None = None, threshold: int | None = None
    ) -> None:
        super().__init__(inner.rank, inner.world_size, inner.mailbox)
        self.inner = inner
        self.is_local = is_local or (lambda dst: True)
        self.threshold = config.get("collectives.shm-threshold") if threshold is None else threshold
        # (A threshold given explicitly, as in tests and benchmarks, holds for one peer too.)
        self.threshold_one_peer = (
            max(self.threshold, config.get("collectives.shm-threshold-one-peer")) if threshold is None else threshold
        )
        self._slots: dict[tuple[int, ...], list[_Slot]] = {}  # by the local ranks that read them
        self._slot_peer: dict[tuple[int, ...], tuple[str, ...]] = {}  # who the slots were mapped by
        self._mapped: dict[str, tuple[shared_memory.SharedMemory, np.ndarray]] = {}
        self._lock = threading.Lock()  # slots are retired from the event loop on a failed send
        self._map_lock = threading.RLock()  # messages are dropped from the event loop at close
        self.mailbox.on_drop = self._dropped
        self._closed = False
        self._ring: Ring | None = None  # two local replicas: the pair's ring (ring.py)
        self._ring_peer = ""  # the peer's worker it was made with or mapped from
        self._ring_failed = False  # no segment could be made here
        self._one_host = False  # every peer was found on this host (``spans_hosts``)
        sweep_stale()

    # -- sending --------------------------------------------------------------
    def send_packet(
        self,
        dsts: list[int],
        step: int,
        seq: int,
        packet: Packet,
        on_error: Callable[[BaseException], None] | None = None,
        detached: bool = False,
    ) -> None:
        if not packet.buffers:  # (a small packet: all of it in its header)
            self.inner.send_packet(dsts, step, seq, packet, on_error, detached)
            return
        data = sum(memoryview(b).nbytes for b in packet.buffers)
        limit = self.threshold if len(dsts) > 1 else self.threshold_one_peer
        if data < limit or self.threshold < 0 or self._closed:
            self.inner.send_packet(dsts, step, seq, packet, on_error, detached)
            return
        far = [d for d in dsts if not self.is_local(d)]
        if far:
            self.inner.send_packet(far, step, seq, packet, on_error, detached)
        near = tuple(d for d in dsts if d not in far)
        if near:
            # One copy for all the local peers: each maps the same segment (4 replicas, 16 MB
            # all_reduce: one 16 MB write per rank instead of three).
            self._send_shared(near, step, seq, packet, on_error)

    def _send_shared(
        self,
        dsts: tuple[int, ...],
        step: int,
        seq: int,
        packet: Packet,
        on_error: Callable[[BaseException], None] | None,
    ) -> None:
        def write(views: list[np.ndarray]) -> None:
            for b, v in zip(packet.buffers, views, strict=True):
                np.copyto(v, np.frombuffer(b, np.uint8))

        specs = [(np.dtype(np.uint8), memoryview(b).nbytes) for b in packet.buffers]
        self._write_shared(dsts, step, seq, packet.header, specs, write, on_error)

    def send_written(
        self,
        dsts: list[int],
        step: int,
        seq: int,
        header: bytes,
        specs: list[tuple[np.dtype[Any], int]],
        write: Callable[[list[np.ndarray]], None],
    ) -> bool:
        """Send a packet of ``header`` and one buffer per ``(dtype, elements)`` of ``specs``, which ``write(views)``
        fills where they lie, in the segment itself: no copy in (a split reduce-broadcast owner's sum,
        ``split.py``). False, nothing sent and ``write`` not called, where the packet would not go through shared
        memory (a peer on another host, a packet under the threshold)."""
        data = sum(np.dtype(d).itemsize * n for d, n in specs)
        limit = self.threshold if len(dsts) > 1 else self.threshold_one_peer
        if data < limit or self.threshold < 0 or self._closed or not all(self.is_local(d) for d in dsts):
            return False
        self._write_shared(tuple(dsts), step, seq, header, specs, write, None)
        return True

    def _write_shared(
        self,
        dsts: tuple[int, ...],
        step: int,
        seq: int,
        header: bytes,
        specs: list[tuple[np.dtype[Any], int]],
        write: Callable[[list[np.ndarray]], None],
        on_error: Callable[[BaseException], None] | None,
    ) -> None:
        sizes = [np.dtype(d).itemsize * n for d, n in specs]
        offsets, at = [], 0
        for s in sizes:
            offsets.append(at)
            at += -(-s // _ALIGN) * _ALIGN
        token = next(_tokens)
        slot = self._acquire(dsts, at)
        try:
            slot.mark_busy(token)
            base = slot.header_bytes
            write([np.ndarray((n,), d, slot.shm.buf, base + o) for (d, n), o in zip(specs, offsets, strict=True)])
            spans = [[base + o, s] for o, s in zip(offsets, sizes, strict=True)]

            def failed(exc: BaseException) -> None:
                self._retire(dsts, slot)
                if on_error is not None:
                    on_error(exc)

            for index, dst in enumerate(dsts):
                ref = [slot.shm.name, len(dsts), token, spans, index]
                # Detached: the control message holds none of the caller's memory, so the
                # collective need not wait for its delivery (saves 0.3-0.7 ms per collective).
                self.inner.send_packet([dst], step, seq, Packet(header, [], ref), failed, detached=True)
        except BaseException:
            self._retire(dsts, slot)  # a sender that fails removes its own segment
            raise

    def _acquire(self, dsts: tuple[int, ...], nbytes: int) -> _Slot:
        with self._lock:
            if self._closed:
                raise RuntimeError("the collectives transport was closed (the strategy left this worker)")
            slots = self._slots.setdefault(dsts, [])
            peer = tuple(self.inner.peer_id(d) for d in dsts)
            if self._slot_peer.setdefault(dsts, peer) != peer:
                # A rank's worker was replaced: the new process never mapped these (their
                # names are gone), so it gets new segments.
                for s in slots:
                    s.retire()
                slots.clear()
                self._slot_peer[dsts] = peer
            fits = [s for s in slots if s.free and s.capacity >= nbytes]
            if fits:
                return min(fits, key=lambda s: s.capacity)
            for s in [s for s in slots if s.free]:  # too small: replace rather than keep both
                slots.remove(s)
                s.retire()
            # Busy slots are never taken back: a peer may not have mapped them yet (and their
            # names go when it does). A message it abandons is freed through ``on_drop``; a
            # replaced peer is handled above. A broadcast root may run a few messages ahead.
            slot = _Slot(max(1 << 20, 1 << (nbytes - 1).bit_length()), readers=len(dsts))
            slots.append(slot)
            return slot

    def _retire(self, dsts: tuple[int, ...], slot: _Slot) -> None:
        with self._lock:
            if slot in self._slots.get(dsts, []):
                self._slots[dsts].remove(slot)
                slot.retire()

    def trim(self) -> None:
        """After a program: give back the memory of segments above ``KEEP_BYTES``.

        Segments are kept for the next collective of the same size (no page faults, no new
        mapping), which pinned twice a large all-reduce's bytes in every replica until the strategy
        closed (a 1 GiB all-reduce: 2 GiB). A sender retires its large free segments here; a reader
        unmaps the retired ones it still holds (a segment not retired yet may be written again, and
        its name is gone: it stays mapped until its sender retires it)."""
        with self._lock:
            for slots in self._slots.values():
                for big in [s for s in slots if s.free and s.capacity > KEEP_BYTES]:
                    slots.remove(big)
                    big.retire()
        with self._map_lock:
            for name in [k for k, (_, h) in self._mapped.items() if int(h[0])]:
                shm, header = self._mapped.pop(name)
                del header
                _close(shm)

    def peer_id(self, dst: int) -> str:
        return self.inner.peer_id(dst)

    def spans_hosts(self) -> bool:
        if self.threshold < 0:
            return self.inner.spans_hosts()
        if self._one_host:  # (asked at every collective: AUTO's choice)
            return False
        # A peer not probed yet counts as far (``is_local``), so only the answer "one host" is kept.
        self._one_host = all(self.is_local(d) for d in range(self.world_size) if d != self.rank)
        return not self._one_host

    def peers_replaced(self, peers: list[str]) -> None:
        self._one_host = False  # a replaced peer may be on another host
        self.inner.peers_replaced(peers)

    def send_header(self, dsts: list[int], step: int, seq: int, header: bytes) -> None:
        self.inner.send_header(dsts, step, seq, header)

    def flush(self, timeout: float | None = None) -> None:
        self.inner.flush(timeout)

    def forget(self) -> None:
        self.inner.forget()

    # -- receiving ------------------------------------------------------------
    def _map(self, name: str, readers: int, index: int) -> tuple[shared_memory.SharedMemory, np.ndarray]:
        with self._map_lock:
            return self._map_locked(name, readers, index)

    def _map_locked(self, name: str, readers: int, index: int) -> tuple[shared_memory.SharedMemory, np.ndarray]:
        got = self._mapped.get(name)
        if got is not None:
            return got
        shm = _untracked(shared_memory.SharedMemory(name=name))
        header = np.ndarray((_header_words(readers),), np.int64, shm.buf)
        header[2 + 2 * index] = 1  # opened
        if header[2::2].all():
            _unlink(shm)  # every reader mapped it: the name goes, the memory stays mapped
        # Mappings are kept (the sender reuses its segments) until the sender retires one; a
        # retired one is never written again, so it goes when a new one comes.
        for stale in [k for k, (_, h) in self._mapped.items() if int(h[0])]:
            old, old_header = self._mapped.pop(stale)
            del old_header
            _close(old)
        self._mapped[name] = (shm, header)
        return shm, header

    def view(self, packet: Packet) -> list[Any]:
        if packet.shm is None:
            return self.inner.view(packet)
        name, readers, _, spans, index = packet.shm
        shm, _ = self._map(name, readers, index)
        packet.shared = True
        buf = shm.buf
        assert buf is not None
        return [buf[o : o + s] for o, s in spans]

    def release(self, packet: Packet) -> None:
        if packet.shm is None:
            self.inner.release(packet)
            return
        name, readers, token, _, index = packet.shm
        try:
            _, header = self._map(name, readers, index)
        except FileNotFoundError:  # the sender retired it (closed, or its send failed)
            return
        if int(header[1 + 2 * index]) == token:
            header[1 + 2 * index] = 0

    def _dropped(self, message: Any) -> None:
        if isinstance(message, Packet):
            self.release(message)

    def abort_peers(self, step: int, reason: str) -> None:
        self.inner.abort_peers(step, reason)

    def close(self) -> None:
        self._closed = True  # a replica thread still running sends no new segment
        self.mailbox.drain()
        with self._lock:
            self._closed = True
            if self._ring is not None:
                self._ring.close()
                self._ring = None
            for slots in self._slots.values():
                for s in slots:
                    s.retire()
            self._slots.clear()
        with self._map_lock:
            while self._mapped:
                _, (shm, header) = self._mapped.popitem()
                del header
                _close(shm)
        self.inner.close()
