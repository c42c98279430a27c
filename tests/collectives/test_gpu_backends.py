"""The device-resident backends of GPU replicas without a GPU: registry entries, what they say is
missing, the topology and path choice, the bounded waits, the buffer layouts (issue 27).

The engines themselves run with NumPy stand-ins in test_gpu_backends_engines.py; on a GPU,
tests/gpu/test_gpu_device_collectives.py.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import itertools
import sys
import threading
import time
import types
from typing import Any

import pytest

import interdist as idist
from interdist.collectives import algorithms, cost_model
from interdist.collectives import cuda_ipc as ipc_mod
from interdist.collectives import device_common as dc
from interdist.collectives import nccl as nccl_mod
from interdist.collectives.base import BackendUnavailableError, Transport
from interdist.collectives.cuda_ipc import CudaIpcTransport
from interdist.collectives.gpu_backend import GpuTransport
from interdist.collectives.nccl import NcclTransport
from interdist.collectives.registry import (
    DEVICE_BACKENDS,
    available_backends,
    backend_for,
    backend_names,
    get_backend,
    load_backend,
)
from interdist.config import settings
from interdist.errors import CollectiveAbortedError, CollectiveTimeoutError

DEVICE = {"cuda_ipc": CudaIpcTransport, "nccl": NcclTransport, "gpu": GpuTransport}


# -- a CuPy that is installed but broken in a given way (no real CuPy is needed) -----------------
def _fake_cupy(monkeypatch: pytest.MonkeyPatch, count: int = 1, count_error: Exception | None = None,
               nccl: bool | None = True) -> None:
    """``nccl``: True/False is ``cupy.cuda.nccl.available``; None: ``cupy.cuda.nccl`` does not import."""
    cupy = types.ModuleType("cupy")
    cupy.__spec__ = importlib.machinery.ModuleSpec("cupy", None)
    cuda = types.ModuleType("cupy.cuda")

    def get_device_count() -> int:
        if count_error is not None:
            raise count_error
        return count

    cuda.runtime = types.SimpleNamespace(getDeviceCount=get_device_count)  # type: ignore[attr-defined]
    if nccl is not None:
        cuda.nccl = types.SimpleNamespace(available=nccl)  # type: ignore[attr-defined]
    cupy.cuda = cuda  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "cupy", cupy)
    monkeypatch.setitem(sys.modules, "cupy.cuda", cuda)


def _no_cupy(monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "cupy" else real(name, *a))


# -- the registry ----------------------------------------------------------------------------
def test_device_backends_are_registered() -> None:
    assert {"cuda_ipc", "nccl", "gpu"} <= set(backend_names())
    for name, cls in DEVICE.items():
        assert DEVICE_BACKENDS[name] == f"{cls.__module__}:{cls.__qualname__}"
        assert load_backend(name) is cls and cls.name == name and issubclass(cls, Transport)


@pytest.mark.parametrize("name", ["cuda_ipc", "nccl", "gpu"])
def test_without_cupy_each_says_what_to_install(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    _no_cupy(monkeypatch)
    cls = load_backend(name)
    assert not cls.is_available() and name not in available_backends()
    reason = cls.unavailable_reason()
    assert reason == ("CuPy is not installed: pip install 'interdist[gpu]' (CUDA 12 drivers; "
                      "'interdist[cuda13]' for CUDA 13)")
    with pytest.raises(BackendUnavailableError) as info:  # the registry's error kind, a RuntimeError
        get_backend(name)
    assert str(info.value) == f"collectives backend {name!r} is not available here: {reason}"


def test_a_strategy_refuses_an_unavailable_device_backend_before_taking_workers(
        monkeypatch: pytest.MonkeyPatch) -> None:
    _no_cupy(monkeypatch)
    monkeypatch.setattr(settings, "collectives_backend", "cuda_ipc")
    with pytest.raises(BackendUnavailableError, match="'cuda_ipc' is not available here: CuPy is not installed"):
        idist.MirroredStrategy(["CPU:0", "CPU:1"], cluster="tcp://127.0.0.1:1")  # never contacted


def test_cupy_without_a_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    _fake_cupy(monkeypatch, count=0)
    assert CudaIpcTransport.unavailable_reason() == "CUDA sees no GPU (CUDA_VISIBLE_DEVICES='')"
    assert NcclTransport.unavailable_reason() == "CUDA sees no GPU (CUDA_VISIBLE_DEVICES='')"
    assert GpuTransport.is_available()  # installed: the workers find out what their GPUs can do
    _fake_cupy(monkeypatch, count_error=RuntimeError("cudaErrorInsufficientDriver"))
    assert CudaIpcTransport.unavailable_reason() == (
        "CUDA sees no usable GPU (RuntimeError: cudaErrorInsufficientDriver; CUDA_VISIBLE_DEVICES='')")


def test_cupy_that_does_not_import(monkeypatch: pytest.MonkeyPatch) -> None:
    cupy = types.ModuleType("cupy")
    cupy.__spec__ = importlib.machinery.ModuleSpec("cupy", None)
    monkeypatch.setitem(sys.modules, "cupy", None)  # import cupy raises ImportError
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: cupy.__spec__ if name == "cupy" else real(name, *a))
    reason = CudaIpcTransport.unavailable_reason()
    assert reason.startswith("CuPy does not import (ModuleNotFoundError: import of cupy halted")
    assert "pip install 'interdist[gpu]'" in reason


def test_nccl_says_how_to_get_nccl(monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_cupy(monkeypatch, nccl=False)
    assert CudaIpcTransport.is_available() and not NcclTransport.is_available()
    assert NcclTransport.unavailable_reason() == (
        "CuPy finds no NCCL library (cupy.cuda.nccl.available is False): " + dc.NCCL_INSTALL)
    assert "pip install nvidia-nccl-cu12" in dc.NCCL_INSTALL
    _fake_cupy(monkeypatch, nccl=None)
    assert NcclTransport.unavailable_reason().startswith("CuPy's NCCL module does not import (ImportError: ")
    _fake_cupy(monkeypatch, nccl=True)
    assert NcclTransport.unavailable_reason() == "" and get_backend("nccl") is NcclTransport


def test_backend_for_gpu_devices(monkeypatch: pytest.MonkeyPatch) -> None:
    gpus = ["/job:localhost/replica:0/task:0/device:GPU:0", "GPU:1"]
    assert settings.collectives_backend == "auto"  # the default: chosen by the devices
    _fake_cupy(monkeypatch)  # installed
    assert backend_for(gpus) == "gpu"
    assert backend_for(["CPU:0", "GPU:0"]) == "dask" and backend_for(["CPU:0"]) == "dask" and backend_for([]) == "dask"
    assert backend_for(gpus, "dask") == "dask"  # a strategy's own choice is kept
    monkeypatch.setattr(settings, "collectives_backend", "nccl")
    assert backend_for(gpus) == "nccl"  # a backend set explicitly is kept
    monkeypatch.setattr(settings, "collectives_backend", "dask")
    assert backend_for(gpus) == "dask"  # so is 'dask': host staging asked for by name
    monkeypatch.setattr(settings, "collectives_backend", "auto")
    _no_cupy(monkeypatch)
    assert backend_for(gpus) == "dask"  # a notebook without CuPy keeps host staging
    with pytest.raises(ValueError, match="unknown collectives backend 'auto'.*the setting's default"):
        get_backend("auto")  # resolved by backend_for, never a backend of its own


def test_a_gpu_strategy_takes_the_gpu_backend_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    """MirroredStrategy over GPU devices asks for ``backend_for``'s choice (checked before any worker is taken)."""
    import interdist as idist
    from interdist.strategy import base

    asked: list[str] = []

    class Stop(Exception):
        pass

    def recorded(name: str) -> Any:
        asked.append(name)
        raise Stop

    monkeypatch.setattr(base, "get_backend", recorded)
    _fake_cupy(monkeypatch)  # installed
    with pytest.raises(Stop):
        idist.MirroredStrategy(["GPU:0", "GPU:1"])
    with pytest.raises(Stop):
        idist.MirroredStrategy(["CPU:0", "CPU:1"])
    monkeypatch.setattr(settings, "collectives_backend", "cuda_ipc")
    with pytest.raises(Stop):
        idist.MirroredStrategy(["GPU:0", "GPU:1"])
    monkeypatch.setattr(settings, "collectives_backend", "dask")  # host staging asked for by name
    with pytest.raises(Stop):
        idist.MirroredStrategy(["GPU:0", "GPU:1"])
    monkeypatch.setattr(settings, "collectives_backend", "auto")
    _no_cupy(monkeypatch)
    with pytest.raises(Stop):
        idist.MirroredStrategy(["GPU:0", "GPU:1"])
    assert asked == ["gpu", "dask", "cuda_ipc", "dask", "dask"]


