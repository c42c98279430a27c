"""The ``cuda_ipc`` collectives backend: GPU replicas that share one GPU all-reduce on it, through CUDA IPC.

NCCL refuses two ranks on one GPU, so this is the device path of replicas that share one (the
machine this was developed for has one H100). Each replica keeps two *exchange buffers* of its own
(``cudaMalloc``, so that an IPC handle names exactly one buffer), used in turn, and three
interprocess events. One all_reduce:

1. the replica waits (on its stream, not on the host) for every peer's *done* event, recorded after
   that peer last read this replica's buffers: the buffer used two calls ago may now be written;
2. it copies its batch into the buffer and records the buffer's *written* event;
3. its hello (``device_common``) carries the buffer's IPC handle, generation and offsets and the
   events' handles; the peers' hellos carry theirs;
4. it opens each peer's buffer (once per generation: opening costs milliseconds) and events,
   makes its stream wait for each peer's *written* event, and reduces every array in rank order
   straight from the peers' buffers (``reduce_arrays``: the host path's bits), then records *done*.

The reasoning behind 1: a peer reads this replica's buffer of call k within its own call k, and
records *done* before it sends its hello of call k+1, which this replica has received before it
starts call k+2 (the next use of that buffer). A failed call breaks that chain (a peer may not have
sent its hello): the next call then takes fresh buffers. Buffers outgrown, or given up after a
failure, are kept until the transport closes (a peer may still have them open), so memory grows by
at most the buffers' sizes.

The device calls go through an *API* object: :class:`CupyIpc` here, NumPy stand-ins in the tests,
which check the bookkeeping (buffers, generations, handles opened once, the order of waits).
"""

from __future__ import annotations

import contextlib
import os
import time
from typing import Any, ClassVar

from interdist._reduction import reduce_arrays
from interdist.collectives.device_common import CUDA_IPC, cupy_missing
from interdist.collectives.device_transport import DeviceCall, DeviceEngine, DeviceTransport, EngineFactory

#: Where each array starts in an exchange buffer: a multiple of this many bytes (CUDA's own alignment).
ALIGN = 256
#: The smallest exchange buffer; larger ones are powers of two. CUDA shares the whole underlying block
#: of an allocation through IPC, and advises sharing allocations of a 2 MiB multiple only (so that no
#: other allocation of this process is exposed).
MIN_CAPACITY = 2 << 20
#: At close, how long to wait for the peers' last reads of this replica's buffers (their *done* events).
CLOSE_WAIT_S = 5.0


