"""``stop_this_process``, the freeze fault's way of stopping a worker: the process is stopped when the call
returns to its caller only after a SIGCONT (timed, or sent by someone else). A SIGSTOP a worker thread sent
to its own process was seen to stop nothing at all, so that a "freeze" ran on as a normal step."""

from __future__ import annotations

import multiprocessing
import os
import signal
import time

import psutil
import pytest

from interdist.replica.faults import stop_this_process


def _child(seconds: float | None, out: multiprocessing.Queue) -> None:  # type: ignore[type-arg]
    t0 = time.monotonic()
    stop_this_process(seconds)
    out.put(time.monotonic() - t0)


def _stopped_within(pid: int, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if psutil.Process(pid).status() == psutil.STATUS_STOPPED:
            return True
        time.sleep(0.01)
    return False


@pytest.mark.parametrize(("seconds", "resume_after"), [(1.0, None), (60.0, 0.5), (None, 0.5)])
def test_the_process_stops_and_runs_on_only_once_resumed(seconds: float | None, resume_after: float | None) -> None:
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    child = ctx.Process(target=_child, args=(seconds, out))
    child.start()
    try:
        assert _stopped_within(child.pid)
        if resume_after is not None:
            time.sleep(resume_after)
            assert psutil.Process(child.pid).status() == psutil.STATUS_STOPPED  # nothing resumed it meanwhile
            os.kill(child.pid, signal.SIGCONT)
        took = out.get(timeout=30)
        # back only once resumed: by the timer (1 s), or by the SIGCONT, long before a 60 s timer
        assert 0.4 < took < 30
        if resume_after is None:
            assert seconds is not None and took >= seconds
    finally:
        child.join(10)
        if child.is_alive():
            child.kill()
    assert child.exitcode == 0
