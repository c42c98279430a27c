"""The dashboard's state, built from events alone.

Every view (inline in a notebook, or a page of the Dask dashboard) reads one
``DashboardModel``; the model reads nothing but ``interdist.events`` (plus, as an
envelope, which worker sent a batch). So a recorded event stream rebuilds exactly
what a live run showed, which is how the views are tested. The account of the runs and steps (run numbers,
steps finished, rates) is a base of the model, ``progress.RunProgress``.

The model is not thread-safe on purpose: each owner feeds it from one thread (the
scheduler's event loop, or the inline dashboard's pump thread), and taking a lock
per event would cost time on the step path for no reader that needs it.
"""

from __future__ import annotations

import time
from collections import deque

from interdist import events
from interdist.dashboard import describe
from interdist.dashboard.describe import first_line
from interdist.dashboard.progress import MAX_PENDING_STEPS, RunProgress
from interdist.dashboard.records import (
    FAILURE_KINDS,
    ArmedFault,
    CopySummary,
    Incident,
    OpenCollective,
    ReplicaStatus,
    StuckCollective,
    TimelineEntry,
    TimingPoint,
    VariableInfo,
)
from interdist.dashboard.replica_state import FUSED_PROGRAM, ReplicaStates, recovery_note

__all__ = [  # the records are the model's vocabulary: importable from here, where the views always found them
    "FAILURE_KINDS",
    "FUSED_PROGRAM",
    "ArmedFault",
    "CopySummary",
    "DashboardModel",
    "Incident",
    "ModelHub",
    "OpenCollective",
    "ReplicaStatus",
    "StuckCollective",
    "TimelineEntry",
    "TimingPoint",
    "VariableInfo",
    "first_line",
]

# Checksums are float64 sums computed on each worker; mirrored copies updated by the
# same all-reduced values agree to rounding, so only a real difference may show.
DEFAULT_RTOL = 1e-6
DEFAULT_ATOL = 1e-9
# Bounded history: a long training run must not grow the notebook's memory.
MAX_TIMELINE = 2000
MAX_TIMINGS = 5000
MAX_SCALARS = 5000  # points kept per logged scalar per replica
MAX_INCIDENTS = 200  # the failures list keeps the newest


# NCCL's convention: bus bandwidth = algorithm bandwidth x this factor, so that the
# numbers of different collectives compare against the link's speed.
def _bus_factor(op: str, n: int) -> float:
    if n <= 1:
        return 1.0
    if op == "all_reduce":
        return 2.0 * (n - 1) / n
    if op in ("all_gather", "reduce_scatter"):
        return (n - 1) / n
    return 1.0


