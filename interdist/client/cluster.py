"""Where replicas run: an embedded local cluster, or any existing Dask cluster.

Embedded clusters bind to 127.0.0.1, one single-threaded worker process per
device. They are pooled: a closed strategy hands its cluster back and the next
strategy with as many devices reuses it (starting worker processes takes seconds
on 2 cores). Idle clusters are shut down after ``config.cluster_idle_timeout``
seconds, and every embedded cluster at interpreter exit.

GPU devices get one worker per GPU, each seeing its GPU first in
``CUDA_VISIBLE_DEVICES`` (so as CUDA device 0): through ``dask_cuda.LocalCUDACluster``
when dask-cuda imports, else through :func:`local_gpu_cluster`
(``INTERDIST_GPU_CLUSTER=auto|dask-cuda|builtin`` chooses). Every GPU worker is
checked (CuPy imports, CUDA sees a device) before a strategy uses it; a machine
without a usable GPU gets ``NoGPUError`` saying why. See docs/gpu.md.
"""

from __future__ import annotations

import atexit
import importlib.util
import logging
import os
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from interdist._gpu import probe_worker
from interdist.config import settings
from interdist.device import DeviceSpec
from interdist.errors import NoGPUError


@dataclass
class Lease:
    """Workers lent to one strategy, and how to give them back."""

    client: Any
    addresses: list[str]
    names: list[Any]
    cluster: Any = None
    embedded: bool = False
    key: tuple[Any, ...] | None = None
    released: bool = field(default=False)
    registry_file: Any = None  # listed for the JupyterLab sidebar while it runs (interdist.lab.registry)

    @property
    def dashboard_link(self) -> str | None:
        try:
            return str(self.client.dashboard_link)
        except Exception:  # noqa: BLE001 - no dashboard (bokeh missing)
            return None


_pool_lock = threading.Lock()
_idle: dict[tuple[Any, ...], list[tuple[float, Lease]]] = {}
_all_embedded: list[Lease] = []
_reaper: threading.Thread | None = None


# glibc's allocator for the replica processes: arrays of up to 64 MiB come from the heap and freed
# memory stays there for the next array, instead of a fresh mmap (and its page faults) per array.
# Dask's default (MALLOC_TRIM_THRESHOLD_=64 KiB) hands freed memory back at once; a replica that
# allocates the same few large arrays every step then faults them in again every step.
_MALLOC_ENV = {"MALLOC_MMAP_THRESHOLD_": str(64 << 20), "MALLOC_TRIM_THRESHOLD_": str(256 << 20)}


def _malloc_env() -> Any:
    """Config under which embedded clusters start: ``_MALLOC_ENV`` in every worker's environment at spawn
    (glibc reads it when the process starts, so setting it later in the worker would be too late)."""
    import dask

    spawn_env = {**dask.config.get("distributed.nanny.pre-spawn-environ", {}), **_MALLOC_ENV}
    return dask.config.set({"distributed.nanny.pre-spawn-environ": spawn_env})


def _list_for_lab(lease: Lease, cluster: Any, n: int) -> None:
    from interdist.lab.registry import register

    lease.registry_file = register(cluster.scheduler_address, lease.dashboard_link, n)  # never raises


def _start_local_cpu(n: int) -> Lease:
    from distributed import Client, LocalCluster

    from interdist.dashboard.pages import register_pages

    register_pages()  # the scheduler reads its dashboard pages once, as it starts
    with _malloc_env():
        cluster = _local_cluster(n, LocalCluster)
    client = Client(cluster, set_as_default=False)  # type: ignore[no-untyped-call]  # distributed is untyped
    lease = _lease_from(client, cluster, n, embedded=True, key=("CPU", n))
    _list_for_lab(lease, cluster, n)
    return lease


def _local_cluster(n: int, LocalCluster: Any) -> Any:  # noqa: N803 - the class, imported lazily
    return LocalCluster(
        n_workers=n,
        threads_per_worker=1,
        processes=True,
        host="127.0.0.1",
        dashboard_address="127.0.0.1:0",
        silence_logs=logging.ERROR,
        memory_limit=0,
        # Workers run interdist programs from their own thread pool; Dask's task
        # threads stay free for data work (Dask arrays read by replicas).
        env={"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"},
    )


