"""Faults on purpose: the engine's injection hook, off unless armed (``idist.debug.inject``).

A teacher shows a hang being detected, a lost worker being named and the strategy recovering; a
test suite (``tests/faults/``) injects each kind of fault at each named point. One fault is armed
on one replica for its next program and fires once, at the first matching point:

- ``at``: ``"step"`` (the start of the replica function), ``"collective"`` (before any collective),
  or one collective by name (``"all_reduce"``, ``"all_gather"``, ``"merge_call"``...), or
  ``"update"`` (before a variable update in replica context), or ``"checkpoint_save"`` (in the
  middle of the next ``Checkpoint.save``/``write``, after its first variable is written);
- on a ``ParameterServerStrategy``, ``"ps_step"``: on a worker task, at the start of the next step
  it runs; on a ps task, when it next applies a step's updates (``worker/ps_store.py``); and
  ``"checkpoint_save"`` on either;
- ``fault``: ``"raise"`` (``InjectedFaultError``), ``"slow"`` (sleeps ``seconds``, alive), ``"freeze"``
  (the whole worker process stops, as under SIGSTOP, and resumes after ``seconds``), ``"kill"``
  (the worker process dies, as under SIGKILL; an embedded cluster starts it again).

Unarmed, the hook costs one attribute read per point.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from typing import TYPE_CHECKING, Any

from interdist.errors import InjectedFaultError

if TYPE_CHECKING:
    from interdist.replica.replica import Replica

FAULTS = ("raise", "slow", "freeze", "kill")
POINTS = ("step", "collective", "update", "checkpoint_save")
PS_POINTS = ("ps_step", "checkpoint_save")


def arm(replica: Replica, rank: int, fault: str, at: str, seconds: float) -> None:
    """A system program: arm ``fault`` at ``at`` on replica ``rank`` (the others only disarm)."""
    replica.armed_fault = {"fault": fault, "at": at, "seconds": seconds} if replica.rank == rank else None


def fire(replica: Replica, at: str, op: str | None = None) -> None:
    """Fire the armed fault if it matches this point (``at``; ``op`` names the collective)."""
    armed: dict[str, Any] | None = getattr(replica, "armed_fault", None)
    if armed is None or armed["at"] not in (at, op):
        return
    replica.armed_fault = None  # once
    point = _POINT_NAMES.get(op or at, op or at)
    act(armed["fault"], float(armed["seconds"]), f"{point} on replica {replica.rank} (engine step {replica.step})")


# How the points read in a message (the others are collectives' names: "all_reduce").
_POINT_NAMES = {
    "step": "the start of the replica function",
    "update": "a variable update",
    "checkpoint_save": "Checkpoint.save",
}


def fire_point(replica: Replica, at: str) -> None:
    """A system program: fire a fault armed at ``at`` (a point outside replica functions:
    ``"checkpoint_save"``) on the replica that holds it; the others do nothing."""
    fire(replica, at)


def act(fault: str, seconds: float, where: str) -> None:
    """Do ``fault`` here, now (``where`` names the point, the step and the replica or task)."""
    if fault == "raise":
        raise InjectedFaultError(f"fault injected by idist.debug.inject: raise at {where}")
    if fault == "slow":
        time.sleep(seconds)
    elif fault == "freeze":
        # A stopped process cannot wake itself: a small shell process sends SIGCONT after ``seconds``.
        subprocess.Popen(
            ["/bin/sh", "-c", f"sleep {seconds:g}; kill -CONT {os.getpid()}"],
            start_new_session=True,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        os.kill(os.getpid(), signal.SIGSTOP)  # resumed here; the SIGCONT handler lets pending aborts in first
    elif fault == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
