"""Worker processes forked from a zygote (``client/zygote.py``): what ``interdist.Server`` and embedded CPU
clusters start their workers with.

A forked worker must be what a fresh one is: in its own session, restarted when it is killed (its exit
code reported by the zygote), with its own random stream, its log lines labelled with its name, in this
process's working directory, and gone with the process that made it however that process ends. Where no
zygote can serve, or ``interdist.cluster.fork-workers`` is false, workers start fresh. The zygote is told
from its workers by its process name.
"""

from __future__ import annotations

import gc
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import interdist as idist
from interdist.client import worker_process, zygote
from interdist.client.connect import connect

psutil = pytest.importorskip("psutil")
ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_until(condition: Any, timeout: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


@pytest.fixture(autouse=True)
def _forking(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Workers forked (the default) even where the suite runs with ``interdist.cluster.fork-workers: false``;
    its scripts too, through the environment."""
    import dask

    monkeypatch.setenv("DASK_INTERDIST__CLUSTER__FORK_WORKERS", "true")
    with dask.config.set({"interdist.cluster.fork-workers": True}):
        yield


@pytest.fixture
def servers() -> Iterator[list[idist.Server]]:
    cluster = {"worker": [f"127.0.0.1:{free_port()}" for _ in range(2)]}
    made = [idist.Server(cluster, "worker", i, config={"timeout": 60}) for i in range(2)]
    yield made
    for s in reversed(made):
        s.stop()


def _worker(server: idist.Server) -> worker_process.WorkerProcess:
    node = server._nodes[-1]
    assert isinstance(node, worker_process.WorkerProcess)
    return node


def test_server_workers_are_forked_in_sessions_of_their_own(servers: list[idist.Server]) -> None:
    workers = [_worker(s) for s in servers]
    assert all(isinstance(w.process, zygote.Forked) for w in workers)
    assert all(os.getsid(w.pid) == w.pid != os.getsid(0) for w in workers if w.pid)  # type: ignore[arg-type]
    client = connect(servers[0].target, set_as_default=False)
    try:
        got = client.run(lambda: (os.getpid(), __import__("numpy").random.random()))
    finally:
        client.close()
    assert sorted(pid for pid, _ in got.values()) == sorted(w.pid for w in workers)  # type: ignore[type-var]
    assert len({r for _, r in got.values()}) == 2  # not the zygote's random stream in both


def test_a_killed_forked_worker_is_started_again(servers: list[idist.Server]) -> None:
    w = _worker(servers[1])
    first = w.process
    assert isinstance(first, zygote.Forked) and first.pid
    os.kill(first.pid, signal.SIGKILL)
    assert wait_until(lambda: first.poll() is not None)
    assert first.returncode == -signal.SIGKILL  # reported by the zygote, as Popen would say it
    assert wait_until(lambda: w.restarts == 1 and w.process is not first and w.process.poll() is None)
    s = idist.MultiWorkerMirroredStrategy(cluster=servers[0].target)
    try:
        assert s.num_replicas_in_sync == 2 and sorted(s._lease.names) == ["worker-0", "worker-1"]
    finally:
        s.close()


def test_workers_start_fresh_where_no_zygote_serves(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(zygote, "MAX_ZYGOTES", 0)
    monkeypatch.setattr(zygote, "_zygotes", {})
    with idist.Server({"worker": [f"127.0.0.1:{free_port()}"]}, "worker", 0, config={"timeout": 60}) as server:
        assert isinstance(_worker(server).process, subprocess.Popen)


HOLDER = textwrap.dedent("""
    import socket
    import interdist as idist

    def free_port():
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            return s.getsockname()[1]

    cluster = {"worker": [f"127.0.0.1:{free_port()}" for _ in range(2)], "ps": [f"127.0.0.1:{free_port()}"]}
    servers = [idist.Server(cluster, "worker", i) for i in range(2)] + [idist.Server(cluster, "ps", 0)]
    zygotes = [z.process.pid for z in idist.client.zygote._zygotes.values()]
    print("pids", *[s._nodes[-1].pid for s in servers], *zygotes, flush=True)
    import time
    time.sleep(120)
""")


@pytest.mark.timeout(120)
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_forked_workers_end_with_a_killed_parent(sig: signal.Signals, tmp_path: Path) -> None:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    parent = subprocess.Popen([sys.executable, "-c", HOLDER], stdout=subprocess.PIPE, text=True, cwd=tmp_path, env=env)
    try:
        assert parent.stdout is not None
        line = parent.stdout.readline()
        pids = [int(p) for p in line.split()[1:]]
        assert line.startswith("pids") and len(pids) == 4, line  # 3 workers and their zygote
        parent.send_signal(sig)
        parent.wait(10)
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
    assert wait_until(lambda: not any(_alive(p) for p in pids), 20), f"{pids} outlived their parent ({sig.name})"


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _embedded(n: int, tag: str) -> Any:
    """A lease of a new embedded CPU cluster of ``n`` workers (never one from the pool)."""
    from interdist.client import cluster

    return cluster._start_local_cpu(n, key=("CPU", n, tag))


def test_embedded_workers_are_forked_named_and_told_from_their_zygote(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from interdist.client import cluster

    monkeypatch.chdir(tmp_path)
    lease = _embedded(2, "forked")
    try:
        workers = list(lease.cluster.workers.values())
        assert all(isinstance(w.process, zygote.Forked) for w in workers)
        zygotes = {z.process.pid for z in zygote._zygotes.values()}
        for w in workers:
            p = psutil.Process(w.pid)
            assert p.name() == "idist-worker" and p.ppid() in zygotes and w.pid not in zygotes
            assert os.getsid(w.pid) == w.pid  # a session of its own, as a fresh worker's
        assert all(psutil.Process(z).name() == "idist-zygote" for z in zygotes)
        got = lease.client.run(os.getcwd)
        assert set(got.values()) == {str(tmp_path)}  # this process's directory now, not the zygote's
        _assert_startup_frozen(lease)
        _assert_event_loops(lease, quiet=True)
    finally:
        cluster._shutdown(lease)


def test_fork_workers_false_starts_each_worker_fresh() -> None:
    import dask

    from interdist.client import cluster

    with dask.config.set({"interdist.cluster.fork-workers": False}):
        lease = _embedded(1, "fresh")
    try:
        (w,) = lease.cluster.workers.values()
        assert isinstance(w.process, subprocess.Popen) and psutil.Process(w.pid).ppid() == os.getpid()
        assert psutil.Process(w.pid).name() == "idist-worker"
        _assert_startup_frozen(lease)
        _assert_event_loops(lease, quiet=True)
    finally:
        cluster._shutdown(lease)


def test_quiet_event_loops_false_keeps_dasks_profiler_and_tick() -> None:
    import dask

    from interdist.client import cluster

    with dask.config.set({"interdist.cluster.quiet-event-loops": False}):
        lease = _embedded(1, "dask-loops")
    try:
        _assert_event_loops(lease, quiet=False)
    finally:
        cluster._shutdown(lease)


def _assert_event_loops(lease: Any, quiet: bool) -> None:
    """``interdist.cluster.quiet-event-loops`` (``worker_process.QUIET_EVENT_LOOPS``): the workers without Dask's
    statistical profiler, their event loop and the embedded scheduler's ticked every second; else Dask's own
    settings (as this process reads them)."""
    import dask
    from dask.utils import parse_timedelta

    def loops(dask_worker: Any = None, dask_scheduler: Any = None) -> dict[str, float]:
        server = dask_worker if dask_worker is not None else dask_scheduler
        return {name: pc.callback_time for name, pc in server.periodic_callbacks.items()}

    workers = lease.client.run(loops)
    scheduler = lease.client.run_on_scheduler(loops)
    dasks_tick = 1000 * parse_timedelta(dask.config.get("distributed.admin.tick.interval"))
    dasks_profile = 1000 * parse_timedelta(dask.config.get("distributed.worker.profile.interval"))
    assert dasks_tick < 1000 and dask.config.get("distributed.worker.profile.enabled")  # (else nothing is shown)
    for got in workers.values():
        assert got["tick"] == (1000 if quiet else dasks_tick), got
        assert got.get("profile") == (None if quiet else dasks_profile), got
        assert "heartbeat" in got  # the rest as Dask has it
    assert scheduler["tick"] == (1000 if quiet else dasks_tick), scheduler


def _assert_startup_frozen(lease: Any) -> None:
    """A worker, forked or fresh, has left what its imports and start made out of the collector's scans
    (``worker.process.freeze_startup_objects``): a full collection there no longer pauses its replica's peers."""
    frozen = lease.client.run(gc.get_freeze_count)
    assert frozen and all(n > 10_000 for n in frozen.values()), frozen  # Dask's, NumPy's, interdist's: ~69,000


def test_a_zygote_without_live_workers_makes_room_for_another(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(zygote, "MAX_ZYGOTES", 1)
    monkeypatch.setattr(zygote, "HANDED_OUT_GRACE", 0.0)
    monkeypatch.setattr(zygote, "_zygotes", {})
    flags, boot = worker_process._interpreter_flags(), worker_process._BOOT
    env = dict(os.environ)
    try:
        first = zygote.for_env({**env, "IDIST_TEST_ZYGOTE": "1"}, flags, boot, None)
        assert first is not None
        first._children[1] = zygote.Forked(1)  # a live worker of its own: it stays
        assert zygote.for_env({**env, "IDIST_TEST_ZYGOTE": "2"}, flags, boot, None) is None
        first._children.clear()  # none: the least recently used makes room
        second = zygote.for_env({**env, "IDIST_TEST_ZYGOTE": "2"}, flags, boot, None)
        assert second is not None and second is not first
        assert not first.usable and wait_until(lambda: first.process.poll() is not None, 10)
        assert list(zygote._zygotes.values()) == [second]
    finally:
        zygote.close_all()