def _start_local_gpu(indices: list[int]) -> Lease:
    """One worker per GPU device asked for (``GPU:k`` is the k-th GPU this process sees)."""
    n = len(indices)
    asked = ", ".join(f"GPU:{i}" for i in indices)
    n_gpus = visible_gpus()
    if n_gpus == 0:
        raise NoGPUError(
            f"{asked} asked for, but this machine shows no NVIDIA GPU (no nvidia-smi, or CUDA_VISIBLE_DEVICES "
            f"hides every GPU: {os.environ.get('CUDA_VISIBLE_DEVICES')!r}). Use CPU devices (e.g. "
            "MirroredStrategy(['CPU:0', 'CPU:1'])), or pass cluster= with GPU workers."
        )
    missing = [i for i in indices if i >= n_gpus]
    if missing:
        raise NoGPUError(
            f"{asked} asked for, but this machine shows {n_gpus} GPU(s) (GPU:0..GPU:{n_gpus - 1}). To run several "
            "replicas on one GPU, pass a cluster whose workers share it: "
            f"cluster=interdist.client.cluster.local_gpu_cluster(gpus={[0] * n})"
        )
    if importlib.util.find_spec("cupy") is None:
        raise NoGPUError(
            "GPU replicas need CuPy: pip install 'interdist[gpu]' (or the cupy-cuda12x / cupy-cuda13x "
            "wheel that matches the NVIDIA driver)"
        )
    physical = _physical_gpu_ids(n_gpus)
    cluster = None
    try:
        with _malloc_env():
            cluster = _start_dask_cuda([physical[i] for i in indices]) if _use_dask_cuda() else None
            if cluster is None:
                cluster = local_gpu_cluster([physical[i] for i in indices])
    except NoGPUError:
        raise
    except Exception as e:
        raise NoGPUError(
            f"could not start a GPU worker for each of {asked}: no usable GPU here ({type(e).__name__}: {e})"
        ) from e
    from distributed import Client

    client = Client(cluster, set_as_default=False)  # type: ignore[no-untyped-call]  # distributed is untyped
    try:
        lease = _lease_from(client, cluster, n, embedded=True, key=("GPU", tuple(indices)))
        check_gpu_workers(client, lease.addresses)
    except BaseException:
        try:
            client.close(timeout=5)  # type: ignore[no-untyped-call]  # distributed is untyped
        finally:
            cluster.close(timeout=10)
        for stale in [x for x in _all_embedded if x.cluster is cluster]:
            _all_embedded.remove(stale)
        raise
    _list_for_lab(lease, cluster, n)
    return lease


def _physical_gpu_ids(n_gpus: int) -> list[str]:
    """The ids to put in a worker's ``CUDA_VISIBLE_DEVICES`` for this process's GPU:0, GPU:1, ..."""
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env is not None and env.strip():
        return [d.strip() for d in env.split(",") if d.strip() and d.strip() != "-1"]
    return [str(i) for i in range(n_gpus)]


def _use_dask_cuda() -> bool:
    """``INTERDIST_GPU_CLUSTER``: ``auto`` (dask-cuda when it imports), ``dask-cuda``, or ``builtin``."""
    choice = os.environ.get("INTERDIST_GPU_CLUSTER", "auto").strip().lower()
    if choice == "builtin":
        return False
    if choice not in ("auto", "dask-cuda", "dask_cuda"):
        raise ValueError(f"INTERDIST_GPU_CLUSTER must be auto, dask-cuda or builtin, but is {choice!r}")
    try:
        import dask_cuda  # noqa: F401 - optional, GPU only
    except Exception as e:
        if choice != "auto":
            raise NoGPUError(
                f"INTERDIST_GPU_CLUSTER={choice} but dask-cuda cannot be imported: {type(e).__name__}: {e}"
            ) from e
        logging.getLogger("interdist").info("dask-cuda not usable (%s); starting GPU workers without it", e)
        return False
    return True


def _start_dask_cuda(gpu_ids: list[str]) -> Any:
    from dask_cuda import LocalCUDACluster

    from interdist.dashboard.pages import register_pages

    register_pages()
    return LocalCUDACluster(
        CUDA_VISIBLE_DEVICES=gpu_ids,
        n_workers=len(gpu_ids),
        threads_per_worker=1,
        host="127.0.0.1",
        dashboard_address="127.0.0.1:0",
        silence_logs=logging.ERROR,
        memory_limit=0,
    )


