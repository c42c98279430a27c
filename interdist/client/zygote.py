"""Worker processes forked from one that has imported them already: a few seconds for a whole cluster.

A worker process starts by importing Dask and interdist: about a second of CPU on an idle machine, several
on a busy one, for every worker. ``interdist.Server``s made one after another in one process (TF's
in-process cluster: a ``Server`` per task) paid it once per task, in a row: a 5-task parameter-server
cluster took 6 s on an idle 2-core machine, 12 s on a busy one (TF: under a second).

A ``Zygote`` is a ``python`` started as a worker is (``worker_process.py``: a fresh interpreter, never
through ``multiprocessing``, so a script's ``__main__`` is never run again; this process's import path,
environment and interpreter flags) that imports what a worker needs, once, then waits. Each worker is a
``fork`` of it: in its own session, with the socket pair end and log file of its ``WorkerProcess``
(passed over a ``SOCK_SEQPACKET`` control socket as ``SCM_RIGHTS``), the rest as the boot code of a
fresh worker would do it. The zygote reaps its children and reports their exit codes, so a
``WorkerProcess`` watches a forked worker as it watches one it started itself (:class:`Forked` is what
it uses of a ``Popen``).

It is used only where it is safe and the same: the zygote's environment must be the worker's (the
variables read as a process starts: the allocator's, the BLAS thread counts, Dask's inherited config),
but for the worker's name in its log format, set in the child; it forks only while it has one thread.
Anything else, or a zygote that fails, and the worker is started as before. The zygote ends when this
process closes its control socket or dies (however it dies); the workers it forked end with their
own socket pairs, as every worker does.

Embedded CPU clusters use it too (``interdist.cluster.fork-workers: false``: not even ``Server``). A worker
is forked in this process's working directory of the moment; past ``MAX_ZYGOTES`` environments, the least
recently used zygote without live workers is closed. A forked worker is a grandchild with the zygote's
command line: it is told from the zygote (``idist-zygote`` in ``ps``) by its name, ``idist-worker``.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import subprocess
import sys
import threading
import time
from typing import Any

logger = logging.getLogger("interdist")

#: Variables a forked worker sets for itself: read after the imports (the worker's log format), or never
#: (pytest's name of the test: new at every test, a zygote for each otherwise).
LATE_ENV = frozenset({"DASK_DISTRIBUTED__ADMIN__LOG_FORMAT", "PYTEST_CURRENT_TEST"})
#: The most zygotes (one per distinct worker environment) this process keeps.
MAX_ZYGOTES = 3
#: Seconds to wait for a zygote's imports, and for its answer to a fork.
READY_TIMEOUT = 60.0
FORK_TIMEOUT = 10.0
#: Seconds after ``for_env`` handed a zygote out during which it is not retired for another (a fork follows).
HANDED_OUT_GRACE = 5.0

# The zygote: its first packet carries the import path and the workers' boot code; it imports, says it
# is ready, then forks one child per request and reports each child's exit. A child runs the worker's boot
# code (``worker_process._BOOT``) on the socket it was given, as a fresh worker process would.
_ZYGOTE = """\
import json, os, select, signal, socket, sys, traceback
try:
    with open('/proc/self/comm', 'w') as f:
        f.write('idist-zygote')  # as ps and top show it, and never mistaken for a worker (idist-worker)
except OSError:
    pass
ctl = socket.socket(fileno=int(sys.argv[1]))
first = json.loads(ctl.recv(1 << 20))
sys.path[:] = first['sys_path']
try:
    import distributed
    import interdist.worker.process
    threads = len(os.listdir('/proc/self/task'))
    if threads != 1:
        raise RuntimeError(f'{threads} threads after the imports: a fork would lose all but one')
    interdist.worker.process.freeze_startup_objects()  # inherited: the workers' collector never scans them
except BaseException as exc:
    ctl.send(json.dumps({'error': f'{type(exc).__name__}: {exc}'}).encode())
    raise SystemExit(1)
ctl.send(b'{"ready": true}')
wake_r, wake_w = os.pipe()
os.set_blocking(wake_r, False)
os.set_blocking(wake_w, False)
signal.set_wakeup_fd(wake_w)
signal.signal(signal.SIGCHLD, lambda *_: None)

