"""``DeviceTransport``: the transport of the device-resident backends, and the engines of its paths.

A ``DeviceTransport`` wraps the transport a worker would use anyway (``inner``: Dask comms with the
same-host shared-memory path, as ``SharedMemoryTransport`` wraps its own ``inner``): every packet,
abort and timeout goes through it unchanged, so NumPy values, exchanges and broadcasts behave as on
the ``dask`` backend. What it adds is :meth:`DeviceTransport.device_all_reduce`, which
``Collectives.all_reduce`` calls for a batch that holds CuPy arrays; where it returns ``None``, or
where that hook is absent, the batch is staged through host memory as before. The steps of one
device all_reduce are in ``device_common.py``; each path is a :class:`DeviceEngine` (``cuda_ipc.py``,
``nccl.py``).
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

from interdist.collectives import cost_model
from interdist.collectives.algorithms import Collectives
from interdist.collectives.base import (
    BackendUnavailableError,
    Packet,
    Timing,
    Transport,
    is_frame,
    pack,
    unpack,
    unpack_arrays,
)
from interdist.collectives.dask_comms import DaskTransport
from interdist.collectives.device_common import DEVICE_MARK, HOST, Topology, device_tag, local_identity
from interdist.collectives.mailbox import Mailbox
from interdist.errors import ReplicaMismatchError
from interdist.reduce_op import ReduceOp


@dataclass
class DeviceCall:
    """One device all_reduce as an engine sees it."""

    transport: DeviceTransport
    colls: Collectives
    step: int
    seq: int
    what: str
    op: ReduceOp

    def timeout(self) -> float:
        return float(self.colls.timeout())

    def aborted(self) -> str | None:
        return self.transport.mailbox.aborted(self.step)

    def broadcast(self, phase: int, obj: Any, root: int) -> Any:
        """``obj`` of rank ``root`` on every rank, through the inner transport (a control round)."""
        t = self.transport
        tag = device_tag(self.seq, phase)
        if t.rank == root:
            t.inner.send_packet([r for r in range(t.world_size) if r != root], self.step, tag, pack(obj), detached=True)
            return obj
        return t.take_objects(self.step, tag, [root], self.timeout(), self.what)[root]


class DeviceEngine(ABC):
    """One device path of a transport (its state lives as long as the transport)."""

    path: ClassVar[str] = ""
    algorithm: ClassVar[str] = ""

    def __init__(self, transport: DeviceTransport) -> None:
        self.transport = transport

    @abstractmethod
    def to_device(self, arrays: list[Any]) -> list[Any]:
        """The batch as arrays of this path's array module (CuPy; NumPy in tests)."""

    @abstractmethod
    def prepare(self, arrays: list[Any]) -> Any:
        """Before the hello: what it carries to the peers."""

    @abstractmethod
    def finish(self, call: DeviceCall, arrays: list[Any], infos: dict[int, Any]) -> list[Any]:
        """The reduced batch, from the peers' ``prepare`` results."""

    def failed(self) -> None:  # noqa: B027 - an optional hook
        """The call failed half-way: forget what cannot be trusted any more."""

    def close(self) -> None:  # noqa: B027 - an optional hook
        """Give back device memory, handles, communicators."""


EngineFactory = Callable[["DeviceTransport"], DeviceEngine]


