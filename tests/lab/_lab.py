"""Start a real ``jupyter lab`` (127.0.0.1, a free port, a token, no browser) for the tests, and stop it."""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

LABEXTENSION = Path(__file__).resolve().parents[2] / "interdist" / "labextension"


@dataclass
class Lab:
    url: str  # http://127.0.0.1:port/
    token: str
    proc: subprocess.Popen[bytes]
    log: Path

    def get(
        self, path: str, token: bool = True, method: str = "GET", headers: dict[str, str] | None = None
    ) -> tuple[int, Any]:
        return self.get_with_headers(path, token, method, headers)[:2]

    def get_with_headers(
        self, path: str, token: bool = True, method: str = "GET", headers: dict[str, str] | None = None
    ) -> tuple[int, Any, Any]:
        """``(status, JSON body, response headers)``."""
        req = urllib.request.Request(self.url + path.lstrip("/"), method=method, headers=headers or {})
        if token:
            req.add_header("Authorization", f"token {self.token}")
        try:
            with urllib.request.urlopen(req, timeout=20) as r:
                return r.status, json.loads(r.read() or b"null"), r.headers
        except urllib.error.HTTPError as e:
            return e.code, None, e.headers

    def shutdown_kernels(self) -> None:
        """End every session and its kernel (and so whatever the kernel started), waiting for each."""
        status, sessions = self.get("api/sessions")
        for session in sessions if status == 200 and sessions else []:
            self.get(f"api/sessions/{session['id']}", method="DELETE")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def running_lab(tmp: Path, registry_dir: Path, timeout: float = 60.0) -> Iterator[Lab]:
    """A jupyter lab with the server extension enabled and the prebuilt extension found in interdist/labextension."""
    # extra_labextensions_path wants a folder of <package name>/ folders: link ours in as @interdist/jupyterlab
    ext_root = tmp / "labextensions"
    (ext_root / "@interdist").mkdir(parents=True, exist_ok=True)
    link = ext_root / "@interdist" / "jupyterlab"
    if not link.exists():
        link.symlink_to(LABEXTENSION, target_is_directory=True)
    for d in ("config", "data", "runtime", "root", "workspaces", "settings"):
        (tmp / d).mkdir(exist_ok=True)
    # what the shipped jupyter-config/ file does for an installed wheel: enable the server extension
    (tmp / "config" / "jupyter_server_config.json").write_text(
        json.dumps({"ServerApp": {"jpserver_extensions": {"interdist.lab": True, "jupyter_lsp": False}}}))
    # no "official Jupyter news?" prompt over the screenshots
    (tmp / "config" / "labconfig").mkdir(exist_ok=True)
    (tmp / "config" / "labconfig" / "page_config.json").write_text(
        json.dumps({"disabledExtensions": {"@jupyterlab/apputils-extension:announcements": True}}))
    token = secrets.token_hex(16)
    port = free_port()
    env = {**os.environ, "JUPYTER_CONFIG_DIR": str(tmp / "config"), "JUPYTER_DATA_DIR": str(tmp / "data"),
           "JUPYTER_RUNTIME_DIR": str(tmp / "runtime"), "DASK_INTERDIST__LAB__REGISTRY_DIR": str(registry_dir),
           "JUPYTER_PLATFORM_DIRS": "1"}
    cmd = [sys.executable, "-m", "jupyterlab", "--no-browser", "--ServerApp.ip=127.0.0.1",
           f"--ServerApp.port={port}", "--ServerApp.port_retries=0", f"--IdentityProvider.token={token}",
           f"--ServerApp.root_dir={tmp / 'root'}",
           f"--LabApp.extra_labextensions_path={ext_root}", f"--LabApp.workspaces_dir={tmp / 'workspaces'}",
           f"--LabApp.user_settings_dir={tmp / 'settings'}",
           "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
           "--LabApp.extension_manager=readonly", "--ServerApp.open_browser=False"]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        cmd.append("--allow-root")  # containers and CI runners
    log = tmp / "jupyter-lab.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT, cwd=tmp / "root")
    lab = Lab(f"http://127.0.0.1:{port}/", token, proc, log)
    try:
        deadline = time.monotonic() + timeout
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"jupyter lab exited ({proc.returncode}):\n{log.read_text()[-4000:]}")
            try:
                if lab.get("api/status")[0] == 200:
                    break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"jupyter lab did not start in {timeout} s:\n{log.read_text()[-4000:]}")
            time.sleep(0.25)
        yield lab
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


@contextlib.contextmanager
def module_lab(tmp_path_factory: Any, name: str) -> Iterator[Lab]:
    """A lab for a test module: its root (``lab.root``) and registry (``lab.registry``) in a fresh tmp dir;
    every kernel (and so every cluster a notebook started) shut down at the end."""
    tmp = tmp_path_factory.mktemp(name)
    (tmp / "lab").mkdir()
    (tmp / "registry").mkdir()
    with running_lab(tmp / "lab", tmp / "registry") as lab:
        lab.root = tmp / "lab" / "root"  # type: ignore[attr-defined]
        lab.registry = tmp / "registry"  # type: ignore[attr-defined]
        try:
            yield lab
        finally:
            lab.shutdown_kernels()  # the kernel's cluster goes with it
