"""Where replicas run: an embedded local cluster, or any existing Dask cluster.

Embedded clusters bind to 127.0.0.1, one single-threaded worker process per
device. They are pooled: a closed strategy hands its cluster back and the next
strategy with as many devices reuses it (starting worker processes takes seconds
on 2 cores). Idle clusters are shut down after ``config.cluster_idle_timeout``
seconds, and every embedded cluster at interpreter exit.
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from ..config import settings
from ..device import DeviceSpec
from ..errors import NoGPUError


@dataclass
class Lease:
    """Workers lent to one strategy, and how to give them back."""

    client: Any
    addresses: list[str]
    names: list[Any]
    cluster: Any = None
    embedded: bool = False
    key: tuple[str, int] | None = None
    released: bool = field(default=False)

    @property
    def dashboard_link(self) -> str | None:
        try:
            return str(self.client.dashboard_link)
        except Exception:  # noqa: BLE001 - no dashboard (bokeh missing)
            return None


_pool_lock = threading.Lock()
_idle: dict[tuple[str, int], list[tuple[float, Lease]]] = {}
_all_embedded: list[Lease] = []
_reaper: threading.Thread | None = None


def _start_local_cpu(n: int) -> Lease:
    from distributed import Client, LocalCluster

    from ..dashboard.pages import register_pages

    register_pages()  # the scheduler reads its dashboard pages once, as it starts
    cluster = LocalCluster(
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
    client = Client(cluster, set_as_default=False)
    return _lease_from(client, cluster, n, embedded=True, key=("CPU", n))


def _start_local_gpu(n: int) -> Lease:
    try:
        from dask_cuda import LocalCUDACluster  # noqa: PLC0415 - optional, GPU only
    except ImportError as e:
        raise NoGPUError("GPU devices need the 'gpu' extra: pip install 'interdist[gpu]' "
                         f"(dask-cuda and cupy could not be imported: {e})") from e
    from distributed import Client

    try:
        cluster = LocalCUDACluster(n_workers=n, threads_per_worker=1, host="127.0.0.1",
                                   dashboard_address="127.0.0.1:0", silence_logs=logging.ERROR)
    except Exception as e:  # noqa: BLE001 - NVML/driver errors come in many types
        raise NoGPUError(f"could not start a GPU worker for each of {n} GPU device(s): no usable GPU here "
                         f"({type(e).__name__}: {e})") from e
    client = Client(cluster, set_as_default=False)
    return _lease_from(client, cluster, n, embedded=True, key=("GPU", n))


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
    if cluster is None:
        kind = devices[0].device_type
        key = (kind, n)
        with _pool_lock:
            idle = _idle.get(key) or []
            while idle:
                _, lease = idle.pop()
                if _healthy(lease, n):
                    lease.released = False
                    return lease
                _shutdown(lease)
        lease = _start_local_gpu(n) if kind == "GPU" else _start_local_cpu(n)
        _ensure_reaper()
        return lease
    from distributed import Client

    if isinstance(cluster, Client):
        return _lease_from(cluster, None, n, embedded=False)
    if isinstance(cluster, str):
        client = Client(cluster, set_as_default=False, timeout="10s")
        return _lease_from(client, None, n, embedded=False, key=("own-client", n))
    if hasattr(cluster, "scheduler_address"):
        client = Client(cluster, set_as_default=False)
        return _lease_from(client, None, n, embedded=False, key=("own-client", n))
    raise TypeError("cluster must be None, a scheduler address, a distributed.Client or a Dask cluster object, "
                    f"but got {type(cluster).__name__}")


def _healthy(lease: Lease, n: int) -> bool:
    try:
        workers = lease.client.scheduler_info(n_workers=-1)["workers"]
        return all(a in workers for a in lease.addresses) and lease.client.status == "running"
    except Exception:  # noqa: BLE001
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
    try:
        lease.client.close(timeout=5)
    except Exception:  # noqa: BLE001
        pass
    if lease.cluster is not None:
        try:
            lease.cluster.close(timeout=10)
        except Exception:  # noqa: BLE001
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
    for lease in list(_all_embedded):
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
    except Exception:  # noqa: BLE001
        return 0
