"""The exact events one step emits (the dashboard reads only these)."""

from __future__ import annotations

import time

from typing import Any

import numpy as np

import interdist as idist
from interdist import events


def test_events_of_one_all_reduce_step(mirrored2: idist.MirroredStrategy) -> None:
    s = mirrored2
    s.run(lambda: np.float32(0.0))  # a step before, so that ours is not the first
    step = s._group.step + 1
    s.run(lambda: idist.get_replica_context().all_reduce("sum", np.ones(4, np.float32)))

    def mine(evs: list[events.Event]) -> list[events.Event]:
        return [e for e in evs if e.step == step and e.group == s._group_id]

    evs = mine(s.events.wait_for(lambda evs: sum(isinstance(e, events.RunFinished) for e in mine(evs)) == 2))
    kinds = sorted((e.replica, e.kind, getattr(e, "op", "")) for e in evs)
    # the notebook's own event (replica -1: the whole group) says it sent the call, and its number
    assert kinds == sorted([(-1, "step-sent", "")] + [
        (r, k, op) for r in (0, 1) for k, op in [
            ("run-started", ""), ("collective-entered", "all_reduce"), ("collective-exited", "all_reduce"),
            ("run-finished", "")]
    ])
    (sent,) = [e for e in evs if isinstance(e, events.StepSent)]
    assert (sent.run, sent.steps, sent.world_size, sent.program) == (s._group.runs, 1, 2, "run")
    for e in evs:
        if isinstance(e, events.CollectiveExited):
            assert e.nbytes >= 16 and e.wait_s >= 0 and e.transfer_s >= 0 and e.backend == "dask"
        if isinstance(e, events.RunFinished):
            assert e.ok and e.program == "run"
    # per replica, the order is started < entered < exited < finished
    for r in (0, 1):
        order = [e.kind for e in sorted((e for e in evs if e.replica == r), key=lambda e: e.time)]
        assert order == ["run-started", "collective-entered", "collective-exited", "run-finished"]


def test_a_steps_collectives_keep_their_place_among_its_other_events(mirrored2: idist.MirroredStrategy) -> None:
    """Collective events travel as rows of records; a scalar logged between two collectives, and the
    variable update after them, are seen where they happened, in each replica's log order."""
    s = mirrored2
    with s.scope():
        v = idist.Variable(np.zeros(3, np.float32), name="v_order", synchronization=idist.VariableSynchronization.ON_READ,
                           aggregation=idist.VariableAggregation.SUM)  # fmt: skip (written in place: no collective)

    def step() -> None:
        ctx = idist.get_replica_context()
        ctx.all_reduce("sum", np.ones(4, np.float32))
        idist.debug.log_scalar("between", 1.0)
        ctx.all_reduce("sum", np.ones(4, np.float32))
        ctx.all_reduce("mean", np.ones(4, np.float32))
        v.assign(np.ones(3, np.float32))

    step_no = s._group.step + 1
    s.run(step)

    def mine(evs: list[events.Event], r: int) -> list[events.Event]:
        return [e for e in evs if e.step == step_no and e.group == s._group_id and e.replica == r]

    evs = s.events.wait_for(lambda evs: all(any(isinstance(e, events.RunFinished) for e in mine(evs, r)) for r in (0, 1)))
    for r in (0, 1):
        got = [(e.kind, getattr(e, "seq", None)) for e in mine(evs, r) if not isinstance(e, events.VariableUpdated)]
        assert got == [("run-started", None), ("collective-entered", 1), ("collective-exited", 1), ("scalar-logged", None),
                       ("collective-entered", 2), ("collective-exited", 2), ("collective-entered", 3),
                       ("collective-exited", 3), ("run-finished", None)]  # fmt: skip
        kinds = [e.kind for e in mine(evs, r)]
        assert kinds.index("variable-updated") > kinds.index("collective-exited") + 4  # after the last collective
        assert kinds.index("variable-updated") < kinds.index("run-finished")


def test_event_roundtrip() -> None:
    e = events.CollectiveExited("g", 3, 1, 12.5, "all_reduce", 1, 64, "all-gather-reduce", "dask", 0.1, 0.2)
    assert events.from_msg(e.to_msg()) == e