class DashboardModel(RunProgress):
    """Per-replica values, divergence, collectives, watchdog and progress, from events.

    >>> from interdist import events
    >>> m = DashboardModel()
    >>> m.feed(events.RunStarted("g", 1, 0, 10.0, "step", "run"))
    >>> m.replicas, m.status(0).text
    ([0], 'running step')
    """

    def __init__(self, rtol: float = DEFAULT_RTOL, atol: float = DEFAULT_ATOL) -> None:
        super().__init__()  # the runs, steps and rates (progress.RunProgress)
        self.rtol = rtol
        self.atol = atol
        self.group: str | None = None
        self.version = 0  # bumped on every event: views skip redraws when it is unchanged
        self.t0: float | None = None  # time of the first event: the time axes start there
        self.last_time = 0.0
        self._replicas: set[int] = set()
        self.workers: dict[int, str] = {}  # replica -> worker address (envelope facts)
        self.replica_devices: dict[int, str] = {}
        self.variables: dict[int, VariableInfo] = {}
        self.copies: dict[tuple[int, int], CopySummary] = {}  # (var_id, replica) -> summary
        self.diverged_since: dict[int, int] = {}  # var_id -> step where copies began to differ
        self.repaired: dict[int, tuple[int, str]] = {}  # var_id -> (step, how) of its last repair
        self._checks: dict[int, dict[int, dict[int, float]]] = {}  # var_id -> step -> replica -> checksum
        self._judged: dict[int, int] = {}  # var_id -> last step compared
        self.timeline: deque[TimelineEntry] = deque(maxlen=MAX_TIMELINE)
        self.timings: deque[TimingPoint] = deque(maxlen=MAX_TIMINGS)
        self.open: dict[tuple[int, int], OpenCollective] = {}  # (step, seq) -> state
        self.replica_states = ReplicaStates()  # what each replica is doing: every view's one answer
        self.incidents: deque[Incident] = deque(maxlen=MAX_INCIDENTS)  # the failures list, oldest first
        self._incident_keys: set[tuple[str, int, int, float]] = set()  # a repeated event lists nothing twice
        self.faults: list[ArmedFault] = []  # faults armed with idist.debug.inject, newest last
        self.last_collective: tuple[str, int, int] | None = None  # (op, seq, step) of the newest collective
        # logged scalars: name -> replica -> (training step, time, value), oldest first
        self.scalars: dict[str, dict[int, deque[tuple[int, float, float]]]] = {}

    # -- facts about the replicas ------------------------------------------------
    @property
    def replicas(self) -> list[int]:
        return sorted(self._replicas)

    @property
    def world_size(self) -> int:
        return max(self._replicas) + 1 if self._replicas else 0

    def note_worker(self, replica: int, address: str, device: str | None = None) -> None:
        """Record where a replica runs (from a batch's envelope or the strategy's lease)."""
        self._replicas.add(replica)
        self.workers[replica] = address
        if device is not None:
            self.replica_devices[replica] = device

    @property
    def failures(self) -> list[Incident]:
        """The replicas' own failures (raised, frozen, lost), oldest first: not a peer's release."""
        return [i for i in self.incidents if i.failure]

    # -- feeding -------------------------------------------------------------------
    def feed_many(self, evs: list[events.Event]) -> None:
        for e in evs:
            self.feed(e)

    def feed(self, e: events.Event) -> None:
        """Apply one event. Unknown kinds are ignored, so old dashboards survive new events."""
        if self.group is None:
            self.group = e.group
        self.version += 1
        if e.replica >= 0:  # the notebook's events about the whole group name no replica
            self._replicas.add(e.replica)
        if self.t0 is None or e.time < self.t0:
            self.t0 = e.time
        self.last_time = max(self.last_time, e.time)
        self.replica_states.handle(e)
        if isinstance(e, events.CollectiveEntered):
            self._entered(e)
        elif isinstance(e, events.CollectiveExited):
            self._exited(e)
        elif isinstance(e, events.VariableUpdated):
            summary = CopySummary(e.device, e.norm, e.checksum, e.step, e.time, e.values, e.sketch)
            self._copy(e.var_id, e.replica, summary)
        elif isinstance(e, events.ScalarLogged):
            self._scalar(e)
        elif isinstance(e, events.VariableCreated):
            self._created(e)
        elif isinstance(e, events.RunStarted):
            self._started(e)
        elif isinstance(e, events.RunFinished):
            if not e.ok:  # a failed step aborts its collectives: they are not stuck, they are over
                self._close_collectives(e.step)
            self._finished(e, self.world_size)
        elif isinstance(e, events.StepSent):
            self._replicas.update(range(e.world_size))
            self._sent(e)  # the notebook's own number for the call (progress.RunProgress)
        elif isinstance(e, events.ReplicaFailed):
            self._incident("raised", e, e.error)
        elif isinstance(e, events.ReplicaFrozen):  # (its peers wait for it until they are released)
            self._incident("frozen", e, f"ReplicaFrozenError: {e.reason}")
        elif isinstance(e, events.ReplicaLost):
            self._incident("lost", e, f"WorkerLostError: {e.reason}")
            for f in self.faults:  # a killed process never says its fault fired: its death does
                if f.replica == e.replica and f.fault == "kill" and f.state == "armed" and f.armed_at <= e.time:
                    f.state, f.where, f.step = "fired", "its worker died", e.step
        elif isinstance(e, events.ReplicaReleased):  # the step was aborted: its collectives are over
            self._close_collectives(e.step)
        elif isinstance(e, events.ReplicaRecovered):
            self._incident("recovered", e, f"recovered on {e.worker}: {recovery_note(e)}")
        elif isinstance(e, events.VariablesRepaired):
            self._repaired(e)
        elif isinstance(e, (events.FaultArmed, events.FaultFired, events.FaultDisarmed)):
            self._fault(e)

    def _incident(self, kind: str, e: events.Event, error: str) -> None:
        key = (kind, e.replica, e.step, e.time)
        if key in self._incident_keys:
            return
        self._incident_keys.add(key)
        if len(self._incident_keys) > 4 * MAX_INCIDENTS:  # forget keys of incidents that left the list
            self._incident_keys = {(i.kind, i.replica, i.step, i.time) for i in self.incidents}
        self.incidents.append(Incident(kind, e.replica, e.step, e.time, error))

    def _close_collectives(self, step: int) -> None:
        """``step`` was aborted (a replica released from it, or one whose run failed): its collectives are over. Not
        when a replica is found frozen or lost: until the notebook releases them, its peers wait for it there."""
        for k in [k for k in self.open if k[0] == step]:
            del self.open[k]

    def _created(self, e: events.VariableCreated) -> None:
        self.variables[e.var_id] = VariableInfo(
            e.var_id, e.name, tuple(e.shape), e.dtype, e.synchronization, e.aggregation, e.step
        )
        self._copy(e.var_id, e.replica, CopySummary(e.device, e.norm, e.checksum, e.step, e.time, e.values))

    def _copy(self, var_id: int, replica: int, summary: CopySummary) -> None:
        self.copies[(var_id, replica)] = summary
        info = self.variables.get(var_id)
        if info is not None and info.synchronization == "ON_READ":
            return  # sync-on-read copies differ by design; they are aggregated on read
        # Each worker's events come in its own batches, so replica 0 may report steps
        # 3..6 before replica 1 reports step 3. Checksums are therefore kept per step
        # and compared once every copy has reported that step: the divergence then
        # begins at the right step whatever order the batches came in.
        per_step = self._checks.setdefault(var_id, {})
        seen = per_step.setdefault(summary.step, {})
        seen[replica] = summary.checksum
        holders = {r for (v, r) in self.copies if v == var_id}
        if len(holders) >= 2 and holders <= set(seen):
            self._judge(var_id, summary.step, list(seen.values()))
            for old in [st for st in per_step if st <= summary.step]:
                del per_step[old]
        while len(per_step) > MAX_PENDING_STEPS:
            del per_step[min(per_step)]

    def _judge(self, var_id: int, step: int, checksums: list[float]) -> None:
        if step <= self._judged.get(var_id, -1 << 62):
            return  # an older step, completed late: the newer verdict stands
        self._judged[var_id] = step
        lo, hi = min(checksums), max(checksums)
        if hi - lo > self.atol + self.rtol * max(abs(lo), abs(hi)):
            self.diverged_since.setdefault(var_id, step)
            self.repaired.pop(var_id, None)
        else:
            self.diverged_since.pop(var_id, None)

    def _repaired(self, e: events.VariablesRepaired) -> None:
        """Copies made equal again (``resync_variables``, a recovery): no longer diverged, at once, and
        no verdict of an older step may mark them so again."""
        for var_id in e.var_ids:
            self.diverged_since.pop(var_id, None)
            self.repaired[var_id] = (e.step, e.how)
            self._judged[var_id] = max(self._judged.get(var_id, -1 << 62), e.step)
            per_step = self._checks.get(var_id, {})
            for old in [st for st in per_step if st <= e.step]:
                del per_step[old]

    def _fault(self, e: events.FaultArmed | events.FaultFired | events.FaultDisarmed) -> None:
        if isinstance(e, events.FaultArmed):
            if any(f.armed_at == e.time and f.replica == e.replica for f in self.faults):
                return  # the same arming, seen twice
            for f in self.faults:
                if f.state == "armed" and f.replica == e.replica:
                    f.state, f.where = "disarmed", "replaced by a newer fault"
            self.faults.append(ArmedFault(e.replica, e.fault, e.at, e.seconds, e.persist, e.time, step=e.step))
            del self.faults[:-MAX_FAULTS]
            return
        for f in reversed(self.faults):
            if f.replica == e.replica and f.fault == e.fault and f.at == e.at and f.armed_at <= e.time:
                if isinstance(e, events.FaultFired):
                    f.state, f.where, f.step = "fired", e.where, e.step  # once, persist or not
                elif f.state == "armed":
                    f.state, f.where, f.step = "disarmed", e.reason, e.step
                return

    def _entered(self, e: events.CollectiveEntered) -> None:
        oc = self.open.get((e.step, e.seq))
        if oc is None:
            oc = self.open[(e.step, e.seq)] = OpenCollective(e.op, e.step, e.seq)
        oc.entered[e.replica] = e.time
        self.last_collective = (e.op, e.seq, e.step)

    def _exited(self, e: events.CollectiveExited) -> None:
        key = (e.step, e.seq)
        oc = self.open.get(key)
        start = oc.entered.get(e.replica) if oc is not None else None
        if start is None:
            start = e.time - e.wait_s - e.transfer_s
        self.timeline.append(
            TimelineEntry(
                e.replica, e.step, e.seq, e.op, start, e.wait_s, e.transfer_s, e.time, e.nbytes, e.algorithm, e.backend
            )
        )
        n = max(self.world_size, 1)
        factor = _bus_factor(e.op, n)
        # Bandwidth from the transfer time only: waiting for a late peer says nothing about the link.
        bus = e.nbytes * factor / e.transfer_s / 1e9 if e.transfer_s > 0 else 0.0
        self.timings.append(TimingPoint(e.replica, e.time, e.step, e.op, e.time - start, e.nbytes, bus))
        if oc is not None:
            oc.exited.add(e.replica)
            # Done once everyone known has left. A replica not heard of yet (its worker's
            # batch is late) may re-open the entry; everyone in it has left, so the
            # watchdog never lists it, and the clean-up below drops it.
            if len(oc.exited) >= n and set(oc.entered) <= oc.exited:
                del self.open[key]
        # A new step means the collectives of older steps were finished or aborted.
        for k in [k for k in self.open if k[0] < e.step - 1]:
            del self.open[k]

    def _scalar(self, e: events.ScalarLogged) -> None:
        per = self.scalars.setdefault(e.name, {})
        points = per.get(e.replica)
        if points is None:
            points = per[e.replica] = deque(maxlen=MAX_SCALARS)
        points.append((self.train_step_of.get(e.step, e.step), e.time, e.value))

    def waiting(self) -> int:
        """Open collectives that someone is still inside."""
        return sum(1 for oc in self.open.values() if set(oc.entered) - oc.exited)

    # -- questions the views ask -------------------------------------------------------
    def stuck(self, threshold_s: float = 5.0, now: float | None = None) -> list[StuckCollective]:
        """Collectives entered by some replicas and not left after ``threshold_s``: who waits, who is missing."""
        now = time.time() if now is None else now
        out = []
        for oc in sorted(self.open.values(), key=lambda o: (o.step, o.seq)):
            waiting = {r: now - t for r, t in oc.entered.items() if r not in oc.exited}
            if not waiting or max(waiting.values()) < threshold_s:
                continue
            missing = [r for r in range(self.world_size) if r not in oc.entered]
            out.append(StuckCollective(oc.op, oc.step, oc.seq, dict(sorted(waiting.items())), missing))
        return out

    def status(self, replica: int, now: float | None = None) -> ReplicaStatus:
        """One replica's chip, from its state alone (and, for "waiting", the open collective it is in)."""
        return describe.chip(self, replica, now)

    def variable_status(self, var_id: int) -> tuple[str, str]:
        """(kind, words) for a variable: "agree", "diverged" (since run #n), "repaired", "per-replica"."""
        return describe.variable(self, var_id)

    def devices_of(self, replica: int) -> str:
        """The replica's own device: given by the owner, else read off its mirrored variables."""
        if replica in self.replica_devices:
            return self.replica_devices[replica]
        for (var_id, r), c in self.copies.items():
            if r == replica and self.copies_of(var_id) > 1:
                return c.device
        return ""

    def copies_of(self, var_id: int) -> int:
        return sum(1 for (v, _) in self.copies if v == var_id)