# -- topology and the path choice ----------------------------------------------------------------
def _ident(gpu: str | None, host: str = "h", paths: tuple[str, ...] = ("cuda_ipc", "nccl")) -> dict[str, Any]:
    return {"host": host, "gpu": gpu, "pid": 1, "paths": list(paths)}


def test_topology_shared_distinct_mixed() -> None:
    shared = dc.Topology((_ident("A"), _ident("A"), _ident("A")))
    assert shared.shared_gpu and not shared.distinct_gpus and shared.hosts == 1
    assert shared.candidates(("cuda_ipc", "nccl")) == ["cuda_ipc"]
    assert "NCCL needs one GPU per replica (it refuses two ranks on one GPU)" in shared.why_not("nccl")
    distinct = dc.Topology((_ident("A"), _ident("B"), _ident("A", host="h2")))
    assert distinct.distinct_gpus and not distinct.shared_gpu and distinct.hosts == 2
    assert distinct.candidates(("cuda_ipc", "nccl")) == ["nccl"]
    assert distinct.why_not("cuda_ipc").startswith("'cuda_ipc' connects replicas that share one GPU, and these do not")
    assert "replica 2: A on h2" in distinct.why_not("cuda_ipc")
    mixed = dc.Topology((_ident("A"), _ident("A"), _ident("B")))
    assert mixed.candidates(("cuda_ipc", "nccl", "host")) == ["host"]
    no_nccl = dc.Topology((_ident("A"), _ident("B", paths=("cuda_ipc",))))
    assert no_nccl.unable("nccl") == [1] and no_nccl.candidates(("nccl",)) == []
    assert no_nccl.why_not("nccl").startswith("replica(s) [1] cannot use 'nccl'")
    cpu = dc.Topology((_ident(None, paths=()), _ident(None, paths=())))
    assert not cpu.shared_gpu and not cpu.distinct_gpus and cpu.candidates(("cuda_ipc", "nccl")) == []


