"""The ``cuda_ipc`` and ``nccl`` engines with NumPy stand-ins for CuPy, CUDA IPC and NCCL.

Ranks are threads of this process over the in-process transport (``local``), each wrapped in a
device transport whose engine calls a fake API: IPC handles name NumPy buffers in a shared table
(freed ones are poisoned), events log their records and waits; the fake NCCL moves bytes through
queues. What runs is the real protocol and bookkeeping of ``device_transport.py``, ``cuda_ipc.py``
and ``nccl.py``: the hello and its checks, the topology round, double buffering, handles opened
once per generation, the reduce-scatter layout, communicator generations, timeouts and aborts, and
the results against the host path's (``reduce_arrays``), bit for bit.
"""

from __future__ import annotations

import dataclasses
import itertools
import queue
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from interdist._reduction import reduce_arrays
from interdist.collectives import cost_model
from interdist.collectives.algorithms import Collectives
from interdist.collectives.base import BackendUnavailableError
from interdist.collectives.cuda_ipc import CudaIpcTransport, IpcEngine
from interdist.collectives.device_common import CUDA_IPC, NCCL
from interdist.collectives.gpu_backend import GpuTransport
from interdist.collectives.local import local_group
from interdist.collectives.nccl import NcclEngine, NcclTransport
from interdist.errors import CollectiveAbortedError, CollectiveTimeoutError, ReplicaMismatchError
from interdist.reduce_op import ReduceOp