MAX_FAULTS = 50


class ModelHub:
    """One model per replica group, for a scheduler that serves many strategies in turn.

    It keeps the ``keep`` groups heard from last; ``current()`` is the one that spoke last.

    >>> from interdist import events
    >>> hub = ModelHub()
    >>> hub.feed(events.RunStarted("g1", 1, 0, 10.0, "step", "run"))
    >>> hub.feed(events.RunStarted("g2", 1, 0, 11.0, "train", "run"))
    >>> sorted(hub.models), hub.latest, hub.current().status(0).text
    (['g1', 'g2'], 'g2', 'running train')
    """

    def __init__(self, keep: int = 8) -> None:
        self.keep = keep
        self.models: dict[str, DashboardModel] = {}
        self.latest: str | None = None

    def feed(self, e: events.Event, worker: str | None = None) -> None:
        m = self.models.get(e.group)
        if m is None:
            m = self.models[e.group] = DashboardModel()
            while len(self.models) > self.keep:  # drop the oldest group: a pooled cluster serves many
                del self.models[next(iter(self.models))]
        if worker is not None and m.workers.get(e.replica) != worker:
            m.note_worker(e.replica, worker)
        m.feed(e)
        self.latest = e.group

    def current(self) -> DashboardModel:
        """The group that spoke last (an empty model before any event)."""
        if self.latest is None or self.latest not in self.models:
            return DashboardModel()
        return self.models[self.latest]
