"""Instrumentation as data: the frozen events the runtime emits.

Each replica returns its events, as ``event.to_msg()`` dicts (and records of many, ``run-steps`` and
``collectives``, which ``expand`` turns into events), with the reply to the
program that emitted them (the notebook's ``EventLog``); its worker also logs them,
batched and packed (``pack_batch``), to the scheduler's ``interdist`` topic for the
dashboard pages. Only summaries travel (shape, dtype, norm, checksum), never whole
arrays. The dashboard reads only these.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

import msgpack

TOPIC = "interdist"


@dataclass(frozen=True)
class Event:
    kind: ClassVar[str] = "event"
    group: str
    step: int
    replica: int
    time: float

    def to_msg(self) -> dict[str, Any]:
        # A shallow dict (the fields are numbers, strings and tuples of them): ``dataclasses.asdict``
        # deep-copies every field and cost ~15 us per event, twice per step on every replica.
        msg = {name: getattr(self, name) for name in _field_names(type(self))}
        msg["kind"] = self.kind
        return msg


@dataclass(frozen=True)
class RunStarted(Event):
    kind: ClassVar[str] = "run-started"
    fn: str
    program: str  # "run" for user functions, else the engine's own program


@dataclass(frozen=True)
class RunFinished(Event):
    kind: ClassVar[str] = "run-finished"
    fn: str
    program: str
    duration_s: float
    ok: bool


@dataclass(frozen=True)
class CollectiveEntered(Event):
    kind: ClassVar[str] = "collective-entered"
    op: str
    seq: int
    nbytes: int


@dataclass(frozen=True)
class CollectiveExited(Event):
    kind: ClassVar[str] = "collective-exited"
    op: str
    seq: int
    nbytes: int
    algorithm: str
    backend: str
    wait_s: float
    transfer_s: float


@dataclass(frozen=True)
class ReplicaFailed(Event):
    kind: ClassVar[str] = "replica-failed"
    error: str
    traceback: str


@dataclass(frozen=True)
class VariableCreated(Event):
    kind: ClassVar[str] = "variable-created"
    var_id: int
    name: str
    shape: tuple[int, ...]
    dtype: str
    device: str
    synchronization: str
    aggregation: str
    norm: float
    checksum: float
    values: tuple[float, ...] = ()  # the copy's elements, flattened, when it has at most SMALL_VALUES of them


@dataclass(frozen=True)
class VariableUpdated(Event):
    kind: ClassVar[str] = "variable-updated"
    var_id: int
    name: str
    device: str
    norm: float
    checksum: float
    values: tuple[float, ...] = ()  # as in VariableCreated
    sketch: tuple[float, ...] = ()  # a larger copy's block means (``SKETCH_BLOCKS``): the dashboard's heatmap


@dataclass(frozen=True)
class ScalarLogged(Event):
    """A number a replica function logged (``idist.debug.log_scalar("loss", x)``): a line per replica."""

    kind: ClassVar[str] = "scalar-logged"
    name: str
    value: float


@dataclass(frozen=True)
class ReplicaReleased(Event):
    """A replica left its program because the step was aborted for someone else's failure: a peer's
    (``by``), or the notebook's (``by = -1``: Kernel > Interrupt). Not a failure of its own."""

    kind: ClassVar[str] = "replica-released"
    by: int
    reason: str


# -- what the notebook saw: events it emits itself (``replica`` is the replica concerned, -1 for all) --------


@dataclass(frozen=True)
class StepSent(Event):
    """The notebook sent a user call (``run``, ``run_steps``) to every replica: ``run`` is its number as the
    notebook's errors say it ("run #3"); its programs are steps ``step`` .. ``step + steps - 1``."""

    kind: ClassVar[str] = "step-sent"
    fn: str
    program: str
    run: int
    steps: int
    world_size: int


@dataclass(frozen=True)
class ReplicaFrozen(Event):
    """The liveness watch found the replica's process stopped (or silent) for ``stopped_s`` seconds."""

    kind: ClassVar[str] = "replica-frozen"
    stopped_s: float
    reason: str


