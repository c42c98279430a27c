"""Instrumentation as data: the frozen events the runtime emits.

Workers send them with ``worker.log_event("interdist", event.to_msg())``; the
notebook subscribes with ``client.subscribe_topic``. Only summaries travel
(shape, dtype, norm, checksum), never whole arrays. The dashboard reads only these.
"""

from __future__ import annotations

import dataclasses
import functools
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


@dataclass(frozen=True)
class VariableUpdated(Event):
    kind: ClassVar[str] = "variable-updated"
    var_id: int
    name: str
    device: str
    norm: float
    checksum: float


EVENT_TYPES: dict[str, type[Event]] = {
    cls.kind: cls
    for cls in (RunStarted, RunFinished, CollectiveEntered, CollectiveExited, ReplicaFailed,
                VariableCreated, VariableUpdated)
}


def from_msg(msg: dict[str, Any]) -> Event:
    """Rebuild an event from the dict that crossed the wire."""
    cls = EVENT_TYPES[msg["kind"]]
    fields = _field_names(cls)
    kwargs = {k: (tuple(v) if isinstance(v, list) else v) for k, v in msg.items() if k in fields}
    return cls(**kwargs)


@functools.cache
def _field_names(cls: type) -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(cls))