_WORKER_ENV = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def _rotated(gpu_ids: list[str], i: int) -> str:
    """``CUDA_VISIBLE_DEVICES`` for worker ``i``: its GPU first, then the others (dask-cuda's rule)."""
    mine = gpu_ids[i]
    others = [g for g in dict.fromkeys(gpu_ids) if g != mine]
    return ",".join([mine, *others])


def local_gpu_cluster(gpus: list[int | str], scheduler_host: str = "127.0.0.1", asynchronous: bool = False) -> Any:
    """A local Dask cluster with one single-threaded worker process per entry of ``gpus``.

    Worker ``i`` sees GPU ``gpus[i]`` as its CUDA device 0 (``CUDA_VISIBLE_DEVICES``
    lists it first), which is where its replica keeps its CuPy arrays. Entries may
    repeat: ``local_gpu_cluster([0, 0])`` gives two workers that share GPU 0, the
    supported way to run a multi-replica GPU strategy on a machine with one GPU
    (replicas then compete for that GPU; collectives go through host memory)::

        cluster = local_gpu_cluster([0, 0])
        strategy = interdist.MirroredStrategy(["GPU:0", "GPU:1"], cluster=cluster)

    Needs neither dask-cuda nor a GPU in the calling process. The caller closes it
    (``cluster.close()``, or use it as a context manager).
    """
    from distributed import Nanny, Scheduler, SpecCluster

    from interdist.dashboard.pages import register_pages

    ids = [str(g) for g in gpus]
    if not ids:
        raise ValueError("local_gpu_cluster needs at least one GPU id")
    register_pages()
    workers = {
        i: {
            "cls": Nanny,
            "options": {
                "nthreads": 1,
                "name": i,
                "host": scheduler_host,
                "memory_limit": 0,
                "silence_logs": logging.ERROR,
                "env": {**_WORKER_ENV, "CUDA_VISIBLE_DEVICES": _rotated(ids, i), "INTERDIST_GPU": ids[i]},
            },
        }
        for i in range(len(ids))
    }
    scheduler = {"cls": Scheduler, "options": {"host": scheduler_host, "dashboard_address": f"{scheduler_host}:0"}}
    return SpecCluster(  # type: ignore[no-untyped-call]  # distributed is untyped
        workers=workers,
        scheduler=scheduler,
        asynchronous=asynchronous,
        silence_logs=logging.ERROR,
        name="interdist-gpu",
    )


def check_gpu_workers(client: Any, addresses: list[str]) -> list[dict[str, Any]]:
    """Check that each worker can use a GPU through CuPy; ``NoGPUError`` naming the ones that cannot."""

    try:
        found = client.run(probe_worker, workers=list(addresses))
    except Exception as e:
        raise NoGPUError(f"could not check the GPU of the workers {addresses}: {type(e).__name__}: {e}") from e
    bad = {a: r.get("error") for a, r in found.items() if not r.get("ok")}
    if bad:
        lines = "; ".join(f"{a}: {err}" for a, err in bad.items())
        raise NoGPUError(
            f"GPU devices asked for, but {len(bad)} of {len(addresses)} worker(s) cannot use a GPU: {lines}"
        )
    return [found[a] for a in addresses]


def _lease_from(client: Any, cluster: Any, n: int, embedded: bool, key: Any = None) -> Lease:
    if embedded:
        client.wait_for_workers(n, timeout=120)
    workers = client.scheduler_info(n_workers=-1)["workers"]
    ordered = sorted(workers.items(), key=lambda kv: _name_key(kv[1].get("name"), kv[0]))
    if len(ordered) < n:
        raise ValueError(f"the Dask cluster has {len(ordered)} worker(s), but {n} replica device(s) were asked for")
    chosen = ordered[:n]
    lease = Lease(client, [a for a, _ in chosen], [w.get("name") for _, w in chosen], cluster, embedded, key)
    if embedded:
        _all_embedded.append(lease)
    return lease


def _name_key(name: Any, addr: str) -> tuple[int, Any, str]:
    if isinstance(name, int) or (isinstance(name, str) and name.isdigit()):
        return (0, int(name), addr)
    return (1, str(name), addr)


