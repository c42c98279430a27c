"""What each replica is doing, from events alone: the one answer every view gives.

A small state machine per replica with no I/O, in the shape of distributed's
``worker_state_machine``: ``ReplicaStates.handle(event)`` moves the replica the event is
about; the legal moves are in one table (``TRANSITIONS``); ``validate()`` checks the
invariants. The status strip, the summary line, the failures list, the Dask pages, the
sidebar's pages and the HTML report all render these states; none guesses on its own.

The states, and what puts a replica in each:

============  =====================================================================
idle          nothing run yet
starting      the notebook sent it a call (``StepSent``); it has not said it started
running       its program started (``RunStarted``); *waiting* when it is inside a
              collective that a peer has not entered (the views derive that part
              from the open collectives)
done          its program returned (``RunFinished`` ok)
raised        its own program raised (``ReplicaFailed``): class and message
released      its step was aborted because replica ``by`` failed, or the notebook was
              interrupted (``ReplicaReleased``): not a failure of its own
frozen        the liveness watch found its process stopped (``ReplicaFrozen``)
lost          its worker died or became unreachable (``ReplicaLost``)
restarting    the notebook waits for a new worker to take its place
recovered     it runs again on a new worker (``ReplicaRecovered``)
============  =====================================================================

Evidence rules, so that late, reordered or repeated events cannot make a replica lie:

- a replica's state comes from events *about that replica* only: its own (``RunStarted``,
  ``ReplicaFailed``...) and the notebook's about it (frozen, lost). A peer's abort moves
  the peer, never this replica;
- an event of an older step than the state's is late: it changes nothing;
- after frozen, lost, restarting or recovered (what the notebook decided at a moment), only
  evidence newer than that moment counts: an event the replica emitted before it froze or
  died, delivered late, does not bring it back to life;
- handling an event twice is the same as handling it once.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from interdist import events

KINDS = ("idle", "starting", "running", "done", "raised", "released", "frozen", "lost", "restarting", "recovered")
_ANY = frozenset(KINDS)
_GONE = frozenset({"frozen", "lost", "restarting"})
#: What each kind of event may move a replica to, and from which states: the whole set of legal moves
#: (``validate`` checks every move made against it). A replica's own event of a newer step moves it
#: from any state, a lost one's included: it is its new worker speaking (the recovery's word may come later).
TRANSITIONS: dict[str, dict[str, frozenset[str]]] = {
    "step-sent": {"starting": _ANY - _GONE},
    "run-started": {"running": _ANY},
    "collective-entered": {"running": _ANY},
    "run-finished": {"done": _ANY, "idle": _ANY, "raised": _ANY},
    "replica-failed": {"raised": _ANY},
    "replica-released": {"released": _ANY},
    "replica-frozen": {"frozen": _ANY - {"lost", "restarting"}},
    "replica-lost": {"lost": _ANY - {"lost", "restarting"}},
    "replica-restarting": {"restarting": frozenset({"lost"})},
    "replica-recovered": {"recovered": frozenset({"lost", "restarting"})},
}


@dataclass(frozen=True)
class ReplicaState:
    """One replica's state: ``kind`` (one of ``KINDS``) and what a person needs to know about it."""

    kind: str = "idle"
    step: int = -1  # the engine step the state is about (-1: none yet)
    since: float = 0.0  # when it began: the time of the event that moved it here
    fn: str = ""  # the program: the user's function, or the engine's program (``system``)
    system: bool = False  # an engine program (a variable's creation, a checkpoint), not the user's call
    collective: tuple[int, int, str] | None = None  # (step, seq, op) of the collective it is inside
    error_type: str = ""  # raised: the exception's class
    error: str = ""  # raised: the message; released, frozen, lost: why
    by: int | None = None  # released: the replica whose failure released it (-1: the notebook)
    stopped_since: float = 0.0  # frozen: when its process was first seen stopped
    worker: str = ""  # lost, restarting: the worker it had; recovered: its new one
    note: str = ""  # recovered: what its state was rebuilt from; after a freeze: "resumed after 7 s"
    user_step: int = -1  # the step of the last user call it started (system programs leave it)


class InvalidTransitionError(AssertionError):
    """A move the table does not allow: a bug in the state machine (raised by ``validate`` in tests)."""