def child(req, fds):
    signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    os.close(wake_r)
    os.close(wake_w)
    ctl.close()
    os.setsid()
    if req.get('cwd'):
        try:
            os.chdir(req['cwd'])  # the parent's, now: a fresh worker would start there
        except OSError:
            pass
    sock = fds[0]
    if len(fds) > 1:
        os.dup2(fds[1], 1)
        os.dup2(fds[1], 2)
        os.close(fds[1])
    os.environ.update(req['env'])
    fmt = req['env'].get('DASK_DISTRIBUTED__ADMIN__LOG_FORMAT')
    if fmt:
        import logging, dask
        dask.config.set({'distributed.admin.log-format': fmt})
        for name in ('distributed', 'distributed.client', 'distributed.gc', 'bokeh', 'tornado'):
            for handler in logging.getLogger(name).handlers:
                if isinstance(handler, logging.StreamHandler):
                    handler.setFormatter(logging.Formatter(fmt))
    if 'numpy' in sys.modules:
        sys.modules['numpy'].random.seed()  # not the zygote's stream in every worker (Python's random reseeds)
    sys.argv = ['-c', str(sock)]
    exec(first['boot'], {'__name__': '__main__'})


def reap():
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        ctl.send(json.dumps({'exit': pid, 'code': os.waitstatus_to_exitcode(status)}).encode())


while True:
    ready, _, _ = select.select([ctl, wake_r], [], [])
    if wake_r in ready:
        while True:
            try:
                if not os.read(wake_r, 512):
                    break
            except BlockingIOError:
                break
    reap()
    if ctl not in ready:
        continue
    msg, fds, _flags, _addr = socket.recv_fds(ctl, 1 << 20, 4)
    if not msg:
        os._exit(0)  # the parent closed its end, or died
    req = json.loads(msg)
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            child(req, fds)
            code = 0
        except SystemExit as exc:
            if isinstance(exc.code, int):
                code = exc.code
            elif exc.code is not None:
                print(exc.code, file=sys.stderr, flush=True)
        except BaseException:
            traceback.print_exc()
        finally:
            os._exit(code)
    for fd in fds:
        os.close(fd)
    ctl.send(json.dumps({'req': req['req'], 'pid': pid}).encode())
"""


class Forked:
    """A worker process a zygote forked: what ``WorkerProcess`` uses of a ``subprocess.Popen``."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None
        self._done = threading.Event()
        self._orphan = False  # its zygote is gone: no exit code will come

    def _exited(self, code: int) -> None:
        self.returncode = code
        self._done.set()

    def _orphaned(self) -> None:
        self._orphan = True
        self._done.set()

    def poll(self) -> int | None:
        if self.returncode is None and self._orphan and not alive(self.pid):
            self.returncode = -1  # ended, its code unknown (it was its zygote's to collect)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int | None:
        self._done.wait(timeout)
        while self.poll() is None and self._orphan:
            self._done.wait(0.1)  # reparented: watch it until it ends
        return self.returncode


def _cwd() -> str | None:
    """This process's working directory, where a fresh worker would start (None: it was removed)."""
    try:
        return os.getcwd()
    except OSError:
        return None


def alive(pid: int) -> bool:  # process ``pid`` exists and is not a zombie (dead, not collected yet)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[-1].split()[0] != "Z"
    except OSError:
        return False