class DeviceTransport(Transport):
    """Wraps ``inner`` (every packet goes through it) and reduces CuPy batches on the device."""

    name = "device"
    #: The device paths this backend may take, and whether it stages through host memory otherwise.
    paths: ClassVar[tuple[str, ...]] = ()
    host_fallback: ClassVar[bool] = False
    #: How each path's engine is made (the CuPy ones; tests pass NumPy stand-ins to ``__init__``).
    engine_factories: ClassVar[dict[str, EngineFactory]] = {}

    @classmethod
    def for_worker(
        cls, worker: Any, group_id: str, rank: int, peers: list[str], mailbox: Mailbox, sockets: bool = True
    ) -> Transport:
        """The ``dask`` backend's transport, wrapped."""
        inner = DaskTransport.for_worker(worker, group_id, rank, peers, mailbox, sockets)
        base = getattr(inner, "inner", inner)
        if hasattr(base, "connect_peers"):
            base.connect_peers()  # as the worker does for 'dask' (it looks one wrapper deep only)
        return cls(inner)

    def __init__(
        self,
        inner: Transport,
        identity: Callable[[], dict[str, Any]] | None = None,
        engines: dict[str, EngineFactory] | None = None,
    ) -> None:
        super().__init__(inner.rank, inner.world_size, inner.mailbox)
        self.inner = inner
        self._identity = identity or (lambda: local_identity(self.paths))
        self._factories = dict(self.engine_factories if engines is None else engines)
        self._engines: dict[str, DeviceEngine] = {}
        self._topology: tuple[tuple[str, ...], Topology] | None = None

    # -- the device path ------------------------------------------------------------------------
    def device_all_reduce(
        self, colls: Collectives, step: int, seq: int, arrays: list[Any], op: ReduceOp, what: str
    ) -> list[Any] | None:
        """The batch reduced on the device, or ``None``: stage it through host memory (``host`` chosen)."""
        t0 = time.perf_counter()
        engine: DeviceEngine | None = None
        try:
            topology = self.topology(step, seq, colls.timeout(), what)
            candidates = topology.candidates(self.paths) + ([HOST] if self.host_fallback else [])
            if not candidates:
                why = topology.why_not(self.paths[0])
                raise BackendUnavailableError(f"{what}: the {self.name!r} collectives backend cannot run here: {why}")
            elements = sum(int(a.size) for a in arrays)
            hosts, shared = topology.hosts, topology.shared_gpu
            path = cost_model.device_choice(4 * elements, self.world_size, candidates, hosts, shared)
            if path == HOST:
                return None
            engine = self.engine(path)
            arrays = engine.to_device(arrays)
            meta = ([tuple(a.shape) for a in arrays], [a.dtype.str for a in arrays], op.value)
            info = engine.prepare(arrays)
            peers = [r for r in range(self.world_size) if r != self.rank]
            self.inner.send_packet(peers, step, seq, pack((meta, [DEVICE_MARK, path, info])), detached=True)
            t1 = time.perf_counter()
            infos = self._hellos(colls, step, seq, meta, path, what)
            wait = time.perf_counter() - t1
            out = engine.finish(DeviceCall(self, colls, step, seq, what, op), arrays, infos)
            nbytes = sum(int(a.nbytes) for a in arrays)
            colls.last_timing = Timing(wait, time.perf_counter() - t0 - wait, nbytes, engine.algorithm)
            return out
        except BaseException:
            self.inner.forget()
            if engine is not None:
                engine.failed()
            raise

    def engine(self, path: str) -> DeviceEngine:
        got = self._engines.get(path)
        if got is None:
            got = self._engines[path] = self._factories[path](self)
        return got

    def topology(self, step: int, seq: int, timeout: float, what: str) -> Topology:
        """Where every replica runs (one round the first time, and after a worker was replaced)."""
        key = tuple(self.peer_id(r) for r in range(self.world_size))
        if self._topology is not None and self._topology[0] == key:
            return self._topology[1]
        tag = device_tag(seq, 0)
        mine = self._identity()
        peers = [r for r in range(self.world_size) if r != self.rank]
        self.inner.send_packet(peers, step, tag, pack(mine), detached=True)
        got = self.take_objects(step, tag, peers, timeout, f"{what} (where are the replicas' GPUs?)")
        topology = Topology(tuple(mine if r == self.rank else got[r] for r in range(self.world_size)))
        self._topology = (key, topology)
        return topology

    def take_objects(self, step: int, tag: int, srcs: list[int], timeout: float, what: str) -> dict[int, Any]:
        """The objects ``srcs`` sent at (step, tag), unpickled (timeout and abort as any collective)."""
        got: dict[int, Packet] = self.mailbox.take(step, tag, srcs, timeout, what) if srcs else {}
        try:
            return {r: unpack(p, self.inner.view(p), copy=True) for r, p in got.items()}
        finally:
            for p in got.values():
                self.inner.release(p)

    def _hellos(self, colls: Collectives, step: int, seq: int, meta: Any, path: str, what: str) -> dict[int, Any]:
        """The peers' hellos, checked as the host path checks its first message."""
        peers = [r for r in range(self.world_size) if r != self.rank]
        got: dict[int, Packet] = self.mailbox.take(step, seq, peers, colls.timeout(), what) if peers else {}
        metas: dict[int, Any] = {}
        infos: dict[int, Any] = {}
        elsewhere: dict[int, str] = {}
        try:
            for r, p in got.items():
                buffers = self.inner.view(p)
                if is_frame(p.header):  # the peer staged its batch through host memory
                    metas[r], _ = unpack_arrays(p.header, buffers)
                    elsewhere[r] = HOST
                    continue
                metas[r], extra = unpack(p, buffers, copy=True)
                if isinstance(extra, list) and extra[:1] == [DEVICE_MARK]:
                    infos[r] = extra[2]
                    if extra[1] != path:
                        elsewhere[r] = str(extra[1])
                else:
                    elsewhere[r] = HOST
        finally:
            for p in got.values():
                self.inner.release(p)
        colls._check(meta, metas)  # shapes, dtypes and op agree, else the host path's error on every rank
        if elsewhere:
            raise ReplicaMismatchError(
                f"{what}: replicas reduced one batch along different paths (this one: {path}; "
                + ", ".join(f"replica {r}: {p}" for r, p in sorted(elsewhere.items()))
                + "): give every replica the same kind of arrays (all CuPy or all NumPy) and the same settings"
            )
        return infos

    # -- everything else goes through ``inner`` -------------------------------------------------
    def send_packet(
        self,
        dsts: list[int],
        step: int,
        seq: int,
        packet: Packet,
        on_error: Callable[[BaseException], None] | None = None,
        detached: bool = False,
    ) -> None:
        self.inner.send_packet(dsts, step, seq, packet, on_error, detached)

    def send_header(self, dsts: list[int], step: int, seq: int, header: bytes) -> None:
        self.inner.send_header(dsts, step, seq, header)

    def flush(self, timeout: float | None = None) -> None:
        self.inner.flush(timeout)

    def peer_id(self, dst: int) -> str:
        return self.inner.peer_id(dst)

    def spans_hosts(self) -> bool:
        return self.inner.spans_hosts()

    def peers_replaced(self, peers: list[str]) -> None:
        self.inner.peers_replaced(peers)

    def forget(self) -> None:
        self.inner.forget()

    def view(self, packet: Packet) -> list[Any]:
        return self.inner.view(packet)

    def release(self, packet: Packet) -> None:
        self.inner.release(packet)

    def abort_peers(self, step: int, reason: str) -> None:
        self.inner.abort_peers(step, reason)

    def trim(self) -> None:
        """After a program (``Replica``): the inner transport gives back large shared-memory segments."""
        trim = getattr(self.inner, "trim", None)
        if trim is not None:
            trim()

    def close(self) -> None:
        engines, self._engines = list(self._engines.values()), {}
        try:
            for e in engines:
                e.close()
        finally:
            self.inner.close()


__all__ = ["DeviceCall", "DeviceEngine", "DeviceTransport", "EngineFactory"]