def acquire(devices: list[DeviceSpec], cluster: Any = None) -> Lease:
    """Workers for ``devices``: from ``cluster`` (address, Client, cluster object) or an embedded pool."""
    n = len(devices)
    gpu = devices[0].device_type == "GPU"
    if cluster is None:
        kind = devices[0].device_type
        key: tuple[Any, ...] = ("GPU", tuple(d.index for d in devices)) if gpu else (kind, n)
        with _pool_lock:
            idle = _idle.get(key) or []
            while idle:
                _, lease = idle.pop()
                if _healthy(lease, n):
                    lease.released = False
                    return lease
                _shutdown(lease)
        lease = _start_local_gpu([d.index for d in devices]) if gpu else _start_local_cpu(n)
        _ensure_reaper()
        return lease
    from distributed import Client

    if isinstance(cluster, Client):
        lease = _lease_from(cluster, None, n, embedded=False)
    elif isinstance(cluster, str):
        client = Client(cluster, set_as_default=False, timeout="10s")  # type: ignore[no-untyped-call]  # distributed is untyped
        lease = _lease_from(client, None, n, embedded=False, key=("own-client", n))
    elif hasattr(cluster, "scheduler_address"):
        client = Client(cluster, set_as_default=False)  # type: ignore[no-untyped-call]  # distributed is untyped
        lease = _lease_from(client, None, n, embedded=False, key=("own-client", n))
    else:
        raise TypeError(
            "cluster must be None, a scheduler address, a distributed.Client or a Dask cluster object, "
            f"but got {type(cluster).__name__}"
        )
    if gpu:
        try:
            check_gpu_workers(lease.client, lease.addresses)
        except BaseException:
            release(lease)
            raise
    return lease


def _healthy(lease: Lease, n: int) -> bool:
    try:
        workers = lease.client.scheduler_info(n_workers=-1)["workers"]
        return all(a in workers for a in lease.addresses) and lease.client.status == "running"
    except Exception:  # noqa: BLE001 - any failure to ask means the pooled cluster is unusable
        return False


def release(lease: Lease) -> None:
    """Give the workers back: pool an embedded cluster, close a client we opened."""
    if lease.released:
        return
    lease.released = True
    if lease.embedded and lease.key is not None:
        with _pool_lock:
            _idle.setdefault(lease.key, []).append((time.monotonic(), lease))
    elif lease.key is not None and lease.key[0] == "own-client":
        lease.client.close()


def _shutdown(lease: Lease) -> None:
    if lease.registry_file is not None:
        from interdist.lab.registry import unregister

        unregister(lease.registry_file)
        lease.registry_file = None
    try:
        lease.client.close(timeout=5)
    except Exception:  # noqa: BLE001, S110 - shutting down must not fail because the client is already gone
        pass
    if lease.cluster is not None:
        try:
            lease.cluster.close(timeout=10)
        except Exception:  # noqa: BLE001, S110 - shutting down must not fail because the cluster is already gone
            pass
    if lease in _all_embedded:
        _all_embedded.remove(lease)


def shutdown_idle(max_idle: float = 0.0) -> int:
    """Shut down pooled clusters idle for more than ``max_idle`` seconds; how many were."""
    now = time.monotonic()
    victims: list[Lease] = []
    with _pool_lock:
        for key, entries in list(_idle.items()):
            keep = [(t, lease) for t, lease in entries if now - t <= max_idle]
            victims += [lease for t, lease in entries if now - t > max_idle]
            _idle[key] = keep
    for lease in victims:
        _shutdown(lease)
    return len(victims)


def _ensure_reaper() -> None:
    global _reaper
    if _reaper is not None and _reaper.is_alive():
        return

    def loop() -> None:
        while True:
            time.sleep(max(1.0, settings.cluster_idle_timeout / 4))
            shutdown_idle(settings.cluster_idle_timeout)

    _reaper = threading.Thread(target=loop, name="interdist-cluster-reaper", daemon=True)
    _reaper.start()


@atexit.register
def shutdown_all() -> None:
    """Close every embedded cluster (at exit: nothing keeps running after the interpreter)."""
    with _pool_lock:
        _idle.clear()
    for lease in _all_embedded:
        _shutdown(lease)


def visible_gpus() -> int:
    """How many GPUs this machine shows (0 without NVIDIA's driver); never raises."""
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env is not None:
        return len([d for d in env.split(",") if d.strip() and d.strip() != "-1"])
    import shutil
    import subprocess

    if shutil.which("nvidia-smi") is None:
        return 0
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=10)
        return sum(1 for line in out.stdout.splitlines() if line.startswith("GPU "))
    except Exception:  # noqa: BLE001 - never raises (documented): no usable nvidia-smi means no GPU
        return 0
