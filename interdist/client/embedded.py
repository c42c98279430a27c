"""A strategy's ``Lease`` of workers, and the embedded clusters: how one starts and how it shuts down.

``cluster.py`` pools what this module starts (``acquire``, ``release``, the idle reaper) and re-exports
its names. An embedded CPU cluster is a ``LocalCluster`` of ``WorkerProcess`` workers (``worker_process.py``)
speaking TLS with credentials made for it alone (``credentials.py``), its dashboard behind a token
(``dashboard_auth.py``); a GPU one has a worker per GPU (``gpus.py``).
"""

from __future__ import annotations

import functools
import logging
import sys
from dataclasses import dataclass, field
from typing import Any

from interdist.client import gpus
from interdist.client.connect import connect
from interdist.client.worker_process import QUIET_EVENT_LOOPS, WorkerProcess
from interdist.config import settings
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


_all_embedded: list[Lease] = []  # every embedded cluster's lease, pooled or lent (closed at exit)


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


def _quiet_scheduler() -> Any:
    """Config under which an embedded cluster's scheduler starts: its event loop ticked every second, not every
    20 ms (``interdist.cluster.quiet-event-loops``, as its workers: ``worker_process.QUIET_EVENT_LOOPS``). It runs
    in the notebook's process, whose cores the replicas share."""
    import dask

    tick = "distributed.admin.tick.interval"
    return dask.config.set({tick: QUIET_EVENT_LOOPS[tick]} if settings.quiet_event_loops else {})


def _list_for_lab(lease: Lease, cluster: Any, n: int) -> None:
    from interdist.lab.registry import register

    lease.registry_file = register(cluster.scheduler_address, lease.dashboard_link, n)  # never raises


def _start_local_cpu(n: int, security: Any = None, key: tuple[Any, ...] | None = None) -> Lease:
    from distributed import LocalCluster

    from interdist.dashboard.pages import register_pages

    register_pages()  # the scheduler reads its dashboard pages once, as it starts
    token = dashboard_auth.new_token()
    with _malloc_env(), _quiet_scheduler():
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
    with _malloc_env(), _quiet_scheduler():
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