def test_device_tags_never_meet_the_host_algorithms() -> None:
    tags = {dc.device_tag(seq, phase) for seq in range(5000) for phase in range(8)}
    assert len(tags) == 5000 * 8  # one per (seq, phase)
    host = {s for seq in range(5000) for s in (seq, algorithms._phase2(seq))}
    assert not tags & host and max(tags) < -(1 << 39)


@pytest.mark.parametrize("world", [2, 3, 4])
def test_the_cost_model_chooses_the_device_paths_for_cupy_batches(world: int) -> None:
    # On a shared GPU (the H200's figures, cost_params.py): 2 replicas stage a few KB through the host (measured
    # faster there), more replicas make 2 copies each through the one GPU's link and take CUDA IPC at every size
    for nbytes in (4, 4 << 10, 1 << 20, 16 << 20, 256 << 20):
        want = "host" if world == 2 and nbytes <= 4 << 10 else "cuda_ipc"
        assert cost_model.device_choice(nbytes, world, ["host", "cuda_ipc"]) == want
        assert cost_model.device_choice(nbytes, world, ["cuda_ipc", "host"]) == want
        assert cost_model.device_choice(nbytes, world, ["host"]) == "host"  # nothing else available
    big = 16 << 20
    assert cost_model.device_choice(big, world, ["host", "nccl"], shared_gpu=False) == "nccl"
    with pytest.raises(ValueError, match="no candidate device paths"):
        cost_model.device_choice(big, world, [])
    with pytest.raises(ValueError, match="unknown device path 'carrier-pigeon'"):
        cost_model.device_path_time("carrier-pigeon", big, world)


def test_the_host_staged_prediction_matches_the_h100_measurement() -> None:
    # tests/gpu/gpu_run.md: 16 MB on 2 replicas sharing an H100, CuPy 18.6 ms against NumPy 8.5 ms.
    staged = cost_model.device_path_time("host", 16 << 20, 2) - cost_model.predict(
        cost_model.auto_choice(4 << 20, 2, False), 16 << 20, 2)
    assert 9e-3 < staged < 12e-3  # the ~10 ms the measurement charges the 4 copies


# -- bounded waits ------------------------------------------------------------------------------
def test_run_bounded_returns_raises_and_times_out() -> None:
    never = threading.Event()
    assert dc.run_bounded(lambda: 41 + 1, 1.0, lambda: None, never.set, "x") == 42
    with pytest.raises(ZeroDivisionError):
        dc.run_bounded(lambda: 1 / 0, 1.0, lambda: None, never.set, "x")
    assert not never.is_set()
    released = threading.Event()
    t0 = time.monotonic()
    with pytest.raises(CollectiveTimeoutError, match=r"all_reduce #3 of step 1 timed out after 0.2 s on the device"):
        dc.run_bounded(lambda: released.wait(30), 0.2, lambda: None, released.set, "all_reduce #3 of step 1")
    assert released.is_set() and time.monotonic() - t0 < 2  # given up on: the call was released


