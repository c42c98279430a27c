"""An embedded worker's process: a Dask worker whose main thread runs the replica programs.

``interdist/client/worker_process.py`` starts one per device of an embedded cluster, as a fresh
``python`` (not through ``multiprocessing``, so the notebook's or script's ``__main__`` is never run
again here) in a session of its own (so the kernel's or terminal's SIGINT does not reach it). It gets
one end of a socket pair from its parent and:

- first reads its spec from it (the boot code in ``worker_process.py``: never on its command line), then
  the cluster's TLS credentials, when ``spec["credentials"]`` says they follow (into memfds of this
  process, ``worker/credentials.py``: never in a file);
- writes one JSON line on it when the worker is up (``{"address": ...}``) or could not start
  (``{"error": ...}``);
- reads it to its end: the end comes when the parent closes it (it shuts the worker down) or dies
  (killed, too): the worker then closes and the process exits, so no worker outlives its notebook;
- runs the Dask worker's event loop on a thread, and serves replica programs on the main thread,
  where the notebook's interrupt can reach them (``worker/thread.py``).

SIGTERM closes the worker as the end of the socket does.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import logging
import os
import signal
import socket
import sys
import threading
import time
from typing import Any

import dask
from distributed import Worker
from distributed.compatibility import asyncio_run
from distributed.config import get_loop_factory

from interdist.replica.user_code import enable_capture
from interdist.worker import thread
from interdist.worker.control_server import settle_after_resume
from interdist.worker.credentials import in_memory

_EXIT_GRACE = 10.0  # seconds a closing worker gets before the process exits regardless
_RESUME_SETTLE = 0.3  # seconds the main thread waits after a SIGCONT (see main)
_RESUME_WAIT = 5.0  # at most this long for the control connections to hand over what came meanwhile


def main(spec: dict[str, Any]) -> None:
    """Run the worker described by ``spec`` (see ``client/worker_process.py``) until it closes."""
    _name_process()
    sock = socket.socket(fileno=int(spec["fd"]))
    sock.set_inheritable(False)
    if spec.get("credentials"):
        spec = {**spec, "options": {**spec.get("options", {}), "security": _read_security(sock)}}
    for name, level in spec.get("log_levels", {}).items():
        logging.getLogger(name).setLevel(level)
    dask.config.set(spec.get("dask_config") or {})  # (QUIET_EVENT_LOOPS: read as the worker is made)
    enable_capture()  # replicas' prints go back with their replies; the rest to the worker log (worker_process.py)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda signum, frame: stop.set())
    # Resumed after a SIGSTOP (a frozen replica): the notebook has given up on the step and aborted it, and
    # the abort waits in this process's sockets. Give the threads that read them a moment before the
    # replica's code goes on (this handler runs on the main thread, where that code runs), so that it
    # leaves the step at its next collective instead of completing one its peers abandoned.
    signal.signal(signal.SIGCONT, lambda signum, frame: _settle())
    code = [1]
    loop_thread = threading.Thread(
        target=_run_loop, args=(spec, sock, stop, code), name="interdist-worker-loop", daemon=True
    )
    loop_thread.start()
    thread.serve_main_thread()  # until the worker closes (stop_main_thread)
    loop_thread.join(_EXIT_GRACE)
    _exit(code[0])


#: This process's name (``/proc/PID/comm``: what ``ps``, ``top`` and ``psutil``'s ``name()`` show), fresh or forked
#: from a zygote (``idist-zygote``, ``client/zygote.py``), whose command line a forked worker keeps.
PROCESS_NAME = "idist-worker"


def freeze_startup_objects() -> None:
    """Collect once, then leave every object alive now (the imports' modules, functions and classes, the Dask
    worker) out of the garbage collector's scans for good (``gc.freeze``).

    Without it, a full collection in a worker scanned the ~69,000 objects of Dask's, NumPy's and interdist's
    imports: 33-41 ms, about once every 9 s per worker in a loop of small all-reduces, while every peer of the
    replica waited in the next collective (the longest of 20,000 4 KB all-reduces took 54-83 ms at 2 and 4
    replicas; frozen, a full collection takes ~3 ms and the longest collective 4-10 ms). The zygote freezes what
    it imported before it forks (its workers inherit it, and the collector no longer writes to the pages they
    share); a worker freezes what its start made. Objects frozen stay refcounted: only a reference cycle among
    them would never be freed, and none of them is garbage at the freeze (``gc.collect`` first: 29 ms after the
    imports, a fraction of a millisecond in a forked worker).
    """
    gc.collect()
    gc.freeze()


def _name_process() -> None:
    with contextlib.suppress(OSError), open("/proc/self/comm", "w") as f:
        f.write(PROCESS_NAME)


def _settle() -> None:
    """The SIGCONT handler: the abort waiting in a control socket is handled before replica code goes on
    (``settle_after_resume``, at most ``_RESUME_WAIT`` s: under load its thread may wait for a core), and
    the peers' channels get ``_RESUME_SETTLE`` s more."""
    settle_after_resume(_RESUME_WAIT)
    time.sleep(_RESUME_SETTLE)


