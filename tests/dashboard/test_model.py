"""The dashboard model, from hand-made event streams: divergence, watchdog, timings, progress."""

from __future__ import annotations

import pytest

from interdist import events as ev
from interdist.dashboard.model import DashboardModel, ModelHub

from .streams import G, created, hang_stream, training_stream, updated


def fed(stream: list[ev.Event]) -> DashboardModel:
    m = DashboardModel()
    m.feed_many(stream)
    return m


def test_divergence_begins_at_the_step_where_checksums_first_differ() -> None:
    m = fed(training_stream())
    assert m.diverged_since == {1: 3}  # w differs from step 3; s is sync-on-read, never "diverged"
    # later steps keep the step where it began
    m.feed_many([updated(0, 4, 1, "w", 3.0, 103.3), updated(1, 4, 1, "w", 3.5, 103.3)])
    assert m.diverged_since == {1: 3}
    # copies that agree again clear the marker
    m.feed_many([updated(0, 5, 1, "w", 4.0, 104.3), updated(1, 5, 1, "w", 4.0, 104.3)])
    assert m.diverged_since == {}


def test_copies_of_different_steps_are_not_compared() -> None:
    m = fed([created(0, 1, "w", 1.0, 100.0), created(1, 1, "w", 1.0, 100.0)])
    m.feed(updated(0, 2, 1, "w", 5.0, 101.0))  # replica 0 reported step 2, replica 1 not yet
    assert m.diverged_since == {}
    m.feed(updated(1, 2, 1, "w", 5.0, 101.1))
    assert m.diverged_since == {}


def test_divergence_tolerance_is_relative() -> None:
    m = fed([created(0, 1, "w", 1e6, 100.0), created(1, 1, "w", 1e6 + 0.1, 100.0)])
    assert m.diverged_since == {}  # 1e-7 relative: rounding, not divergence
    m = fed([created(0, 1, "w", 1e6, 100.0), created(1, 1, "w", 1e6 + 10.0, 100.0)])
    assert m.diverged_since == {1: 1}


def test_watchdog_lists_the_missing_replica_and_how_long_the_others_wait() -> None:
    m = fed(hang_stream())
    assert m.world_size == 3
    assert m.stuck(threshold_s=5.0, now=104.0) == []  # replica 0 has waited 4 s only
    (s,) = m.stuck(threshold_s=5.0, now=110.0)
    assert (s.op, s.step, s.seq, s.missing) == ("all_gather", 7, 1, [1])
    assert s.arrived == {0: pytest.approx(10.0), 2: pytest.approx(9.0)}
    # the late replica arrives and everyone leaves: nothing is stuck
    m.feed(ev.CollectiveEntered(G, 7, 1, 111.0, "all_gather", 1, 64))
    for r in (0, 1, 2):
        m.feed(ev.CollectiveExited(G, 7, r, 111.5, "all_gather", 1, 64, "all_gather", "dask", 0.0, 0.5))
    assert m.stuck(threshold_s=5.0, now=200.0) == [] and m.open == {}


def test_a_failed_step_closes_its_collectives() -> None:
    m = fed(hang_stream())
    m.feed(ev.ReplicaFailed(G, 7, 1, 102.0, "ValueError: boom", "tb"))
    m.feed(ev.RunFinished(G, 7, 0, 102.1, "step", "run", 2.1, False))
    assert m.stuck(threshold_s=1.0, now=200.0) == []
    assert [f.replica for f in m.failures] == [1]


def test_timings_latency_and_bus_bandwidth() -> None:
    m = fed(training_stream())
    p0, p1 = list(m.timings)[:2]
    assert (p0.replica, p0.op, p0.nbytes) == (0, "all_reduce", 1000)
    assert p0.latency_s == pytest.approx(0.15)  # entered at 101.1, left at 101.25
    assert p1.latency_s == pytest.approx(0.05)
    # all_reduce over 2 replicas: bus = bytes * 2(n-1)/n / transfer time
    assert p0.bus_gbps == pytest.approx(1000 * 1.0 / 0.05 / 1e9)
    e0 = m.timeline[0]
    assert (e0.start, e0.wait_s, e0.transfer_s, e0.end) == (pytest.approx(101.1), 0.1, 0.05, 101.25)


def test_progress_counts_steps_all_replicas_finished() -> None:
    m = fed(training_stream())
    assert [s for _, s in m.steps_done] == [2, 3]
    assert m.steps_per_second() == pytest.approx(1.0)
    m.feed(ev.RunStarted(G, 4, 0, 103.0, "step", "run"))
    m.feed(ev.RunFinished(G, 4, 0, 103.5, "step", "run", 0.5, True))
    assert [s for _, s in m.steps_done] == [2, 3] and m.running_step == 4  # replica 1 still runs step 4


def test_hub_follows_the_group_that_spoke_last() -> None:
    hub = ModelHub(keep=2)
    for g in ("a", "b", "c"):
        hub.feed(ev.RunStarted(g, 1, 0, 1.0, "f", "run"), worker=f"tcp://10.0.0.{ord(g)}:1")
    assert hub.current().group == "c" and list(hub.models) == ["b", "c"]
    assert hub.current().workers == {0: "tcp://10.0.0.99:1"}


def test_batches_of_one_worker_after_another_give_the_same_state() -> None:
    """On a scheduler, replica 0's batch (steps 2-3) may arrive before replica 1's first one."""
    stream = training_stream()
    by_replica = [e for e in stream if e.replica == 0] + [e for e in stream if e.replica == 1]
    m = fed(by_replica)
    assert m.diverged_since == {1: 3}
    assert [s for _, s in m.steps_done] == [2, 3] and m.running_step is None
    assert m.waiting() == 0 and m.stuck(threshold_s=0.0, now=1e9) == []
    assert len(m.timeline) == 4