def test_run_bounded_stops_at_an_abort() -> None:
    released = threading.Event()
    reason: list[str] = []
    threading.Timer(0.1, lambda: reason.append("replica 1 raised ValueError: boom")).start()
    t0 = time.monotonic()
    with pytest.raises(CollectiveAbortedError, match="was aborted: replica 1 raised ValueError: boom"):
        dc.run_bounded(lambda: released.wait(30), 30.0, lambda: reason[0] if reason else None, released.set, "x")
    assert released.is_set() and time.monotonic() - t0 < 2


def test_run_bounded_without_a_way_to_release_the_call_leaves_it() -> None:
    stuck = threading.Event()
    t0 = time.monotonic()
    with pytest.raises(CollectiveTimeoutError):
        dc.run_bounded(lambda: stuck.wait(3), 0.1, lambda: None, None, "creating")
    assert time.monotonic() - t0 < 1  # no wait for a call nothing can release
    stuck.set()


def test_wait_until_polls_with_a_deadline() -> None:
    calls = iter([False, False, True])
    dc.wait_until(lambda: next(calls), 1.0, lambda: None, lambda: pytest.fail("given up"), "x")
    gave_up: list[bool] = []
    with pytest.raises(CollectiveTimeoutError):
        dc.wait_until(lambda: False, 0.05, lambda: None, lambda: gave_up.append(True), "x")
    assert gave_up == [True]
    with pytest.raises(CollectiveAbortedError, match="aborted: gone"):
        dc.wait_until(lambda: False, 30, lambda: "gone", lambda: gave_up.append(True), "x")
    assert gave_up == [True, True]


# -- layouts --------------------------------------------------------------------------------------
def test_ipc_layout_and_capacity() -> None:
    offsets, total = ipc_mod.layout([1, 300, 0, 256])
    assert offsets == [0, 256, 768, 768] and total == 1024
    assert all(o % ipc_mod.ALIGN == 0 for o in offsets)
    assert ipc_mod.capacity_for(10) == 2 << 20 and ipc_mod.capacity_for((2 << 20) + 1) == 4 << 20
    assert ipc_mod.capacity_for(3 << 20) == 4 << 20 and ipc_mod.capacity_for(4 << 20) == 4 << 20
    assert all(ipc_mod.capacity_for(n) % (2 << 20) == 0 for n in (0, 1, 5 << 20, 123_456_789))  # CUDA's advice


@pytest.mark.parametrize("n", [2, 3, 4])
def test_nccl_regions_cover_every_element_once(n: int) -> None:
    sizes, itemsizes = [1, 7, 0, 40_001, 3], [4, 8, 2, 4, 1]
    regions = nccl_mod.regions(sizes, itemsizes, n)
    assert len(regions) == n
    for i, (size, itemsize) in enumerate(zip(sizes, itemsizes, strict=True)):
        b = nccl_mod.bounds(size, n)
        assert b == algorithms._bounds(size, n)  # the host path's reduce-scatter chunks
        covered = []
        for j, (pieces, length) in enumerate(regions):
            p = pieces[i]
            assert (p.array, p.lo, p.hi) == (i, b[j], b[j + 1]) and p.nbytes == (p.hi - p.lo) * itemsize
            assert p.offset % nccl_mod.ALIGN == 0 and p.offset + p.nbytes <= length
            covered += range(p.lo, p.hi)
        assert covered == list(range(size))
    for pieces, length in regions:  # pieces of one region never overlap
        spans = sorted((p.offset, p.offset + p.nbytes) for p in pieces if p.nbytes)
        assert all(a[1] <= b[0] for a, b in itertools.pairwise(spans))
        assert length % nccl_mod.ALIGN == 0


def test_importing_the_backends_imports_no_cupy() -> None:
    import subprocess

    # loading every backend, and asking whether 'gpu' is available (a strategy's check), import no CuPy
    code = ("import sys, interdist.collectives\n"
            "from interdist.collectives.registry import backend_names, backend_for, load_backend\n"
            "[load_backend(n) for n in backend_names()]\n"
            "load_backend('gpu').is_available(); backend_for(['GPU:0', 'GPU:1'])\n"
            "print('cupy' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "False"
