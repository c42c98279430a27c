"""An embedded cluster's worker: a ``python`` process of its own, started and watched from the notebook.

``WorkerProcess`` is the worker class of the embedded ``LocalCluster`` (``cluster.py``) in place of
Dask's ``Nanny``, and does the nanny's job from here: it restarts a worker that dies. It differs
where a notebook or a script needs it to:

- **No ``multiprocessing``.** A nanny starts its worker with ``multiprocessing``'s spawn, which runs
  the parent's ``__main__`` module again in the child: a script without an
  ``if __name__ == "__main__":`` guard (as TensorFlow's tutorials write them) then starts clusters
  from inside its own workers and dies in hundreds of lines of "Nanny failed to start". A
  ``WorkerProcess`` runs ``python -c`` with ``interdist.worker.process`` and nothing of the
  parent's main module, so scripts work with or without the guard, and so do ``python - < file``
  and ``python -c`` (``preforked``: forked from a "zygote" started so, ``zygote.py``).
- **A session of its own** (``start_new_session``). Jupyter's Kernel > Interrupt signals the
  kernel's whole process group, and a terminal's Ctrl-C its foreground group: workers in that group
  died with it, and every replica's state with them. Now only the kernel gets the SIGINT; the
  strategy turns it into an abort of the step and an interrupt of the replica functions
  (``group.py``), and the workers go on.
- **They end with the notebook.** Out of its process group, a worker no longer gets the SIGTERM or
  SIGKILL that ends the kernel. Each holds one end of a socket pair whose other end only this
  process holds: when it is closed (``close``) or this process dies, however it dies, the worker
  closes and its process exits.

The worker's spec (scheduler address, name, options) is the first line on that socket pair, and when
the cluster speaks TLS its credentials (``Security.temporary()``'s certificate and key) the second: not
on its command line (only the socket's descriptor number is) or in its environment, where another
account on the host could read them. The worker puts the certificate and key into memfds of its own
(``credentials.py``), as this process does, so they never touch a file (docs/reliability.md).

Its stdout and stderr go to a log file (:func:`worker_log_path`, named in a ``WorkerLostError``), not
to the notebook's: what a replica function prints travels back with its step's reply and shows in the
cell that ran it, labelled (``replica/user_code.py``); what is left is the worker's own noise (Dask's
logs, each line labelled ``worker NAME pid N``, the traceback of a dying process), which landed in
whichever cell ran next. The notebook's own background lines join them there (``logs.py``), the
restart of a dead worker's among them: in a notebook the dashboard shows that as events (a replica
lost, restarting, recovered), and a script's stderr shows the line as it happens.
``interdist.cluster.worker-log: "-"`` gives workers the notebook's streams again. The log file's
handling is in ``worker_log.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from typing import Any

import dask
from distributed.deploy.spec import ProcessInterface

from interdist.client import zygote
from interdist.client.worker_log import FAILURE_TAIL_CHARS as FAILURE_TAIL_CHARS  # (this module's API too)
from interdist.client.worker_log import _failure, _log_format_env, _log_since, _log_size, _open_log
from interdist.client.worker_log import worker_log_path as worker_log_path
from interdist.config import settings
from interdist.worker import credentials

logger = logging.getLogger("interdist")

#: Seconds a worker process gets to start (import, connect to the scheduler) before it counts as failed.
START_TIMEOUT = 60.0
#: The longest wait (seconds) between two tries to start a dead worker again (1 s, 2 s, 4 s, ... up to this).
RETRY_MAX_S = 10.0
#: Starts in a row that may fail *on their own* (the new process exits with an error, or does not answer
#: within ``START_TIMEOUT``) before a dead worker is given up, its replica lost with an error that quotes
#: the worker's last output. A start cut by a signal (someone killed it, as a fault test or the OOM killer
#: does) is tried again without counting: the worker itself could start.
MAX_FAILED_STARTS = 5
#: The Dask settings interdist's workers start with (``interdist.cluster.quiet-event-loops``): each of Dask's
#: periodic callbacks wakes the worker's event loop, which then takes the interpreter's lock from the replica
#: running in the same process. The statistical profiler (every 10 ms) samples Dask's task threads, which a
#: replica is not; the tick (every 20 ms) measures the loop's delay for a warning after 3 s, which a tick a
#: second still gives. A loop of 4 KB all-reduces, both settings against Dask's (three alternated pairs): at 2
#: replicas p99 166-218 us against 365-1,145, p90 87-91 against 93-157; at 4, mean 334-350 against 421-536 us
#: (docs/performance.md, "The fifteenth run"). Either one alone changed nothing measurable.
QUIET_EVENT_LOOPS = {"distributed.worker.profile.enabled": False, "distributed.admin.tick.interval": "1s"}

# The child's first Python: the parent's import path (a notebook may have added to it), then
# interdist.worker.process; nothing of the parent's __main__. ``distributed`` is imported before
# interdist, as in a nanny's worker: its import makes tblib pickle every exception class that exists
# by then, and tblib cannot rebuild interdist's (CollectiveTimeoutError is a RuntimeError and a TimeoutError).
# The spec (scheduler address, name, options) is the first line on the socket pair, whose descriptor
# is the only argument: a command line is readable by every account on the host (/proc/PID/cmdline).
# Read a byte at a time: what follows the line (the credentials) is ``main``'s to read.
_BOOT = """\
import sys, os, json
fd, line = int(sys.argv[1]), b''
while not line.endswith(b'\\n'):
    byte = os.read(fd, 1)
    if not byte:
        raise SystemExit('interdist: the parent closed the socket before sending the worker spec')
    line += byte
