"""The events as a Chrome trace: the JSON that Perfetto, ``chrome://tracing`` and Speedscope open.

``strategy.events.to_chrome_trace(path)`` writes it (``client/event_log.py``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from interdist.events import (
    CollectiveEntered,
    CollectiveExited,
    Event,
    ReplicaFailed,
    ReplicaFrozen,
    ReplicaLost,
    ReplicaRecovered,
    ReplicaReleased,
    ReplicaRestarting,
    RunFinished,
    RunStarted,
    ScalarLogged,
    StepSent,
)


def to_chrome_trace(evs: Iterable[Event]) -> dict[str, Any]:
    """The events as a Chrome trace (the JSON that Perfetto, ``chrome://tracing`` and Speedscope open).

    One process per replica group, one thread (track) per replica. Each ``run`` is a slice named by its
    function; inside it each collective is a slice ``all_reduce #k`` split into a ``wait`` slice (for
    the slowest peer) and a ``transfer`` slice (moving and reducing the bytes), as Horovod's timeline
    shows them. A failure is an instant event with the error. Times are microseconds from the first
    event.
    """
    evs = list(evs)
    if not evs:
        return {"traceEvents": [], "displayTimeUnit": "ms"}
    t0 = min(e.time for e in evs)
    groups: dict[str, int] = {}
    out: list[dict[str, Any]] = []

    def us(t: float) -> float:
        return round((t - t0) * 1e6, 3)

    def pid(group: str) -> int:
        if group not in groups:
            groups[group] = len(groups) + 1
            out.append({"ph": "M", "name": "process_name", "pid": groups[group], "args": {"name": f"group {group}"}})
        return groups[group]

    tracks: set[tuple[int, int]] = set()
    started: dict[tuple[str, int, int], RunStarted] = {}
    entered: dict[tuple[str, int, int, int], CollectiveEntered] = {}
    for e in sorted(evs, key=lambda e: e.time):
        p, tid = pid(e.group), e.replica
        if (p, tid) not in tracks:
            tracks.add((p, tid))
            track = f"replica {tid}" if tid >= 0 else "notebook"  # the notebook's own events: a track of its own
            out.append({"ph": "M", "name": "thread_name", "pid": p, "tid": tid, "args": {"name": track}})
            out.append({"ph": "M", "name": "thread_sort_index", "pid": p, "tid": tid, "args": {"sort_index": tid}})
        if isinstance(e, RunStarted):
            started[(e.group, e.step, e.replica)] = e
        elif isinstance(e, RunFinished):
            begin = started.pop((e.group, e.step, e.replica), None)
            start = begin.time if begin is not None else e.time - e.duration_s
            out.append(
                {
                    "ph": "X", "name": e.fn, "cat": e.program, "pid": p, "tid": tid,
                    "ts": us(start), "dur": us(e.time) - us(start),
                    "args": {"step": e.step, "ok": e.ok, "program": e.program},
                }
            )  # fmt: skip
        elif isinstance(e, CollectiveEntered):
            entered[(e.group, e.step, e.replica, e.seq)] = e
        elif isinstance(e, CollectiveExited):
            begin_c = entered.pop((e.group, e.step, e.replica, e.seq), None)
            end_wait = e.time - e.transfer_s
            start = begin_c.time if begin_c is not None else end_wait - e.wait_s
            args = {"step": e.step, "bytes": e.nbytes, "algorithm": e.algorithm, "backend": e.backend}
            name = f"{e.op} #{e.seq}"
            out.append({"ph": "X", "name": name, "cat": "collective", "pid": p, "tid": tid, "ts": us(start),
                        "dur": us(e.time) - us(start), "args": args})  # fmt: skip
            wait_start = max(start, end_wait - e.wait_s)
            out.append({"ph": "X", "name": "wait", "cat": "collective", "pid": p, "tid": tid,
                        "ts": us(wait_start), "dur": us(end_wait) - us(wait_start), "args": {"op": name}})  # fmt: skip
            out.append({"ph": "X", "name": "transfer", "cat": "collective", "pid": p, "tid": tid,
                        "ts": us(end_wait), "dur": us(e.time) - us(end_wait), "args": {"op": name}})  # fmt: skip
        elif isinstance(e, ScalarLogged):  # a counter track per name, one series per replica
            out.append({"ph": "C", "name": e.name, "pid": p, "ts": us(e.time),
                        "args": {f"replica {e.replica}": e.value}})  # fmt: skip
        elif isinstance(e, ReplicaFailed):
            out.append({"ph": "i", "s": "t", "name": "failed", "cat": "error", "pid": p, "tid": tid, "ts": us(e.time),
                        "args": {"step": e.step, "error": e.error}})  # fmt: skip
        elif isinstance(e, StepSent):
            out.append({"ph": "i", "s": "t", "name": f"run #{e.run} sent", "cat": "notebook", "pid": p, "tid": tid,
                        "ts": us(e.time), "args": {"step": e.step, "fn": e.fn, "steps": e.steps}})  # fmt: skip
        elif isinstance(e, (ReplicaReleased, ReplicaFrozen, ReplicaLost, ReplicaRestarting, ReplicaRecovered)):
            name = e.kind.removeprefix("replica-")  # "frozen", "lost", ...: an instant on the replica's track
            args = {k: v for k, v in e.to_msg().items() if k not in ("kind", "group", "replica", "time")}
            out.append({"ph": "i", "s": "t", "name": name, "cat": "state", "pid": p, "tid": tid, "ts": us(e.time),
                        "args": args})  # fmt: skip
    return {"traceEvents": out, "displayTimeUnit": "ms", "otherData": {"producer": "interdist"}}