@dataclass(frozen=True)
class ReplicaLost(Event):
    """The replica's worker died or became unreachable during step ``step``."""

    kind: ClassVar[str] = "replica-lost"
    worker: str
    reason: str


@dataclass(frozen=True)
class ReplicaRestarting(Event):
    """The notebook is waiting for a new worker to take the lost replica's place."""

    kind: ClassVar[str] = "replica-restarting"
    worker: str


@dataclass(frozen=True)
class ReplicaRecovered(Event):
    """The replica runs again on a new worker (``worker``): what its state was rebuilt from.

    ``copied``: variables copied from replica ``source``; ``restored``: sync-on-read copies set back to the
    values the lost replica last reported; ``lost``: what could not be restored, each as a sentence."""

    kind: ClassVar[str] = "replica-recovered"
    worker: str
    source: int
    copied: tuple[str, ...]
    restored: tuple[str, ...]
    lost: tuple[str, ...]


@dataclass(frozen=True)
class VariablesRepaired(Event):
    """The copies of variables ``var_ids`` were made equal again, copied from replica ``source``
    (``how``: "resync" for ``resync_variables``, "recovery" after a lost replica, "restore")."""

    kind: ClassVar[str] = "variables-repaired"
    var_ids: tuple[int, ...]
    source: int
    how: str


@dataclass(frozen=True)
class FaultArmed(Event):
    """``idist.debug.inject`` armed a fault on the replica (``persist``: until disarmed, not for one program)."""

    kind: ClassVar[str] = "fault-armed"
    fault: str
    at: str
    seconds: float
    persist: bool


@dataclass(frozen=True)
class FaultFired(Event):
    """An armed fault fired on the replica, at ``where`` (a kill or a freeze: just before it happens)."""

    kind: ClassVar[str] = "fault-fired"
    fault: str
    at: str
    where: str


@dataclass(frozen=True)
class FaultDisarmed(Event):
    """An armed fault was dropped without firing: ``reason`` says why (its program never reached the point)."""

    kind: ClassVar[str] = "fault-disarmed"
    fault: str
    at: str
    reason: str


SMALL_VALUES = 16
"""Variables of at most this many elements carry their values in their events (the dashboard shows
them per replica); larger ones only their norm and checksum, so an event stays a few hundred bytes."""

SKETCH_BLOCKS = 16
"""A larger variable's update carries the means of this many contiguous blocks of its flattened
elements (one pass over the copy, 16 numbers on the wire): where the copies differ shows per block."""

EVENT_TYPES: dict[str, type[Event]] = {
    cls.kind: cls
    for cls in (
        RunStarted,
        RunFinished,
        CollectiveEntered,
        CollectiveExited,
        ReplicaFailed,
        VariableCreated,
        VariableUpdated,
        ScalarLogged,
        ReplicaReleased,
        StepSent,
        ReplicaFrozen,
        ReplicaLost,
        ReplicaRestarting,
        ReplicaRecovered,
        VariablesRepaired,
        FaultArmed,
        FaultFired,
        FaultDisarmed,
    )
}


#: Every event class in a fixed order: a compact event's first item is its class's index here.
EVENT_CLASSES: tuple[type[Event], ...] = tuple(EVENT_TYPES.values())
_CODE: dict[type[Event], int] = {cls: i for i, cls in enumerate(EVENT_CLASSES)}
_CODE_BY_KIND: dict[str, int] = {cls.kind: i for i, cls in enumerate(EVENT_CLASSES)}


