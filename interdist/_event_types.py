"""The events' classes, the kinds they travel as and ``from_msg``: the base of ``interdist.events``.

``interdist.events`` re-exports every name here (import them from there); this module holds only what the
wire forms and the compact form (``events.py``) are built on.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

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

    @classmethod
    def msg(cls, *values: Any) -> dict[str, Any]:
        """``cls(*values).to_msg()`` without making the event (a replica's two events of every program)."""
        msg = dict(zip(_field_names(cls), values, strict=True))
        msg["kind"] = cls.kind
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


def _compute_field_names(cls: type) -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(cls))


# Typed as a plain callable: the cache's own signature asks for ``Hashable`` arguments, which mypy
# does not see a dataclass's class object as (its ``__hash__`` is the instances' one).
_field_names: Callable[[type], tuple[str, ...]] = functools.cache(_compute_field_names)
