"""An embedded cluster's dashboard needs its token; its credentials never touch a file (issue 25, item 5).

A review found another account on the host reading a live variable's values from the dashboard (its port
from ``/proc/net/tcp``), and the TLS key written to ``/tmp/tmp*/dask.pem`` at every cluster start. Now
every page, websocket and route but Dask's ``/health`` answers 403 without the token the dashboard link
carries (``lab/dashboard_auth.py``), the certificate and key live in memfds (``worker/credentials.py``),
and a worker's command line holds nothing but the number of its socket's descriptor.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import interdist as idist
from interdist.client import cluster as pool
from interdist.lab.dashboard_auth import cookie_name, link_with_token, token_of
from interdist.dashboard.docked import page_url

PAGES = ["/status", "/individual-interdist-value-heatmap", "/info/main/workers.html", "/metrics",
         "/individual-plots.json", "/statics/css/base.css"]
WS_PATH = "/individual-interdist-value-heatmap/ws"


@pytest.fixture(scope="module")
def strategy(mirrored2: idist.MirroredStrategy) -> Iterator[idist.MirroredStrategy]:
    with mirrored2.scope():
        v = idist.Variable(np.arange(6, dtype=np.float32))  # a live variable for the heatmap
    yield mirrored2
    del v


def origin_of(link: str) -> str:
    return link.split("/status", 1)[0]


def get(url: str, headers: dict[str, str] | None = None) -> tuple[int, Any]:
    """Status and headers of a GET (redirects not followed: a 30x is not a page)."""

    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args: Any) -> None:
            return None

    try:
        with urllib.request.build_opener(NoRedirect).open(urllib.request.Request(url, headers=headers or {}),
                                                          timeout=20) as r:
            r.read()
            return int(r.status), r.headers
    except urllib.error.HTTPError as e:
        return e.code, e.headers


def ws_upgrade(port: int, path: str, headers: dict[str, str] | None = None) -> int:
    """The status of a websocket upgrade request (101: switched; Bokeh itself then checks its session)."""
    key = base64.b64encode(os.urandom(16)).decode()
    lines = [f"GET {path} HTTP/1.1", f"Host: 127.0.0.1:{port}", "Upgrade: websocket", "Connection: Upgrade",
             f"Sec-WebSocket-Key: {key}", "Sec-WebSocket-Version: 13", "Sec-WebSocket-Protocol: bokeh",
             f"Origin: http://127.0.0.1:{port}", *(f"{k}: {v}" for k, v in (headers or {}).items())]
    with socket.create_connection(("127.0.0.1", port), timeout=20) as s:
        s.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
        answer = b""
        while b"\r\n" not in answer:
            chunk = s.recv(4096)
            if not chunk:
                break
            answer += chunk
    return int(answer.split(b" ", 2)[1])


def test_the_link_carries_a_fresh_token(strategy: idist.MirroredStrategy) -> None:
    link = strategy.dashboard_link
    assert link is not None and link.startswith("http://127.0.0.1:")
    token = token_of(link)
    assert token is not None and len(token) >= 40  # secrets.token_urlsafe(32)
    assert strategy._lease.dashboard_token == token
    assert link_with_token(link, "other") == link.replace(token, "other")  # one token, replaced


@pytest.mark.parametrize("path", PAGES)
def test_every_page_is_refused_without_the_token(strategy: idist.MirroredStrategy, path: str) -> None:
    link = strategy.dashboard_link
    assert link is not None
    root = origin_of(link)
    assert get(root + path)[0] == 403
    assert get(root + path + "?token=wrong")[0] == 403
    assert get(root + path, {"Authorization": "token wrong"})[0] == 403
    port = int(root.rsplit(":", 1)[1])
    assert get(root + path, {"Cookie": f"{cookie_name(port)}=wrong"})[0] == 403
    assert get(root + path, {"Cookie": f"{cookie_name(port + 1)}={token_of(link)}"})[0] == 403  # another port's


@pytest.mark.parametrize("path", PAGES)
def test_every_page_answers_with_the_token(strategy: idist.MirroredStrategy, path: str) -> None:
    link = strategy.dashboard_link
    assert link is not None
    root, token = origin_of(link), token_of(link)
    port = int(root.rsplit(":", 1)[1])
    status, headers = get(f"{root}{path}?token={token}")
    assert status == 200
    # the query sets the cookie the page's own requests (scripts, websocket) show
    (cookie,) = headers.get_all("Set-Cookie")
    assert cookie.startswith(f"{cookie_name(port)}={token};")
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and "Path=/" in cookie
    assert get(root + path, {"Cookie": cookie.split(";", 1)[0]})[0] == 200
    assert get(root + path, {"Authorization": f"token {token}"})[0] == 200


def test_the_links_of_the_pages_open(strategy: idist.MirroredStrategy) -> None:
    """What the notebook shows (the strategy's card, the docked dashboard's link) opens as it is."""
    link = strategy.dashboard_link
    assert get(link)[0] == 200  # type: ignore[arg-type]
    for view in ("value-heatmap", "overview", "status"):
        url = page_url(link, view)
        assert url is not None and "token=" in url and get(url)[0] == 200
    assert page_url(link, "timeline") in strategy._repr_html_()  # the strategy's card lists its pages


def test_the_bokeh_websocket_needs_the_token(strategy: idist.MirroredStrategy) -> None:
    link = strategy.dashboard_link
    assert link is not None
    root, token = origin_of(link), token_of(link)
    port = int(root.rsplit(":", 1)[1])
    assert ws_upgrade(port, WS_PATH) == 403
    assert ws_upgrade(port, WS_PATH, {"Cookie": f"{cookie_name(port)}=wrong"}) == 403
    assert ws_upgrade(port, WS_PATH, {"Cookie": f"{cookie_name(port)}={token}"}) == 101
    assert ws_upgrade(port, f"{WS_PATH}?token={token}") == 101


def test_health_stays_open(strategy: idist.MirroredStrategy) -> None:
    link = strategy.dashboard_link
    assert link is not None
    status, _ = get(origin_of(link) + "/health")
    assert status == 200


def test_worker_command_lines_hold_nothing_a_stranger_can_use(strategy: idist.MirroredStrategy) -> None:
    lease = strategy._lease
    address = lease.cluster.scheduler_address
    secrets = [address, address.split("://", 1)[1], lease.dashboard_token, *lease.addresses,
               *(a.split("://", 1)[1] for a in lease.addresses)]
    for w in lease.cluster.workers.values():
        cmdline = Path(f"/proc/{w.pid}/cmdline").read_bytes().decode(errors="replace")
        assert not any(s in cmdline for s in secrets), cmdline
        assert "PRIVATE KEY" not in cmdline
        argv = cmdline.rstrip("\0").split("\0")
        assert argv[-3] == "-c" and argv[-1].isdigit(), argv  # the boot code, then its socket's descriptor only


def test_the_registry_file_is_private(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from interdist.lab import registry

    d = tmp_path / "reg"
    d.mkdir(mode=0o755)
    d.chmod(0o755)
    (d / f".{os.getpid()}-x.json.tmp").touch(mode=0o644)  # a stale name never reused: a fresh one is 0600 anyway
    path = registry.register("tls://127.0.0.1:1", "http://127.0.0.1:2/status?token=t0k", 1, directory=d)
    assert path is not None
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(d.stat().st_mode) == 0o700
    assert json.loads(path.read_text())["dashboard_link"].endswith("?token=t0k")


# -- a second account, as the review's probe ------------------------------------------------------------

_PROBE = r"""
import json, os, sys, urllib.request, urllib.error
port, pids = int(sys.argv[1]), [int(p) for p in sys.argv[2].split(",")]
out = {"uid": os.getuid(), "listed": False, "pages": {}, "cmdlines": {}}
for name in ("/proc/net/tcp", "/proc/net/tcp6"):
    try:
        for line in open(name).read().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            if state == "0A" and int(local.rsplit(":", 1)[1], 16) == port:
                out["listed"] = True
    except OSError:
        pass