def compact(msg: dict[str, Any]) -> list[tuple[Any, ...]]:
    """The events of one wire message in their compact form: ``(class index, *field values)``, numbers,
    strings and tuples of them only (``from_compact`` makes the event).

    The notebook's event log keeps events so (``EventLog``). A frozen dataclass instance is an object the
    garbage collector tracks for its whole life; a tuple of numbers and strings it stops tracking at its
    first collection. With 100,000 events kept, the instances made every full collection of the notebook's
    process 72% longer (76 against 44 ms with Dask, Bokeh and interdist loaded), and, promoted to the oldest
    generation at the rate events come, they caused those collections: in a loop of 4 KB all-reduces, half
    of the notebook's CPU per collective (docs/performance.md)."""
    kind = msg["kind"]
    if kind == COLLECTIVES:
        group, step, replica = msg["group"], msg["step"], msg["replica"]
        entered, exited = _CODE[CollectiveEntered], _CODE[CollectiveExited]
        return [
            (entered, group, step, replica, *row[1:])
            if row[0] == ENTERED_ROW
            else (exited, group, step, replica, *row[1:])
            for row in msg["rows"]
        ]
    if kind == RUN_STEPS:
        return [of_event(e) for e in expand(msg)]
    code = _CODE_BY_KIND[kind]
    try:
        return [
            (
                code,
                *[tuple(v) if type(v) is list else v for v in map(msg.__getitem__, _field_names(EVENT_CLASSES[code]))],
            )
        ]
    except KeyError:  # a message from before a field with a default was added: from_msg knows the defaults
        return [of_event(from_msg(msg))]


def of_event(event: Event) -> tuple[Any, ...]:
    """An event's compact form (see ``compact``)."""
    cls = type(event)
    return (_CODE[cls], *[getattr(event, name) for name in _field_names(cls)])


def from_compact(item: tuple[Any, ...]) -> Event:
    """The event of a compact form (see ``compact``)."""
    cls: type[Event] = EVENT_CLASSES[item[0]]
    return cls(*item[1:])


def _compute_key_field(cls: type[Event]) -> int:
    names = _field_names(cls)
    for name in ("seq", "var_id"):
        if name in names:
            return 1 + names.index(name)
    return 0


def compact_key(item: tuple[Any, ...]) -> tuple[Any, ...]:
    """``event_key`` (``client/event_log.py``) of a compact event: (kind, group, step, replica, seq or var_id,
    time)."""
    code = item[0]
    k = _KEY_FIELD[code]
    return (EVENT_CLASSES[code].kind, item[1], item[2], item[3], item[k] if k else None, item[4])


def abort_culprit(reason: str) -> int:
    """The replica an abort's reason names first ("replica 2 is frozen: ...", "could not deliver to replica
    1 (tls://...)"): every abort the engine sends says who caused it so (``Replica.execute``,
    ``client/group.py``, the transports); -1 for the notebook's own (an interrupt) or a reason that
    names no replica."""
    m = re.search(r"\breplica (\d+)\b", reason)
    return int(m.group(1)) if m else -1


def from_msg(msg: dict[str, Any]) -> Event:
    """Rebuild an event from the dict that crossed the wire."""
    cls = EVENT_TYPES[msg["kind"]]
    # Positionally, in field order (msgpack turns tuples into lists: back to tuples). ~3x cheaper than
    # filtering the dict into keyword arguments, which cost 14 us an event, two events a fused step.
    try:
        values: list[Any] = [tuple(v) if type(v) is list else v for v in map(msg.__getitem__, _field_names(cls))]
    except KeyError:  # a message from before a field with a default was added (a recording): the default
        given: dict[str, Any] = {k: msg[k] for k in _field_names(cls) if k in msg}
        given = {k: tuple(v) if type(v) is list else v for k, v in given.items()}
        return cls(**given)
    return cls(*values)


RUN_STEPS = "run-steps"
"""The wire form of consecutive steps of a fused loop that emitted nothing else: one record for
them all (``times`` holds each step's start and end), expanded to ``RunStarted``/``RunFinished``
pairs where it is read. Per step, two dicts cost ~4 us to build and pack on the worker and
~10 us to unpack and rebuild in the notebook, more than a small batch's step itself."""


def steps_msg(group: str, first_step: int, replica: int, fn: str, times: list[float]) -> dict[str, Any]:
    """The record of steps ``first_step``, ``first_step + 1``, ... whose (start, end) are in ``times``."""
    return {
        "kind": RUN_STEPS,
        "group": group,
        "step": first_step,
        "replica": replica,
        "time": times[0],
        "fn": fn,
        "program": "run",
        "times": times,
    }


