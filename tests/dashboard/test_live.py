"""Events during a step: with a dashboard open, the notebook sees a held-back replica before the step returns.

Real workers and a real scheduler (the ``mirrored2`` fixture): replica 1 sleeps before its
``all_reduce``, so replica 0 waits in it; the step runs on a background thread while the test
reads the dashboard's model.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import numpy as np

import interdist as idist
from interdist import events as ev
from interdist.client.event_log import event_key

HOLD_S = 2.0


def held_back(v: Any) -> Any:
    def step() -> Any:
        ctx = idist.get_replica_context()
        if ctx.replica_id_in_sync_group == 1:
            time.sleep(HOLD_S)
        total = ctx.all_reduce("sum", np.float32(1.0))
        v.assign_add(np.full(3, total, np.float32))
        return total

    return step


def wait_until(predicate: Any, timeout: float) -> float:
    """Seconds it took ``predicate()`` to become true (AssertionError after ``timeout``)."""
    t0 = time.monotonic()
    while not predicate():
        assert time.monotonic() - t0 < timeout, "timed out"
        time.sleep(0.02)
    return time.monotonic() - t0


def test_the_status_strip_moves_while_the_step_runs_and_the_log_has_no_duplicate(
    mirrored2: idist.MirroredStrategy,
) -> None:
    s = mirrored2
    with s.scope():
        v = idist.Variable(np.zeros(3, np.float32), name="v_live", aggregation=idist.VariableAggregation.MEAN)
    box = s.dashboard(interval=0.05)
    d = box.dashboard
    strip = d.views["status"]
    try:
        assert d.live.active
        result: list[Any] = []
        runner = threading.Thread(target=lambda: result.append(s.run(held_back(v))))
        t0 = time.monotonic()
        runner.start()
        chips = lambda: dict(zip(strip.source.data["replica"], strip.source.data["text"], strict=True))
        # live: while the step still runs, replica 0 is seen waiting for replica 1 (each worker's batch comes
        # on its own, within the worker's 250 ms flush interval)
        expected = {0: "waiting in all_reduce #1 for [1]", 1: "running step"}
        wait_until(lambda: chips() == expected, timeout=HOLD_S)
        seen_after = time.monotonic() - t0
        assert runner.is_alive() and seen_after < HOLD_S, seen_after
        assert "waiting in all_reduce #1 for [1]" in strip.header.text
        runner.join(timeout=30)
        wait_until(lambda: chips() == {0: "done", 1: "done"}, timeout=5)
        # the values shown become the replicas' values: the view redraws at most every interval, and the variable's
        # row appears (with its creation value) before the step's update is drawn, so wait for the values themselves
        def shown() -> list[Any]:
            rows = d.views["replica-values"].source.data
            return [rows["values"][i] for i, name in enumerate(rows["variable"]) if name == "v_live"]

        held = [c.tolist() for c in idist.debug.replica_values(s, v)]
        assert held == [[2.0, 2.0, 2.0]] * 2
        wait_until(lambda: shown() == ["[2, 2, 2]"] * 2, timeout=5)
        assert shown() == ["[2, 2, 2]"] * 2, shown()
        # each event once, though most came twice (live, then with the reply)
        keys = [event_key(e) for e in s.events.events]
        assert len(keys) == len(set(keys))
        assert sum(isinstance(e, ev.CollectiveEntered) for e in s.events.events) >= 2
    finally:
        d.close()
    assert not d.live.active and s.events._seen is None  # back to the replies only: nothing on the step's path


def test_without_a_dashboard_the_log_does_no_deduplication(mirrored2: idist.MirroredStrategy) -> None:
    s = mirrored2
    assert s.events._seen is None and not s.events.listeners
    s.run(lambda: np.float32(1.0))
    assert s.events._raw or s.events._seen is None  # the replies' messages kept unexpanded, as before
