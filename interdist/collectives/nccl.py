"""The ``nccl`` collectives backend: GPU replicas on distinct GPUs all-reduce through NCCL (CuPy's binding).

NCCL refuses two ranks on one GPU: replicas that share one use ``cuda_ipc``; ``gpu`` chooses
between them and host staging. Bootstrap: on the first device all_reduce (and after a failure) rank
0 makes a unique id and broadcasts it through the inner transport (Dask comms), and every replica
creates its ``NcclCommunicator``. Every communicator has a *generation*, carried by the hello
(``device_common``): when the ranks' generations differ (one failed and dropped its communicator),
all of them make a new one.

The all_reduce keeps interdist's rule that every element is added in rank order (``reduce_arrays``,
the host path's bits), which NCCL's own reductions do not promise. So NCCL only moves bytes:

1. reduce-scatter: every array is cut into ``n`` chunks (the host path's bounds); chunk ``j`` of
   every array goes to rank ``j`` by ``ncclSend``/``ncclRecv`` (one group), and rank ``j`` adds
   the ``n`` chunks it has in rank order, on its GPU;
2. all-gather: every rank sends its reduced chunks to every peer (one group) and copies theirs
   into place.

Chunks travel packed in one buffer per peer (:func:`regions`, each piece aligned). The blocking
NCCL calls (communicator creation, ``ncclGroupEnd``) run in a thread with the collective timeout;
completion is polled on an event with the same deadline; on a timeout or an aborted step the
communicator is aborted (``ncclCommAbort``) and the next call makes a new one
(``device_common.run_bounded``, ``wait_until``). A communicator whose creation never returns (a peer
that never came) cannot be aborted: its thread is left behind, and the error says so.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any, ClassVar

from interdist._reduction import reduce_arrays
from interdist.collectives.device_common import NCCL, nccl_missing, run_bounded, wait_until
from interdist.collectives.device_transport import DeviceCall, DeviceEngine, DeviceTransport, EngineFactory

#: Each piece of a packed buffer starts at a multiple of this many bytes (any dtype's alignment).
ALIGN = 16


def bounds(size: int, n: int) -> list[int]:
    """Where the ``n`` chunks of ``size`` elements start (the host path's reduce-scatter bounds)."""
    return [size * j // n for j in range(n + 1)]


@dataclass(frozen=True)
class Piece:
    """Elements ``lo:hi`` of (flattened) array ``array``, at byte ``offset`` of a packed region."""

    array: int
    lo: int
    hi: int
    offset: int
    nbytes: int


def regions(sizes: list[int], itemsizes: list[int], n: int) -> list[tuple[list[Piece], int]]:
    """For each rank ``j``: chunk ``j`` of every array packed one after another (each piece aligned to
    ``ALIGN``), and the region's length. Every rank computes the same from the same shapes and dtypes."""
    out = []
    for j in range(n):
        pieces, at = [], 0
        for i, (size, itemsize) in enumerate(zip(sizes, itemsizes, strict=True)):
            b = bounds(size, n)
            nbytes = (b[j + 1] - b[j]) * itemsize
            pieces.append(Piece(i, b[j], b[j + 1], at, nbytes))
            at += -(-nbytes // ALIGN) * ALIGN
        out.append((pieces, at))
    return out


class CupyNccl:
    """The NCCL and CUDA calls of the ``nccl`` path, on the current device and stream (CuPy)."""

    def __init__(self) -> None:
        import cupy
        from cupy.cuda import nccl

        self.cp: Any = cupy
        self.nccl: Any = nccl
        self.xp: Any = cupy

    def to_device(self, a: Any) -> Any:
        return self.cp.asarray(a)

    def unique_id(self) -> Any:
        return self.nccl.get_unique_id()

    def communicator(self, n: int, uid: Any, rank: int) -> Any:
        return self.nccl.NcclCommunicator(n, uid, rank)

    def group(self, comm: Any, sends: list[tuple[Any, int]], recvs: list[tuple[Any, int]]) -> None:
        """Point-to-point transfers of byte arrays (``(buffer, peer)``) as one NCCL group."""
        stream = self.cp.cuda.get_current_stream().ptr
        u8 = getattr(self.nccl, "NCCL_UINT8", 1)  # ncclUint8 is 1 in every NCCL 2.x
        self.nccl.groupStart()
        try:
            for buf, peer in sends:
                comm.send(buf.data.ptr, buf.nbytes, u8, peer, stream)
            for buf, peer in recvs:
                comm.recv(buf.data.ptr, buf.nbytes, u8, peer, stream)
        finally:
            self.nccl.groupEnd()

    def record(self) -> Any:
        ev = self.cp.cuda.Event(block=False, disable_timing=True)
        ev.record(self.cp.cuda.get_current_stream())
        return ev

    def done(self, ev: Any) -> bool:
        return bool(ev.done)

    def check(self, comm: Any) -> None:
        comm.check_async_error()

    def abort(self, comm: Any) -> None:
        comm.abort()


class NcclEngine(DeviceEngine):
    """The ``nccl`` path of one replica: its communicator and its generation."""

    path: ClassVar[str] = NCCL
    algorithm: ClassVar[str] = "nccl-reduce-scatter-all-gather"

    def __init__(self, transport: DeviceTransport, api: Any = None) -> None:
        super().__init__(transport)
        self.api = CupyNccl() if api is None else api
        self.comm: Any = None
        self.gen = -1  # the communicator's generation; -1: none (never made, or aborted)
        self.last = -1  # the last generation this rank made (they only grow)

    def to_device(self, arrays: list[Any]) -> list[Any]:
        return [self.api.to_device(a) for a in arrays]

    def prepare(self, arrays: list[Any]) -> Any:
        return {"gen": self.gen, "last": self.last}

    def _abort(self) -> None:
        comm, self.comm, self.gen = self.comm, None, -1
        if comm is not None:
            with contextlib.suppress(Exception):  # an abort that fails leaves nothing more to do
                self.api.abort(comm)

    def _connect(self, call: DeviceCall, gen: int) -> None:
        """A new communicator for every rank (rank 0's unique id, broadcast through the inner transport)."""
        self._abort()
        t = self.transport
        uid = call.broadcast(1, self.api.unique_id() if t.rank == 0 else None, 0)
        what = f"{call.what} (creating the NCCL communicator; a replica that never joins leaves its thread behind)"
        self.comm = run_bounded(
            lambda: self.api.communicator(t.world_size, uid, t.rank), call.timeout(), call.aborted, None, what
        )
        self.gen = self.last = gen

    def finish(self, call: DeviceCall, arrays: list[Any], infos: dict[int, Any]) -> list[Any]:
        t = self.transport
        me, n, xp = t.rank, t.world_size, self.api.xp
        gens = [self.gen, *(int(i["gen"]) for i in infos.values())]
        if min(gens) < 0 or len(set(gens)) > 1:  # the same answer on every rank: a new one everywhere
            self._connect(call, max(self.last, *(int(i["last"]) for i in infos.values())) + 1)
        flats = [a.reshape(-1) for a in arrays]
        sizes = [int(a.size) for a in arrays]
        # 1. reduce-scatter: chunk j of every array to rank j; the n chunks of this rank's, added in rank order
        inward = regions(sizes, [a.dtype.itemsize for a in arrays], n)
        mine, mine_len = inward[me]
        sends = [(self._pack(flats, inward[j][0], inward[j][1]), j) for j in range(n) if j != me]
        recvs = [(xp.empty(mine_len, xp.uint8), r) for r in range(n) if r != me]
        self._group(call, sends, recvs, "reduce-scatter")
        got = dict(zip([r for r in range(n) if r != me], [b for b, _ in recvs], strict=True))

        def chunk(r: int, p: Any) -> Any:
            if r == me:
                return flats[p.array][p.lo : p.hi]
            return got[r][p.offset : p.offset + p.nbytes].view(arrays[p.array].dtype)

        reduced = [reduce_arrays([chunk(r, p) for r in range(n)], call.op) for p in mine]
        # 2. all-gather: this rank's reduced chunks to every peer, theirs copied into place
        outs = [xp.empty(size, r.dtype) for size, r in zip(sizes, reduced, strict=True)]
        outward = regions(sizes, [r.dtype.itemsize for r in reduced], n)
        rebased = [Piece(p.array, 0, p.hi - p.lo, p.offset, p.nbytes) for p in outward[me][0]]
        packed = self._pack(reduced, rebased, outward[me][1])
        back = [(xp.empty(outward[r][1], xp.uint8), r) for r in range(n) if r != me]
        self._group(call, [(packed, j) for j in range(n) if j != me], back, "all-gather")
        for p, red in zip(outward[me][0], reduced, strict=True):
            outs[p.array][p.lo : p.hi] = red
        for buf, r in back:
            for p in outward[r][0]:
                outs[p.array][p.lo : p.hi] = buf[p.offset : p.offset + p.nbytes].view(outs[p.array].dtype)
        ev = self.api.record()
        wait_until(lambda: self.api.done(ev), call.timeout(), call.aborted, self._abort, f"{call.what} (NCCL)")
        self.api.check(self.comm)
        return [o.reshape(a.shape) for o, a in zip(outs, arrays, strict=True)]

    def _pack(self, flats: list[Any], pieces: list[Piece], total: int) -> Any:
        xp = self.api.xp
        buf = xp.empty(total, xp.uint8)
        for p in pieces:
            if p.nbytes:
                buf[p.offset : p.offset + p.nbytes] = flats[p.array][p.lo : p.hi].view(xp.uint8)
        return buf

    def _group(self, call: DeviceCall, sends: list[tuple[Any, int]], recvs: list[tuple[Any, int]], phase: str) -> None:
        sends = [(b, peer) for b, peer in sends if b.nbytes]  # both sides skip the same empty regions
        recvs = [(b, peer) for b, peer in recvs if b.nbytes]
        comm = self.comm
        run_bounded(
            lambda: self.api.group(comm, sends, recvs),
            call.timeout(),
            call.aborted,
            self._abort,
            f"{call.what} (NCCL {phase})",
        )

    def failed(self) -> None:
        self._abort()  # its state is unknown: every rank makes a new one next time (the generations differ)

    def close(self) -> None:
        self._abort()  # not ncclCommDestroy: it waits for peers' pending work, which may never come


class NcclTransport(DeviceTransport):
    """GPU replicas on distinct GPUs: CuPy batches all-reduced through NCCL (the module docstring)."""

    name = "nccl"
    paths: ClassVar[tuple[str, ...]] = (NCCL,)
    engine_factories: ClassVar[dict[str, EngineFactory]] = {NCCL: NcclEngine}

    @classmethod
    def unavailable_reason(cls) -> str:
        return nccl_missing()


__all__ = ["ALIGN", "CupyNccl", "NcclEngine", "NcclTransport", "Piece", "bounds", "regions"]
