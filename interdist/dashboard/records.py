"""The records the dashboard's model keeps and answers with: a variable, a copy's summary, a replica's
chip, a failure, a fault, a collective's timings. Plain data, no logic (``model.py`` fills them)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class VariableInfo:
    var_id: int
    name: str
    shape: tuple[int, ...]
    dtype: str
    synchronization: str
    aggregation: str
    created_step: int


@dataclass
class CopySummary:
    """One replica's copy of one variable, as its last event described it."""

    device: str
    norm: float
    checksum: float
    step: int
    time: float
    values: tuple[float, ...] = ()  # the elements, for a variable of at most events.SMALL_VALUES of them
    sketch: tuple[float, ...] = ()  # block means of a larger one (events.SKETCH_BLOCKS)


@dataclass
class ReplicaStatus:
    """A replica's chip: its state's kind (``replica_state.KINDS``, or "waiting": running, inside a
    collective a peer has not entered) and the words a person reads."""

    replica: int
    kind: str
    text: str  # "waiting in all_reduce #1 for [1]"
    detail: str = ""  # a longer line: the error, who released it, what a recovery restored


@dataclass(frozen=True)
class Incident:
    """Something that went wrong (or was repaired) on one replica: a row of the failures list.

    ``kind``: "raised", "frozen", "lost" (failures), "recovered" (what followed). Injected faults are not
    listed here (they would crowd out the failures they cause): the faults tab lists them (``faults``)."""

    kind: str
    replica: int
    step: int
    time: float
    error: str  # "ValueError: boom", "ReplicaFrozenError: its worker process ... stopped for 8 s"

    @property
    def failure(self) -> bool:
        return self.kind in FAILURE_KINDS


FAILURE_KINDS = ("raised", "frozen", "lost")


@dataclass
class ArmedFault:
    """A fault ``idist.debug.inject`` armed on a replica, and what became of it (the faults tab)."""

    replica: int
    fault: str
    at: str
    seconds: float
    persist: bool
    armed_at: float
    state: str = "armed"  # armed | fired | disarmed
    where: str = ""  # fired: where; disarmed: why
    step: int = -1


@dataclass
class TimelineEntry:
    replica: int
    step: int
    seq: int
    op: str
    start: float  # when the replica entered the collective (wall clock, seconds)
    wait_s: float
    transfer_s: float
    end: float
    nbytes: int
    algorithm: str
    backend: str


@dataclass
class TimingPoint:
    replica: int
    time: float
    step: int
    op: str
    latency_s: float
    nbytes: int
    bus_gbps: float


@dataclass
class OpenCollective:
    """A collective some replicas entered: who arrived when, who already left."""

    op: str
    step: int
    seq: int
    entered: dict[int, float] = field(default_factory=dict)
    exited: set[int] = field(default_factory=set)


@dataclass
class StuckCollective:
    op: str
    step: int
    seq: int
    arrived: dict[int, float]  # replica -> seconds it has been waiting
    missing: list[int]
