"""Where replicas run: an embedded local cluster, or any existing Dask cluster.

Embedded clusters bind to 127.0.0.1 and speak TLS with credentials made for them
alone (``Security.temporary()``: kept in this process's memory, the certificate and
key in memfds (``credentials.py``), and handed to each
worker over its private socket pair, never on a command line or in a file), so
another account's ``distributed.Client`` on the same host is refused, and their
dashboard answers only requests that show the cluster's token (``dashboard_auth.py``;
``Lease.dashboard_link`` carries it); one
single-threaded worker process per
device (``worker_process.py``: its own session, no ``multiprocessing``, gone with
the notebook). They are pooled: a closed strategy hands its cluster back and the next
strategy with as many devices reuses it (starting worker processes takes seconds
on 2 cores). Idle clusters are shut down after ``config.cluster_idle_timeout``
seconds, and every embedded cluster at interpreter exit.

GPU devices get one worker per GPU, started and checked by ``gpus.py``; the pool
leases them as it does CPU workers. See docs/gpu.md.

The lines this process logs from the cluster's threads (its scheduler's, its client's, the worker
supervisor's) go to the cluster's log file, with the workers' own output, not under an old cell of
the notebook (``logs.py``).
"""

from __future__ import annotations

import atexit
import functools
import logging
import os
import sys
import threading
import time
import warnings
from dataclasses import dataclass, field
from typing import Any

from interdist.client import gpus, logs, reclaim, zygote
from interdist.client.connect import connect
from interdist.client.replies import user_stacklevel
from interdist.client.worker_process import WorkerProcess
from interdist.collectives import segments
from interdist.config import settings
from interdist.device import DeviceSpec
from interdist.lab import dashboard_auth
from interdist.worker import credentials


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
    dashboard_token: str | None = None  # an embedded cluster's dashboard needs it (dashboard_auth.py)

    @property
    def dashboard_link(self) -> str | None:
        """Dask's link to the dashboard, with the token of an embedded cluster's (``?token=``)."""
        try:
            link = str(self.client.dashboard_link)
        except Exception:  # noqa: BLE001 - no dashboard (bokeh missing)
            return None
        return dashboard_auth.link_with_token(link, self.dashboard_token)


_pool_lock = threading.Lock()
_idle: dict[tuple[Any, ...], list[tuple[float, Lease]]] = {}
_all_embedded: list[Lease] = []
_reaper: threading.Thread | None = None

#: Past this many open strategies (leases not given back), a new one warns once with the count (TF's 179 API
#: examples run in a row without ``close()`` left 41 worker processes behind before strategies were reclaimed).
OPEN_WARN_AT = 8
#: At most this many worker processes stay idle in the pool: starting a cluster of another size shuts the
#: oldest idle ones down first, so a notebook that makes strategies of many sizes keeps few processes
#: (8 holds the 1-, 3- and 4-replica clusters of a lesson together; the test suite raises it for its many sizes).
IDLE_WORKERS_MAX = max(8, os.cpu_count() or 1)
_open: dict[int, Lease] = {}  # id -> every lease acquired and not released
_warned = False


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


def _start_local_cpu(n: int, security: Any = None, key: tuple[Any, ...] | None = None) -> Lease:
    from distributed import LocalCluster

    from interdist.dashboard.pages import register_pages

    register_pages()  # the scheduler reads its dashboard pages once, as it starts
    token = dashboard_auth.new_token()
    with _malloc_env():
        cluster = _local_cluster(n, _embedded_class(LocalCluster), security, dashboard_token=token)
    client = connect(cluster, set_as_default=False)
    lease = _lease_from(client, cluster, n, embedded=True, key=key or ("CPU", n))
    lease.dashboard_token = token
    _list_for_lab(lease, cluster, n)
    return lease


def embedded_security() -> Any:
    """The ``Security`` of a new embedded cluster: fresh temporary TLS credentials, or None for plain TCP
    (``interdist.cluster.embedded-tls: false``). Their certificate and key are memfds of this process
    (``credentials.py``: never a file); the cluster's close closes them."""
    if not settings.embedded_tls:
        return None
    from distributed.security import Security

    return credentials.in_memory(Security.temporary())  # type: ignore[no-untyped-call]  # distributed is untyped