COLLECTIVES = "collectives"
"""The wire form of a replica's collective events in a row, within one step: one record for them all (its
``rows``), expanded to ``CollectiveEntered``/``CollectiveExited`` events where it is read. A row is
``(ENTERED_ROW, time, op, seq, nbytes)`` or ``(EXITED_ROW, time, op, seq, nbytes, algorithm, backend, wait_s,
transfer_s)``. As two dicts of 8 and 12 keys, built and packed twice on the replica (for its reply and
its worker's batch), then unpacked and rebuilt in the notebook, a 4 KB all_reduce on 2 replicas took
71-109 us seen from the notebook against 42-59 us with no events at all; as rows, the notebook's CPU per
collective went from 50-56 to 26-33 us (docs/performance.md). A replica keeps the rows of its current
collectives until it emits any other event, its reply is made, its worker's batch goes to the scheduler
(every 250 ms, so a replica waiting in a collective is seen waiting there at once), or ``MAX_ROWS`` wait
(``Replica._row``)."""

ENTERED_ROW, EXITED_ROW = 0, 1
#: The most rows one ``collectives`` record holds: a long loop of collectives sends several.
MAX_ROWS = 1024


def collectives_msg(group: str, step: int, replica: int, rows: list[tuple[Any, ...]]) -> dict[str, Any]:
    """The record of a replica's collective events ``rows`` in ``step``, in order (see ``COLLECTIVES``)."""
    return {"kind": COLLECTIVES, "group": group, "step": step, "replica": replica, "time": rows[0][1], "rows": rows}


def weight(msg: dict[str, Any]) -> int:
    """How many events one wire message holds (a record many, any other message one)."""
    kind = msg["kind"]
    if kind == COLLECTIVES:
        return len(msg["rows"])
    if kind == RUN_STEPS:
        return len(msg["times"])
    return 1


#: The kinds of wire message that hold several events (``expand`` them; ``from_msg`` takes one event's).
RECORD_KINDS = frozenset((RUN_STEPS, COLLECTIVES))


def expand(msg: dict[str, Any]) -> list[Event]:
    """The events of one wire message: one event, a ``run-steps`` record's pairs, or a ``collectives``
    record's events."""
    kind = msg["kind"]
    if kind == COLLECTIVES:
        group, step, replica = msg["group"], msg["step"], msg["replica"]
        return [
            CollectiveEntered(group, step, replica, *row[1:])
            if row[0] == ENTERED_ROW
            else CollectiveExited(group, step, replica, *row[1:])
            for row in msg["rows"]
        ]
    if kind != RUN_STEPS:
        return [from_msg(msg)]
    group, first, replica, fn, times = msg["group"], msg["step"], msg["replica"], msg["fn"], msg["times"]
    out: list[Event] = []
    for k in range(len(times) // 2):
        t0, t1 = times[2 * k], times[2 * k + 1]
        out.append(RunStarted(group, first + k, replica, t0, fn, "run"))
        out.append(RunFinished(group, first + k, replica, t1, fn, "run", t1 - t0, True))
    return out


def pack_batch(msgs: list[dict[str, Any]]) -> dict[str, Any]:
    """A worker's batch of event messages as it goes to the scheduler's event log: packed once
    into msgpack bytes. Dask checks and sizes every element of a structure it is given to log;
    on a batch of dicts that cost the worker's event loop ~15% of a fused loop's time (measured)."""
    return {"packed": msgpack.packb(msgs, use_bin_type=True), "count": len(msgs)}


def unpack_batch(logged: Any) -> list[dict[str, Any]]:
    """The event messages of one entry of the scheduler's ``interdist`` topic (see ``pack_batch``)."""
    if not isinstance(logged, dict):
        return []
    packed = logged.get("packed")
    if isinstance(packed, bytes):
        msgs = msgpack.unpackb(packed, raw=False, use_list=True)
        return msgs if isinstance(msgs, list) else []
    return list(logged.get("batch", ()))  # a batch logged as plain structures


def _compute_field_names(cls: type) -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(cls))


# Typed as a plain callable: the cache's own signature asks for ``Hashable`` arguments, which mypy
# does not see a dataclass's class object as (its ``__hash__`` is the instances' one).
_field_names: Callable[[type], tuple[str, ...]] = functools.cache(_compute_field_names)


_KEY_FIELD: tuple[int, ...] = tuple(_compute_key_field(cls) for cls in EVENT_CLASSES)
