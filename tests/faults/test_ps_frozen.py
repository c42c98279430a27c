"""A frozen (SIGSTOP) ps task or worker task of a ParameterServerStrategy (issue 17): a call waiting
for it names it within about ``frozen_after`` seconds instead of waiting for ever; a slow one that
answers is waited for; after SIGCONT the strategy goes on; updates stay exactly-once.

One cluster of Dask nannies (``ps-0``, ``worker-0``, ``worker-1``) for the module; ``frozen_after``
is 2 s here (5 s by default). Every SIGSTOP is followed by a SIGCONT in a ``finally``."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from typing import Any

import pytest

import interdist as idist
from interdist.config import settings
from interdist.errors import TaskFrozenError, UnavailableError
from interdist.experimental import ParameterServerStrategy
from interdist.replica import ps_liveness
from interdist.strategy.coordinator import ClusterCoordinator

from .test_parameter_server import _Nannies

pytestmark = [pytest.mark.timeout(180), pytest.mark.slow]

PS0 = "/job:ps/replica:0/task:0"
WORKER1 = "/job:worker/replica:0/task:1"
FROZEN_AFTER = 2.0


@pytest.fixture(scope="module")
def ps() -> Iterator[tuple[ParameterServerStrategy, ClusterCoordinator]]:
    before = settings.frozen_after
    # interdist.liveness.frozen-after in Dask's config: the workers get it too (they watch the ps): from the
    # nannies' config when they start, and from the strategy's when their replicas join it
    settings.frozen_after = FROZEN_AFTER
    cluster = _Nannies(["ps-0", "worker-0", "worker-1"])
    try:
        s = ParameterServerStrategy(cluster=cluster.address)
        coord = ClusterCoordinator(s)
        yield s, coord
        s.close()
    finally:
        cluster.close()
        settings.frozen_after = before


def _pid(s: ParameterServerStrategy, address: str) -> int:
    client = s._lease.client
    return int(client.run(os.getpid, workers=[address])[address])


def _resume(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGCONT)
    except ProcessLookupError:
        pass


def _counter(s: ParameterServerStrategy, coord: ClusterCoordinator) -> tuple[Any, Any]:
    with s.scope():
        n = idist.Variable(0, name="n")
    for _ in range(4):  # every task has met every other once (the pids are known everywhere)
        coord.schedule(lambda: n.assign_add(1) and None)
    coord.join()
    assert int(n.numpy()) == 4

    def step() -> int:
        n.assign_add(1)
        return 1

    return n, step


def test_a_frozen_ps_is_named_from_the_notebook(
    ps: tuple[ParameterServerStrategy, ClusterCoordinator], tmp_path: Any
) -> None:
    """A write, a read and a checkpoint save from the notebook: TaskFrozenError (an UnavailableError)
    naming the ps within frozen_after + 2 s, then at once while it stays stopped; after SIGCONT the
    write given up on is not applied late, and everything works."""
    s, coord = ps
    n, _ = _counter(s, coord)
    pid = _pid(s, s._ps_tasks[0].address)
    os.kill(pid, signal.SIGSTOP)
    try:
        t0 = time.monotonic()
        with pytest.raises(TaskFrozenError, match=f"parameter server {PS0} .* is frozen: its process \\(pid {pid}\\) "
                           "has been stopped") as info:
            n.assign_add(100)  # sent, buffered in the stopped process's socket
        took_write = time.monotonic() - t0
        assert isinstance(info.value, UnavailableError) and info.value.task == PS0
        assert "SIGCONT" in str(info.value) and "not applied" in str(info.value)
        t1 = time.monotonic()
        with pytest.raises(TaskFrozenError, match=PS0):
            n.numpy()
        took_read = time.monotonic() - t1
        with pytest.raises(TaskFrozenError, match=PS0):
            s.run(lambda: n.assign_add(1))  # a step run in the notebook: its read meets the stopped ps
        manager = idist.CheckpointManager(idist.Checkpoint(n=n), str(tmp_path), max_to_keep=2)
        with pytest.raises(TaskFrozenError, match=PS0):
            manager.save()
        assert sorted(os.listdir(tmp_path)) == []  # nothing half-written
    finally:
        _resume(pid)
    assert float(took_write) < FROZEN_AFTER + 3.0, took_write  # the apply window (2 s) + 1 s, then the look
    assert took_read < 1.0, took_read  # still stopped: at once
    time.sleep(0.5)
    assert int(n.numpy()) == 4  # the write given up on reached the ps late: refused, not applied
    n.assign_add(1)
    assert int(n.numpy()) == 5
    assert manager.save().endswith("ckpt-1")
    print(f"\n[faults] ps frozen: TaskFrozenError from a notebook write after {took_write:.2f} s, "
          f"then reads fail in {took_read:.3f} s; frozen_after={FROZEN_AFTER}")


def test_a_frozen_ps_fails_the_scheduled_steps_and_training_goes_on_after_sigcont(
    ps: tuple[ParameterServerStrategy, ClusterCoordinator],
) -> None:
    """Steps whose reads or updates go to a stopped ps: join raises TaskFrozenError naming it within
    frozen_after + 3 s (never waits for ever), the queued steps fail with it at once, schedule raises
    it while the ps stays stopped; after SIGCONT steps run again and the counter counts each step
    that succeeded exactly once (the failed ones applied nothing, even late)."""
    s, coord = ps
    n, step = _counter(s, coord)
    pid = _pid(s, s._ps_tasks[0].address)
    os.kill(pid, signal.SIGSTOP)
    try:
        t0 = time.monotonic()
        rvs = [coord.schedule(step) for _ in range(6)]
        with pytest.raises(TaskFrozenError, match=f"parameter server {PS0} .* is frozen") as info:
            coord.join()
        took_join = time.monotonic() - t0
        assert info.value.task == PS0
        for r in rvs:  # the queued ones failed at once; the other running one meets the stopped ps too
            with pytest.raises(TaskFrozenError, match=PS0):
                r.fetch()
        took_all = time.monotonic() - t0
        t1 = time.monotonic()
        with pytest.raises(TaskFrozenError, match=PS0):
            coord.schedule(step)
        with pytest.raises(TaskFrozenError, match=PS0):
            coord.join()
        took_again = time.monotonic() - t1
    finally:
        _resume(pid)
    assert took_join < FROZEN_AFTER + 4.0 and took_all < FROZEN_AFTER + 6.0 and took_again < 1.0, (
        took_join, took_all, took_again)
    time.sleep(0.5)  # the workers' updates buffered in the stopped ps are refused as it resumes
    t2 = time.monotonic()
    rvs = [coord.schedule(step) for _ in range(5)]
    coord.join()
    took_back = time.monotonic() - t2
    assert [r.fetch() for r in rvs] == [1] * 5
    assert int(n.numpy()) == 4 + 5  # exactly once: none of the 6 failed steps applied, each of the 5 did
    applied = s._ps_stats()[0]["applied_ids"]
    assert all(applied.count(r.step_id) == 1 for r in rvs)
    print(f"\n[faults] ps frozen during steps: join raised TaskFrozenError after {took_join:.2f} s, "
          f"schedule/join after that in {took_again:.3f} s; after SIGCONT 5 steps in {took_back:.2f} s")


def test_a_frozen_worker_step_goes_to_the_other_worker_exactly_once(
    ps: tuple[ParameterServerStrategy, ClusterCoordinator],
) -> None:
    """worker:1 stopped in the middle of its steps: its step is given up after frozen_after and runs on
    worker:0; join ends without error and every step applied exactly once, also after worker:1 resumes
    and sends its late update (a ps applies a step id once). worker:1 then takes steps again."""
    s, coord = ps
    n, _ = _counter(s, coord)

    def step() -> int:
        time.sleep(0.2)
        n.assign_add(1)
        return 1

    address = coord._addresses[1]
    pid = _pid(s, address)
    rvs = [coord.schedule(step) for _ in range(8)]
    time.sleep(0.3)  # worker:1 is in a step
    os.kill(pid, signal.SIGSTOP)
    try:
        t0 = time.monotonic()
        coord.join()
        took = time.monotonic() - t0
        assert [r.fetch() for r in rvs] == [1] * 8
        assert int(n.numpy()) == 4 + 8
        moved = [r for r in rvs if r.attempts > 1]
        assert len(moved) == 1 and moved[0].worker == "worker:0", [(r.attempts, r.worker) for r in rvs]
    finally:
        _resume(pid)
    assert took < FROZEN_AFTER + 4.0, took
    deadline = time.monotonic() + 20
    while s._ps_stats()[0]["duplicates"] == 0 and time.monotonic() < deadline:
        time.sleep(0.1)  # the resumed worker finishes its step: its update is a duplicate, ignored
    assert s._ps_stats()[0]["duplicates"] >= 1
    assert int(n.numpy()) == 4 + 8
    applied = s._ps_stats()[0]["applied_ids"]
    assert applied.count(moved[0].step_id) == 1
    deadline = time.monotonic() + 30
    workers: set[str | None] = set()
    while workers != {"worker:0", "worker:1"} and time.monotonic() < deadline:  # worker:1 is back
        rvs = [coord.schedule(step) for _ in range(4)]
        coord.join()
        workers |= {r.worker for r in rvs}
    assert workers == {"worker:0", "worker:1"}
    print(f"\n[faults] worker frozen mid-step: its step ran on worker:0, join done after {took:.2f} s")


def test_slow_but_alive_tasks_are_waited_for(ps: tuple[ParameterServerStrategy, ClusterCoordinator]) -> None:
    """A ps slow to apply (its event loop answers) and a worker's step that computes longer than
    frozen_after are not frozen: no error, no step moved."""
    s, coord = ps
    n, _ = _counter(s, coord)

    def long_step() -> int:
        time.sleep(FROZEN_AFTER + 1.5)
        n.assign_add(1)
        return 1

    idist.debug.inject(s, replica="ps:0", fault="slow", at="ps_step", seconds=FROZEN_AFTER + 1.5)
    rvs = [coord.schedule(long_step) for _ in range(2)]
    coord.join()
    assert [r.fetch() for r in rvs] == [1, 1] and all(r.attempts == 1 for r in rvs)
    assert int(n.numpy()) == 6


def test_a_frozen_ps_seen_as_on_another_host_is_found_by_probes(
    ps: tuple[ParameterServerStrategy, ClusterCoordinator], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where the process state cannot be seen (another host), a ps whose event loop does not answer a
    probe for 2 * frozen_after is frozen; a slow apply whose event loop answers is not."""
    s, coord = ps
    n, _ = _counter(s, coord)
    monkeypatch.setattr(ps_liveness, "host_key", lambda: "another-host")  # the notebook sees no pid
    idist.debug.inject(s, replica="ps:0", fault="slow", at="ps_step", seconds=2 * FROZEN_AFTER + 1.0)
    t0 = time.monotonic()
    n.assign_add(1)  # slow, alive: waited for
    assert time.monotonic() - t0 >= 2 * FROZEN_AFTER + 0.9 and int(n.numpy()) == 5
    pid = _pid(s, s._ps_tasks[0].address)
    os.kill(pid, signal.SIGSTOP)
    try:
        t0 = time.monotonic()
        with pytest.raises(TaskFrozenError, match=f"{PS0} .* has not answered a liveness probe for"):
            n.numpy()
        took = time.monotonic() - t0
        with pytest.raises(TaskFrozenError, match=PS0):
            n.numpy()  # looked at again: a short probe
        took_again = time.monotonic() - t0 - took
    finally:
        _resume(pid)
    assert 2 * FROZEN_AFTER <= took < 2 * FROZEN_AFTER + 3.0 and took_again < 3.0, (took, took_again)
    assert int(n.numpy()) == 5
    print(f"\n[faults] ps frozen, seen by probes only: TaskFrozenError after {took:.2f} s, again in {took_again:.2f} s")