spec = json.loads(line)
spec['fd'] = fd  # a worker forked by a zygote (zygote.py) got the socket under another number
sys.path[:] = spec['sys_path']
import distributed
from interdist.worker.process import main
main(spec)
"""


class WorkerProcess(ProcessInterface):
    """One worker of an embedded cluster, in its own process and session (``LocalCluster(worker_class=...)``).

    Takes the worker options ``LocalCluster`` passes to its worker class and uses those an embedded
    worker needs (``nthreads``, ``memory_limit``, ``host``, ``env``, ``silence_logs``); its
    environment is that of a nanny's worker (``distributed.nanny.pre-spawn-environ`` and
    ``distributed.nanny.environ``, then ``env``), and it inherits this process's Dask config.
    """

    def __init__(
        self,
        scheduler: str,
        name: Any = None,
        nthreads: int = 1,
        memory_limit: Any = 0,
        host: str | None = "127.0.0.1",
        env: dict[str, Any] | None = None,
        silence_logs: Any = logging.ERROR,
        security: Any = None,
        protocol: str | None = None,
        worker_port: int | None = None,
        death_timeout: float | None = None,
        restart_clean_exits: bool = True,
        preforked: bool = False,
        **_other: Any,  # what LocalCluster passes to a Nanny and an embedded worker does not use
    ) -> None:
        super().__init__()  # type: ignore[no-untyped-call]  # distributed is untyped
        self.scheduler = scheduler
        self.name = name
        self.options: dict[str, Any] = {
            "nthreads": nthreads,
            "memory_limit": memory_limit,
            "host": host,
            "dashboard": False,
        }
        if protocol:
            self.options["protocol"] = protocol
        # A Nanny's options of the same names (``interdist.Server``: the task's port, the wait for its scheduler).
        if worker_port is not None:
            self.options["port"] = int(worker_port)
        if death_timeout is not None:
            self.options["death_timeout"] = float(death_timeout)
        # False: a worker that closed and exited cleanly (code 0: its scheduler closed it, or it was stopped on
        # purpose) is not started again, as a nanny's is not (``interdist.Server``: a task whose scheduler
        # shut down). An embedded cluster restarts every worker that ends while the cluster runs.
        self.restart_clean_exits = restart_clean_exits
        # True: forked from a zygote that imported what a worker needs once (zygote.py), when its environment
        # allows; a worker given its own GPUs always starts fresh (CUDA reads them as the process starts).
        self.preforked = preforked and "CUDA_VISIBLE_DEVICES" not in (env or {})
        self.credentials = _credentials(security)
        self.log_levels = {"distributed": int(silence_logs)} if silence_logs else {}
        self.env = {
            **os.environ,
            **_config_env("distributed.nanny.pre-spawn-environ"),
            **_config_env("distributed.nanny.environ"),
            **{k: str(v) for k, v in (env or {}).items()},
            "DASK_INTERNAL_INHERIT_CONFIG": dask.config.serialize(dask.config.global_config),
            **_log_format_env(name),
        }
        self.process: subprocess.Popen[bytes] | zygote.Forked | None = None
        self._sock: socket.socket | None = None
        self._closing = False
        self._supervisor: asyncio.Task[None] | None = None
        self.restarts = 0
        #: Why this worker was given up (``MAX_FAILED_STARTS`` failed starts in a row), with its last output;
        #: None while it runs or is being started again. ``DaskGroup`` raises it for the replica at once.
        self.failure: str | None = None
        self._cut_by_signal = False  # the last failed start's process was ended by a signal (not by itself)
        # The pid of the process ``address`` belongs to (``process`` is the new one while it starts, ``address``
        # still the dead one's): the pool hands a worker's address out only while this process runs.
        self.address_pid: int | None = None

    @property
    def pid(self) -> int | None:
        return None if self.process is None else self.process.pid

    async def start(self) -> None:
        await self._spawn()
        self._supervisor = asyncio.ensure_future(self._supervise())
        await super().start()  # type: ignore[no-untyped-call]  # distributed is untyped

    async def _spawn(self) -> None:
        ours, theirs = socket.socketpair()
        log = _open_log()
        spec = {
            "scheduler": self.scheduler,
            "name": self.name,
            "options": self.options,
            "log_levels": self.log_levels,
            "fd": theirs.fileno(),
            "sys_path": sys.path,
            "credentials": self.credentials is not None,  # they follow on the socket, never in argv
            "dask_config": QUIET_EVENT_LOOPS if settings.quiet_event_loops else {},
        }
        try:
            self.process = await asyncio.get_running_loop().run_in_executor(None, self._start_process, theirs, log)
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
            if log is not None:
                os.close(log)
        first = json.dumps(spec).encode() + b"\n"
        if self.credentials is not None:
            first += json.dumps(self.credentials).encode() + b"\n"
        try:
            ours.sendall(first)
        except OSError:
            pass  # the child is gone already: reading its first line says so
        ours.setblocking(False)
        self._sock = ours
        try:
            line = await asyncio.wait_for(_read_line(ours), START_TIMEOUT)
        except TimeoutError:
            line = b'{"error": "no answer within %d s"}' % START_TIMEOUT
        said = json.loads(line) if line else {"error": f"its process ended (exit code {self.process.poll()})"}
        if "address" not in said:
            for _ in range(10):  # its socket closes as it exits: its exit status follows in a moment
                if (code := self.process.poll()) is not None or line:
                    break
                await asyncio.sleep(0.05)
            self._cut_by_signal = code is not None and code < 0  # before we stop what is left of it
            await self._stop_process()
            raise RuntimeError(f"interdist: worker {self.name!r} could not start: {said.get('error')}")
        self.address = said["address"]
        self.address_pid = self.process.pid  # (set with it: a new process is ``process`` before it has one)

    def prewarm(self) -> None:
        """Start the zygote this worker will be forked from (``preforked``), so that it imports meanwhile."""
        if not self.preforked:
            return
        log = _open_log()
        try:
            zygote.for_env(self.env, _interpreter_flags(), _BOOT, log)
        finally:
            if log is not None:
                os.close(log)

    def _start_process(self, theirs: socket.socket, log: int | None) -> subprocess.Popen[bytes] | zygote.Forked:
        """The worker's process on ``theirs``: forked from a zygote (``preforked``), else a fresh ``python``."""
        if self.preforked:
            found = zygote.for_env(self.env, _interpreter_flags(), _BOOT, log)
            if found is not None:
                try:
                    return found.fork(theirs, log, zygote.split_env(self.env)[1])
                except (OSError, RuntimeError) as exc:
                    logger.info("interdist: worker %r not forked (%s): starting a process of its own", self.name, exc)
        return subprocess.Popen(
            [sys.executable, *_interpreter_flags(), "-c", _BOOT, str(theirs.fileno())],  # the spec: on the socket
            pass_fds=(theirs.fileno(),),
            start_new_session=True,  # the kernel's or terminal's SIGINT is not for this process
            stdin=subprocess.DEVNULL,
            stdout=log,  # None: the notebook's
            stderr=None if log is None else subprocess.STDOUT,
            env=self.env,
        )

    async def _supervise(self) -> None:
        """Restart the worker when its process ends while the cluster runs, as a nanny does."""
        while not self._closing:
            sock, process = self._sock, self.process
            assert sock is not None and process is not None
            await _until_closed(sock)  # the child's end closes when its process ends
            code = await asyncio.get_running_loop().run_in_executor(None, process.wait)
            if self._closing:
                return
            sock.close()
            if code == 0 and not self.restart_clean_exits:
                logger.info("interdist: worker %r (pid %s) closed; not starting it again", self.name, process.pid)
                return
            logger.warning(
                "interdist: worker %r (pid %s) exited with code %s; starting it again", self.name, process.pid, code
            )
            attempt = failed = 0
            while not self._closing:
                attempt += 1
                start, self._cut_by_signal = _log_size(), False
                try:
                    await self._spawn()
                    self.restarts += 1
                    break
                except Exception as exc:  # noqa: BLE001 - e.g. its name still taken at the scheduler: try again
                    # Tried again while the cluster runs: a replica lost for good cannot be had back. Only a
                    # worker that fails by itself, again and again, is given up, with its own words as the cause.
                    logger.error("interdist: could not start worker %r again (try %d): %s", self.name, attempt, exc)
                    if not self._cut_by_signal:  # it failed by itself
                        failed += 1
                    if failed >= MAX_FAILED_STARTS:
                        self.failure = _failure(self.name, failed, exc, _log_since(start))
                        logger.error("interdist: %s", self.failure)
                        return
                    # backing off from a worker's own failures; a start cut by a signal is tried again soon
                    await asyncio.sleep(0.5 if self._cut_by_signal else min(RETRY_MAX_S, 0.5 * 2**failed))

    async def close(self) -> None:
        self._closing = True
        if self._supervisor is not None:
            self._supervisor.cancel()  # done before the socket it reads is closed
            with contextlib.suppress(asyncio.CancelledError):
                await self._supervisor
        await self._stop_process()
        await super().close()  # type: ignore[no-untyped-call]  # distributed is untyped

    async def _stop_process(self, timeout: float = 8.0) -> None:
        """Close our end of the socket (the worker closes and exits); kill what is left after ``timeout``."""
        if self._sock is not None:
            self._sock.close()
        process = self.process
        if process is None:
            return
        deadline = time.monotonic() + timeout
        while process.poll() is None and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        if process.poll() is None:
            with contextlib.suppress(OSError):
                os.killpg(process.pid, signal.SIGKILL)  # its session's group: the worker and any child of it
            await asyncio.get_running_loop().run_in_executor(None, process.wait)

    def __repr__(self) -> str:
        return f"<interdist WorkerProcess {self.name!r} pid={self.pid} {self.address}: status={self.status.name}>"


