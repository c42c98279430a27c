"""The same-host control path: programs and their replies over a Unix socket, not the event loops.

A ``run`` over Dask comms crosses four threads (notebook → the client's event loop →
the worker's event loop → the replica thread, and back): ~1.5-1.9 ms on 2 replicas here,
slower than ``client.run`` and than TF's eager ``run``. When the notebook and a worker
share a host, the notebook's own thread writes the program to a Unix socket that the
replica thread reads itself between programs (``ReplicaThread.read_directly``), and the
replica thread writes the reply back. A second socket to the same worker, served by a
thread of the worker's own, carries the notebook's notices to a replica that is running
(an abort, a peer's return). The Dask path stays for everything else (joins, fetches,
collectives) and for workers on other hosts.

Trust is the same as Dask's: the socket lies in a directory only the worker's user can
enter (0700), and a connection must first present a 32-byte token that the worker gave
over Dask's own (authenticated) comms; nothing is read from a connection before that.
Messages are msgpack, with the options Dask's protocol uses, so a reply decodes exactly
as it does over Dask comms.
"""

from __future__ import annotations

import contextlib
import logging
import select
import socket
import struct
import threading
import time
from collections.abc import Callable
from typing import Any

import msgpack

from interdist.protocol import lost_reply

logger = logging.getLogger("interdist")

TOKEN_BYTES = 32
PEER_TIMEOUT = 60.0  # seconds, for worker-to-worker connections


def available() -> bool:
    """Unix sockets, ``poll`` and ``sendmsg`` (not on Windows: there every message takes Dask comms)."""
    return hasattr(socket, "AF_UNIX") and hasattr(select, "poll") and hasattr(socket.socket, "sendmsg")


def host_id() -> str:
    """This machine's identity: host name and boot id (two containers may share a host name)."""
    boot = ""
    with contextlib.suppress(OSError), open("/proc/sys/kernel/random/boot_id") as f:
        boot = f.read().strip()
    return f"{socket.gethostname()}/{boot}"


def _default(obj: Any) -> Any:
    import numpy as np

    if isinstance(obj, np.generic):
        return obj.item()
    raise TypeError(f"cannot send {type(obj).__name__} on the local control path")


# A message is a msgpack header and, after it, the raw bytes of its large fields ("blobs"): a
# pickled 16 MB argument is written from its own buffer and read into one buffer of its own,
# instead of being copied into and out of the msgpack body (measured: 16 MB argument, 2 replicas,
# 110 ms with the body copies against 84 ms over Dask comms).
_PREFIX = struct.Struct("!QI")  # header length, number of blobs
_LEN = struct.Struct("!Q")
_BLOB = 1  # msgpack extension code: the field is blob number N
BLOB_MIN = 64 << 10


def _extract(obj: Any, blobs: list[Any], depth: int = 0) -> Any:
    if isinstance(obj, (bytes, bytearray, memoryview)):
        if memoryview(obj).nbytes >= BLOB_MIN:
            blobs.append(memoryview(obj).cast("B"))
            return msgpack.ExtType(_BLOB, _LEN.pack(len(blobs) - 1))
        return obj
    if depth >= 3:
        return obj
    if isinstance(obj, dict):
        return {k: (v if k == "events" else _extract(v, blobs, depth + 1)) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_extract(v, blobs, depth + 1) for v in obj]
    return obj


def pack(msg: Any) -> list[Any]:
    """``msg`` as the buffers to write, in order (``send_parts``)."""
    blobs: list[Any] = []
    header: bytes = msgpack.packb(_extract(msg, blobs), use_bin_type=True, default=_default)
    lengths = b"".join(_LEN.pack(b.nbytes) for b in blobs)
    return [_PREFIX.pack(len(header), len(blobs)) + lengths + header, *blobs]


def pack_inline(msg: Any) -> list[Any]:
    """``pack`` of a message known to have no field of ``BLOB_MIN`` bytes or more (a small collective
    packet), without walking it for blobs: the same bytes as ``pack(msg)``."""
    header: bytes = msgpack.packb(msg, use_bin_type=True, default=_default)
    return [_PREFIX.pack(len(header), 0) + header]