class Zygote:
    """A started zygote process and its control socket (see the module's docstring)."""

    def __init__(self, env: dict[str, str], flags: list[str], boot: str, log: int | None) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self.process = subprocess.Popen(
                [sys.executable, *flags, "-c", _ZYGOTE, str(theirs.fileno())],
                pass_fds=(theirs.fileno(),),
                start_new_session=True,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=None if log is None else subprocess.STDOUT,
                env=env,
            )
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        self._sock = ours
        self._sock.send(json.dumps({"sys_path": sys.path, "boot": boot}).encode())
        self._lock = threading.Lock()  # one request on the socket at a time
        self._state = threading.Condition()
        self._ready: bool | None = None
        self.error: str | None = None
        self._answers: dict[int, int] = {}
        self._children: dict[int, Forked] = {}
        self._early_exits: dict[int, int] = {}
        self._next = 0
        self._forking = 0  # forks under way (their children not yet in ``_children``)
        self._retired = False  # taken out of use (``retire``): it forks no more
        self.handed_out = time.monotonic()  # when ``for_env`` last returned it: a fork may follow
        self._gone = False
        self._reader = threading.Thread(target=self._read, name="interdist-zygote", daemon=True)
        self._reader.start()

    @property
    def usable(self) -> bool:
        return self._ready is not False and not self._gone and not self._retired and self.process.poll() is None

    def retire(self) -> bool:
        """Take it out of use if no worker it forked is alive and no fork is under way (closing it then
        leaves no worker without the exit code it reports); whether it was."""
        with self._state:
            if self._children or self._forking or self._retired:
                return False
            self._retired = True
            return True

    def _read(self) -> None:
        while True:
            try:
                data = self._sock.recv(1 << 16)
            except OSError:
                data = b""
            if not data:
                break
            msg = json.loads(data)
            with self._state:
                if "ready" in msg:
                    self._ready = True
                elif "error" in msg:
                    self._ready, self.error = False, str(msg["error"])
                elif "exit" in msg:
                    child = self._children.pop(int(msg["exit"]), None)
                    if child is None:
                        self._early_exits[int(msg["exit"])] = int(msg["code"])
                    else:
                        child._exited(int(msg["code"]))
                elif "req" in msg:
                    self._answers[int(msg["req"])] = int(msg["pid"])
                self._state.notify_all()
        with self._state:  # the zygote is gone: its children's exits will not be reported
            if self._ready is None:
                self._ready, self.error = False, "it ended before it was ready"
            self._gone = True
            for child in self._children.values():
                child._orphaned()
            self._children.clear()
            self._state.notify_all()

    def fork(self, sock: socket.socket, log: int | None, late_env: dict[str, str]) -> Forked:
        """A worker process on ``sock`` (the child's end of its socket pair), writing to ``log``."""
        with self._state:
            if not self._state.wait_for(lambda: self._ready is not None, READY_TIMEOUT) or not self._ready:
                raise RuntimeError(f"the zygote could not start: {self.error or 'no answer'}")
        with self._state:
            if self._retired:
                raise RuntimeError("the zygote was retired")
            self._forking += 1
        try:
            return self._fork(sock, log, late_env)
        finally:
            with self._state:
                self._forking -= 1

    def _fork(self, sock: socket.socket, log: int | None, late_env: dict[str, str]) -> Forked:
        fds = [sock.fileno()] + ([log] if log is not None else [])
        with self._lock:
            self._next += 1
            req = self._next
            msg = {"req": req, "env": late_env, "cwd": _cwd()}
            socket.send_fds(self._sock, [json.dumps(msg).encode()], fds)
        with self._state:
            if not self._state.wait_for(lambda: req in self._answers or not self.usable, FORK_TIMEOUT):
                raise RuntimeError("the zygote did not answer a fork")
            if req not in self._answers:
                raise RuntimeError(f"the zygote ended: {self.error or 'no answer'}")
            pid = self._answers.pop(req)
            child = Forked(pid)
            if pid in self._early_exits:
                child._exited(self._early_exits.pop(pid))
            else:
                self._children[pid] = child
            return child

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)
        self._sock.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(5)


_zygotes: dict[tuple[Any, ...], Zygote] = {}
_zygotes_lock = threading.Lock()


def split_env(env: dict[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """(what the zygote must be started with, what a forked worker sets for itself)."""
    early = {k: v for k, v in env.items() if k not in LATE_ENV}
    return early, {k: v for k, v in env.items() if k in LATE_ENV}


def for_env(env: dict[str, str], flags: list[str], boot: str, log: int | None) -> Zygote | None:
    """The zygote for workers with ``env`` (started now if there is none yet), or None when there are
    ``MAX_ZYGOTES`` already, each with live workers, or this platform cannot pass descriptors."""
    if not hasattr(socket, "send_fds") or not hasattr(os, "fork") or not os.path.isdir("/proc/self/task"):
        return None
    early, _ = split_env(env)
    # Not keyed by ``sys.path``: Dask puts a scheduler's scratch folder on it while the scheduler runs; each
    # worker takes the path of its spec, and the zygote's imports (Dask, interdist) do not depend on it.
    # Keyed by whether there is a log file: a zygote started without one writes to this process's streams.
    key = (tuple(flags), tuple(sorted(early.items())), boot, log is None)
    with _zygotes_lock:
        zygote = _zygotes.get(key)
        if zygote is not None and zygote.usable:
            zygote.handed_out = time.monotonic()
            return zygote
        if zygote is not None:
            zygote.close()
            del _zygotes[key]
        if len(_zygotes) >= MAX_ZYGOTES and not _retire_one():
            return None
        try:
            zygote = Zygote(early, flags, boot, log)
        except OSError as exc:
            logger.info("interdist: no zygote for worker processes (%s): starting each on its own", exc)
            return None
        _zygotes[key] = zygote
        return zygote


def _retire_one() -> bool:
    """Close the least recently used zygote that has no live worker (a changed environment or Dask config
    asks for a zygote of its own: the test suite's many configs, a notebook's ``os.environ`` edits);
    whether there was one. Called with ``_zygotes_lock`` held."""
    now = time.monotonic()
    for key, zygote in sorted(_zygotes.items(), key=lambda kv: kv[1].handed_out):
        if now - zygote.handed_out > HANDED_OUT_GRACE and zygote.retire():
            del _zygotes[key]
            zygote.close()
            return True
    return False


def close_all() -> None:
    """End every zygote (the workers they forked go on: each ends with its own socket pair)."""
    with _zygotes_lock:
        zygotes = list(_zygotes.values())
        _zygotes.clear()
    for zygote in zygotes:
        zygote.close()