def test_the_event_log_keeps_arrival_order_whether_or_not_it_expanded_yet() -> None:
    from interdist.client.event_log import EventLog

    log = EventLog(maxlen=5)
    a = events.RunStarted("g", 1, 0, 1.0, "f", "run")
    record = events.steps_msg("g", 2, 0, "f", [2.0, 2.5])
    log.add_msgs([a.to_msg(), record])
    log.add(events.RunStarted("g", 9, 1, 9.0, "f", "run"))  # after the messages, so after their events
    assert [(e.kind, e.step) for e in log.events] == [
        ("run-started", 1), ("run-started", 2), ("run-finished", 2), ("run-started", 9)]
    seen: list[events.Event] = []
    log.listeners.append(seen.append)
    log.add_msgs([events.steps_msg("g", 3, 0, "f", [3.0, 3.5])])
    assert [(e.kind, e.step) for e in seen] == [("run-started", 3), ("run-finished", 3)]  # at once, expanded
    assert [e.step for e in log.events] == [2, 2, 9, 3, 3]  # maxlen 5: the oldest went
    log.listeners.clear()
    log.add_msgs([events.steps_msg("g", 10 + k, 0, "f", [1.0, 1.0]) for k in range(8)])  # more than maxlen, raw
    last = [("run-finished", 15), ("run-started", 16), ("run-finished", 16), ("run-started", 17), ("run-finished", 17)]
    assert [(e.kind, e.step) for e in log.wait_for(lambda evs: evs[-1].step == 17, timeout=1)] == last
    assert [(e.kind, e.step) for e in log.events] == last


def test_since_reads_new_events_from_a_position_and_expands_them_only_then() -> None:
    from interdist.client.event_log import EventLog

    log = EventLog(maxlen=6)
    log.add_msgs([events.RunStarted("g", k, 0, float(k), "f", "run").to_msg() for k in (1, 2)])
    assert len(log._raw) == 2  # no reader yet: kept in wire form
    first, pos = log.since(0)
    assert [e.step for e in first] == [1, 2] and pos == 2 and not log._raw
    assert log.since(pos) == ([], 2)
    log.add_msgs([events.steps_msg("g", 3, 0, "f", [3.0, 3.5])])
    new, pos = log.since(pos)
    assert [(e.kind, e.step) for e in new] == [("run-started", 3), ("run-finished", 3)] and pos == 4
    log.add_msgs([events.RunStarted("g", k, 0, float(k), "f", "run").to_msg() for k in range(10, 20)])
    new, pos = log.since(pos)  # 10 more, of which the log keeps 6: the 4 oldest are skipped
    assert [e.step for e in new] == list(range(14, 20)) and pos == 14


def test_live_duplicates_are_dropped_when_expanded() -> None:
    from interdist.client.event_log import EventLog

    log = EventLog()
    a, b, c = (events.RunStarted("g", k, 0, float(k), "f", "run").to_msg() for k in (1, 2, 3))
    log.start_live()
    log.add_live([a, b])  # the worker's batch came first
    log.add_msgs([a, b, c])  # then the reply, with the same two
    log.add_live([c])
    new, pos = log.since(0)
    assert [e.step for e in new] == [1, 2, 3] and pos == 3
    log.stop_live()
    log.add_live([c])  # the feed is off: nothing more from it
    log.add_msgs([c])  # the replies are all there is now, taken as they come
    assert [e.step for e in log.since(pos)[0]] == [3]


