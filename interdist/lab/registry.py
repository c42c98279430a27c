"""Which embedded interdist clusters are alive: one small JSON file per cluster.

Each embedded cluster interdist starts is written as ``<pid>-<id>.json`` in a
per-user directory (``jupyter_runtime_dir()/interdist``, or
``~/.cache/interdist/runtime`` without jupyter_core; the Dask config key
``interdist.lab.registry-dir`` overrides both) and removed when the cluster closes. The Jupyter server
extension lists them for the JupyterLab sidebar. The file of a notebook that
died without closing its cluster (killed, its kernel restarted) names a process
that is gone, or a process id since reused by a process started after the file
was written: listing removes such files, and so does every new registration, so
they do not stay for ever. Only JSON is read, and only well-formed files named
``<pid>-<id>.json`` are ever removed. Nothing here ever raises into the caller
that registers: an unwritable directory just means the cluster is not listed.

A cluster started in a Jupyter kernel also records that kernel's id and its
notebook (``JPY_SESSION_NAME``, which jupyter_server sets for the kernels of its
sessions), so the sidebar can name it; other processes (scripts) record None.
"""

from __future__ import annotations

import json
import logging
import os
import re
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from interdist import config

logger = logging.getLogger("interdist")

ENV_DIR = "INTERDIST_REGISTRY_DIR"  # the variable of earlier versions (deprecated): interdist.lab.registry-dir
FIELDS: dict[str, type | tuple[type, ...]] = {
    "id": str,
    "pid": int,
    "scheduler_address": str,
    "dashboard_link": (str, type(None)),
    "n_workers": int,
    "created": (int, float),
}
#: Fields a file may lack (written by an older interdist): read as None.
OPTIONAL_FIELDS: dict[str, type | tuple[type, ...]] = {
    "kernel_id": (str, type(None)),
    "notebook": (str, type(None)),
}
_KERNEL_FILE = re.compile(r"kernel-([0-9A-Za-z_.-]+)\.json$")


def kernel_identity() -> tuple[str | None, str | None]:
    """``(kernel id, notebook path)`` of this process when it is a Jupyter kernel, else ``(None, None)``.

    The id is read from the kernel's connection file name (``kernel-<id>.json``, as Jupyter names it);
    ipykernel is only looked at when this process already imported it (no import here)."""
    kernel_id = None
    kernelapp = sys.modules.get("ipykernel.kernelapp")
    try:
        if kernelapp is not None and kernelapp.IPKernelApp.initialized():
            found = _KERNEL_FILE.search(os.path.basename(str(kernelapp.IPKernelApp.instance().connection_file)))
            kernel_id = found.group(1) if found else None
    except Exception:  # noqa: BLE001 - an odd kernel app: the cluster is listed unnamed
        kernel_id = None
    notebook = os.environ.get("JPY_SESSION_NAME") or None
    return kernel_id, notebook


def registry_dir() -> Path:
    """The directory of the registration files (not created here)."""
    env = config.get("lab.registry-dir")
    if env:
        return Path(env)
    try:
        from jupyter_core.paths import jupyter_runtime_dir
    except ImportError:
        cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        return Path(cache) / "interdist" / "runtime"
    return Path(jupyter_runtime_dir()) / "interdist"


def register(
    scheduler_address: str, dashboard_link: str | None, n_workers: int, directory: Path | None = None
) -> Path | None:
    """Write this process's cluster file (in ``directory``, default :func:`registry_dir`); its path, or None
    when it could not be written."""
    cluster_id = uuid.uuid4().hex[:12]
    kernel_id, notebook = kernel_identity()
    record: dict[str, Any] = {
        "id": cluster_id,
        "pid": os.getpid(),
        "scheduler_address": str(scheduler_address),
        "dashboard_link": dashboard_link,
        "n_workers": int(n_workers),
        "created": time.time(),
        "kernel_id": kernel_id,
        "notebook": notebook,
    }
    try:
        d = registry_dir() if directory is None else Path(directory)
        d.mkdir(parents=True, exist_ok=True, mode=0o700)
        _private(d)
        live_clusters(d)  # removes the files of notebooks that died without closing their clusters
        path = d / f"{os.getpid()}-{cluster_id}.json"
        tmp = d / f".{path.name}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0), 0o600)
        if hasattr(os, "fchmod"):
            os.fchmod(fd, 0o600)  # a leftover temporary file keeps its mode through O_CREAT: the link holds a token
        with os.fdopen(fd, "w") as f:
            json.dump(record, f)
        os.replace(tmp, path)  # readers never see half a file
        return path
    except Exception as e:  # noqa: BLE001 - read-only home, odd paths: the cluster works unlisted
        logger.debug("interdist: could not register the cluster for JupyterLab: %s", e)
        return None


def _private(directory: Path) -> None:
    """Make ``directory`` 0700 when this user owns it and others can get in: its files hold dashboard links
    with their tokens (each file is 0600 too). A directory of another owner, or a sticky one (a shared
    ``interdist.lab.registry-dir``, as ``/tmp`` is shared), is left as it is."""
    if not hasattr(os, "getuid"):
        return
    st = directory.stat()
    if st.st_uid == os.getuid() and st.st_mode & 0o077 and not st.st_mode & 0o1000:
        directory.chmod(0o700)


def unregister(path: Path | None) -> None:
    """Remove a file written by :func:`register` (no error when it is gone)."""
    if path is None:
        return
    try:
        path.unlink(missing_ok=True)
    except Exception as e:  # noqa: BLE001 - removing a listing must not fail: it is only logged
        logger.debug("interdist: could not remove %s: %s", path, e)


def pid_alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, someone else's
        return True
    except OSError:
        return False
    return True


def same_process(pid: int, created: float) -> bool:
    """Whether ``pid`` is alive and is the process that wrote a file at time ``created`` (not a later
    process that was given the same id)."""
    if not pid_alive(pid):
        return False
    try:
        import psutil  # distributed's dependency

        return bool(psutil.Process(pid).create_time() <= created + 1.0)
    except Exception:  # noqa: BLE001 - cannot tell (gone meanwhile, no access): trust pid_alive
        return pid_alive(pid)


def _own(path: Path) -> bool:
    """Whether this user owns ``path`` (always true where there are no user ids)."""
    getuid = getattr(os, "getuid", None)
    return getuid is None or path.stat().st_uid == getuid()


def _valid(record: Any) -> bool:
    return (
        isinstance(record, dict)
        and all(k in record and isinstance(record[k], t) and not isinstance(record[k], bool) for k, t in FIELDS.items())
        and all(isinstance(record.get(k), t) for k, t in OPTIONAL_FIELDS.items())
    )


def live_clusters(directory: Path | None = None) -> list[dict[str, Any]]:
    """This user's registered clusters whose process is alive, oldest first (malformed files and other
    users' files skipped; files of processes that are gone removed)."""
    d = registry_dir() if directory is None else directory
    try:
        files = sorted(d.glob("*.json"))
    except OSError:
        return []
    found = []
    for path in files:
        try:
            if not _own(path):
                continue  # another user's file (a shared interdist.lab.registry-dir): neither listed nor removed
            with open(path, encoding="utf-8") as f:
                record = json.loads(f.read(65536))
        except (OSError, ValueError):
            continue
        if not _valid(record):
            continue
        if not same_process(record["pid"], record["created"]):
            if path.name == f"{record['pid']}-{record['id']}.json":
                unregister(path)  # a notebook that died without closing its cluster
            continue
        found.append({**{k: record[k] for k in FIELDS}, **{k: record.get(k) for k in OPTIONAL_FIELDS}})
    return sorted(found, key=lambda r: r["created"])
