"""The same-host control path (control.py): who may connect, and that it changes no result."""

from __future__ import annotations

import os
import signal
import socket
import stat
import struct
import threading
import time

import msgpack
import numpy as np
import pytest

import interdist as idist
from interdist import control as local_control
from interdist.worker import control_server


def _endpoint(s: idist.MirroredStrategy, rank: int) -> dict[str, object]:
    group = s._group
    return dict(group.client.sync(lambda: group.client.rpc(group.addresses[rank]).interdist_control_endpoint()))


def test_programs_go_over_the_control_sockets(mirrored2: idist.MirroredStrategy) -> None:
    out = mirrored2.run(lambda: idist.get_replica_context().all_reduce("sum", np.float32(1.5)))
    assert [float(v) for v in mirrored2.experimental_local_results(out)] == [3.0, 3.0]
    conns = mirrored2._group._control
    assert conns is not None and len(conns) == 2 and not any(c.broken for c in conns)
    # Programs over the connection the replica thread reads; notices over a second one, read while it runs.
    assert all(c.side is not None and not c.side.broken for c in conns)


def test_socket_is_private_and_needs_the_token(mirrored2: idist.MirroredStrategy) -> None:
    ep = _endpoint(mirrored2, 0)
    path = str(ep["path"])
    assert stat.S_IMODE(os.stat(os.path.dirname(path)).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    token = bytes(ep["token"])  # type: ignore[arg-type]
    assert len(token) == local_control.TOKEN_BYTES
    wrong = bytes(b ^ 1 for b in token)
    with pytest.raises(ConnectionError, match="refused"):
        local_control.ControlConnection(path, wrong)
    # A refused connection leaves the strategy's own connections working.
    out = mirrored2.run(lambda: np.float32(7.0))
    assert [float(v) for v in mirrored2.experimental_local_results(out)] == [7.0, 7.0]
    local_control.ControlConnection(path, token).close()


def _program() -> object:
    ctx = idist.get_replica_context()
    r = int(ctx.replica_id_in_sync_group)
    big = np.arange(5000, dtype=np.float64) * (r + 1)
    return {"small": np.int32(r), "py": [r, "x", (1.5, None)], "big": big,
            "sum": ctx.all_reduce("sum", big)}


def _results(s: idist.MirroredStrategy) -> list[dict[str, object]]:
    out = s.run(_program)
    return [{k: np.asarray(v) if k in ("small", "big", "sum") else v for k, v in d.items()}
            for d in s.experimental_local_results(out)]


def test_same_results_over_sockets_and_dask_comms(mirrored2: idist.MirroredStrategy) -> None:
    settings = idist.config.settings
    a = _results(mirrored2)
    settings.local_control = False
    try:
        b = _results(mirrored2)
    finally:
        settings.local_control = True
    for x, y in zip(a, b, strict=True):
        assert x["py"] == y["py"]
        for k in ("small", "big", "sum"):
            np.testing.assert_array_equal(x[k], y[k])
            assert x[k].dtype == y[k].dtype
    np.testing.assert_array_equal(a[0]["sum"], np.arange(5000, dtype=np.float64) * 3)


@pytest.mark.parametrize("path", ["socket", "dask"])
def test_interrupted_step_then_the_next_one_works(mirrored2: idist.MirroredStrategy, path: str) -> None:
    settings = idist.config.settings
    settings.local_control = path == "socket"
    timer = threading.Timer(0.3, lambda: os.kill(os.getpid(), signal.SIGINT))
    try:
        def slow() -> object:
            time.sleep(1.0)
            return idist.get_replica_context().all_reduce("sum", np.float32(1.0))

        timer.start()
        with pytest.raises(KeyboardInterrupt):
            mirrored2.run(slow)
        # The interrupted program's replies (late, or aborted) must not be taken for the next step's.
        for k in range(3):
            out = mirrored2.run(lambda k=k: idist.get_replica_context().all_reduce("sum", np.float32(k)))
            assert [float(v) for v in mirrored2.experimental_local_results(out)] == [2.0 * k, 2.0 * k]
    finally:
        timer.cancel()
        settings.local_control = True


def test_workers_on_another_host_use_dask_comms(mirrored2: idist.MirroredStrategy,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    group = mirrored2._group
    group._drop_control()
    monkeypatch.setattr(local_control, "host_id", lambda: "some-other-host/boot")
    try:
        out = mirrored2.run(lambda: np.float32(2.0))
        assert [float(v) for v in mirrored2.experimental_local_results(out)] == [2.0, 2.0]
        assert group._control is None and group._control_refused
    finally:
        group._control_refused = False


@pytest.mark.parametrize("on", [True, False])
def test_collective_packets_between_workers_use_sockets_unless_switched_off(on: bool) -> None:
    settings = idist.config.settings
    settings.local_control = on
    try:
        with idist.MirroredStrategy(["CPU:0", "CPU:1"]) as s:
            def fn() -> object:
                ctx = idist.get_replica_context()
                r = int(ctx.replica_id_in_sync_group)
                # one packet in the pickle, one out of band through shared memory
                return ctx.all_reduce("sum", np.float32(r + 1)), ctx.all_reduce("sum", np.full(10000, r + 1.0))

            small, big = s.run(fn)
            assert [float(v) for v in s.experimental_local_results(small)] == [3.0, 3.0]
            for v in s.experimental_local_results(big):
                np.testing.assert_array_equal(np.asarray(v), np.full(10000, 3.0))
            group = s._group

            def peer_sockets(dask_worker: object, gid: str = group.group_id) -> list[str]:
                from interdist.worker.plugin import get_runtime

                t = get_runtime(dask_worker).replicas[gid].transport.inner
                return sorted(a for a, c in t._socks.items() if c is not None)

            socks = s.client.run(peer_sockets, workers=group.addresses)
            a, b = group.addresses
            assert socks == ({a: [b], b: [a]} if on else {a: [], b: []})
    finally:
        settings.local_control = True


def test_out_of_band_buffers_over_the_peer_socket(mirrored2: idist.MirroredStrategy) -> None:
    """A packet with raw buffers (arrays above the in-band size) that does not go through shared memory."""
    def fn() -> object:
        ctx = idist.get_replica_context()
        transport = ctx._replica.transport
        saved, transport.threshold = transport.threshold, -1  # shared memory off for this collective
        try:
            r = int(ctx.replica_id_in_sync_group)
            return ctx.all_reduce("sum", np.arange(50_000, dtype=np.float32) * (r + 1))
        finally:
            transport.threshold = saved

    out = mirrored2.run(fn)
    for v in mirrored2.experimental_local_results(out):
        np.testing.assert_array_equal(np.asarray(v), np.arange(50_000, dtype=np.float32) * 3)


def test_socket_directories_of_killed_workers_are_removed() -> None:
    import subprocess
    import sys
    import tempfile

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale = tempfile.mkdtemp(prefix=f"{control_server._DIR_PREFIX}{dead.pid}-")
    live = tempfile.mkdtemp(prefix=f"{control_server._DIR_PREFIX}{os.getpid()}-")
    try:
        control_server._remove_stale_dirs()
        assert not os.path.exists(stale) and os.path.isdir(live)
    finally:
        os.rmdir(live)


def test_large_arguments_and_results_as_blobs(mirrored2: idist.MirroredStrategy) -> None:
    """Fields over BLOB_MIN travel after the msgpack header, each read into a buffer of its own."""
    x = np.arange(300_000, dtype=np.float64)  # 2.4 MB pickled: a blob
    assert x.nbytes > local_control.BLOB_MIN
    out = mirrored2.run(lambda v: (v.sum(), v[::-1].copy()), args=(x,))
    sums, rev = out
    assert [float(s) for s in mirrored2.experimental_local_results(sums)] == [float(x.sum())] * 2
    for r in mirrored2.experimental_local_results(rev):
        np.testing.assert_array_equal(np.asarray(r), x[::-1])
    parts = local_control.pack({"step": 1, "fn": b"f" * 10, "args": x.tobytes()})
    assert len(parts) == 2 and parts[1].nbytes == x.nbytes  # the big field is its own buffer, not copied


def test_arguments_out_of_band_are_private_writable_copies(mirrored2: idist.MirroredStrategy) -> None:
    """Arrays sent out of band (pickle protocol 5) arrive as writable arrays of the replica's own."""
    x = np.arange(100_000, dtype=np.float32)  # contiguous: out of band
    y = np.arange(200_000, dtype=np.float64)[::2]  # not contiguous: inside the pickle
    small = np.arange(10, dtype=np.int64)  # out of band, below the blob size

    def fn(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> object:
        a += 1  # in place, on the replica's copy
        b *= 2
        c -= 1
        return a.sum(dtype=np.float64), b.sum(), c.sum(), np.bool_(a.flags.writeable and c.flags.writeable)

    out = mirrored2.run(fn, args=(x, y, small))
    for a, b, c, w in zip(*(mirrored2.experimental_local_results(o) for o in out), strict=True):
        assert float(a) == float(x.astype(np.float64).sum() + x.size)
        assert float(b) == float(y.sum() * 2) and int(c) == int(small.sum() - small.size) and bool(w)
    np.testing.assert_array_equal(x, np.arange(100_000, dtype=np.float32))  # the notebook's arrays unchanged
    np.testing.assert_array_equal(small, np.arange(10))


class _Unit:
    """A class of the notebook's, named in a dtype's metadata (the standard pickler sends it by reference)."""


def test_arrays_whose_dtype_holds_python_objects_are_pickled_by_value(mirrored2: idist.MirroredStrategy) -> None:
    """An array's dtype may carry ``metadata`` or a record type of the user's: such an argument goes through
    cloudpickle (by value), not the standard pickler, which failed on it (or named a class no worker has)."""
    from interdist.client.arg_pickle import _plain

    tagged = np.ones(3, dtype=np.dtype("f8", metadata={"unit": _Unit}))
    record = np.zeros(2, dtype=np.dtype((np.record, [("a", "f4"), ("b", "i4")])))
    assert not _plain(((tagged,), {})) and _plain(((np.ones(3), record.view(np.ndarray)), {}))
    out = mirrored2.run(lambda a: np.float64(a.sum()), args=(tagged,))
    assert [float(v) for v in mirrored2.experimental_local_results(out)] == [3.0, 3.0]


def _raw_connection(server: object) -> socket.socket:
    ep = server.endpoint()  # type: ignore[attr-defined]
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(10)
    sock.connect(ep["path"])
    sock.sendall(ep["token"])
    assert sock.recv(2) == b"OK"
    return sock


@pytest.mark.parametrize(
    "frame",
    [
        struct.pack("!QI", 5, 0) + b"\xc1\xc1\xc1\xc1\xc1",  # 0xc1: a byte msgpack never uses
        struct.pack("!QI", 1, 0) + msgpack.packb(5),  # a message that is not a map
        struct.pack("!QI", 3, 0) + b"\x93\x01\x02",  # a list
    ],
    ids=["not-msgpack", "an-int", "a-list"],
)
def test_a_malformed_frame_with_a_valid_token_closes_only_that_connection(frame: bytes) -> None:
    """Review: "malformed frames with a valid token kill the connection's thread with an uncaught
    exception". Now the connection is closed with a warning, and the server goes on."""
    from interdist.worker.control_server import ControlServer

    handled: list[object] = []
    uncaught: list[object] = []
    old_hook = threading.excepthook
    threading.excepthook = lambda args: uncaught.append(args.exc_value)
    server = ControlServer(lambda msg, reply: handled.append(msg) or reply({"ok": True, "step": msg.get("step")}))
    try:
        bad = _raw_connection(server)
        bad.sendall(frame)
        assert bad.recv(16) == b""  # closed by the server
        bad.close()
        good = local_control.ControlConnection(server.endpoint()["path"], server.endpoint()["token"])
        good.send(local_control.pack({"op": "ping", "step": 1}), 1)
        deadline = time.monotonic() + 10
        while not handled and time.monotonic() < deadline:
            time.sleep(0.01)
        good.close()
    finally:
        server.close()
        threading.excepthook = old_hook
    assert handled == [{"op": "ping", "step": 1}]
    assert uncaught == []


def test_connections_beyond_the_limit_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    from interdist.worker import control_server

    monkeypatch.setattr(control_server, "MAX_CONNECTIONS", 2)
    server = control_server.ControlServer(lambda msg, reply: None)
    try:
        kept = [_raw_connection(server) for _ in range(2)]
        extra = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        extra.settimeout(10)
        extra.connect(server.endpoint()["path"])
        assert extra.recv(2) == b""  # closed at once, before any token is read
        for s in [*kept, extra]:
            s.close()
    finally:
        server.close()


def test_plain_arguments_are_pickled_once_for_every_replica(mirrored2: idist.MirroredStrategy,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """``run``'s arguments with nothing per replica in them (numbers, arrays) are one object for every rank:
    pickled once, each replica gets an equal copy; a ``PerReplica`` among them is still picked per rank."""
    from interdist.client import group as group_mod

    dumps: list[object] = []
    real = group_mod._dump_out_of_band

    def counting(obj: object) -> tuple[bytes, list[memoryview]]:
        dumps.append(obj)
        return real(obj)

    monkeypatch.setattr(group_mod, "_dump_out_of_band", counting)
    x = np.arange(6, dtype=np.float64)

    def fn(a: np.ndarray, k: float, *, shift: int) -> object:
        r = int(idist.get_replica_context().replica_id_in_sync_group)
        a += r  # the replica's own copy
        return a * k + shift

    out = mirrored2.run(fn, args=(x, 2.0), kwargs={"shift": 1})
    assert len(dumps) == 1
    for r, v in enumerate(mirrored2.experimental_local_results(out)):
        np.testing.assert_array_equal(np.asarray(v), (x + r) * 2.0 + 1)
    np.testing.assert_array_equal(x, np.arange(6, dtype=np.float64))  # the notebook's array unchanged

    dumps.clear()
    per = mirrored2.experimental_distribute_values_from_function(
        lambda ctx: np.float64(10 * (ctx.replica_id_in_sync_group + 1)))
    out = mirrored2.run(lambda a, p: a + p, args=(x, per))
    assert len(dumps) == 2  # one pickle per rank: their arguments differ
    for r, v in enumerate(mirrored2.experimental_local_results(out)):
        np.testing.assert_array_equal(np.asarray(v), x + 10 * (r + 1))


def test_a_small_program_message_packs_as_pack_does() -> None:
    """The control path packs small programs without walking them for blobs: the bytes must not change."""
    msg = {"op": "execute", "group": "g", "step": 7, "fn": b"f" * 100, "args": b"a" * 50, "bufs": [],
           "system": False, "release": ["k1", "k2"], "timeout": None}
    assert b"".join(bytes(p) for p in local_control.pack_inline(msg)) == b"".join(
        bytes(p) for p in local_control.pack(msg))
    assert local_control.pack_inline(msg)[0] == bytes(local_control.pack(msg)[0])