# -- fake CUDA IPC ---------------------------------------------------------------------------------
class IpcWorld:
    """What the 'processes' (threads) share: buffers and events by handle, and a log."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.buffers: dict[bytes, np.ndarray] = {}
        self.freed: set[bytes] = set()
        self.events: dict[bytes, Any] = {}
        self.log: list[tuple[int, str, str]] = []
        self.ids = itertools.count()


class FakeEvent:
    def __init__(self, name: str) -> None:
        self.name = name


class FakeIpc:
    def __init__(self, world: IpcWorld, rank: int, slow: float = 0.0) -> None:
        self.w, self.rank, self.slow = world, rank, slow
        self.opened: list[bytes] = []
        self.closed: list[Any] = []
        self.allocs = 0

    def to_device(self, a: Any) -> Any:
        return np.asarray(a)

    def alloc(self, nbytes: int) -> tuple[Any, bytes]:
        handle = f"mem-{self.rank}-{next(self.w.ids)}".encode()
        buf = np.zeros(nbytes, np.uint8)
        with self.w.lock:
            self.w.buffers[handle] = buf
        self.allocs += 1
        return buf, handle

    def free(self, mem: Any) -> None:
        with self.w.lock:
            for h, b in self.w.buffers.items():
                if b is mem:
                    self.w.freed.add(h)
                    b[:] = 0xFF  # poison: a read after the free shows

    def open(self, handle: bytes, nbytes: int) -> Any:
        with self.w.lock:
            assert handle not in self.w.freed, "opened a freed buffer"
            self.opened.append(handle)
            buf = self.w.buffers[handle]
        assert buf.nbytes == nbytes
        return buf

    def close(self, mapped: Any) -> None:
        self.closed.append(mapped)

    def view(self, mem: Any, offset: int, shape: tuple[int, ...], dtype: Any) -> Any:
        return np.ndarray(shape, dtype, buffer=mem, offset=offset)

    def copy_into(self, dst: Any, src: Any) -> None:
        dst[...] = src

    def event(self) -> tuple[Any, bytes]:
        handle = f"ev-{self.rank}-{next(self.w.ids)}".encode()
        ev = FakeEvent(handle.decode())
        self.w.events[handle] = ev
        return ev, handle

    def record(self, ev: Any) -> None:
        self.w.log.append((self.rank, "record", ev.name))

    def open_event(self, handle: bytes) -> Any:
        return self.w.events[handle]

    def close_event(self, ev: Any) -> None:
        pass

    def query(self, ev: Any) -> bool:
        self.w.log.append((self.rank, "query", ev.name))
        return True

    def stream_wait(self, ev: Any) -> None:
        self.w.log.append((self.rank, "wait", ev.name))
        if self.slow:
            time.sleep(self.slow)  # a reader that lags: a writer that did not wait for it would show

    def synchronize(self) -> None:
        pass


# -- fake NCCL ---------------------------------------------------------------------------------------
class NcclWorld:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.uids = itertools.count(1)
        self.barriers: dict[int, threading.Barrier] = {}
        self.queues: dict[tuple[int, int, int], queue.Queue[bytes]] = {}
        self.created: list[tuple[int, int]] = []  # (uid, rank)
        self.aborted: list[int] = []

    def q(self, uid: int, src: int, dst: int) -> queue.Queue[bytes]:
        with self.lock:
            return self.queues.setdefault((uid, src, dst), queue.Queue())


class FakeComm:
    def __init__(self, uid: int, rank: int) -> None:
        self.uid, self.rank = uid, rank
        self.gone = threading.Event()


class FakeNccl:
    xp = np

    def __init__(self, world: NcclWorld, rank: int) -> None:
        self.w, self.rank = world, rank
        self.block = False  # group() never delivers (a peer's GPU that hangs)
        self.block_init = False

    def to_device(self, a: Any) -> Any:
        return np.asarray(a)

    def unique_id(self) -> int:
        return next(self.w.uids)

    def communicator(self, n: int, uid: int, rank: int) -> FakeComm:
        if self.block_init:
            threading.Event().wait(2)
            raise RuntimeError("never joined")
        with self.w.lock:
            barrier = self.w.barriers.setdefault(uid, threading.Barrier(n, timeout=3))
        barrier.wait()
        self.w.created.append((uid, rank))
        return FakeComm(uid, rank)

    def group(self, comm: FakeComm, sends: list[tuple[Any, int]], recvs: list[tuple[Any, int]]) -> None:
        if self.block:
            comm.gone.wait(30)
            raise RuntimeError("aborted")
        for buf, peer in sends:
            self.w.q(comm.uid, self.rank, peer).put(bytes(buf))
        for buf, peer in recvs:
            while True:
                if comm.gone.is_set():
                    raise RuntimeError("aborted")
                try:
                    data = self.w.q(comm.uid, peer, self.rank).get(timeout=0.01)
                    break
                except queue.Empty:
                    continue
            buf[:] = np.frombuffer(data, np.uint8)

    def record(self) -> Any:
        return object()

    def done(self, ev: Any) -> bool:
        return True

    def check(self, comm: FakeComm) -> None:
        assert not comm.gone.is_set()

    def abort(self, comm: FakeComm) -> None:
        comm.gone.set()
        self.w.aborted.append(self.rank)


# -- a group of ranks ---------------------------------------------------------------------------------
def ident(gpu: str | None, host: str = "h", paths: tuple[str, ...] = (CUDA_IPC, NCCL)) -> dict[str, Any]:
    return {"host": host, "gpu": gpu, "pid": 1, "paths": list(paths)}


class Group:
    """``n`` ranks as threads; ``all_reduce`` goes through ``device_all_reduce`` as the hook would."""

    def __init__(self, n: int, cls: type = GpuTransport, gpus: list[str | None] | None = None,
                 engines: Callable[[int], dict[str, Any]] | None = None,
                 paths: list[tuple[str, ...]] | None = None) -> None:
        self.n = n
        gpus = gpus if gpus is not None else ["GPU-A"] * n
        ids = [ident(g, paths=paths[r] if paths else (CUDA_IPC, NCCL)) for r, g in enumerate(gpus)]
        self.ipc, self.nccl = IpcWorld(), NcclWorld()
        self.ipc_api = [FakeIpc(self.ipc, r) for r in range(n)]
        self.nccl_api = [FakeNccl(self.nccl, r) for r in range(n)]
        factories = engines or (lambda r: {CUDA_IPC: lambda t: IpcEngine(t, self.ipc_api[r]),
                                           NCCL: lambda t: NcclEngine(t, self.nccl_api[r])})
        self.ts = [cls(t, identity=(lambda r=r: dict(ids[r], pid=100 + r)), engines=factories(r))
                   for r, t in enumerate(local_group(n))]
        self.timeout = 5.0
        self.colls = [Collectives(t, lambda: self.timeout) for t in self.ts]
        self.step = 0

    def run(self, body: Callable[[int, Callable[..., Any]], Any], timeout: float = 5.0) -> list[Any]:
        self.step += 1
        step, self.timeout = self.step, timeout
        for t in self.ts:
            t.mailbox.begin_step(step)
        out: list[Any] = [None] * self.n

        def go(r: int) -> None:
            seq = itertools.count(1)

            def all_reduce(arrays: list[np.ndarray], op: ReduceOp = ReduceOp.SUM) -> Any:
                s = next(seq)
                return self.ts[r].device_all_reduce(self.colls[r], step, s, arrays, op, f"all_reduce #{s} on {r}")

            try:
                out[r] = body(r, all_reduce)
            except BaseException as e:  # returned to the test
                out[r] = e

        threads = [threading.Thread(target=go, args=(r,)) for r in range(self.n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        return out

    def close(self) -> None:
        for t in self.ts:
            t.close()


def _ok(out: list[Any]) -> list[Any]:
    for r, o in enumerate(out):
        assert not isinstance(o, BaseException), f"rank {r}: {o!r}"
    return out


def _data(rank: int) -> list[np.ndarray]:
    """Sums that depend on the order of additions; odd sizes; a 0-d array, an empty one, integers."""
    rng = np.random.default_rng(rank)
    scale = np.float32(10.0) ** rng.integers(-3, 4, 40_001).astype(np.float32)
    return [
        np.asarray(rng.standard_normal(), np.float32),
        (rng.standard_normal(40_001).astype(np.float32) * scale).astype(np.float32),
        rng.standard_normal((3, 5, 7)),
        np.zeros((0, 4), np.float32),
        rng.integers(-1000, 1000, 11).astype(np.int32),
        rng.standard_normal(9).astype(np.float16),
    ]


ALGORITHM = {"cuda_ipc": "cuda-ipc-all-gather-reduce", "nccl": "nccl-reduce-scatter-all-gather"}


def _gpus(path: str, n: int) -> list[str | None]:
    return ["GPU-A"] * n if path == "cuda_ipc" else [f"GPU-{r}" for r in range(n)]


def _group(path: str, n: int) -> Group:
    """A group that takes ``path`` (its explicit backend: ``gpu`` might stage small batches through the host)."""
    return Group(n, cls=CudaIpcTransport if path == "cuda_ipc" else NcclTransport, gpus=_gpus(path, n))


# -- bit for bit against the host path -------------------------------------------------------------------
@pytest.mark.parametrize("path", ["cuda_ipc", "nccl"])
@pytest.mark.parametrize("n", [2, 3, 4])
@pytest.mark.parametrize("op", [ReduceOp.SUM, ReduceOp.MEAN])
def test_same_bits_as_the_host_path(path: str, n: int, op: ReduceOp) -> None:
    g = _group(path, n)
    try:
        out = _ok(g.run(lambda r, ar: (ar(_data(r), op), g.colls[r].last_timing)))
    finally:
        g.close()
    data = [_data(r) for r in range(n)]
    for r in range(n):
        got, timing = out[r]
        assert timing.algorithm == ALGORITHM[path]
        for i in range(len(data[0])):
            want = reduce_arrays([d[i] for d in data], op)  # the host path's bits (rank order)
            assert got[i].dtype == want.dtype and got[i].shape == want.shape, (i, got[i].dtype, got[i].shape)
            assert got[i].tobytes() == want.tobytes(), f"rank {r}, array {i}"


# -- cuda_ipc's bookkeeping ------------------------------------------------------------------------------
def test_ipc_double_buffers_and_opens_each_handle_once() -> None:
    g = Group(3)
    try:
        def body(r: int, ar: Callable[..., Any]) -> Any:
            return [ar([np.full(1000, float(r + 10 * k), np.float32)])[0][0] for k in range(5)]

        out = _ok(g.run(body))
        assert out[0] == [3.0, 33.0, 63.0, 93.0, 123.0]
        engine = g.ts[0]._engines[CUDA_IPC]
        assert isinstance(engine, IpcEngine) and engine.turn == 1  # buffers 0,1,0,1,0
        for r in range(3):
            assert g.ipc_api[r].allocs == 2  # two exchange buffers, reused
            assert len(g.ipc_api[r].opened) == 4 and len(set(g.ipc_api[r].opened)) == 4  # 2 peers x 2 buffers
        # Before a buffer is written again, the writer's stream waited for every peer's "done" event.
        log = [e for e in g.ipc.log if e[0] == 0]
        third_write = [i for i, e in enumerate(log) if e[1] == "record" and e[2] == log[0][2]][2]
        waits = {e[2] for e in log[:third_write] if e[1] == "wait"}
        peer_done = {g.ts[0]._engines[CUDA_IPC].peer_done[p].name for p in (1, 2)}
        assert peer_done <= waits
    finally:
        g.close()
    assert g.ipc.freed == set(g.ipc.buffers)  # every buffer given back at close
    # ... once the peers' last reads were done (their "done" events queried first)
    assert {e[2] for e in g.ipc.log if e[0] == 0 and e[1] == "query"} == peer_done


def test_ipc_a_lagging_reader_is_never_overwritten() -> None:
    g = Group(2, cls=CudaIpcTransport)  # its path at every size (under 'gpu' a few KB stage through the host)
    g.ipc_api[1].slow = 0.02  # rank 1 reads late; rank 0 runs ahead as far as the protocol lets it
    try:
        def body(r: int, ar: Callable[..., Any]) -> Any:
            return [float(ar([np.full(4096, (r + 1) * (k + 1), np.float64)])[0][-1]) for k in range(6)]

        out = _ok(g.run(body))
        assert out[0] == out[1] == [3.0 * (k + 1) for k in range(6)]
    finally:
        g.close()


def test_ipc_a_larger_batch_takes_a_new_buffer_generation() -> None:
    g = Group(2, cls=CudaIpcTransport)  # its path at every size (under 'gpu' a few KB stage through the host)
    try:
        def body(r: int, ar: Callable[..., Any]) -> Any:
            small = [float(ar([np.ones(10, np.float32)])[0][0]) for _ in range(2)]  # buffers 0 and 1
            big = ar([np.ones((2 << 20) // 4 + 1, np.float32)])[0]  # buffer 0 again: over its 2 MiB
            again = ar([np.ones(10, np.float32)])[0]
            return *small, float(big[-1]), float(again[0])

        assert _ok(g.run(body)) == [(2.0, 2.0, 2.0, 2.0)] * 2
        engine = g.ts[0]._engines[CUDA_IPC]
        assert engine.buffers[0].capacity == 4 << 20 and engine.buffers[1].capacity == 2 << 20
        assert engine.buffers[0].gen == 3
        assert g.ipc_api[0].allocs == 3 and len(engine.retired) == 1  # the outgrown buffer, kept until close
        # the peer opened buffer 0 twice (generations 1 and 3) and closed its mapping of generation 1
        assert len(g.ipc_api[1].opened) == 3 and len(g.ipc_api[1].closed) == 1
    finally:
        g.close()


# -- the hello's checks -------------------------------------------------------------------------------------
@pytest.mark.parametrize("path", ["cuda_ipc", "nccl"])
def test_a_shape_mismatch_raises_the_host_paths_error_on_every_rank(path: str) -> None:
    g = _group(path, 2)
    try:
        out = g.run(lambda r, ar: ar([np.ones(3 + r, np.float32)]))
        for o in out:
            assert isinstance(o, ReplicaMismatchError)
            assert ("Cannot all_reduce values of different shapes across replicas "
                    "(replica 0: (3,), replica 1: (4,))") in str(o)
        again = _ok(g.run(lambda r, ar: ar([np.ones(3, np.float32)])[0].tolist()))  # the group stays usable
        assert again == [[2.0] * 3] * 2
    finally:
        g.close()


def test_a_peer_on_the_host_path_is_named() -> None:
    g = Group(2, cls=CudaIpcTransport)  # its path at every size (under 'gpu' a few KB stage through the host)
    try:
        _ok(g.run(lambda r, ar: ar([np.ones(3, np.float32)])))  # the topology round, once

        def body(r: int, ar: Callable[..., Any]) -> Any:
            if r == 1:  # stages through host memory: sends a raw frame at the same (step, seq)
                return g.colls[1]._all_reduce_host(g.step, 1, [np.ones(3, np.float32)], ReduceOp.SUM, "x")
            return ar([np.ones(3, np.float32)])

        out = g.run(body, timeout=1.0)
        assert isinstance(out[0], ReplicaMismatchError)
        assert "replicas reduced one batch along different paths (this one: cuda_ipc; replica 1: host)" in str(out[0])
    finally:
        g.close()


# -- choosing the path ------------------------------------------------------------------------------------
def test_gpu_stages_through_the_host_when_no_device_path_fits() -> None:
    g = Group(3, gpus=["GPU-A", "GPU-A", "GPU-B"])  # two share a GPU, one does not: neither path fits
    try:
        out = _ok(g.run(lambda r, ar: ar([np.ones(3, np.float32)])))
        assert out == [None] * 3  # the hook's caller stages it through host memory
        assert g.ipc.buffers == {} and g.nccl.created == []
    finally:
        g.close()


def test_gpu_weighs_nccl_against_the_host_by_size() -> None:
    g = Group(2, gpus=["GPU-0", "GPU-1"])
    try:
        def body(r: int, ar: Callable[..., Any]) -> Any:
            tiny = ar([np.ones(4, np.float32)])  # 16 bytes: staging costs less than an NCCL round (the model)
            big = ar([np.ones(1 << 18, np.float32)])[0]
            return tiny, float(big[0]), g.colls[r].last_timing.algorithm

        assert _ok(g.run(body)) == [(None, 2.0, "nccl-reduce-scatter-all-gather")] * 2
        assert cost_model.device_choice(16, 2, ["nccl", "host"], shared_gpu=False) == "host"
    finally:
        g.close()


def test_gpu_leaves_out_a_path_that_a_replica_cannot_take() -> None:
    g = Group(2, gpus=["GPU-0", "GPU-1"], paths=[(CUDA_IPC, NCCL), (CUDA_IPC,)])  # no NCCL on replica 1
    try:
        assert _ok(g.run(lambda r, ar: ar([np.ones(1 << 18, np.float32)]))) == [None, None]
        assert g.nccl.created == []
    finally:
        g.close()


def test_gpu_follows_the_cost_models_parameters(monkeypatch: pytest.MonkeyPatch) -> None:
    slow = dataclasses.replace(cost_model.preset("cuda_ipc"), intra=cost_model.Link(1.0, 0.0, 0.0))
    monkeypatch.setitem(cost_model.PRESETS, "cuda_ipc", slow)  # as a measured parameter file could say
    g = Group(2)
    try:
        assert _ok(g.run(lambda r, ar: ar([np.ones(1 << 18, np.float32)]))) == [None, None]  # host staging
        monkeypatch.undo()
        out = _ok(g.run(lambda r, ar: float(ar([np.ones(1 << 18, np.float32)])[0][0])))
        assert out == [2.0, 2.0] and g.ipc.buffers
    finally:
        g.close()


def test_an_explicit_backend_says_why_it_cannot_run_here() -> None:
    g = Group(2, cls=CudaIpcTransport, gpus=["GPU-A", "GPU-B"])
    try:
        out = g.run(lambda r, ar: ar([np.ones(3, np.float32)]))
        for o in out:
            assert isinstance(o, BackendUnavailableError)
            assert "the 'cuda_ipc' collectives backend cannot run here: 'cuda_ipc' connects replicas that share " \
                   "one GPU, and these do not (replica 0: GPU-A on h, replica 1: GPU-B on h)" in str(o)
    finally:
        g.close()
    g = Group(2, cls=NcclTransport, gpus=["GPU-A", "GPU-A"])
    try:
        for o in g.run(lambda r, ar: ar([np.ones(3, np.float32)])):
            assert isinstance(o, BackendUnavailableError) and "NCCL needs one GPU per replica" in str(o)
    finally:
        g.close()


def test_numpy_values_and_exchanges_go_through_the_inner_transport() -> None:
    g = Group(3)
    try:
        def body(r: int, ar: Callable[..., Any]) -> Any:
            c = g.colls[r]
            return c.all_reduce(g.step, 1, [np.full(5, r, np.float64)], ReduceOp.SUM, "x")[0], \
                c.exchange(g.step, 2, {"r": r}, "y")

        out = _ok(g.run(body))
        for total, gathered in out:
            assert total.tolist() == [3.0] * 5 and gathered == [{"r": 0}, {"r": 1}, {"r": 2}]
        assert g.ipc.buffers == {}  # NumPy batches never reach the device path
    finally:
        g.close()


# -- timeouts and aborts -------------------------------------------------------------------------------------
@pytest.mark.parametrize("path", ["cuda_ipc", "nccl"])
def test_a_missing_replica_times_out_by_name_and_the_next_call_works(path: str) -> None:
    g = _group(path, 3)
    try:
        _ok(g.run(lambda r, ar: ar([np.ones(4, np.float32)])))  # topology known, buffers or communicator made

        def body(r: int, ar: Callable[..., Any]) -> Any:
            if r == 2:
                return "absent"
            t0 = time.monotonic()
            try:
                ar([np.ones(4, np.float32)])
            except CollectiveTimeoutError as e:
                return e, time.monotonic() - t0
            return "no timeout"

        out = g.run(body, timeout=0.3)
        for error, waited in out[:2]:
            assert isinstance(error, CollectiveTimeoutError) and "[2]" in str(error) and 0.25 < waited < 3
        again = _ok(g.run(lambda r, ar: ar([np.full(4, r, np.float32)])[0].tolist()))
        assert again == [[3.0] * 4] * 3
        if path == "cuda_ipc":
            assert all(g.ts[r]._engines[CUDA_IPC].retired for r in range(2))  # fresh buffers after the failure
    finally:
        g.close()


def test_ipc_abort_releases_waiters() -> None:
    g = Group(3)
    try:
        _ok(g.run(lambda r, ar: ar([np.ones(4, np.float32)])))

        def body(r: int, ar: Callable[..., Any]) -> Any:
            if r == 2:
                time.sleep(0.2)
                g.ts[2].abort_peers(g.step, "replica 2 raised ValueError: boom")
                return "aborted"
            t0 = time.monotonic()
            try:
                ar([np.ones(4, np.float32)])
            except CollectiveAbortedError as e:
                return e, time.monotonic() - t0
            return "not aborted"

        out = g.run(body, timeout=30.0)
        for error, waited in out[:2]:
            assert isinstance(error, CollectiveAbortedError) and "replica 2 raised ValueError: boom" in str(error)
            assert waited < 2
    finally:
        g.close()


def test_nccl_a_hung_transfer_is_aborted_and_the_communicator_made_again() -> None:
    g = _group("nccl", 2)
    try:
        _ok(g.run(lambda r, ar: ar([np.ones(4, np.float32)])))
        assert len(g.nccl.created) == 2
        g.nccl_api[0].block = True  # rank 0's transfers never complete; rank 1 waits for them
        t0 = time.monotonic()
        out = g.run(lambda r, ar: ar([np.ones(4, np.float32)]), timeout=0.3)
        for o in out:
            assert isinstance(o, CollectiveTimeoutError) and "(NCCL reduce-scatter) timed out after 0.3 s" in str(o)
        assert time.monotonic() - t0 < 5 and sorted(g.nccl.aborted) == [0, 1]
        g.nccl_api[0].block = False
        again = _ok(g.run(lambda r, ar: ar([np.full(4, r + 1, np.float32)])[0].tolist()))
        assert again == [[3.0] * 4] * 2
        uids = sorted({u for u, _ in g.nccl.created})
        assert len(g.nccl.created) == 4 and len(uids) == 2  # a new communicator, from a new unique id
        assert all(g.ts[r]._engines[NCCL].gen == 1 for r in range(2))
    finally:
        g.close()


def test_nccl_an_abort_stops_a_transfer_at_once() -> None:
    g = _group("nccl", 2)
    try:
        _ok(g.run(lambda r, ar: ar([np.ones(4, np.float32)])))
        g.nccl_api[1].block = True

        def body(r: int, ar: Callable[..., Any]) -> Any:
            if r == 0:
                threading.Timer(0.2, lambda: g.ts[0].mailbox.abort(g.step, "the notebook was interrupted")).start()
                threading.Timer(0.2, lambda: g.ts[1].mailbox.abort(g.step, "the notebook was interrupted")).start()
            t0 = time.monotonic()
            try:
                ar([np.ones(4, np.float32)])
            except CollectiveAbortedError as e:
                return e, time.monotonic() - t0
            return "not aborted"

        out = g.run(body, timeout=30.0)
        for error, waited in out:
            assert isinstance(error, CollectiveAbortedError) and "the notebook was interrupted" in str(error)
            assert waited < 3
    finally:
        g.close()


def test_nccl_a_communicator_that_is_never_made_times_out() -> None:
    g = _group("nccl", 2)
    g.nccl_api[1].block_init = True
    try:
        t0 = time.monotonic()
        out = g.run(lambda r, ar: ar([np.ones(4, np.float32)]), timeout=0.3)
        assert isinstance(out[0], CollectiveTimeoutError)
        assert "(creating the NCCL communicator; a replica that never joins leaves its thread behind)" in str(out[0])
        assert time.monotonic() - t0 < 3
    finally:
        g.close()
