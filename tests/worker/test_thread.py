"""The replica thread's side of Kernel > Interrupt: where an interrupt may land, and programs cancelled before they run.

The whole path (a kernel, SIGINT to its process group, the worker's main thread) is in
``tests/client/test_interrupt.py``.
"""

from __future__ import annotations

import struct
import sys
import threading
import time
from types import FrameType
from typing import Any

from interdist import _nest
from interdist.replica.user_code import call_user, in_user_code
from interdist.worker.thread import ReplicaThread


def test_an_interrupt_lands_only_in_the_users_code() -> None:
    frames: dict[str, FrameType] = {}

    def user_fn(x: int) -> None:
        frames["user"] = sys._getframe()
        # the user's code calls interdist, which calls the user's code back (a merge_fn, a map function)
        _nest.map_structure(lambda y: frames.setdefault("callback", sys._getframe()), [x])

    call_user(user_fn, (1,), {})
    assert in_user_code(frames["user"])  # below call_user, no interdist frame in between
    assert not in_user_code(frames["callback"])  # inside interdist's code: it waits
    assert not in_user_code(sys._getframe())  # not a replica function at all


def test_a_program_interrupted_before_it_starts_does_not_run() -> None:
    ex = ReplicaThread("interdist-test")
    gate = threading.Event()
    got: list[Any] = []
    ex.call(gate.wait, (10,), lambda r, e: got.append(("first", r, e)), step=1)
    ex.call(lambda: got.append("second ran"), (), lambda r, e: got.append(("second", type(e).__name__)), step=2)
    while ex.running != 1:
        time.sleep(0.01)
    assert ex.interrupt(2)  # queued: it will not run
    assert not ex.interrupt(1)  # running on a thread of its own (not a main thread): only waited for
    gate.set()
    deadline = time.monotonic() + 10
    while len(got) < 2:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    assert got == [("first", True, None), ("second", "RuntimeError")]
    ex.shutdown()


def _wait(cond: Any, what: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.005)


def test_a_direct_connection_is_read_by_the_replica_thread_between_programs() -> None:
    """``read_directly``: the notebook's programs are read by the replica thread itself (no handover from the
    control server's thread), queued programs first, in the order they came, a malformed frame or the end of
    the stream dropping only that connection; the queue is still served, and a shutdown closes the connection."""
    import socket

    from interdist import control

    ex = ReplicaThread("interdist-test")
    readers: list[int] = []
    ran: list[Any] = []

    def handler(msg: dict[str, Any], reply: Any) -> None:
        readers.append(threading.get_ident())
        ex.call(lambda: ran.append(msg["n"]) or msg["n"] * 10, (), lambda r, e: reply({"n": msg["n"], "r": r}))

    notebook, worker = socket.socketpair()
    gate = threading.Event()
    ex.call(gate.wait, (10,), lambda r, e: ran.append("queued first"), step=1)  # running while the programs come
    _wait(lambda: ex.running == 1, "the first program to start")
    ex.read_directly(worker, handler)
    for n in (1, 2, 3):
        control.send_parts(notebook, control.pack({"n": n}))
    time.sleep(0.05)
    assert ran == []  # read only once the thread is free: they wait in the socket meanwhile
    gate.set()
    replies = [control.read_message(notebook) for _ in range(3)]
    assert [dict(r) for r in replies] == [{"n": 1, "r": 10}, {"n": 2, "r": 20}, {"n": 3, "r": 30}]
    assert ran == ["queued first", 1, 2, 3]
    assert set(readers) == {ex._ident}  # read on the replica thread, not on this one
    # A program queued from elsewhere (the Dask path) wakes the thread waiting on the connection.
    got: list[Any] = []
    ex.call(lambda: "via the queue", (), lambda r, e: got.append(r))
    _wait(lambda: got, "a queued program to run while the thread waits on its connection")
    assert got == ["via the queue"]
    # A malformed frame closes that connection only; the thread goes on serving the queue and other connections.
    other_nb, other_w = socket.socketpair()
    ex.read_directly(other_w, handler)
    notebook.sendall(struct.pack("!QI", 5, 0) + b"\xc1\xc1\xc1\xc1\xc1")
    notebook.settimeout(10)
    assert notebook.recv(16) == b""  # closed by the replica thread
    control.send_parts(other_nb, control.pack({"n": 4}))
    assert dict(control.read_message(other_nb)) == {"n": 4, "r": 40}
    ex.call(lambda: "still served", (), lambda r, e: got.append(r))
    _wait(lambda: len(got) == 2, "the queue after a dropped connection")
    ex.shutdown()
    other_nb.settimeout(10)
    assert other_nb.recv(16) == b""  # the thread ended: its connections are closed
    notebook.close()
    other_nb.close()


def _state(thread_name: str) -> str:
    """The kernel's state of this process's thread named ``thread_name`` (``R`` running, ``S`` asleep)."""
    (native,) = [t.native_id for t in threading.enumerate() if t.name == thread_name]
    with open(f"/proc/self/task/{native}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0]


def test_a_program_that_asks_to_spin_leaves_the_thread_awake_for_the_next_one() -> None:
    """``call(spin=s)``: once that program replied, the thread polls its direct connections without sleeping for
    up to ``s`` seconds; the next program that comes meanwhile is taken awake (``caught_spinning``). One that comes
    after a program that asked for no spin, or after the spin ran out, wakes the thread from ``poll``."""
    import socket

    from interdist import control

    ex = ReplicaThread("interdist-test-spin")
    notebook, worker = socket.socketpair()

    def handler(msg: dict[str, Any], reply: Any) -> None:
        ex.call(lambda: msg["n"], (), lambda r, e: reply({"n": r}), spin=msg["spin"])

    def program(n: int, spin: float) -> None:
        control.send_parts(notebook, control.pack({"n": n, "spin": spin}))
        assert dict(control.read_message(notebook)) == {"n": n}

    try:
        ex.read_directly(worker, handler)
        program(1, 30.0)  # the thread then spins for up to 30 s: program 2 comes well within them
        program(2, 0.0)
        assert ex.caught_spinning == 1
        program(3, 0.05)  # after program 2 the thread slept: 3 woke it
        assert ex.caught_spinning == 1
        if sys.platform.startswith("linux"):
            # The spin ran out and the thread sleeps in poll (its state alone is not enough: a spinning thread that
            # waits for the interpreter's lock sleeps too, and would then catch program 4 when it gets the lock).
            _wait(
                lambda: ex.asleep and _state("interdist-test-spin") == "S",
                "the spin of 50 ms to run out and the thread to sleep in poll",
            )
            program(4, 0.0)
            assert ex.caught_spinning == 1
    finally:
        ex.shutdown()  # (rings the thread awake also while it spins)
        notebook.close()
