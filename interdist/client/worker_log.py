"""Where an embedded worker's own output goes: the cluster's log file (``logs.py``), and what is read back of it.

A ``WorkerProcess`` (``worker_process.py``, which re-exports the public names) writes its stdout and stderr to
the log file :func:`worker_log_path` names, its Dask lines labelled with its name and pid; when a worker
is given up, the error quotes what its failed starts wrote there.
"""

from __future__ import annotations

import os
from typing import Any

import dask

from interdist.client import logs

#: The most of a failed start's output (characters, its last lines) kept for the error that names it.
FAILURE_TAIL_CHARS = 2000


def worker_log_path() -> str | None:
    """The file the embedded workers of this process write their own output to; None before one started,
    or when ``interdist.cluster.worker-log`` is ``"-"`` (the notebook's streams)."""
    return _log_path


_log_path: str | None = None


def _open_log() -> int | None:
    """A descriptor for a worker's stdout and stderr (the cluster's log file, ``logs.py``: appended to by
    every worker of this process, and by this process's own background lines), or None."""
    global _log_path
    path = logs.log_path()
    if path is None:
        return None
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    except OSError:
        return None  # an unwritable place: the notebook's streams, as before
    _log_path = path
    return fd


#: ``distributed.admin.log-format``'s default; a worker's lines in the shared log file then say whose they are.
_DASK_LOG_FORMAT = "%(asctime)s - %(name)s - %(levelname)s - %(message)s"


def _log_format_env(name: Any) -> dict[str, str]:
    """Dask's log format for worker ``name``, labelled as this process's lines are (``logs.py``); nothing
    when the user set a format of their own."""
    if dask.config.get("distributed.admin.log-format", None) != _DASK_LOG_FORMAT:
        return {}
    label = "worker " + str(name).replace("%", "%%") + " pid %(process)d"
    fmt = _DASK_LOG_FORMAT.replace("%(asctime)s - ", f"%(asctime)s - {label} - ", 1)
    return {"DASK_DISTRIBUTED__ADMIN__LOG_FORMAT": fmt}


def _log_size() -> int | None:
    """Where the shared log file ends now (what a start writes comes after), or None without one."""
    try:
        return os.path.getsize(_log_path) if _log_path else None
    except OSError:
        return None


def _log_since(offset: int | None) -> str:
    """The log's last lines written since ``offset`` (a failed start's own output, and whatever else
    landed meanwhile), at most ``FAILURE_TAIL_CHARS``."""
    if offset is None or not _log_path:
        return ""
    try:
        with open(_log_path, "rb") as f:
            f.seek(max(offset, os.path.getsize(_log_path) - FAILURE_TAIL_CHARS))
            return f.read(FAILURE_TAIL_CHARS).decode(errors="replace").strip()
    except OSError:
        return ""


def _failure(name: Any, failed: int, exc: BaseException, tail: str) -> str:
    said = f"worker {name!r} was given up after {failed} failed starts in a row (the last: {exc})"
    if tail:
        return said + f"; its last output ({_log_path}):\n" + tail
    return said + (f"; its log is {_log_path}" if _log_path else "")