@functools.cache
def _embedded_class(LocalCluster: Any) -> Any:  # noqa: N803 - the class, imported lazily
    """``LocalCluster`` without Dask's lost-worker timeout: its ``WorkerProcess`` workers restart themselves.

    When a worker leaves the scheduler, ``SpecCluster`` waits ``distributed.deploy.lost-worker-timeout``
    (15 s), then closes that worker for good if none of its name is registered at that moment. A
    worker killed twice within 15 s (or restarted slower than that under load) was there, closed as it
    came back: the replica was lost for good, and every later call waited 30 s for a replacement that
    never came. A ``WorkerProcess`` watches its own process and starts it again, as a nanny does, so
    the cluster leaves that to it.
    """
    from distributed.deploy.cluster import Cluster

    class EmbeddedCluster(LocalCluster):  # type: ignore[misc]  # distributed is untyped
        def _update_worker_status(self, op: str, msg: Any) -> None:
            # the scheduler's view only: no closing on a timer
            Cluster._update_worker_status(self, op, msg)  # type: ignore[no-untyped-call]  # distributed is untyped

        async def _start(self) -> None:
            dashboard_auth.use_token_scheduler(self)  # its dashboard needs the token (scheduler_kwargs)
            await super()._start()

    return EmbeddedCluster


def _local_cluster(n: int, LocalCluster: Any, security: Any = None, dashboard_token: str | None = None) -> Any:  # noqa: N803 - the class, imported lazily
    """An embedded CPU cluster: its credentials in memory (``credentials.in_memory``: given ones too, as a
    copy), its dashboard behind ``dashboard_token`` when ``LocalCluster`` honours it (``_embedded_class``)."""
    security = credentials.in_memory(security) if security is not None else embedded_security()
    try:
        return _new_local_cluster(n, LocalCluster, security, dashboard_token)
    except BaseException:
        credentials.close(security)
        raise


#: Every embedded CPU worker's own environment variables. Workers run interdist programs from their own
#: thread pool; Dask's task threads stay free for data work (Dask arrays read by replicas).
_WORKER_ENV = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def _new_local_cluster(n: int, LocalCluster: Any, security: Any, dashboard_token: str | None) -> Any:  # noqa: N803 - the class, imported lazily
    # Workers forked from a zygote that imported what a worker needs once (client/zygote.py), not n fresh
    # ``python``s importing it side by side; started now, it imports while the scheduler starts.
    fork = settings.fork_workers
    if fork:
        WorkerProcess("", env=_WORKER_ENV, preforked=True).prewarm()
    return LocalCluster(
        n_workers=n,
        threads_per_worker=1,
        processes=True,
        # Not Dask's Nanny: workers that never run __main__ again (scripts need no guard), out of the
        # kernel's process group (Kernel > Interrupt does not kill them), gone with the notebook.
        worker_class=WorkerProcess,
        host="127.0.0.1",
        security=security,
        dashboard_address="127.0.0.1:0",
        scheduler_kwargs={"dashboard_token": dashboard_token} if dashboard_token else None,
        silence_logs=logging.ERROR,
        memory_limit=0,
        env=_WORKER_ENV,
        preforked=fork,  # a worker option (WorkerProcess); restarts of a killed worker are forked too
    )


def _start_local_gpu(indices: list[int]) -> Lease:
    """One worker per GPU device asked for (``GPU:k`` is the k-th GPU this process sees)."""
    n = len(indices)
    token = dashboard_auth.new_token()
    with _malloc_env():
        cluster = gpus.start_cluster(indices, dashboard_token=token)

    client = connect(cluster, set_as_default=False)
    try:
        lease = _lease_from(client, cluster, n, embedded=True, key=("GPU", tuple(indices)))
        lease.dashboard_token = token
        gpus.check_gpu_workers(client, lease.addresses)
    except BaseException:
        try:
            client.close(timeout=5)
        finally:
            cluster.close(timeout=10)
        for stale in [x for x in _all_embedded if x.cluster is cluster]:
            _all_embedded.remove(stale)
        raise
    _list_for_lab(lease, cluster, n)
    return lease


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


