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

The ``Lease``, and how an embedded cluster starts and shuts down, are in ``embedded.py`` (re-exported here).
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
import time
import warnings
from typing import Any

from interdist.client import gpus, logs, reclaim, zygote
from interdist.client.connect import connect
from interdist.client.embedded import Lease as Lease  # (this module's API too)
from interdist.client.embedded import _all_embedded, _lease_from, _shutdown, _start_local_cpu, _start_local_gpu
from interdist.client.embedded import _forget_scheduler as _forget_scheduler
from interdist.client.embedded import embedded_security as embedded_security
from interdist.client.replies import user_stacklevel
from interdist.client.worker_process import WorkerProcess
from interdist.collectives import segments
from interdist.config import settings
from interdist.device import DeviceSpec

_pool_lock = threading.Lock()
_idle: dict[tuple[Any, ...], list[tuple[float, Lease]]] = {}
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
        if lease.embedded and not _current(lease):
            return False
        workers = lease.client.scheduler_info(n_workers=-1)["workers"]
        return all(a in workers for a in lease.addresses) and lease.client.status == "running"
    except Exception:  # noqa: BLE001 - any failure to ask means the pooled cluster is unusable
        return False


#: How long a pooled embedded cluster's lending waits for a worker being started again (``_current``).
RESTART_WAIT_S = 20.0


def _current(lease: Lease) -> bool:
    """An embedded lease's workers as they are now: each worker's address is that of its running process, the one
    a worker started again after its process died has (``WorkerProcess``), waited for up to ``RESTART_WAIT_S``.
    False when one is given up, or not back in time. The scheduler lists a dead worker for a moment after it
    died: a strategy lent its address waited 30 s to connect to it, then failed (a replica killed in one test,
    the next test's strategy made at once)."""
    procs = getattr(lease.cluster, "workers", None)
    if not isinstance(procs, dict) or not all(isinstance(w, WorkerProcess) for w in procs.values()):
        return True  # not workers of ours (a GPU cluster's nannies): the scheduler's list is all there is
    deadline = time.monotonic() + RESTART_WAIT_S
    while True:
        now: list[str] = []
        for name in lease.names:
            worker = procs.get(name)
            if worker is None or worker.failure is not None:
                return False  # closed, or given up after failing to start
            process = worker.process
            # (``poll`` learns of a forked worker's end from its zygote, a moment later: a zombie is dead already)
            if process is None or process.poll() is not None or not zygote.alive(process.pid):
                continue  # dead, or not started yet
            if worker.address_pid == process.pid:
                now.append(worker.address)
        if len(now) == len(lease.names):
            lease.addresses = now
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)


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