_CREDENTIAL_FIELDS = (
    "require_encryption",
    "tls_ca_file",
    "tls_ciphers",
    "tls_min_version",
    "tls_max_version",
    "tls_worker_cert",
    "tls_worker_key",
    "tls_client_cert",
    "tls_client_key",
)


def _credentials(security: Any) -> dict[str, Any] | None:
    """What a worker needs of the cluster's ``Security`` (its worker and client certificates), or None
    when the cluster has no TLS. PEM contents or file paths, as the ``Security`` holds them; PEM contents
    in place of this process's memfds (``credentials.py``: the worker makes its own)."""
    if security is None or not getattr(security, "tls_ca_file", None):
        return None
    found = {f: credentials.contents(security, f) for f in _CREDENTIAL_FIELDS}
    return {f: v for f, v in found.items() if v is not None}


def _config_env(key: str) -> dict[str, str]:
    """A nanny's environment from Dask's config; the config wins over this process's variables.

    A nanny lets the variables already set here win, but every Dask nanny started in this process
    also writes its pre-spawn variables into ``os.environ`` for good (``distributed/nanny.py``), so
    "already set here" is often a stale value of another cluster's config (Dask's default
    ``MALLOC_TRIM_THRESHOLD_=65536`` after any plain ``LocalCluster``), not the user's choice:
    it would silently undo the allocator settings an embedded cluster starts with (``cluster.py``).
    """
    cfg = dask.config.get(key, {}) or {}
    return {k: str(v) for k, v in cfg.items() if v is not None}


def _interpreter_flags() -> list[str]:
    """This interpreter's options (``-X``, ``-W``, ``-O``...), for the worker's, as multiprocessing passes them."""
    flags: list[str] = subprocess._args_from_interpreter_flags()  # type: ignore[attr-defined]  # what multiprocessing uses
    return flags


async def _read_line(sock: socket.socket) -> bytes:
    """The first line the worker writes (empty if its process ends first)."""
    loop = asyncio.get_running_loop()
    data = b""
    while b"\n" not in data:
        try:
            chunk = await loop.sock_recv(sock, 4096)
        except OSError:
            return b""
        if not chunk:
            return b""
        data += chunk
    return data.split(b"\n", 1)[0]


async def _until_closed(sock: socket.socket) -> None:
    loop = asyncio.get_running_loop()
    while True:
        try:
            if not await loop.sock_recv(sock, 4096):
                return
        except OSError:
            return