def acquire(devices: list[DeviceSpec], cluster: Any = None, security: Any = None) -> Lease:
    """Workers for ``devices``: from ``cluster`` (address, Client, cluster object) or an embedded pool.

    ``security`` (a ``distributed.security.Security``): the credentials to reach a scheduler given by
    address or cluster object; with no cluster, the embedded cluster speaks TLS with them (instead of
    credentials made for it alone), pooled only for strategies given the same credentials."""
    logs.install()  # Dask's and interdist's background lines to the cluster's log file, not under old cells
    n = len(devices)
    gpu = devices[0].device_type == "GPU"
    if cluster is None:
        kind = devices[0].device_type
        key: tuple[Any, ...] = ("GPU", tuple(d.index for d in devices)) if gpu else (kind, n)
        if security is not None:
            if gpu:
                raise NotImplementedError(
                    "security= with GPU devices and no cluster: start a dask_cuda.LocalCUDACluster with "
                    "security= yourself and pass it as cluster= (with security=)"
                )
            key = (
                kind,
                n,
                "security",
                getattr(security, "tls_ca_file", None),
                getattr(security, "tls_client_cert", None),
            )
        reclaim.ensure_thread()
        pooled = _from_pool(key, n)
        if pooled is None:  # no idle cluster: strategies dropped without close() give theirs back first
            reclaim.drain()
            pooled = _from_pool(key, n)
        if pooled is not None:
            return _opened(pooled)
        _make_room(n)
        lease = _start_local_gpu([d.index for d in devices]) if gpu else _start_local_cpu(n, security, key)
        _ensure_reaper()
        return _opened(lease)
    from distributed import Client

    if isinstance(cluster, Client):
        if security is not None:
            raise ValueError(
                "a distributed.Client carries its own security: pass security= with a scheduler address or a "
                "cluster object, or make the Client with Client(address, security=...)"
            )
        lease = _lease_from(cluster, None, n, embedded=False)
    elif isinstance(cluster, str):
        client = connect(cluster, set_as_default=False, timeout="10s", security=security)
        lease = _lease_from(client, None, n, embedded=False, key=("own-client", n))
    elif hasattr(cluster, "scheduler_address"):
        extra = {"security": security} if security is not None else {}
        client = connect(cluster, set_as_default=False, **extra)
        lease = _lease_from(client, None, n, embedded=False, key=("own-client", n))
    else:
        raise TypeError(
            "cluster must be None, a scheduler address, a distributed.Client or a Dask cluster object, "
            f"but got {type(cluster).__name__}"
        )
    if gpu:
        try:
            gpus.check_gpu_workers(lease.client, lease.addresses)
        except BaseException:
            release(lease)
            raise
    return _opened(lease)


def _from_pool(key: tuple[Any, ...], n: int) -> Lease | None:
    """An idle pooled cluster for ``key`` that still has its workers, or None."""
    with _pool_lock:
        idle = _idle.get(key) or []
        while idle:
            _, lease = idle.pop()
            if _healthy(lease, n):
                lease.released = False
                return lease
            _shutdown(lease)
    return None


def _make_room(n: int) -> None:
    """Shut down the oldest idle pooled clusters until at most ``IDLE_WORKERS_MAX`` worker processes stay
    besides the ``n`` about to start."""
    victims: list[Lease] = []
    with _pool_lock:
        entries = sorted((t, id(lease), key, lease) for key, es in _idle.items() for t, lease in es)
        idle_workers = sum(len(lease.addresses) for *_, lease in entries)
        for _t, _, key, lease in entries:
            if idle_workers + n <= IDLE_WORKERS_MAX:
                break
            _idle[key] = [(u, other) for u, other in _idle[key] if other is not lease]
            victims.append(lease)
            idle_workers -= len(lease.addresses)
    for lease in victims:
        _shutdown(lease)


_pages_sent: set[str] = set()  # the schedulers this process sent the pages to (or tried: once each)


def add_dashboard_pages(client: Any) -> None:
    """The interdist pages on the dashboard of the scheduler ``client`` talks to, however and whenever that
    cluster was made (``dashboard/pages.py``'s ``PagesPlugin``; an embedded cluster has them from its start).
    Best effort, once per scheduler: one without interdist or Bokeh goes without them."""
    address = str(getattr(getattr(client, "scheduler", None), "address", "") or "")
    if not address or address in _pages_sent:
        return
    _pages_sent.add(address)
    try:
        from interdist.dashboard.pages import PagesPlugin

        client.register_plugin(PagesPlugin())
    except Exception as exc:  # noqa: BLE001 - the dashboard is an extra: the strategy goes on without its pages
        logging.getLogger("interdist").info(
            "interdist: the Dask dashboard at %s goes without the interdist pages (%s: %s)",
            address,
            type(exc).__name__,
            exc,
        )