class ReplicaStates:
    """Every replica's ``ReplicaState``, moved by events (``handle``).

    >>> from interdist import events as ev
    >>> s = ReplicaStates()
    >>> s.handle(ev.RunStarted("g", 1, 0, 10.0, "step", "run"))
    >>> s.handle(ev.ReplicaReleased("g", 1, 0, 10.5, 1, "replica 1 raised ValueError: boom"))
    >>> s.handle(ev.RunStarted("g", 1, 0, 10.0, "step", "run"))  # late and repeated: changes nothing
    >>> (s.get(0).kind, s.get(0).by)
    ('released', 1)
    """

    def __init__(self) -> None:
        self.states: dict[int, ReplicaState] = {}
        self.moves: list[tuple[int, str, str, str]] = []  # (replica, from, event kind, to), for validate()
        self.keep_moves = False  # tests turn it on; a live dashboard keeps no history

    def get(self, replica: int) -> ReplicaState:
        return self.states.get(replica, _IDLE)

    def handle(self, e: events.Event) -> None:
        """Apply one event (kinds that say nothing about a replica's state are ignored)."""
        _handle(e, self)

    def handle_many(self, evs: Iterable[events.Event]) -> None:
        for e in evs:
            _handle(e, self)

    # -- moves -----------------------------------------------------------------------
    def _move(self, replica: int, e: events.Event, new: ReplicaState) -> None:
        old = self.get(replica)
        if new == old:
            return
        if self.keep_moves:
            self.moves.append((replica, old.kind, e.kind, new.kind))
        self.states[replica] = new

    def _late(self, replica: int, e: events.Event) -> bool:
        """Whether ``e`` is older than what the replica's state already knows.

        Of an older step: late. Of the same step: late when it happened before the event that put the
        replica in its state (a repeated event, or one emitted before a freeze or a death and delivered
        after the notebook reported it). Not against "starting": the notebook's clock and a remote
        replica's may differ by more than a dispatch takes, and any word of the step moves it on.
        """
        st = self.get(replica)
        if e.step != st.step:
            return e.step < st.step
        return st.kind != "starting" and e.time < st.since

    def _set(self, e: events.Event, **changes: Any) -> None:
        """Move ``e``'s replica to its state with ``changes``."""
        self._move(e.replica, e, dataclasses.replace(self.get(e.replica), **changes))

    def validate(self) -> None:
        """Every recorded move is in ``TRANSITIONS``, and every state holds its invariants."""
        for replica, old, kind, new in self.moves:
            allowed = TRANSITIONS.get(kind, {}).get(new)
            if old != new and (allowed is None or old not in allowed):
                raise InvalidTransitionError(f"replica {replica}: {old} --{kind}--> {new} is not a legal move")
        for replica, st in self.states.items():
            if st.kind not in KINDS:
                raise InvalidTransitionError(f"replica {replica} is in an unknown state {st.kind!r}")
            if st.kind == "released" and st.by is None:
                raise InvalidTransitionError(f"replica {replica} is released by nobody")
            if st.kind in ("lost", "restarting") and st.collective is not None:
                raise InvalidTransitionError(f"replica {replica} is {st.kind} yet inside a collective")
            if st.kind == "raised" and not st.error_type:
                raise InvalidTransitionError(f"replica {replica} raised nothing")


_IDLE = ReplicaState()
#: A step in one of these has ended: a start of the same step reported after it is late.
ENDED = ("done", "raised", "released")
#: The class of a failure whose replica's own report has not come.
UNKNOWN = "Error"


@functools.singledispatch
def _handle(e: events.Event, s: ReplicaStates) -> None:
    """Events that say nothing about a replica's state (variables, scalars, faults)."""


@_handle.register
def _(e: events.StepSent, s: ReplicaStates) -> None:
    for r in range(e.world_size):
        st = s.get(r)
        if st.kind in ("frozen", "lost", "restarting") or st.step >= e.step:
            continue  # not sent to a replica known to be gone or stopped; or it already said more
        s._move(r, e, dataclasses.replace(_IDLE, kind="starting", step=e.step, since=e.time, fn=e.fn, user_step=e.step))


@_handle.register
def _(e: events.RunStarted, s: ReplicaStates) -> None:
    st = s.get(e.replica)
    if s._late(e.replica, e) or (st.step == e.step and st.kind in ("running", *ENDED)):
        return  # late, repeated, or a fused call's first step (already running that step)
    system = _is_system(e)
    s._set(
        e,
        kind="running",
        step=e.step,
        since=e.time,
        fn=e.fn,
        system=system,
        collective=None,
        error_type="",
        error="",
        by=None,
        note=_note(st, e),
        user_step=st.user_step if system else e.step,
    )


@_handle.register
def _(e: events.CollectiveEntered, s: ReplicaStates) -> None:
    st = s.get(e.replica)
    if s._late(e.replica, e) or (st.step == e.step and st.kind in ENDED):
        return
    since = st.since if st.kind == "running" and st.step == e.step else e.time
    s._set(e, kind="running", step=e.step, since=since, collective=(e.step, e.seq, e.op), note=_note(st, e))


@_handle.register
def _(e: events.CollectiveExited, s: ReplicaStates) -> None:
    st = s.get(e.replica)
    if st.collective is not None and st.collective[:2] == (e.step, e.seq):
        s._set(e, collective=None)


