"""The replica thread's side of Kernel > Interrupt: where an interrupt may land, and programs cancelled before they run.

The whole path (a kernel, SIGINT to its process group, the worker's main thread) is in
``tests/client/test_interrupt.py``.
"""

from __future__ import annotations

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
