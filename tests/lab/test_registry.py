"""The cluster registry behind the JupyterLab sidebar: files written, removed, dead or malformed ones skipped."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from interdist.lab import registry
from interdist.lab.handlers import Dashboard, cluster_name, dashboard_origin, interdist_pages, locate_dashboard


def test_register_lists_and_unregister_removes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("JPY_SESSION_NAME", raising=False)
    path = registry.register("tcp://127.0.0.1:8786", "http://127.0.0.1:8787/status", 2, directory=tmp_path)
    assert path is not None and path.parent == tmp_path and path.name.startswith(f"{os.getpid()}-")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    (found,) = registry.live_clusters(tmp_path)
    assert found["pid"] == os.getpid() and found["n_workers"] == 2
    assert found["scheduler_address"] == "tcp://127.0.0.1:8786"
    assert found["dashboard_link"] == "http://127.0.0.1:8787/status"
    assert found["kernel_id"] is None  # this test process is no Jupyter kernel
    assert json.loads(path.read_text()) == found
    assert [p.name for p in tmp_path.iterdir()] == [path.name]  # no temporary file left behind
    registry.unregister(path)
    assert not path.exists() and registry.live_clusters(tmp_path) == []
    registry.unregister(path)  # twice is fine


def test_dead_pids_and_malformed_files_are_skipped(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True, check=True)
    dead = int(done.stdout)
    record = {"id": "a", "pid": dead, "scheduler_address": "tcp://127.0.0.1:1", "dashboard_link": None,
              "n_workers": 1, "created": 1.0}
    (tmp_path / f"{dead}-a.json").write_text(json.dumps(record))
    (tmp_path / "broken.json").write_text("{not json")
    (tmp_path / "wrong.json").write_text(json.dumps({**record, "pid": str(os.getpid())}))
    (tmp_path / "list.json").write_text("[1, 2]")
    (tmp_path / "other.txt").write_text(json.dumps({**record, "pid": os.getpid()}))
    alive = registry.register("tcp://127.0.0.1:2", None, 1, directory=tmp_path)
    assert [c["scheduler_address"] for c in registry.live_clusters(tmp_path)] == ["tcp://127.0.0.1:2"]
    assert alive is not None
    # the dead notebook's file is removed; files that are not well-formed registrations are left alone
    assert not (tmp_path / f"{dead}-a.json").exists()
    assert sorted(p.name for p in tmp_path.iterdir() if p != alive) == ["broken.json", "list.json", "other.txt",
                                                                       "wrong.json"]
    assert registry.live_clusters(tmp_path / "missing") == []


def test_a_reused_pid_does_not_keep_a_dead_notebooks_file(tmp_path: Path) -> None:
    """The pid is alive (this process) but it started after the file was written: another process."""
    record = {"id": "b", "pid": os.getpid(), "scheduler_address": "tcp://127.0.0.1:1", "dashboard_link": None,
              "n_workers": 1, "created": 1.0}  # written in 1970, long before this process started
    (tmp_path / f"{os.getpid()}-b.json").write_text(json.dumps(record))
    assert registry.live_clusters(tmp_path) == []
    assert not (tmp_path / f"{os.getpid()}-b.json").exists()


def test_registering_sweeps_the_files_of_dead_notebooks(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True, check=True)
    dead = int(done.stdout)
    record = {"id": "c", "pid": dead, "scheduler_address": "tcp://127.0.0.1:1", "dashboard_link": None,
              "n_workers": 1, "created": 1.0}
    (tmp_path / f"{dead}-c.json").write_text(json.dumps(record))
    mine = registry.register("tcp://127.0.0.1:3", None, 1, directory=tmp_path)
    assert [p.name for p in tmp_path.iterdir()] == [mine.name]  # type: ignore[union-attr]


def test_unwritable_directory_never_raises(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv(registry.ENV_DIR, str(blocker / "sub"))
    assert registry.register("tcp://127.0.0.1:1", None, 1) is None


def test_registry_dir_defaults(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv(registry.ENV_DIR, raising=False)
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(tmp_path / "rt"))
    assert registry.registry_dir() == tmp_path / "rt" / "interdist"
    monkeypatch.setitem(sys.modules, "jupyter_core.paths", None)  # as if jupyter_core were not installed
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert registry.registry_dir() == tmp_path / "cache" / "interdist" / "runtime"
    monkeypatch.setenv(registry.ENV_DIR, str(tmp_path / "mine"))
    assert registry.registry_dir() == tmp_path / "mine"


def test_embedded_cluster_registers_and_unregisters(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from interdist.client import cluster

    monkeypatch.setenv(registry.ENV_DIR, str(tmp_path))
    lease = cluster._start_local_cpu(1)
    try:
        assert lease.registry_file is not None and lease.registry_file.parent == tmp_path
        (found,) = registry.live_clusters(tmp_path)
        assert found["scheduler_address"] == lease.cluster.scheduler_address
        assert found["dashboard_link"] == lease.dashboard_link and found["n_workers"] == 1
    finally:
        cluster._shutdown(lease)
    assert list(tmp_path.glob("*.json")) == [] and lease.registry_file is None


def test_pages_from_individual_plots() -> None:
    assert dashboard_origin("http://127.0.0.1:8787/status") == "http://127.0.0.1:8787"
    assert dashboard_origin("file:///etc/passwd") is None and dashboard_origin(None) is None
    plots = {"Individual Task Stream": "/individual-task-stream",
             "Individual Interdist Timeline": "/individual-interdist-timeline",
             "Individual Interdist Placement": "/individual-interdist-placement",
             "Odd": "http://elsewhere/individual-interdist-x", "Bad": 3}
    assert interdist_pages(plots, "http://h:1") == [
        {"name": "Interdist Placement", "url": "http://h:1/individual-interdist-placement"},
        {"name": "Interdist Timeline", "url": "http://h:1/individual-interdist-timeline"}]
    proxied = interdist_pages(plots, "/user/a/proxy/8787/")
    assert proxied[0]["url"] == "/user/a/proxy/8787/individual-interdist-placement"
    assert interdist_pages([1], "http://h:1") == []


@pytest.mark.parametrize(("link", "base_url", "expected"), [
    # this host: through Jupyter's proxy, read from loopback
    ("http://127.0.0.1:8787/status", "/", Dashboard("http://127.0.0.1:8787", "/proxy/8787", "/proxy/8787/status",
                                                    proxy_port=8787)),
    ("http://localhost:41/status", "/user/ann/", Dashboard("http://127.0.0.1:41", "/user/ann/proxy/41",
                                                             "/user/ann/proxy/41/status", proxy_port=41)),
    ("http://[::1]:5/status", "/", Dashboard("http://127.0.0.1:5", "/proxy/5", "/proxy/5/status", proxy_port=5)),
    # another host: as given
    ("http://10.1.2.3:8787/status", "/", Dashboard("http://10.1.2.3:8787", "http://10.1.2.3:8787",
                                                     "http://10.1.2.3:8787/status")),
    # relative links through a proxy (distributed.dashboard.link on JupyterHub)
    ("/proxy/8787/status", "/", Dashboard("http://127.0.0.1:8787", "/proxy/8787", "/proxy/8787/status",
                                          proxy_port=8787)),
    ("proxy/8787/status", "/base/", Dashboard("http://127.0.0.1:8787", "/base/proxy/8787", "/base/proxy/8787/status",
                                              proxy_port=8787)),
    ("/user/ann/proxy/8787/status", "/user/ann/", Dashboard("http://127.0.0.1:8787", "/user/ann/proxy/8787",
                                                              "/user/ann/proxy/8787/status", proxy_port=8787)),
    ("/proxy/8787", "/", Dashboard("http://127.0.0.1:8787", "/proxy/8787", "/proxy/8787/", proxy_port=8787)),
    # an embedded cluster's link carries its dashboard's token: through the proxy by cookie (clean URLs),
    # elsewhere in the URLs
    ("http://127.0.0.1:8787/status?token=t0k", "/", Dashboard("http://127.0.0.1:8787", "/proxy/8787",
                                                              "/proxy/8787/status", "t0k", 8787)),
    ("http://10.1.2.3:8787/status?token=t0k", "/", Dashboard("http://10.1.2.3:8787", "http://10.1.2.3:8787",
                                                             "http://10.1.2.3:8787/status?token=t0k", "t0k")),
    ("/dask/status?token=t0k", "/", Dashboard("http://jupyter:8888/dask", "/dask", "/dask/status?token=t0k", "t0k")),
    # another path on this server: read through the server's own origin
    ("/dask/status", "/", Dashboard("http://jupyter:8888/dask", "/dask", "/dask/status")),
    # not dashboards
    (None, "/", None), ("", "/", None), ("file:///etc/passwd", "/", None), ("//evil/x", "/", None),
    ("javascript:alert(1)", "/", None), ("http://127.0.0.1:notaport/status", "/", None),
])
def test_dashboard_pages_go_through_jupyters_proxy(link: str | None, base_url: str, expected: Dashboard | None) -> None:
    assert locate_dashboard(link, base_url, proxy=True, request_origin="http://jupyter:8888") == expected


def test_without_the_proxy_local_dashboards_keep_their_urls() -> None:
    assert locate_dashboard("http://127.0.0.1:8787/status", "/", proxy=False) == Dashboard(
        "http://127.0.0.1:8787", "http://127.0.0.1:8787", "http://127.0.0.1:8787/status")
    assert locate_dashboard("/dask/status", "/", proxy=True, request_origin="") is None


def test_clusters_are_named_by_notebook_then_kernel_then_process() -> None:
    record = {"pid": 42, "kernel_id": "0123456789abcdef"}
    assert cluster_name(record, "lessons/02_mirrored.ipynb") == "02_mirrored.ipynb"
    assert cluster_name(record, None) == "kernel 01234567"
    assert cluster_name({"pid": 42, "kernel_id": None}, None) == "process 42"


def test_a_kernel_records_its_id_and_notebook(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    class FakeApp:
        connection_file = "/run/user/1/jupyter/runtime/kernel-5f1c2d3e-aaaa-bbbb-cccc-0123456789ab.json"

        @classmethod
        def initialized(cls) -> bool:
            return True

        @classmethod
        def instance(cls) -> FakeApp:
            return cls()

    fake = type(sys)("ipykernel.kernelapp")
    fake.IPKernelApp = FakeApp  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "ipykernel.kernelapp", fake)
    monkeypatch.setenv("JPY_SESSION_NAME", "/home/ann/lessons/02_mirrored.ipynb")
    path = registry.register("tcp://127.0.0.1:9", None, 1, directory=tmp_path)
    assert path is not None
    (found,) = registry.live_clusters(tmp_path)
    assert found["kernel_id"] == "5f1c2d3e-aaaa-bbbb-cccc-0123456789ab"
    assert found["notebook"] == "/home/ann/lessons/02_mirrored.ipynb"
    monkeypatch.setitem(sys.modules, "ipykernel.kernelapp", None)
    monkeypatch.delenv("JPY_SESSION_NAME")
    assert registry.kernel_identity() == (None, None)


def test_files_of_an_older_interdist_are_read_and_bad_optional_fields_skipped(tmp_path: Path) -> None:
    import time

    record = {"id": "d", "pid": os.getpid(), "scheduler_address": "tcp://127.0.0.1:1", "dashboard_link": None,
              "n_workers": 1, "created": time.time()}  # no kernel_id, no notebook
    (tmp_path / f"{os.getpid()}-d.json").write_text(json.dumps(record))
    (tmp_path / f"{os.getpid()}-e.json").write_text(json.dumps({**record, "id": "e", "kernel_id": 7}))
    (found,) = registry.live_clusters(tmp_path)
    assert found["id"] == "d" and found["kernel_id"] is None and found["notebook"] is None


def test_embedded_gpu_clusters_are_listed_and_get_the_allocator_settings(monkeypatch: pytest.MonkeyPatch,
                                                                          tmp_path: Path) -> None:
    """The GPU start path, on CPU workers: a GPU is pretended (no CUDA is touched by these workers)."""
    import importlib.util
    import os

    from interdist.client import cluster as cl
    from interdist.client import gpus

    monkeypatch.setenv(registry.ENV_DIR, str(tmp_path))
    monkeypatch.setenv("INTERDIST_GPU_CLUSTER", "builtin")  # the CUDA_VISIBLE_DEVICES launcher
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setattr(gpus, "visible_gpus", lambda: 2)
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: object() if name == "cupy" else real_find_spec(name, *a))
    monkeypatch.setattr(gpus, "check_gpu_workers", lambda client, addresses: [])
    lease = cl._start_local_gpu([0, 1])
    try:
        (found,) = registry.live_clusters(tmp_path)
        assert found["scheduler_address"] == lease.cluster.scheduler_address and found["n_workers"] == 2
        env = lease.client.run(lambda: (os.environ.get("MALLOC_TRIM_THRESHOLD_"), os.environ["CUDA_VISIBLE_DEVICES"]))
        assert sorted(env.values()) == [(str(256 << 20), "0,1"), (str(256 << 20), "1,0")]
    finally:
        cl._shutdown(lease)
    assert registry.live_clusters(tmp_path) == []


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="giving a file away needs root")
def test_other_users_files_are_neither_listed_nor_removed(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                          check=True)
    dead = int(done.stdout)
    record = {"id": "f", "pid": dead, "scheduler_address": "tcp://127.0.0.1:1", "dashboard_link": None,
              "n_workers": 1, "created": 1.0}
    theirs = tmp_path / f"{dead}-f.json"
    theirs.write_text(json.dumps(record))
    os.chown(theirs, 12345, 12345)
    assert registry.live_clusters(tmp_path) == []
    assert theirs.exists()  # not ours to remove, even when its process is gone