def send_parts(sock: socket.socket, parts: list[Any]) -> None:
    """Write every part, in order, without joining them (``sendmsg`` may write part of them)."""
    views = [memoryview(p).cast("B") for p in parts if len(p)]
    while views:
        advance(views, sock.sendmsg(views[:64]))


def advance(views: list[memoryview], sent: int) -> None:
    """Drop from ``views`` the ``sent`` bytes a ``sendmsg`` wrote (whole views, then part of one)."""
    while sent:
        if sent >= views[0].nbytes:
            sent -= views[0].nbytes
            views.pop(0)
        else:
            views[0] = views[0][sent:]
            sent = 0


def _recv_exact(sock: socket.socket, n: int) -> bytearray | None:
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        k = sock.recv_into(view[got:], n - got)
        if k == 0:
            return None
        got += k
    return buf


def read_message(sock: socket.socket) -> Any:
    """The next message, blocking; ``None`` at end of stream."""
    prefix = _recv_exact(sock, _PREFIX.size)
    if prefix is None:
        return None
    header_len, nblobs = _PREFIX.unpack(prefix)
    rest = _recv_exact(sock, _LEN.size * nblobs + header_len)
    if rest is None:
        return None
    lengths = [_LEN.unpack_from(rest, _LEN.size * i)[0] for i in range(nblobs)]
    blobs = []
    for n in lengths:
        blob = _recv_exact(sock, n)
        if blob is None:
            return None
        blobs.append(blob)

    def ext(code: int, data: bytes) -> Any:
        if code != _BLOB:
            return msgpack.ExtType(code, data)
        return blobs[_LEN.unpack(data)[0]]

    return msgpack.unpackb(
        memoryview(rest)[_LEN.size * nblobs :], raw=False, use_list=False, strict_map_key=False, ext_hook=ext
    )


def _readable(sock: socket.socket) -> bool:
    poller = select.poll()  # not select.select: it fails on descriptors above 1023
    poller.register(sock, select.POLLIN)
    return bool(poller.poll(0))


# -- the notebook's side ---------------------------------------------------------
class ControlConnection:
    """The notebook's connection to one replica's worker."""

    def __init__(self, path: str, token: bytes, timeout: float = 5.0) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self.sock.settimeout(timeout)
            self.sock.connect(path)
            self.sock.sendall(token)
            ok = b""
            while len(ok) < 2:
                chunk = self.sock.recv(2 - len(ok))
                if not chunk:
                    raise ConnectionError(f"the worker refused the control connection at {path}")
                ok += chunk
            self.sock.settimeout(None)
        except BaseException:
            self.sock.close()
            raise
        self.pending: set[int] = set()  # steps sent whose reply has not been read
        self.broken = False
        self._write_lock = threading.Lock()
        # The notebook's programs go over a connection the replica thread reads itself (``direct``); its
        # notices for a replica that is running (``post``: an abort, a peer's return) over this one, which
        # the worker's control server reads meanwhile.
        self.side: ControlConnection | None = None

    @classmethod
    def direct(cls, path: str, token: bytes, group: str) -> ControlConnection:
        """The notebook's two connections to a replica's worker: programs and their replies over the one
        returned, read by the replica thread between programs (``ReplicaThread.read_directly``); the
        messages ``post`` sends over its ``side``, read by the worker's control server at any time."""
        conn = cls(path, token)
        try:
            conn.side = cls(path, token)
            send_parts(conn.sock, pack({"op": "direct", "group": group}))
        except BaseException:
            conn.close()
            raise
        return conn

    def post(self, parts: list[Any]) -> None:
        """Send a message that has no reply (a collective packet to a peer, the notebook's notice to a
        replica); from any thread."""
        if self.side is not None:
            self.side.post(parts)
            return
        with self._write_lock:
            try:
                send_parts(self.sock, parts)
            except OSError:
                self.broken = True
                raise

    def fileno(self) -> int:
        return self.sock.fileno()

    def send(self, parts: list[Any], step: int) -> None:
        self.pending.add(step)
        send_parts(self.sock, parts)

    def replies(self) -> tuple[list[dict[str, Any]], bool]:
        """Replies that have arrived (stale ones are dropped from ``pending`` too); and end of stream.

        Reads while the socket is readable: a reply whose first bytes have come is read to its
        end (the worker writes a reply in one go).
        """
        out = []
        eof = False
        try:
            while _readable(self.sock):
                msg = read_message(self.sock)
                if msg is None:
                    eof = True
                    break
                self.pending.discard(msg.get("step"))
                out.append(msg)
        except (OSError, ValueError):
            eof = True
        if eof:
            self.broken = True
        return out, eof

    def done(self) -> bool:
        """Whether every step sent has answered (for a replica left running: ``DaskGroup.busy``)."""
        if self.pending and not self.broken:
            self.replies()
        return not self.pending or self.broken

    def close(self) -> None:
        self.broken = True
        with contextlib.suppress(OSError):
            self.sock.close()
        if self.side is not None:
            self.side.close()


