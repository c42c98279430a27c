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


def chips(m: DashboardModel) -> dict[int, str]:
    return {r: m.status(r).text for r in range(m.world_size)}


def test_status_strip_running_waiting_done() -> None:
    m = fed(hang_stream())  # replicas 0 and 2 entered all_gather #1 of step 7; replica 1 did not
    assert chips(m) == {0: "waiting in all_gather #1 for [1]", 1: "running step", 2: "waiting in all_gather #1 for [1]"}
    assert [m.status(r).kind for r in range(3)] == ["waiting", "running", "waiting"]
    m.feed(ev.CollectiveEntered(G, 7, 1, 111.0, "all_gather", 1, 64))
    assert chips(m)[0] == "in all_gather #1"  # everyone arrived: transferring, not waiting
    for r in (0, 1, 2):
        m.feed(ev.CollectiveExited(G, 7, r, 111.5, "all_gather", 1, 64, "ring", "dask", 0.0, 0.5))
    assert chips(m) == {r: "running step" for r in range(3)}
    for r in (0, 1, 2):
        m.feed(ev.RunFinished(G, 7, r, 112.0, "step", "run", 12.0, True))
    assert chips(m) == {r: "done" for r in range(3)} and m.runs == 1 and m.run_label(7) == "run #1"


def test_status_strip_raised_and_released_and_failures_counted_once() -> None:
    m = fed(hang_stream())
    m.feed(ev.ReplicaFailed(G, 7, 1, 102.0, "ValueError: boom\nmore", "tb"))
    m.feed(ev.ReplicaReleased(G, 7, 0, 102.1, 1, "replica 1 raised ValueError: boom"))
    m.feed(ev.RunFinished(G, 7, 0, 102.1, "step", "run", 2.1, False))
    # replica 2's own release is on its way: until it comes, it is still in its step
    assert chips(m) == {0: "released: replica 1 raised", 1: "raised ValueError: boom", 2: "running step"}
    assert [m.status(r).kind for r in range(3)] == ["released", "raised", "running"]
    assert [(f.replica, f.kind) for f in m.failures] == [(1, "raised")]  # a released peer is no failure of its own
    m.feed(ev.ReplicaFailed(G, 7, 1, 102.0, "ValueError: boom\nmore", "tb"))  # the same event again
    assert len(m.failures) == 1
    m.feed(ev.RunStarted(G, 9, 1, 103.0, "step", "run"))  # the next run clears the chip, not the list
    assert chips(m)[1] == "running step" and m.runs == 2 and m.run_label(8) == "after run #1"
    assert len(m.failures) == 1


def test_run_numbers_count_the_users_runs_not_the_engines_programs() -> None:
    m = fed([ev.RunStarted(G, 1, 0, 1.0, "create_variable", "create_variable"),
             ev.RunStarted(G, 2, 0, 2.0, "step", "run"), ev.RunStarted(G, 5, 0, 3.0, "step", "run")])
    assert m.runs == 2 and m.run_label(5) == "run #2" and m.run_label(1) == "before run #1" and m.run_label(3) == "after run #1"


def test_recent_rate_ignores_idle_time_before_the_window() -> None:
    m = DashboardModel()
    m.steps_done.extend([(0.0, 1), (1.0, 2)] + [(100.0 + 0.5 * k, 3 + k) for k in range(5)])
    assert m.recent_rate(window_s=10.0, now=103.0) == pytest.approx(2.0)  # not 6 steps in 102 s
    assert m.recent_rate(window_s=10.0, now=200.0) == 0.0  # idle now


def test_values_of_small_variables_reach_the_model() -> None:
    m = fed(training_stream())
    assert m.copies[(1, 1)].values == (1.25, 1.25)
    big = ev.VariableUpdated(G, 4, 0, 104.0, 1, "w", "cpu", 1.0, 1.0)  # a large variable: no values
    m.feed(big)
    assert m.copies[(1, 0)].values == ()


def test_unit_formatting() -> None:
    from interdist.dashboard.units import fmt_bytes, fmt_duration, fmt_rate, fmt_values, short_devices

    assert [fmt_bytes(n) for n in (12, 1536, 2.5e6, 3e9)] == ["12 B", "1.5 KB", "2.5 MB", "3.0 GB"]
    assert [fmt_rate(r) for r in (2e-3 * 1e9, 12e9)] == ["2.0 MB/s", "12.0 GB/s"]
    assert [fmt_duration(s) for s in (8e-5, 0.0025, 0.25, 12.3, 0)] == ["80 µs", "2.5 ms", "250 ms", "12.3 s", "0 s"]
    assert fmt_values([1.0, 2.5, -3.0]) == "[1, 2.5, -3]" and fmt_values([0.001]) == "0.001"
    cpu = "/job:localhost/replica:0/task:{}/device:CPU:{}"
    assert short_devices([cpu.format(0, 0), cpu.format(0, 1)]) == {cpu.format(0, 0): "CPU:0", cpu.format(0, 1): "CPU:1"}
    assert short_devices([cpu.format(0, 0), cpu.format(1, 0)])[cpu.format(1, 0)] == "task:1/CPU:0"
    assert short_devices([cpu.format(0, 0)]) == {cpu.format(0, 0): "CPU:0"}
