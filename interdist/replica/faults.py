"""Faults on purpose: the engine's injection hook, off unless armed (``idist.debug.inject``).

A teacher shows a hang being detected, a lost worker being named and the strategy recovering; a
test suite (``tests/faults/``) injects each kind of fault at each named point. One fault is armed
on one replica (``arm``, a system program run on every replica: the others drop theirs) and fires
once, at the first matching point of the replica's next *user* program (``strategy.run``,
``run_steps``):

- ``at``: ``"step"`` (the start of the replica function), ``"collective"`` (before any collective),
  or one collective by name (``"all_reduce"``, ``"all_gather"``, ``"merge_call"``...), or
  ``"update"`` (before a variable update in replica context), or ``"checkpoint_save"`` (in the
  middle of the next ``Checkpoint.save``/``write``, after its first variable is written);
- an all-reduce is an all-reduce however it is reached: ``ReplicaContext.all_reduce``, and the
  cross-replica reductions a ``merge_fn`` does (``strategy.reduce``, ``extended.reduce_to``,
  ``batch_reduce_to``: what ``optimizer.apply_gradients`` does), which fire the ``"all_reduce"``
  point even where the values were gathered already and the reduction moves nothing (view.py).
  So that the fault stops the reduction before any value leaves the replica, as it would stop
  TF's, a replica armed at ``"all_reduce"`` holds back even small ``merge_call`` arrays
  (``holds_back``, lazy_merge.py): the peers then meet it in a real all-reduce instead of
  applying a gathered update without it. Central storage's sum onto the holder
  (``"reduce_to_holder"``) counts as ``"all_reduce"`` too;
- on a ``ParameterServerStrategy``, ``"ps_step"``: on a worker task, at the start of the next step
  it runs; on a ps task, when it next applies a step's updates (``worker/ps_store.py``); and
  ``"checkpoint_save"`` on either. Tasks run steps as the coordinator schedules them, so there
  is no "next program" there: a fault waits until its point is reached (as ``persist=True``);
- ``fault``: ``"raise"`` (``InjectedFaultError``), ``"slow"`` (sleeps ``seconds``, alive), ``"freeze"``
  (the whole worker process stops, as under SIGSTOP, and resumes after ``seconds``), ``"kill"``
  (the worker process dies, as under SIGKILL; an embedded cluster starts it again).

A fault its program did not reach is dropped at that program's end (``end``), with a
``FaultDisarmed`` event and a warning the notebook raises at the user's line; with ``persist`` it
stays armed until it fires. System programs (variable creation, the copies' checksums, the arm
program itself) neither fire nor drop it: the hooks read ``replica.armed_fault``, which ``begin``
sets for a user program only; ``replica.injected`` holds the fault between programs. Events:
``FaultArmed`` (the notebook's), ``FaultFired`` (just before the fault acts), ``FaultDisarmed``.

Unarmed, the hook costs one attribute read per point.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from interdist import events
from interdist.errors import InjectedFaultError

if TYPE_CHECKING:
    from interdist.replica.replica import Replica

FAULTS = ("raise", "slow", "freeze", "kill")
POINTS = ("step", "collective", "update", "checkpoint_save")
PS_POINTS = ("ps_step", "checkpoint_save")

# Collectives that are another point by name: central storage's gradient sum is an all-reduce.
_SAME_POINT = {"reduce_to_holder": "all_reduce"}

# How the points read in a message (the others are collectives' names: "all_reduce").
_POINT_NAMES = {
    "step": "the start of the replica function",
    "update": "a variable update",
    "checkpoint_save": "Checkpoint.save",
}


@dataclass
class Injected:
    """The fault armed on this replica, and how far it got."""

    fault: str
    at: str
    seconds: float
    persist: bool
    run: int  # the notebook's user calls when it was armed: the next one is "run #<run + 1>"
    programs: int = 0  # user programs that ended without reaching it (persist)
    call: str = ""  # the user program running now, as the notebook names it: "run #5 (train_step)"


def arm(replica: Replica, rank: int, fault: str, at: str, seconds: float, persist: bool = False, run: int = 0) -> None:
    """A system program: arm ``fault`` at ``at`` on replica ``rank``; every replica drops the fault it held."""
    old = replica.injected
    if old is not None:
        _disarmed(replica, old, f"replaced by the {fault} armed at {at} on replica {rank}")
    replica.armed_fault = None  # the hooks see it from the next user program on (``begin``)
    replica.injected = Injected(fault, at, float(seconds), bool(persist), int(run)) if replica.rank == rank else None


def disarm(replica: Replica) -> None:
    """A system program (``idist.debug.disarm``): drop the fault this replica holds, if any."""
    old = replica.injected
    replica.injected = replica.armed_fault = None
    if old is not None:
        _disarmed(replica, old, "dropped by idist.debug.disarm")


def begin(replica: Replica, kind: str, name: str) -> None:
    """A user program starts (``kind`` "run" or "run_steps" of ``name``): its hooks see the armed fault."""
    f = replica.injected
    if f is None or f.at == "checkpoint_save":  # its program is the next Checkpoint.save (``fire_point``)
        return
    f.call = f"{kind} #{f.run + f.programs + 1} ({name})"
    replica.armed_fault = f


def end(replica: Replica) -> None:
    """A program ended. A user program that did not reach the armed fault drops it (unless ``persist``):
    a ``FaultDisarmed`` event, and a warning the notebook raises at the user's line."""
    replica.armed_fault = None
    f = replica.injected
    if f is None or not f.call:  # nothing armed, or a system program: not the fault's program
        return
    call, f.call = f.call, ""
    f.programs += 1
    if f.persist:
        return
    replica.injected = None
    _disarmed(replica, f, f"not reached in {call}")
    replica.warnings.append(
        f"idist.debug.inject: the {f.fault} armed at {f.at} on replica {replica.rank} was not reached in {call} "
        "and is disarmed; pass persist=True to keep it armed"
    )