def test_the_event_log_is_bounded_by_bytes_as_well_as_by_count() -> None:
    """Issue 25: "event logs bounded by bytes, not only count". Failures carry tracebacks: 100 events of
    10 kB each cannot stay in a log given 200 kB, whatever its count bound; the newest stay, in order,
    and ``since`` still counts positions across what left."""
    from interdist.client.event_log import EventLog, approx_bytes

    log = EventLog(maxlen=1_000, max_bytes=200_000)
    big = [events.ReplicaFailed("g", k, 0, float(k), "ValueError", "x" * 10_000).to_msg() for k in range(100)]
    log.add_msgs(big)
    kept = list(log.events)
    one = approx_bytes(kept[-1])
    assert 10_000 < one < 11_000  # the traceback's text counts
    assert len(kept) == 200_000 // one  # as many as fit, no more
    assert [e.step for e in kept] == list(range(100 - len(kept), 100))
    assert log.nbytes == sum(approx_bytes(e) for e in kept) <= 200_000
    new, position = log.since(98)
    assert [e.step for e in new] == [98, 99] and position == 100
    # the count bound still holds, and its evictions are counted out of the bytes too
    small = EventLog(maxlen=10, max_bytes=10**9)
    small.add_msgs([events.ReplicaFailed("g", k, 0, float(k), "e", "E").to_msg() for k in range(25)])
    assert [e.step for e in small.events] == list(range(15, 25))
    assert small.nbytes == sum(approx_bytes(e) for e in small.events)
    # a batch that pushes only part of what is kept out (kept as a batch, not event by event)
    part = EventLog(maxlen=10, max_bytes=10**9)
    for first in (0, 7):
        part.add_msgs([events.ReplicaFailed("g", k, 0, float(k), "e", "E" * k).to_msg() for k in range(first, first + 7)])
        part.since(0)  # expanded now, batch by batch
    assert [e.step for e in part.events] == list(range(4, 14))
    assert part.nbytes == sum(approx_bytes(e) for e in part.events)
    assert part.since(12)[0][0].step == 12


def test_unread_wire_messages_are_bounded_too() -> None:
    """With no reader, messages wait in wire form; they are expanded (and counted against the byte bound)
    once ``RAW_KEPT`` wait, so unread messages cannot hold more memory than the bound says (before, up to the
    count bound of 100,000 waited uncounted)."""
    from interdist.client.event_log import RAW_KEPT, EventLog

    log = EventLog(maxlen=100_000, max_bytes=1_000_000)
    for k in range(3 * RAW_KEPT):
        log.add_msgs([events.ReplicaFailed("g", k, 0, float(k), "E", "x" * 1000).to_msg()])
        assert len(log._raw) <= RAW_KEPT
    assert log.nbytes <= 1_000_000 and len(log._events) < RAW_KEPT
    assert log.events[-1].step <= 3 * RAW_KEPT - 1


def _collectives(step: int, replica: int, n: int, t0: float = 0.0) -> dict[str, object]:
    rows: list[tuple[object, ...]] = []
    for k in range(n):
        rows.append((events.ENTERED_ROW, t0 + k, "all_reduce", k + 1, 16))
        rows.append((events.EXITED_ROW, t0 + k + 0.5, "all_reduce", k + 1, 16, "all_gather_reduce", "shm", 1e-6, 2e-6))
    return events.collectives_msg("g", step, replica, rows)