def layout(nbytes: list[int]) -> tuple[list[int], int]:
    """Each array's offset in an exchange buffer (aligned to ``ALIGN``) and the bytes they take in all."""
    offsets, at = [], 0
    for n in nbytes:
        offsets.append(at)
        at += -(-n // ALIGN) * ALIGN
    return offsets, at


def capacity_for(nbytes: int) -> int:
    """The size of a new exchange buffer for ``nbytes``: a power of two, at least ``MIN_CAPACITY``."""
    return max(MIN_CAPACITY, 1 << max(0, nbytes - 1).bit_length())


class CupyIpc:
    """The CUDA calls of the ``cuda_ipc`` path, on the current device and stream (CuPy)."""

    def __init__(self) -> None:
        import cupy

        self.cp: Any = cupy
        self.rt: Any = cupy.cuda.runtime

    def to_device(self, a: Any) -> Any:
        return self.cp.asarray(a)

    def alloc(self, nbytes: int) -> tuple[Any, bytes]:
        """A buffer of its own (``cudaMalloc``, not CuPy's pool) and its IPC handle."""
        mem = self.cp.cuda.Memory(nbytes)
        return mem, bytes(self.rt.ipcGetMemHandle(mem.ptr))

    def free(self, mem: Any) -> None:
        del mem  # cupy.cuda.Memory frees its allocation when the last reference goes

    def open(self, handle: bytes, nbytes: int) -> Any:
        ptr = self.rt.ipcOpenMemHandle(handle)
        return self.cp.cuda.UnownedMemory(ptr, nbytes, self)

    def close(self, mapped: Any) -> None:
        self.rt.ipcCloseMemHandle(mapped.ptr)

    def view(self, mem: Any, offset: int, shape: tuple[int, ...], dtype: Any) -> Any:
        return self.cp.ndarray(shape, dtype, self.cp.cuda.MemoryPointer(mem, offset))

    def copy_into(self, dst: Any, src: Any) -> None:
        dst[...] = src

    def event(self) -> tuple[Any, bytes]:
        ev = self.cp.cuda.Event(block=False, disable_timing=True, interprocess=True)
        return ev, bytes(self.rt.ipcGetEventHandle(ev.ptr))

    def record(self, ev: Any) -> None:
        ev.record(self.cp.cuda.get_current_stream())

    def open_event(self, handle: bytes) -> Any:
        return self.rt.ipcOpenEventHandle(handle)

    def close_event(self, ev: Any) -> None:
        self.rt.eventDestroy(ev)

    def query(self, ev: Any) -> bool:
        """Whether ``ev``'s last record has completed (any error counts as done: nothing more to wait for)."""
        return int(self.rt.eventQuery(getattr(ev, "ptr", ev))) != 600  # cudaErrorNotReady

    def stream_wait(self, ev: Any) -> None:
        """The current stream waits for ``ev`` (an event of this process, or one opened by handle)."""
        self.rt.streamWaitEvent(self.cp.cuda.get_current_stream().ptr, getattr(ev, "ptr", ev))

    def synchronize(self) -> None:
        self.cp.cuda.get_current_stream().synchronize()


class _Buffer:
    __slots__ = ("capacity", "gen", "handle", "mem")

    def __init__(self, mem: Any, handle: bytes, capacity: int, gen: int) -> None:
        self.mem, self.handle, self.capacity, self.gen = mem, handle, capacity, gen


class IpcEngine(DeviceEngine):
    """The ``cuda_ipc`` path of one replica: its exchange buffers, events, and the peers' it opened."""

    path: ClassVar[str] = CUDA_IPC
    algorithm: ClassVar[str] = "cuda-ipc-all-gather-reduce"

    def __init__(self, transport: DeviceTransport, api: Any = None) -> None:
        super().__init__(transport)
        self.api = CupyIpc() if api is None else api
        self.buffers: list[_Buffer | None] = [None, None]
        self.turn = 0  # the buffer the next call writes
        self.generations = 0
        self.retired: list[Any] = []  # outgrown or untrusted buffers: freed at close
        self.fresh = False  # a call failed: the next one takes new buffers
        self.written = [self.api.event(), self.api.event()]  # (event, handle) per buffer
        self.done = self.api.event()
        # The peers': buffers opened, by (rank, pid, buffer index) -> (generation, mapping); events by
        # (rank, pid, name) -> opened event; each peer's *done* event, waited for before a buffer is reused.
        self.mapped: dict[tuple[int, int, int], tuple[int, Any]] = {}
        self.peer_events: dict[tuple[int, int, str], Any] = {}
        self.peer_done: dict[int, Any] = {}

    def to_device(self, arrays: list[Any]) -> list[Any]:
        return [self.api.to_device(a) for a in arrays]

    def _buffer(self, index: int, nbytes: int) -> _Buffer:
        buf = self.buffers[index]
        if buf is not None and buf.capacity >= nbytes:
            return buf
        if buf is not None:
            self.retired.append(buf.mem)
        capacity = capacity_for(nbytes)
        mem, handle = self.api.alloc(capacity)
        self.generations += 1
        buf = self.buffers[index] = _Buffer(mem, handle, capacity, self.generations)
        return buf

    def prepare(self, arrays: list[Any]) -> Any:
        if self.fresh:
            self.retired += [b.mem for b in self.buffers if b is not None]
            self.buffers = [None, None]
            self.fresh = False
        index, self.turn = self.turn, 1 - self.turn
        offsets, total = layout([int(a.nbytes) for a in arrays])
        buf = self._buffer(index, total)
        for ev in self.peer_done.values():  # the peers have read what this buffer held two calls ago
            self.api.stream_wait(ev)
        for a, off in zip(arrays, offsets, strict=True):
            self.api.copy_into(self.api.view(buf.mem, off, tuple(a.shape), a.dtype), a)
        event, event_handle = self.written[index]
        self.api.record(event)
        return {
            "pid": os.getpid(),
            "index": index,
            "gen": buf.gen,
            "handle": buf.handle,
            "capacity": buf.capacity,
            "offsets": offsets,
            "written": event_handle,
            "done": self.done[1],
        }

    def _peer_buffer(self, rank: int, info: dict[str, Any]) -> Any:
        """Rank ``rank``'s buffer of this call, opened once per generation (an older one is closed)."""
        key = (rank, int(info["pid"]), int(info["index"]))
        got = self.mapped.get(key)
        if got is not None and got[0] == info["gen"]:
            return got[1]
        if got is not None:
            self.api.synchronize()  # this replica's reads of the old buffer are done before it goes
            self.api.close(got[1])
        mapped = self.api.open(info["handle"], int(info["capacity"]))
        self.mapped[key] = (int(info["gen"]), mapped)
        return mapped

    def _peer_event(self, rank: int, pid: int, name: str, handle: bytes) -> Any:
        key = (rank, pid, name)
        ev = self.peer_events.get(key)
        if ev is None:
            ev = self.peer_events[key] = self.api.open_event(handle)
        return ev

    def finish(self, call: DeviceCall, arrays: list[Any], infos: dict[int, Any]) -> list[Any]:
        me, n = self.transport.rank, self.transport.world_size
        parts: dict[int, list[Any]] = {me: arrays}
        for r, info in sorted(infos.items()):
            pid = int(info["pid"])
            mapped = self._peer_buffer(r, info)
            self.api.stream_wait(self._peer_event(r, pid, f"written{info['index']}", info["written"]))
            self.peer_done[r] = self._peer_event(r, pid, "done", info["done"])
            parts[r] = [
                self.api.view(mapped, off, tuple(a.shape), a.dtype)
                for a, off in zip(arrays, info["offsets"], strict=True)
            ]
        out = [reduce_arrays([parts[r][i] for r in range(n)], call.op) for i in range(len(arrays))]
        self.api.record(self.done[0])  # after the reads of the peers' buffers
        return out

    def failed(self) -> None:
        self.fresh = True

    def close(self) -> None:
        """Give everything back (CUDA errors at teardown, a peer gone first, are not this replica's).

        A peer's kernels that still read this replica's buffers would fault in the peer's process if they
        were freed under them: first wait (bounded) for every peer's *done* event. The group closes after
        its last program returned, when every peer has recorded it."""
        with contextlib.suppress(Exception):
            self.api.synchronize()
        deadline = time.monotonic() + CLOSE_WAIT_S
        for ev in self.peer_done.values():
            with contextlib.suppress(Exception):
                while not self.api.query(ev) and time.monotonic() < deadline:
                    time.sleep(1e-3)
        for _, mapped in self.mapped.values():
            with contextlib.suppress(Exception):
                self.api.close(mapped)
        for ev in self.peer_events.values():
            with contextlib.suppress(Exception):
                self.api.close_event(ev)
        self.mapped.clear()
        self.peer_events.clear()
        self.peer_done.clear()
        for mem in [*self.retired, *(b.mem for b in self.buffers if b is not None)]:
            with contextlib.suppress(Exception):
                self.api.free(mem)
        self.retired.clear()
        self.buffers = [None, None]


class CudaIpcTransport(DeviceTransport):
    """GPU replicas sharing one GPU: CuPy batches all-reduced on it through CUDA IPC (the module docstring)."""

    name = "cuda_ipc"
    paths: ClassVar[tuple[str, ...]] = (CUDA_IPC,)
    engine_factories: ClassVar[dict[str, EngineFactory]] = {CUDA_IPC: IpcEngine}

    @classmethod
    def unavailable_reason(cls) -> str:
        return cupy_missing()


__all__ = ["ALIGN", "CudaIpcTransport", "CupyIpc", "IpcEngine", "capacity_for", "layout"]
