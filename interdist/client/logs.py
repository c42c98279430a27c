"""Where this process's background log lines go: the embedded cluster's log file, never under an old cell.

In a Jupyter kernel, a line a thread writes to ``sys.stderr`` lands under the cell that ran when the
thread started (ipykernel routes output by the thread's parent header), not the cell that runs now.
The Dask client, the embedded scheduler (a ``LocalCluster`` runs it in this process, on the cluster's
event-loop thread) and interdist's worker supervisor (``worker_process.py``, on that loop too) all
log from such threads: "Retire worker addresses", "Lost all workers" and "worker 1 (pid …) exited
with code -9; starting it again" appeared under cell 1 while the class was at cell 24.

:func:`install` (before a cluster is started or reached, ``cluster.acquire``) sends them:

- **to the cluster's log file** (:func:`log_path`), every line the loggers' levels let through. It is
  the file the embedded workers write their own output to (``worker_process.py``): one file to name
  in an error, and a failure's story in one place and in order (the worker's last lines, the
  scheduler removing it, the restart). Every process appends (``O_APPEND``), so their lines interleave
  whole; this process's lines say ``main pid N``, a worker's ``worker NAME pid N``.
- **to the user, now**, what is worth reading at once: interdist's WARNING and above, Dask's ERROR and
  above (what the embedded clusters' ``silence_logs=logging.ERROR`` showed), on ``sys.stderr`` where it
  lands in front of the user: always in a terminal (a script: no old cells there), and in a kernel
  from the thread that runs cells only. A kernel's background line goes to the file only: what the
  user must know reaches them as the dashboard's events (a replica lost, restarting, recovered:
  ``group.py``) and as the exception of the call that failed, which names the file.

The user's own logging configuration is kept. Only the handler ``distributed.config`` adds when it is
imported (its old-style ``logging`` section: one ``StreamHandler`` on stderr in Dask's log format,
shared by the loggers it configures) is replaced; with a new-style or file logging config, or handlers
of the user's own, the file handler is added beside them. Loggers' levels are never changed. The
console handler of ``interdist`` and ``asyncio`` stands in for logging's last resort: it writes only
while the root logger has no handlers, which otherwise get the line (it propagates to them).

Neither handler is a ``logging.StreamHandler``: Dask's ``silence_logs`` sets the level of every
``StreamHandler`` of ``distributed`` while a cluster lives and sets it back when that cluster closes,
and two clusters nested that way unsilenced a live one (the INFO lines of the report).
``interdist.cluster.worker-log: "-"`` leaves everything on the process's streams, as before.

>>> from interdist.client import logs
>>> path = logs.install()  # as cluster.acquire does, before a cluster starts
>>> path == logs.log_path()  # None with interdist.cluster.worker-log "-"
True
"""

from __future__ import annotations

import atexit
import logging
import os
import sys
import tempfile
import threading
import time
from typing import Any

from interdist import config
from interdist.replica.ps_liveness import pid_alive

#: Loggers whose lines go to the file: Dask's and those of the libraries it logs through, interdist's,
#: and asyncio's (an event loop's errors: "Task exception was never retrieved").
DASK_LOGGERS = ("distributed", "tornado", "bokeh")
OWN_LOGGERS = ("interdist", "asyncio")

_lock = threading.Lock()
_file: _FileHandler | None = None
_tidied: set[str] = set()  # this process's default log files, already tidied (``log_path``)


def log_path() -> str | None:
    """The embedded cluster's log file of this process: ``interdist.cluster.worker-log``, else
    ``$TMPDIR/interdist-<uid>/workers-<pid>.log``; None when that key is ``"-"`` (the process's
    streams) or where it cannot be created."""
    path = config.get("cluster.worker-log") or ""
    if path == "-":
        return None
    try:
        if not path:
            folder = os.path.join(tempfile.gettempdir(), f"interdist-{os.getuid()}")
            os.makedirs(folder, mode=0o700, exist_ok=True)
            path = os.path.join(folder, f"workers-{os.getpid()}.log")
            if path not in _tidied:  # once a process: the files of processes that are gone, and ours at exit
                _tidied.add(path)
                _prune(folder)
                atexit.register(_remove_if_empty, path)
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600))
    except OSError:
        return None  # an unwritable place: the process's streams, as before
    return path


#: How long the log file of a process that is gone is kept, when it has lines (for a failure's post-mortem).
KEEP_LOGS_S = 7 * 24 * 3600


def _prune(folder: str) -> None:
    """Remove the default log files of processes that are gone: empty ones at once, the others after
    ``KEEP_LOGS_S`` (one file per process that ever started a cluster piled up in ``$TMPDIR``)."""
    now = time.time()
    try:
        names = os.listdir(folder)
    except OSError:
        return
    for name in names:
        if not (name.startswith("workers-") and name.endswith(".log")):
            continue
        try:
            pid = int(name[len("workers-") : -len(".log")])
            if pid == os.getpid() or pid_alive(pid):  # (another user's: not ours to judge)
                continue
            path = os.path.join(folder, name)
            st = os.stat(path)
            if st.st_size == 0 or now - st.st_mtime > KEEP_LOGS_S:
                os.remove(path)
        except (ValueError, OSError):
            continue