@_handle.register
def _(e: events.RunFinished, s: ReplicaStates) -> None:
    st = s.get(e.replica)
    if s._late(e.replica, e) or e.program == FUSED_PROGRAM:
        return  # a fused call's own end follows its last step's
    if st.step == e.step and st.kind in ENDED:
        return  # its failure (or a repeat of this event) already said how it ended
    if e.ok:
        kind = "done" if (not _is_system(e) or st.user_step >= 0) else "idle"
        s._set(
            e,
            kind=kind,
            step=e.step,
            since=e.time,
            collective=None,
            error_type="",
            error="",
            by=None,
            note=_note(st, e),
        )
    else:  # it ended badly and its own word on why has not come (yet): a failure of unknown kind
        s._set(
            e,
            kind="raised",
            step=e.step,
            since=e.time,
            collective=None,
            error_type=UNKNOWN,
            error="its program failed",
            by=None,
            note=_note(st, e),
        )


@_handle.register
def _(e: events.ReplicaFailed, s: ReplicaStates) -> None:
    if s._late(e.replica, e) and not _refines(s.get(e.replica), e):
        return
    error_type, _, message = e.error.partition(": ")
    s._set(
        e,
        kind="raised",
        step=e.step,
        since=e.time,
        collective=None,
        error_type=error_type or UNKNOWN,
        error=message,
        by=None,
    )


@_handle.register
def _(e: events.ReplicaReleased, s: ReplicaStates) -> None:
    st = s.get(e.replica)
    if s._late(e.replica, e) and not _refines(st, e):
        return
    note = _note(st, e) or ("resumed after it was frozen" if e.by == e.replica else "")
    s._set(
        e,
        kind="released",
        step=e.step,
        since=e.time,
        collective=None,
        error_type="",
        error=e.reason,
        by=e.by,
        note=note,
    )


@_handle.register
def _(e: events.ReplicaFrozen, s: ReplicaStates) -> None:
    st = s.get(e.replica)
    if s._late(e.replica, e) or st.kind in ("lost", "restarting"):
        return
    s._set(
        e,
        kind="frozen",
        step=e.step,
        since=e.time,
        error=e.reason,
        stopped_since=e.time - e.stopped_s,
        by=None,
        error_type="",
    )


@_handle.register
def _(e: events.ReplicaLost, s: ReplicaStates) -> None:
    st = s.get(e.replica)
    if s._late(e.replica, e) or st.kind in ("lost", "restarting"):
        return  # a report older than what is known since; or already known lost
    s._set(
        e,
        kind="lost",
        step=e.step,
        since=e.time,
        collective=None,
        error=e.reason,
        error_type="",
        worker=e.worker,
        by=None,
        note="",
    )


@_handle.register
def _(e: events.ReplicaRestarting, s: ReplicaStates) -> None:
    st = s.get(e.replica)
    if st.kind == "lost" and not s._late(e.replica, e):
        s._set(e, kind="restarting", since=max(st.since, e.time))


@_handle.register
def _(e: events.ReplicaRecovered, s: ReplicaStates) -> None:
    st = s.get(e.replica)
    if st.kind in ("lost", "restarting") and not s._late(e.replica, e):
        s._set(
            e,
            kind="recovered",
            step=max(st.step, e.step),
            since=max(st.since, e.time),
            worker=e.worker,
            error="",
            note=recovery_note(e),
        )


def recovery_note(e: events.ReplicaRecovered) -> str:
    """One line: what a recovered replica's state was rebuilt from, and what is gone."""
    parts = []
    if e.copied:
        parts.append(f"{len(e.copied)} variable(s) copied from replica {e.source}")
    if e.restored:
        parts.append(f"{len(e.restored)} sync-on-read copy(ies) restored from its last report")
    if e.lost:
        parts.append("lost: " + "; ".join(e.lost))
    return ", ".join(parts) or "nothing to restore"


def _note(st: ReplicaState, e: events.Event) -> str:
    """The remark a replica's next state keeps: "resumed after it was frozen for 7 s" when it speaks again
    after a freeze; the same remark while it stays in that step; none in a new step."""
    if st.kind == "frozen":
        return f"resumed after it was frozen for {max(0.0, e.time - st.stopped_since):.0f} s"
    return st.note if st.step == e.step else ""


def _refines(st: ReplicaState, e: events.Event) -> bool:
    """A replica's own word on how its step ended, arriving after the bare end (reordered delivery)."""
    return st.kind == "raised" and st.error_type == UNKNOWN and st.step == e.step


def _is_system(e: Any) -> bool:
    return getattr(e, "program", "run") not in ("run", FUSED_PROGRAM)


# The engine's program for ``run_steps`` (``replica/fused.py``): one user call whose inner steps each
# start as a "run" program. Named here, not imported: the views read events only.
FUSED_PROGRAM = "fused_steps"
