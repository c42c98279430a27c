"""Instrumentation as data: the frozen events the runtime emits.

Each replica returns its events, as ``event.to_msg()`` dicts (and records of many, ``run-steps`` and
``collectives``, which ``expand`` turns into events), with the reply to the
program that emitted them (the notebook's ``EventLog``); its worker also logs them,
batched and packed (``pack_batch``), to the scheduler's ``interdist`` topic for the
dashboard pages. Only summaries travel (shape, dtype, norm, checksum), never whole
arrays. The dashboard reads only these.
"""

from __future__ import annotations

from typing import Any

import msgpack

# The classes and what the wire forms are built on (``_event_types.py``), part of this module's interface.
from interdist._event_types import EVENT_TYPES as EVENT_TYPES
from interdist._event_types import SKETCH_BLOCKS as SKETCH_BLOCKS
from interdist._event_types import SMALL_VALUES as SMALL_VALUES
from interdist._event_types import TOPIC as TOPIC
from interdist._event_types import CollectiveEntered as CollectiveEntered
from interdist._event_types import CollectiveExited as CollectiveExited
from interdist._event_types import Event as Event
from interdist._event_types import FaultArmed as FaultArmed
from interdist._event_types import FaultDisarmed as FaultDisarmed
from interdist._event_types import FaultFired as FaultFired
from interdist._event_types import ReplicaFailed as ReplicaFailed
from interdist._event_types import ReplicaFrozen as ReplicaFrozen
from interdist._event_types import ReplicaLost as ReplicaLost
from interdist._event_types import ReplicaRecovered as ReplicaRecovered
from interdist._event_types import ReplicaReleased as ReplicaReleased
from interdist._event_types import ReplicaRestarting as ReplicaRestarting
from interdist._event_types import RunFinished as RunFinished
from interdist._event_types import RunStarted as RunStarted
from interdist._event_types import ScalarLogged as ScalarLogged
from interdist._event_types import StepSent as StepSent
from interdist._event_types import VariableCreated as VariableCreated
from interdist._event_types import VariablesRepaired as VariablesRepaired
from interdist._event_types import VariableUpdated as VariableUpdated
from interdist._event_types import _field_names as _field_names
from interdist._event_types import abort_culprit as abort_culprit
from interdist._event_types import from_msg as from_msg

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
        out: list[tuple[Any, ...]] = []
        add = out.append
        for row in msg["rows"]:
            code = row[0]
            if code == DONE_ROW:  # (DONE_ROW, entered time, entered nbytes, exited time, op, seq, exited nbytes, ...)
                add((entered, group, step, replica, row[1], row[4], row[5], row[2]))
                add((exited, group, step, replica, *row[3:]))
            else:
                add((entered if code == ENTERED_ROW else exited, group, step, replica, *row[1:]))
        return out
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
transfer_s)``, or both in one when the first was still kept as the second came (the commonest: ``DONE_ROW``,
``(DONE_ROW, entered time, entered nbytes, *the EXITED_ROW's fields after its code)``, 11 values where the two
rows hold 14 in two tuples: 2,048 collectives packed in 0.55 against 0.94 ms, unpacked in 0.58 against 0.79).
As two dicts of 8 and 12 keys, built and packed twice on the replica (for its reply and its worker's batch),
then unpacked and rebuilt in the notebook, a 4 KB all_reduce on 2 replicas took 71-109 us seen from the
notebook against 42-59 us with no events at all; as rows, the notebook's CPU per collective went from 50-56
to 26-33 us (docs/performance.md). A replica keeps the rows of its current
collectives until it emits any other event, its reply is made, its worker's batch goes to the scheduler
(every 250 ms, so a replica waiting in a collective is seen waiting there at once), or ``MAX_ROWS`` wait
(``replica/event_rows.py``)."""

ENTERED_ROW: int = 0
EXITED_ROW: int = 1
DONE_ROW: int = 2
#: The most rows one ``collectives`` record holds: a long loop of collectives sends several.
MAX_ROWS = 1024


def collectives_msg(group: str, step: int, replica: int, rows: list[tuple[Any, ...]]) -> dict[str, Any]:
    """The record of a replica's collective events ``rows`` in ``step``, in order (see ``COLLECTIVES``)."""
    return {"kind": COLLECTIVES, "group": group, "step": step, "replica": replica, "time": rows[0][1], "rows": rows}


def weight(msg: dict[str, Any]) -> int:
    """How many events one wire message holds (a record many, any other message one)."""
    kind = msg["kind"]
    if kind == COLLECTIVES:
        rows = msg["rows"]
        return len(rows) + sum(1 for row in rows if row[0] == DONE_ROW)
    if kind == RUN_STEPS:
        return len(msg["times"])
    return 1


#: The kinds of wire message that hold several events (``expand`` them; ``from_msg`` takes one event's).
RECORD_KINDS: frozenset[str] = frozenset((RUN_STEPS, COLLECTIVES))


def expand(msg: dict[str, Any]) -> list[Event]:
    """The events of one wire message: one event, a ``run-steps`` record's pairs, or a ``collectives``
    record's events."""
    kind = msg["kind"]
    if kind == COLLECTIVES:
        return list(map(from_compact, compact(msg)))  # (one reading of a record's rows: ``compact``'s)
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


_KEY_FIELD: tuple[int, ...] = tuple(_compute_key_field(cls) for cls in EVENT_CLASSES)