for path in sys.argv[3].split(","):
    try:
        with urllib.request.urlopen("http://127.0.0.1:%d%s" % (port, path), timeout=20) as r:
            out["pages"][path] = r.status
    except urllib.error.HTTPError as e:
        out["pages"][path] = e.code
    except Exception as e:
        out["pages"][path] = repr(e)
for pid in pids:
    try:
        out["cmdlines"][pid] = open("/proc/%d/cmdline" % pid, "rb").read().decode(errors="replace")
    except OSError as e:
        out["cmdlines"][pid] = repr(e)
    try:
        open("/proc/%d/environ" % pid, "rb").read()
        out.setdefault("environ_read", []).append(pid)
    except OSError:
        pass
print(json.dumps(out))
"""


def _as_another_user(args: list[str]) -> subprocess.CompletedProcess[str]:
    if os.getuid() != 0:
        pytest.skip(f"switching to a second uid needs root (this test runs as uid {os.getuid()})")
    python = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else shutil.which("python3")
    if python is None:
        pytest.skip("no system python3 the second uid can run")
    try:
        return subprocess.run([python, "-I", "-c", _PROBE, *args], user=65534, group=65534, extra_groups=[],
                              capture_output=True, text=True, timeout=120, cwd="/")
    except (OSError, subprocess.SubprocessError) as e:
        pytest.skip(f"could not run a process as uid 65534 (nobody): {e}")


def test_a_second_uid_finds_the_port_but_gets_403_and_nothing_from_command_lines(
        strategy: idist.MirroredStrategy) -> None:
    lease = strategy._lease
    link = lease.dashboard_link
    assert link is not None
    port = int(origin_of(link).rsplit(":", 1)[1])
    pids = [w.pid for w in lease.cluster.workers.values()]
    done = _as_another_user([str(port), ",".join(map(str, pids)), ",".join(PAGES)])
    if done.returncode != 0 and "Permission denied" in done.stderr:
        pytest.skip(f"uid 65534 cannot run {done.args[0]}: {done.stderr.strip()[-200:]}")
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert seen["uid"] == 65534
    assert seen["listed"]  # the port is there to find, as the review's probe found it
    assert seen["pages"] == {p: 403 for p in PAGES}, seen["pages"]
    address = lease.cluster.scheduler_address.split("://", 1)[1]
    assert set(seen["cmdlines"]) == {str(p) for p in pids}
    for cmdline in seen["cmdlines"].values():
        assert "Errno" not in cmdline, cmdline  # it could read them: world-readable, as the review said
        assert address not in cmdline and lease.dashboard_token not in cmdline and "PRIVATE KEY" not in cmdline
        assert not any(a.split("://", 1)[1] in cmdline for a in lease.addresses)
    assert not seen.get("environ_read")  # environments stay the owner's


# -- no credential on disk ----------------------------------------------------------------------------


_NOT_SCANNED = frozenset({".venv", "node_modules", "site-packages", ".git", "__pycache__"})


@pytest.fixture
def watch_tmp(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, list[str]]]:
    """Records this process's tempfile calls (and what their directories held), and scans the temporary
    directory for new files holding a private key while the test runs and once it is done."""
    found: dict[str, list[str]] = {"calls": [], "keys": []}
    tmp = Path(tempfile.gettempdir())
    started = time.time()
    original_dir = tempfile.TemporaryDirectory

    class Recording(original_dir):  # type: ignore[misc, valid-type]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            found["calls"].append(f"TemporaryDirectory from {sys._getframe(1).f_code.co_filename}")

        def cleanup(self) -> None:
            scan(Path(self.name), since=0.0)
            super().cleanup()

    def recorder(name: str, fn: Any) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            found["calls"].append(f"{name} from {sys._getframe(1).f_code.co_filename}")
            return fn(*args, **kwargs)
        return call

    def scan(root: Path, since: float) -> None:
        for dirpath, dirs, files in os.walk(root, onerror=lambda e: None):
            # installed trees (a checkout's virtualenv under /tmp: 100,000s of files) hold no key Dask
            # wrote: walking them made each scan take seconds and the teardown 38 s on a loaded machine
            dirs[:] = [d for d in dirs if d not in _NOT_SCANNED]
            for f in files:
                p = Path(dirpath) / f
                try:
                    st = p.lstat()
                    if not stat.S_ISREG(st.st_mode) or st.st_mtime < since or st.st_size > 1 << 20:
                        continue
                    if b"PRIVATE KEY" in p.read_bytes():
                        found["keys"].append(str(p))
                except OSError:
                    continue

    monkeypatch.setattr(tempfile, "TemporaryDirectory", Recording)
    for name in ("mkdtemp", "mkstemp", "NamedTemporaryFile", "TemporaryFile", "SpooledTemporaryFile"):
        monkeypatch.setattr(tempfile, name, recorder(name, getattr(tempfile, name)))
    stop = threading.Event()

    def poll() -> None:  # files that stay for a while, the workers' included
        while not stop.wait(0.05):
            scan(tmp, started - 1)

    poller = threading.Thread(target=poll, daemon=True)
    poller.start()
    try:
        yield found
    finally:
        stop.set()
        poller.join(30)
        scan(tmp, started - 1)


def test_no_private_key_is_written_to_a_file(watch_tmp: dict[str, list[str]]) -> None:
    pool.shutdown_idle(0)  # a cluster of its own: its start builds every SSL context anew
    with idist.MirroredStrategy(["CPU:0"]) as s:
        assert s._lease.cluster.security.tls_scheduler_key.startswith("/proc/self/fd/")
        with s.scope():
            v = idist.Variable(np.ones(3, dtype=np.float32))
        s.run(lambda: v.assign_add(np.ones(3, dtype=np.float32)))
        # each worker holds its own memfds: Dask writes temporary files only for PEM contents
        held = s._lease.client.run(lambda dask_worker: [dask_worker.security.tls_worker_key,
                                                        dask_worker.security.tls_worker_cert])
        assert held and all(p.startswith("/proc/self/fd/") for paths in held.values() for p in paths), held
        security = s._lease.cluster.security
    pool.shutdown_idle(0)  # closed for good, not pooled
    with pytest.raises(OSError):
        os.stat(security.tls_scheduler_key)  # its memfds closed with it (this process's fd N is gone or another file)
    assert watch_tmp["keys"] == []
    assert not [c for c in watch_tmp["calls"] if "distributed" in c and "security" in c], watch_tmp["calls"]


# -- the GPU path's clusters (no GPU needed to start them) ----------------------------------------------


def _dashboard_port(cluster: Any) -> int:
    return int(cluster.scheduler.http_server.port)


def test_the_gpu_clusters_dashboard_needs_the_token_too() -> None:
    """``local_gpu_cluster`` (the builtin GPU path) and ``token_cluster_class`` (dask-cuda's
    ``LocalCUDACluster``, a ``LocalCluster``) close their dashboards as the CPU clusters do."""
    import dask
    from distributed import LocalCluster

    from interdist.lab.dashboard_auth import new_token, token_cluster_class
    from interdist.client.gpus import local_gpu_cluster

    token = new_token()
    with dask.config.set({"distributed.diagnostics.nvml": False}), \
            local_gpu_cluster(["0"], dashboard_token=token) as gpu_cluster:
        root = f"http://127.0.0.1:{_dashboard_port(gpu_cluster)}"
        assert get(root + "/status")[0] == 403 and get(f"{root}/status?token={token}")[0] == 200
    with token_cluster_class(LocalCluster)(n_workers=0, processes=False, dashboard_address="127.0.0.1:0",
                                           scheduler_kwargs={"dashboard_token": token}) as cuda_like:
        root = f"http://127.0.0.1:{_dashboard_port(cuda_like)}"
        assert get(root + "/metrics")[0] == 403
        assert get(root + "/metrics", {"Authorization": f"token {token}"})[0] == 200
    with local_gpu_cluster(["0"]) as theirs:  # called by the user, without a token: theirs, left open
        assert get(f"http://127.0.0.1:{_dashboard_port(theirs)}/status")[0] == 200
