"""The worker's end of the same-host control path: a Unix socket programs take instead of Dask comms.

The socket lives in a directory only this user can enter (0700); a connection may send programs only
after presenting the 32-byte token the worker handed out over Dask comms (``interdist_control_endpoint``).
Directories left behind by killed workers are removed when the next server starts. The framing and
the client end are in ``interdist/control.py``.
"""

from __future__ import annotations

import atexit
import contextlib
import hmac
import logging
import os
import secrets
import shutil
import socket
import tempfile
import threading
import time
import weakref
from collections.abc import Callable, Mapping
from typing import Any

from interdist.control import TOKEN_BYTES, host_id, pack, read_message, send_parts
from interdist.protocol import lost_reply

# -- the worker's side -----------------------------------------------------------
_DIR_PREFIX = "interdist-control-"

logger = logging.getLogger(__name__)


def _remove_stale_dirs() -> None:
    """Remove socket directories of this user's processes that are gone (killed: no atexit ran)."""
    root = tempfile.gettempdir()
    try:
        names = [n for n in os.listdir(root) if n.startswith(_DIR_PREFIX)]
    except OSError:
        return
    for name in names:
        path = os.path.join(root, name)
        try:
            pid = int(name[len(_DIR_PREFIX) :].split("-", 1)[0])
            if os.stat(path).st_uid != os.getuid():
                continue
            os.kill(pid, 0)  # raises if no such process
        except ProcessLookupError:
            shutil.rmtree(path, ignore_errors=True)
        except (ValueError, OSError):
            continue


#: Connections a worker's control server keeps at once (the notebook's, one per peer worker on this
#: host, readers of its chunks); beyond this, new ones are refused, so idle connections cannot pile up.
MAX_CONNECTIONS = 256


#: The requests that hand a connection over to a replica's thread, and what each connection is (for a refusal).
_HANDED_OVER = {"direct": "a direct control connection", "channel": "a collectives channel"}

_SERVERS: weakref.WeakSet[ControlServer] = weakref.WeakSet()  # this process's, for ``settle_after_resume``


def _unread(conn: socket.socket) -> bool:
    """Whether bytes wait in ``conn``'s receive buffer (False if it cannot be told)."""
    try:
        return bool(conn.recv(1, socket.MSG_PEEK | getattr(socket, "MSG_DONTWAIT", 0)))
    except (BlockingIOError, OSError, ValueError):
        return False


def settle_after_resume(timeout: float) -> None:
    """After a SIGCONT: wait until what the control connections received while this process was
    stopped (an abort of the step the notebook gave up on) has been read and handled, at most
    ``timeout`` seconds. Called on the main thread, where replica code runs, so that the code goes on
    only once the abort is in the mailbox: it then leaves the step at its next collective instead of
    completing one its peers abandoned."""
    deadline = time.monotonic() + timeout
    for server in list(_SERVERS):
        with server._lock:
            conns = list(server._conns)
        handled = server.handled
        if not any(_unread(c) for c in conns):
            continue
        while time.monotonic() < deadline:
            if not any(_unread(c) for c in conns) and server.handled > handled:
                break
            time.sleep(0.002)


class ControlServer:
    """One per worker: a listening Unix socket and one serving thread per connection.

    ``handle(msg, reply)`` is called on the serving thread for each request; it must
    arrange for ``reply(dict)`` to be called once (from any thread).
    """

    def __init__(self, handle: Callable[[dict[str, Any], Callable[[Mapping[str, Any]], None]], None]) -> None:
        self._handle = handle
        self.token = secrets.token_bytes(TOKEN_BYTES)
        _remove_stale_dirs()
        self.dir = tempfile.mkdtemp(prefix=f"{_DIR_PREFIX}{os.getpid()}-")  # mode 0700: only this user may enter
        self.path = os.path.join(self.dir, "control.sock")
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._listener.bind(self.path)
        os.chmod(self.path, 0o600)
        self._listener.listen(64)
        self._conns: set[socket.socket] = set()
        self._lock = threading.Lock()
        self.handled = 0  # messages handled so far (``settle_after_resume`` waits for it to move)
        _SERVERS.add(self)
        self.closed = False
        atexit.register(self.close)  # the directory goes with the process, also without a teardown
        threading.Thread(target=self._accept, name="interdist-control-accept", daemon=True).start()

    def endpoint(self) -> dict[str, Any]:
        return {"path": self.path, "token": self.token, "host": host_id()}

    def _accept(self) -> None:
        while not self.closed:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return  # closed
            with self._lock:
                if self.closed:
                    conn.close()
                    return
                if len(self._conns) >= MAX_CONNECTIONS:
                    conn.close()  # the notebook needs one, and each peer worker on this host one
                    logger.warning("interdist: refused a control connection: %d are open already", MAX_CONNECTIONS)
                    continue
                self._conns.add(conn)
            threading.Thread(target=self._serve, args=(conn,), name="interdist-control", daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        write_lock = threading.Lock()
        handed_over = False

        def reply(msg: Mapping[str, Any]) -> None:
            parts = pack(msg)
            with write_lock:
                try:
                    send_parts(conn, parts)
                except OSError:
                    pass  # the notebook went away; its group sees the step as lost

        try:
            conn.settimeout(10)
            token = b""
            while len(token) < TOKEN_BYTES:
                chunk = conn.recv(TOKEN_BYTES - len(token))
                if not chunk:
                    return
                token += chunk
            if not hmac.compare_digest(token, self.token):
                logger.warning("interdist: refused a control connection with a wrong token")
                return
            conn.settimeout(None)
            conn.sendall(b"OK")
            while True:
                try:
                    msg = read_message(conn)
                except OSError:
                    raise
                except Exception as exc:  # noqa: BLE001 - a malformed frame: drop the connection, not the thread
                    logger.warning("interdist: closing a control connection after a malformed frame: %s", exc)
                    return
                if msg is None:
                    return
                if not isinstance(msg, dict):
                    logger.warning("interdist: closing a control connection after a %s message", type(msg).__name__)
                    return
                op = msg.get("op")
                if op in _HANDED_OVER:
                    # The connection is handed over, and this thread lets go of it: the notebook's programs
                    # ("direct": the group's replica thread reads them itself between programs,
                    # ``ReplicaThread.read_directly``) or a peer's stream of collective packets ("channel": the
                    # replica thread that waits for them reads the socket itself, ``Mailbox.add_channel``).
                    with self._lock:
                        self._conns.discard(conn)
                    handed_over = True
                    try:
                        self._handle({"op": op, "group": msg.get("group"), "socket": conn}, reply)
                    except Exception as exc:  # noqa: BLE001 - the other end then sees the connection closed
                        logger.warning("interdist: refused %s: %s", _HANDED_OVER[op], exc)
                        with contextlib.suppress(OSError):
                            conn.close()
                    return
                try:
                    self._handle(msg, reply)
                except Exception as exc:  # noqa: BLE001 - reported as this step's reply
                    reply(lost_reply(exc, step=msg.get("step")))
                finally:
                    self.handled += 1
        except OSError:
            return
        finally:
            if not handed_over:
                with self._lock:
                    self._conns.discard(conn)
                with contextlib.suppress(OSError):
                    conn.close()

    def close(self) -> None:
        atexit.unregister(self.close)
        with self._lock:
            self.closed = True
            conns, self._conns = list(self._conns), set()
        for c in [self._listener, *conns]:
            with contextlib.suppress(OSError):
                c.shutdown(socket.SHUT_RDWR)
            with contextlib.suppress(OSError):
                c.close()
        shutil.rmtree(self.dir, ignore_errors=True)