def test_a_collectives_record_counts_its_events_toward_the_unread_bound() -> None:
    """One wire message of many collectives weighs as many events: the bound on unread messages holds."""
    from interdist.client.event_log import RAW_KEPT, EventLog

    log = EventLog(maxlen=100_000)
    record = _collectives(1, 0, RAW_KEPT // 4)  # RAW_KEPT / 2 events in one message
    log.add_msgs([record])
    assert log._raw == [record]  # under the bound: kept as it came
    log.add_msgs([_collectives(2, 0, RAW_KEPT // 4 + 1)])  # now more than RAW_KEPT events wait: expanded
    assert log._raw == [] and len(log._events) == RAW_KEPT + 2
    kept = log.events
    first = kept[0]
    assert first == events.CollectiveEntered("g", 1, 0, 0.0, "all_reduce", 1, 16)
    assert kept[1] == events.CollectiveExited("g", 1, 0, 0.5, "all_reduce", 1, 16, "all_gather_reduce", "shm",
                                                     1e-6, 2e-6)  # fmt: skip
    assert [(type(e).__name__, e.step, e.seq) for e in list(kept)[-2:]] == [
        ("CollectiveEntered", 2, RAW_KEPT // 4 + 1), ("CollectiveExited", 2, RAW_KEPT // 4 + 1)]


def test_live_duplicates_of_collectives_records_are_dropped_event_by_event() -> None:
    """A worker's batch and the reply carry the same records; while live, each event is kept once, however the
    rows were cut into records."""
    from interdist.client.event_log import EventLog, event_key

    log = EventLog()
    log.start_live()
    whole = _collectives(3, 1, 3)
    rows = whole["rows"]
    assert isinstance(rows, list)
    log.add_live([events.collectives_msg("g", 3, 1, rows[:3]), events.collectives_msg("g", 3, 1, rows[3:])])
    log.add_msgs([whole, events.RunFinished("g", 3, 1, 9.0, "f", "run", 1.0, True).to_msg()])
    got = list(log.events)
    assert [type(e).__name__ for e in got] == ["CollectiveEntered", "CollectiveExited"] * 3 + ["RunFinished"]
    assert len({event_key(e) for e in got}) == len(got) == 7
    log.stop_live()


def _sample(cls: type[events.Event], k: int) -> events.Event:
    """An instance of ``cls`` with a value of each field's type (``k`` varies the numbers)."""
    import dataclasses
    import typing

    hints = typing.get_type_hints(cls)
    by_type: dict[Any, Any] = {str: f"s{k}", int: k, float: k + 0.5, bool: True}
    values = []
    for f in dataclasses.fields(cls):
        t = hints[f.name]
        if t in by_type:
            values.append(by_type[t])
        else:  # tuple[X, ...]
            (inner, _) = typing.get_args(t)
            values.append((by_type[inner], by_type[inner]))
    return cls(*values)


def test_every_event_has_a_compact_form_that_makes_it_again() -> None:
    import gc

    from interdist.client.event_log import approx_bytes, event_key

    for k, cls in enumerate(events.EVENT_CLASSES):
        e = _sample(cls, k)
        c = events.of_event(e)
        assert events.from_compact(c) == e and type(events.from_compact(c)) is cls
        assert events.compact(e.to_msg()) == [c]  # from the wire form, directly
        # the wire form made without the event (a replica's RunStarted/RunFinished): the same keys, in order
        made = cls.msg(*c[1:])
        assert made == e.to_msg() and list(made) == list(e.to_msg())
        assert events.compact_key(c) == event_key(e)
        # only numbers and strings (and tuples of them): the garbage collector stops tracking it (a tuple is
        # untracked once the tuples in it are: the inner ones may be seen after it, in the first collection)
        gc.collect()
        gc.collect()
        assert not gc.is_tracked(c), cls
    record = events.steps_msg("g", 4, 1, "fn", [1.0, 1.5])
    assert events.compact(record) == [events.of_event(e) for e in events.expand(record)]
    assert approx_bytes(events.RunStarted("g", 1, 0, 0.5, "f", "run")) == 200 + (49 + 1) + 24 * 3 + (49 + 1) + (49 + 3)


def test_the_log_keeps_events_the_garbage_collector_does_not_track() -> None:
    """100,000 kept dataclass instances made every full collection of the notebook's process much longer, and
    their arrival caused those collections: the log keeps tuples of numbers and strings, untracked once a
    collection has seen them, and makes the events when they are read."""
    import gc

    from interdist.client.event_log import EventLog

    log = EventLog()
    log.add_msgs([_collectives(k, 0, 100) for k in range(50)])  # past RAW_KEPT: kept in compact form
    log.add(events.ReplicaFailed("g", 99, 1, 5.0, "boom", "Traceback"))
    assert len(log._events) == 50 * 200 + 1
    # gc.collect() does nothing while another thread's collection runs (the suite's clusters and event loops
    # live in this process), so wait for the condition, not for two calls: a collection that did run untracks
    # every one of these tuples of atomics (one pass: they hold no tuple).
    deadline = time.monotonic() + 10
    while any(gc.is_tracked(e) for e in log._events) and time.monotonic() < deadline:
        gc.collect()
        time.sleep(0.01)
    assert not any(gc.is_tracked(e) for e in log._events)
    read = log.events
    assert read[-1] == events.ReplicaFailed("g", 99, 1, 5.0, "boom", "Traceback")
    assert read[0] == events.CollectiveEntered("g", 0, 0, 0.0, "all_reduce", 1, 16)
    assert log.since(len(read) - 1) == ([read[-1]], len(read))