def connect_from_worker(worker: Any, addr: str) -> ControlConnection | None:
    """From a thread on a worker (not its event loop): a connection to the worker at ``addr`` when it
    shares this host, else ``None`` (another host, an old peer, another user)."""
    import asyncio

    from distributed.utils import sync

    try:

        async def ask() -> Any:
            return await asyncio.wait_for(worker.rpc(addr).interdist_control_endpoint(), 10)

        ep = sync(worker.loop, ask)
        if ep is None or ep["host"] != host_id():
            return None
        conn = ControlConnection(ep["path"], ep["token"])
        # A peer that stops reading (a frozen process) must not block a replica for ever: a send
        # or a reply that takes this long fails, and the caller aborts the step or reads via Dask.
        conn.sock.settimeout(PEER_TIMEOUT)
        return conn
    except Exception:  # noqa: BLE001 - then the caller uses Dask comms
        return None


def wait_replies(
    conns: dict[int, ControlConnection],
    step: int,
    on_reply: Callable[[int, dict[str, Any]], None],
    timeout_after_failure: Callable[[], float | None],
    on_idle: Callable[[list[int]], list[int]] | None = None,
    idle_every: float = 1.0,
) -> list[int]:
    """Read each rank's reply for ``step``; the ranks that did not answer when the wait timed out.

    ``on_reply(rank, reply)`` is called as replies come (a lost connection gives a reply with
    ``lost``); ``timeout_after_failure()`` is how long to wait for the next reply (``None``: no limit).
    ``on_idle(waiting)``, when given, is called every ``idle_every`` seconds without a reply; the ranks
    it returns are no longer waited for (it has dealt with them: a frozen replica).
    """
    waiting = set(conns)
    # ``poll`` rather than ``selectors``: no epoll object to make and register per step (~50 us).
    poller = select.poll()
    by_fd = {}
    for r in waiting:
        poller.register(conns[r].sock, select.POLLIN)
        by_fd[conns[r].fileno()] = r

    def finish(r: int) -> None:
        waiting.discard(r)
        poller.unregister(conns[r].sock)

    deadline: float | None = None  # when the wait after a failure ends; each reply restarts it
    while waiting:
        grace = timeout_after_failure()
        now = time.monotonic()
        deadline = None if grace is None else (now + grace if deadline is None else deadline)
        wait = None if deadline is None else max(0.0, deadline - now)
        if on_idle is not None:
            wait = idle_every if wait is None else min(wait, idle_every)
        ready = poller.poll(None if wait is None else wait * 1000)
        if not ready:
            if deadline is not None and time.monotonic() >= deadline:
                return sorted(waiting)
            if on_idle is not None:
                for r in on_idle(sorted(waiting)):
                    if r in waiting:
                        finish(r)
            continue
        deadline = None
        for fd, _ in ready:
            r = by_fd[fd]
            if r not in waiting:
                continue
            replies, eof = conns[r].replies()
            for msg in replies:
                if msg.get("step") == step and r in waiting:
                    finish(r)
                    on_reply(r, msg)
            if eof and r in waiting:
                finish(r)
                on_reply(
                    r,
                    dict(
                        lost_reply(
                            type_name="CommClosedError",
                            message="the worker closed the control connection (the process died?)",
                        )
                    ),
                )
    return []