def _remove_if_empty(path: str) -> None:
    """At exit: this process's default log file, if nothing was ever written to it."""
    try:
        if os.stat(path).st_size == 0:
            os.remove(path)
    except OSError:
        pass


def install() -> str | None:
    """Send this process's log lines to the cluster's log file and, when they can land where the user
    looks, to stderr (see the module's docstring); the file's path, or None (nothing changed). Idempotent."""
    global _file
    path = log_path()
    if path is None:
        return None
    import distributed  # noqa: F401 - its import sets up Dask's logging (distributed.config); ours goes on top

    with _lock:
        if _file is not None:
            _file.path = path  # interdist.cluster.worker-log changed: the next lines go to the new file
            return path
        _file = _FileHandler(path)
        _file.setFormatter(
            logging.Formatter(f"%(asctime)s - main pid {os.getpid()} - %(name)s - %(levelname)s - %(message)s")
        )
        dask_default = _dask_default_handler()
        dask_console = _Console(logging.ERROR, dask_default.formatter if dask_default else None, last_resort=False)
        on = {name for name, lg in _loggers() if dask_default is not None and dask_default in lg.handlers}
        for name in sorted(on | set(DASK_LOGGERS)):
            lg = logging.getLogger(name)
            if dask_default is not None and dask_default in lg.handlers:
                lg.removeHandler(dask_default)
                lg.addHandler(dask_console)  # where Dask's own handler was: the same lines reach a terminal
            lg.addHandler(_file)
        own_console = _Console(logging.WARNING, logging.Formatter("%(message)s"), last_resort=True)
        for name in OWN_LOGGERS:
            lg = logging.getLogger(name)
            lg.addHandler(_file)
            lg.addHandler(own_console)
        return path


def _loggers() -> list[tuple[str, logging.Logger]]:
    return [(n, lg) for n, lg in list(logging.root.manager.loggerDict.items()) if isinstance(lg, logging.Logger)]


def _dask_default_handler() -> logging.Handler | None:
    """The handler ``distributed.config`` added to ``distributed`` at import (old-style logging config:
    a plain ``StreamHandler`` in Dask's log format); None when the user's config made Dask add none."""
    import dask

    config: dict[str, Any] = dask.config.config
    section = config.get("distributed", {})
    base = section if {"logging", "logging-file-config"} & set(section) else config  # as distributed.config reads it
    if "logging-file-config" in base or "version" in (base.get("logging") or {}):
        return None  # the user's dictConfig or fileConfig: their handlers, kept
    fmt = dask.config.get("distributed.admin.log-format")
    for handler in logging.getLogger("distributed").handlers:
        formatter = handler.formatter
        if type(handler) is logging.StreamHandler and formatter is not None and formatter._fmt == fmt:
            return handler
    return None


def _in_kernel() -> bool:
    """Whether stderr is a Jupyter kernel's stream, which puts a thread's lines under the cell its thread
    started in (ipykernel's ``OutStream``)."""
    return type(sys.stderr).__module__.split(".")[0] == "ipykernel"


class _Once(logging.Handler):
    """A handler that takes a record once, however many loggers on its way propagate it here."""

    def handle(self, record: logging.LogRecord) -> bool:
        seen = f"_interdist_{id(self)}"
        if getattr(record, seen, False):
            return False
        setattr(record, seen, True)
        return bool(super().handle(record))

    def handleError(self, record: logging.LogRecord) -> None:  # noqa: N802 - logging's name
        pass  # a line that cannot be written: never a "--- Logging error ---" traceback under a cell


class _FileHandler(_Once):
    """Appends each line to the cluster's log file (opened per line: ``O_APPEND`` writes, shared with
    the workers, and a file moved or removed meanwhile is made again)."""

    def __init__(self, path: str) -> None:
        super().__init__()
        self.path = path

    def emit(self, record: logging.LogRecord) -> None:
        try:
            line = (self.format(record) + "\n").encode("utf-8", "backslashreplace")
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
            try:
                os.write(fd, line)
            finally:
                os.close(fd)
        except Exception:  # noqa: BLE001 - as logging's handlers do
            self.handleError(record)


class _Console(_Once):
    """Writes a record at ``level`` or above to ``sys.stderr`` as it is now, unless it would land under an
    old cell (a kernel's background thread); with ``last_resort``, only while the root logger has no
    handlers (logging's last resort: a configured root gets the record itself)."""

    def __init__(self, level: int, formatter: logging.Formatter | None, last_resort: bool) -> None:
        super().__init__(level)
        self.setFormatter(formatter)
        self.last_resort = last_resort

    def emit(self, record: logging.LogRecord) -> None:
        if self.last_resort and logging.root.handlers:
            return
        if _in_kernel() and threading.current_thread() is not threading.main_thread():
            return  # to the file only
        try:
            stream = sys.stderr
            if stream is None:
                return
            stream.write(self.format(record) + "\n")
            stream.flush()
        except Exception:  # noqa: BLE001 - as logging's handlers do
            self.handleError(record)