def _read_security(sock: socket.socket, timeout: float = 30.0) -> Any:
    """The ``Security`` of a TLS cluster, from the first line the parent writes on the socket."""
    from distributed.security import Security

    sock.settimeout(timeout)
    data = b""
    while b"\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            raise SystemExit("interdist: the parent closed the socket before sending the cluster's credentials")
        data += chunk
    sock.settimeout(None)
    line, rest = data.split(b"\n", 1)
    if rest:
        raise SystemExit("interdist: unexpected data after the cluster's credentials")

    # Certificate and key into memfds of this process (kept open for its life): never a file.
    return in_memory(Security(**json.loads(line)))  # type: ignore[no-untyped-call]  # distributed is untyped


def _run_loop(spec: dict[str, Any], sock: socket.socket, stop: threading.Event, code: list[int]) -> None:
    try:
        code[0] = asyncio_run(_serve(spec, sock, stop), loop_factory=get_loop_factory())
    except BaseException:  # logged; the process ends below in every case
        logging.getLogger("interdist").exception("interdist: the worker's event loop failed")
    finally:
        thread.stop_main_thread()
    # The main thread may be in a replica function that does not return: do not wait for it long.
    timer = threading.Timer(_EXIT_GRACE, _exit, args=(code[0],))
    timer.daemon = True
    timer.start()


async def _serve(spec: dict[str, Any], sock: socket.socket, stop: threading.Event) -> int:
    loop = asyncio.get_running_loop()
    sock.setblocking(False)
    # Watched from the start: a parent that dies while the worker still looks for its scheduler (which may
    # have died with it) ends this process now, not when the worker gives up (never, without death_timeout).
    parent_gone: asyncio.Future[Any] = asyncio.ensure_future(_until_closed(loop, sock))
    try:
        worker = Worker(spec["scheduler"], name=spec["name"], **spec.get("options", {}))
        starting: asyncio.Future[Any] = asyncio.ensure_future(worker.start())  # type: ignore[no-untyped-call]  # distributed is untyped
        await asyncio.wait([starting, parent_gone], return_when=asyncio.FIRST_COMPLETED)
        if not starting.done():
            starting.cancel()
            with contextlib.suppress(BaseException):
                await asyncio.wait_for(worker.close(timeout=2, nanny=False, reason="interdist: parent gone"), 5)
            return 0
        starting.result()
        freeze_startup_objects()
    except Exception as exc:  # noqa: BLE001 - the parent shows it, in one line
        parent_gone.cancel()
        await _say(loop, sock, {"error": f"{type(exc).__name__}: {exc}"})
        return 1
    await _say(loop, sock, {"address": worker.address, "pid": os.getpid()})

    stopped: asyncio.Future[Any] = asyncio.ensure_future(loop.run_in_executor(None, stop.wait))
    finished: asyncio.Future[Any] = asyncio.ensure_future(worker.finished())  # type: ignore[no-untyped-call]  # distributed is untyped
    await asyncio.wait([parent_gone, stopped, finished], return_when=asyncio.FIRST_COMPLETED)
    if not finished.done():
        try:
            await asyncio.wait_for(
                worker.close(timeout=5, nanny=False, executor_wait=False, reason="interdist: parent gone"),
                _EXIT_GRACE - 2,
            )
        except Exception:  # the process exits anyway
            logging.getLogger("interdist").exception("interdist: the worker did not close cleanly")
    stop.set()  # ends the executor thread waiting on it
    for task in (parent_gone, stopped, finished):
        task.cancel()
    return 0


async def _say(loop: asyncio.AbstractEventLoop, sock: socket.socket, msg: dict[str, Any]) -> None:
    try:
        await loop.sock_sendall(sock, (json.dumps(msg) + "\n").encode())
    except OSError:
        pass  # the parent is gone: reading the socket says so next


async def _until_closed(loop: asyncio.AbstractEventLoop, sock: socket.socket) -> None:
    """Return when the parent closes its end or dies (nothing is ever written on it)."""
    while True:
        try:
            data = await loop.sock_recv(sock, 4096)
        except OSError:
            return
        if not data:
            return


def _exit(code: int) -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # noqa: BLE001, S110 - exiting must not fail on a closed stream
            pass
    os._exit(code)
