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
from interdist.lab.handlers import dashboard_origin, interdist_pages


def test_register_lists_and_unregister_removes(tmp_path: Path) -> None:
    path = registry.register("tcp://127.0.0.1:8786", "http://127.0.0.1:8787/status", 2, directory=tmp_path)
    assert path is not None and path.parent == tmp_path and path.name.startswith(f"{os.getpid()}-")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    (found,) = registry.live_clusters(tmp_path)
    assert found["pid"] == os.getpid() and found["n_workers"] == 2
    assert found["scheduler_address"] == "tcp://127.0.0.1:8786"
    assert found["dashboard_link"] == "http://127.0.0.1:8787/status"
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
    assert interdist_pages([1], "http://h:1") == []


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