def open_leases() -> list[Lease]:
    """The leases acquired and not given back: one per open strategy that ``acquire`` served."""
    return list(_open.values())


def _opened(lease: Lease) -> Lease:
    """Count ``lease`` as open; warn once when more than ``OPEN_WARN_AT`` are (dropped ones reclaimed first)."""
    global _warned
    _open[id(lease)] = lease
    if len(_open) > OPEN_WARN_AT and not _warned:
        reclaim.drain()  # strategies no longer referenced give their workers back before they are counted
        if len(_open) > OPEN_WARN_AT:
            _warned = True
            leases = list(_open.values())
            workers = sum(len(x.addresses) for x in leases)
            warnings.warn(
                f"{len(leases)} interdist strategies are open, holding {workers} workers"
                f" ({sum(len(x.addresses) for x in leases if x.embedded)} of them worker processes of this"
                " process): close() the strategies you no longer need, or make them with `with strategy:`"
                " (a strategy nothing refers to any more gives its workers back when it is garbage-collected)",
                UserWarning,
                stacklevel=user_stacklevel(),
            )
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
    _closed(lease)
    if lease.embedded and lease.key is not None:
        with _pool_lock:
            _idle.setdefault(lease.key, []).append((time.monotonic(), lease))
    elif lease.key is not None and lease.key[0] == "own-client":
        lease.client.close()


def _closed(lease: Lease) -> None:
    global _warned
    _open.pop(id(lease), None)
    if len(_open) <= OPEN_WARN_AT:
        _warned = False  # warn again if it climbs back past the bound


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
        credentials.close(getattr(lease.cluster, "security", None))  # its memfds (credentials.py)
        _forget_scheduler(getattr(lease.cluster, "scheduler", None))
    if lease in _all_embedded:
        _all_embedded.remove(lease)


def _forget_scheduler(scheduler: Any) -> None:
    """Drop what Dask's module-level caches keep of a closed embedded scheduler (it runs in this process).

    Two unbounded caches hold every scheduler ever started here, and with it its HTTP server, its Bokeh
    applications and their routes (about 0.4 MiB per cluster, benchmarks/bench_memory.py):
    ``distributed.dashboard.scheduler.template_variables`` (a ``toolz.memoize`` keyed by the scheduler)
    and ``distributed.core._expects_comm`` (a ``functools.cache`` keyed by its bound handler methods).
    The first loses the scheduler's entry; the second, which has no per-key removal, is emptied (it
    only caches ``inspect.signature`` answers, found again on a live server's next call). What is left per
    cluster is a few KiB at most (benchmarks/bench_memory.py: +0.01 to +0.02 MiB per cycle)."""
    if scheduler is None:
        return
    # Only modules already imported can hold it (the dashboard's needs bokeh): nothing is imported here.
    dashboard = sys.modules.get("distributed.dashboard.scheduler")
    memoized = getattr(dashboard, "template_variables", None)
    code = getattr(memoized, "__code__", None)
    cells = dict(zip(getattr(code, "co_freevars", ()), getattr(memoized, "__closure__", None) or (), strict=False))
    cache = cells["cache"].cell_contents if "cache" in cells else None  # toolz.memoize's dict, in its closure
    if isinstance(cache, dict):
        cache.pop(scheduler, None)
    expects_comm: Any = getattr(sys.modules.get("distributed.core"), "_expects_comm", None)
    if hasattr(expects_comm, "cache_clear"):
        expects_comm.cache_clear()
    # Its scratch directory was on sys.path while it ran (Dask takes it off at close): its import finder stays
    # cached, one per cluster, unless dropped.
    folder = getattr(scheduler, "local_directory", None)
    if isinstance(folder, str) and folder not in sys.path:
        sys.path_importer_cache.pop(folder, None)


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
    reclaim.drain(timeout=10.0, collect=False)  # the closes collected strategies queued: before their clusters go
    with _pool_lock:
        _idle.clear()
    for lease in _all_embedded[:]:  # a copy: _shutdown removes each from the list (every other one was skipped)
        _shutdown(lease)
    zygote.close_all()  # the processes workers are forked from (they would end with this process)
    segments.sweep_stale()  # what ended workers left in /dev/shm (only segments whose creator pid is dead go)