def _disarmed(replica: Replica, f: Injected, reason: str) -> None:
    replica.emit(events.FaultDisarmed(replica.group_id, replica.step, replica.rank, time.time(), f.fault, f.at, reason))


def fire(replica: Replica, at: str, op: str | None = None, via: str = "") -> None:
    """Fire the armed fault if it matches this point (``at``; ``op`` names the collective; ``via``
    the call that reached it: ``"batch_reduce_to"``)."""
    armed = replica.armed_fault
    if armed is None or armed.at not in (at, op, _SAME_POINT.get(op or "")):
        return
    point = _POINT_NAMES.get(op or at, op or at) + (f" (in {via})" if via else "")
    _fire(replica, armed, point)


def fire_point(replica: Replica, at: str) -> None:
    """A system program: fire a fault armed at ``at`` (a point outside replica functions:
    ``"checkpoint_save"``) on the replica that holds it; the others do nothing."""
    f = replica.injected
    if f is not None and f.at == at:
        _fire(replica, f, _POINT_NAMES.get(at, at))


def _fire(replica: Replica, armed: Injected, point: str) -> None:
    replica.armed_fault = replica.injected = None  # once, persist or not
    when = armed.call or f"engine step {replica.step}"
    where = f"{point}, {when}"
    # Before it acts: a kill or a freeze may keep this event from leaving (the notebook's own events say those).
    replica.emit(
        events.FaultFired(replica.group_id, replica.step, replica.rank, time.time(), armed.fault, armed.at, where)
    )
    act(armed.fault, armed.seconds, f"{point} on replica {replica.rank} (engine step {replica.step})")


def holds_back(replica: Replica) -> bool:
    """Should ``merge_call`` hold back this replica's small arrays too (lazy_merge.py)? While a fault is
    armed here at ``"all_reduce"``: a ``batch_reduce_to`` of them is then a real all-reduce, which the
    fault stops before this replica's values leave it (gathered, the peers would apply them without it)."""
    armed = replica.armed_fault
    return armed is not None and armed.at == "all_reduce"


def act(fault: str, seconds: float, where: str) -> None:
    """Do ``fault`` here, now (``where`` names the point, the step and the replica or task)."""
    if fault == "raise":
        raise InjectedFaultError(f"fault injected by idist.debug.inject: raise at {where}")
    if fault == "slow":
        time.sleep(seconds)
    elif fault == "freeze":
        stop_this_process(seconds)
    elif fault == "kill":
        os.kill(os.getpid(), signal.SIGKILL)


def stop_this_process(seconds: float | None = None, settle: float = 5.0) -> None:
    """Stop this whole process, as under SIGSTOP, and return once it runs again: after ``seconds`` (a small
    shell process sends SIGCONT then) or earlier if something else sends SIGCONT (with ``seconds=None``,
    only then).

    The signals come from that shell, never from this thread, and this thread waits for the shell, which
    ends only once it has seen the process stopped and then running again. A SIGSTOP a thread sends to its
    own process is carried out by whichever thread the kernel picks: meanwhile the sender runs on (and
    may finish the step), and on this machine's kernel one was seen never to stop the process at all
    after the process had been stopped and resumed once. The shell waits at most ``settle`` seconds for
    the stop to show.
    """
    pid = os.getpid()
    state = f"$(sed 's/.*) //' /proc/{pid}/stat 2>/dev/null | cut -c1)"
    script = (
        f"kill -STOP {pid} || exit 1; i=0; "
        f'while [ "{state}" != T ] && [ $i -lt {int(settle / 0.01)} ]; do sleep 0.01; i=$((i+1)); done; '
        # the timed resume runs beside the wait, so that an earlier SIGCONT (a user's) ends the freeze at once
        + (
            f"(trap 'kill $s 2>/dev/null; exit 0' TERM; sleep {seconds:g} & s=$!; wait $s && kill -CONT {pid}) & "
            "timer=$!; "
            if seconds is not None
            else "timer=; "
        )
        + f'while [ "{state}" = T ]; do sleep 0.02; done; '
        '[ -n "$timer" ] && kill $timer 2>/dev/null; exit 0'
    )
    if not os.path.exists(f"/proc/{pid}/stat"):  # no /proc to watch (not Linux): a timed stop, unwatched
        script = f"kill -STOP {pid}" + (f"; sleep {seconds:g}; kill -CONT {pid}" if seconds is not None else "")
    helper = subprocess.Popen(
        ["/bin/sh", "-c", script],
        start_new_session=True,  # not in this process's group: a stop of the group leaves it running
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    helper.wait()  # stopped in here; back once resumed (the SIGCONT handler lets pending aborts in first)
