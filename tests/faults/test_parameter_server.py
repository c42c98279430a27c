"""A parameter server that dies (issue 17): every call names it within seconds with TF's
``UnavailableError``, and ``strategy.recover(checkpoint)`` brings training back from the last checkpoint.
Also the faults injected into ParameterServer steps (``at="ps_step"``). One cluster of Dask nannies
(``ps-0``, ``worker-0``, ``worker-1``) for the module: a nanny restarts a killed task."""

from __future__ import annotations

import logging
import os
import signal
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

import interdist as idist
from interdist.errors import InjectedFaultError, UnavailableError
from interdist.experimental import ParameterServerStrategy
from interdist.strategy.coordinator import ClusterCoordinator

pytestmark = pytest.mark.timeout(120)

PS0 = "/job:ps/replica:0/task:0"


class _Nannies:
    def __init__(self, names: list[str]) -> None:
        from distributed import LocalCluster

        self.cluster = LocalCluster(n_workers=0, host="127.0.0.1", dashboard_address="127.0.0.1:0",
                                    silence_logs=logging.ERROR)
        self.nannies = [self.cluster.sync(self._add, n) for n in names]
        self.address = self.cluster.scheduler_address

    async def _add(self, name: str) -> Any:
        from distributed import Nanny

        nanny = Nanny(self.cluster.scheduler_address, name=name, nthreads=1, host="127.0.0.1", memory_limit=0,
                      silence_logs=logging.ERROR)
        await nanny
        return nanny

    def close(self) -> None:
        for n in self.nannies:
            try:
                self.cluster.sync(n.close, timeout=10)
            except Exception:  # noqa: BLE001
                pass
        self.cluster.close(timeout=20)


@pytest.fixture(scope="module")
def ps() -> Iterator[tuple[ParameterServerStrategy, ClusterCoordinator]]:
    cluster = _Nannies(["ps-0", "worker-0", "worker-1"])
    s = ParameterServerStrategy(cluster=cluster.address)
    coord = ClusterCoordinator(s)
    yield s, coord
    s.close()
    cluster.close()


def _ps_pid(s: ParameterServerStrategy) -> int:
    client = s._lease.client
    addr = s._ps_tasks[0].address
    return int(client.run(os.getpid, workers=[addr])[addr])


def test_ps_step_faults_on_a_worker(ps: tuple[ParameterServerStrategy, ClusterCoordinator]) -> None:
    """raise: the step's error names the worker task; slow/freeze: the step is late, right; kill: the
    step runs again on the other worker and its update is applied exactly once."""
    s, coord = ps
    with s.scope():
        v = idist.Variable(np.float32(0.0))

    def step() -> float:
        v.assign_add(1.0)
        return 1.0

    idist.debug.inject(s, replica=1, fault="raise", at="ps_step")
    rvs = [coord.schedule(step) for _ in range(6)]
    with pytest.raises(InjectedFaultError, match="ps_step .* on /job:worker/replica:0/task:1"):
        coord.join()
    coord.join()  # raised once, as TF: the coordinator goes on
    done = sum(r.done() and r._error is None for r in rvs)
    assert float(v.numpy()) == done  # the failed step applied nothing
    base = float(v.numpy())
    for fault in ("slow", "freeze"):
        idist.debug.inject(s, replica=0, fault=fault, at="ps_step", seconds=1.5)
        t0 = time.monotonic()
        rvs = [coord.schedule(step) for _ in range(4)]
        coord.join()
        assert time.monotonic() - t0 >= 1.4 and [r.fetch() for r in rvs] == [1.0] * 4
        base += 4
        assert float(v.numpy()) == base
    idist.debug.inject(s, replica=1, fault="kill", at="ps_step")
    rvs = [coord.schedule(step) for _ in range(8)]
    coord.join()
    assert [r.fetch() for r in rvs] == [1.0] * 8
    assert float(v.numpy()) == base + 8  # exactly once: the killed step's retry applied once
    applied = s._ps_stats()[0]["applied_ids"]
    assert all(applied.count(r.step_id) == 1 for r in rvs)


def test_ps_step_raise_on_the_ps(ps: tuple[ParameterServerStrategy, ClusterCoordinator], tmp_path: Any) -> None:
    s, coord = ps
    with s.scope():
        v = idist.Variable(np.float32(0.0))
    idist.debug.inject(s, replica="ps:0", fault="raise", at="ps_step")
    rv = coord.schedule(lambda: v.assign_add(1.0) and None)
    with pytest.raises(InjectedFaultError, match=f"on {PS0}"):
        coord.join()
    with pytest.raises(InjectedFaultError):
        rv.fetch()
    assert float(v.numpy()) == 0.0  # all or nothing
    coord.schedule(lambda: v.assign_add(1.0) and None)
    coord.join()
    assert float(v.numpy()) == 1.0
    # at="checkpoint_save" on the ps: the save fails naming it and leaves nothing half-written
    manager = idist.CheckpointManager(idist.Checkpoint(v=v, w=idist.Variable(np.zeros(2))), str(tmp_path), 2)
    first = manager.save()
    idist.debug.inject(s, replica="ps:0", fault="raise", at="checkpoint_save")
    with pytest.raises(InjectedFaultError, match=f"checkpoint_save .* on {PS0}"):
        manager.save()
    assert manager.checkpoints == [first] and sorted(os.listdir(str(tmp_path))) == ["checkpoint.json", "ckpt-1"]
    with pytest.raises(ValueError, match="one of"):
        idist.debug.inject(s, replica="ps:0", fault="raise", at="step")
    with pytest.raises(ValueError, match="not a task"):
        idist.debug.inject(s, replica="ps:3", fault="raise", at="ps_step")


def test_dead_ps_is_named_within_seconds_and_recover_restores(
    ps: tuple[ParameterServerStrategy, ClusterCoordinator], tmp_path: Any
) -> None:
    """Kill the ps mid-training: schedule, join, fetch and reads raise UnavailableError naming
    /job:ps/replica:0/task:0 within seconds; recover(manager) restores the last checkpoint; training goes on."""
    s, coord = ps
    with s.scope():
        w = idist.Variable(np.zeros(3, np.float32), name="w")
        n = idist.Variable(0, name="n")
    manager = idist.CheckpointManager(idist.Checkpoint(w=w, n=n), str(tmp_path), max_to_keep=2)

    def step() -> None:
        w.assign_add(np.ones(3, np.float32))
        n.assign_add(1)

    for _ in range(5):
        coord.schedule(step)
    coord.join()
    manager.save()
    for _ in range(3):  # after the checkpoint: lost with the ps
        coord.schedule(step)
    coord.join()
    assert int(n.numpy()) == 8
    os.kill(_ps_pid(s), signal.SIGKILL)
    t0 = time.monotonic()
    rvs = [coord.schedule(step) for _ in range(6)]
    with pytest.raises(UnavailableError, match=PS0) as info:
        coord.join()
    took_join = time.monotonic() - t0
    assert info.value.task == PS0 and "recover" in str(info.value)
    for r in rvs:
        with pytest.raises(UnavailableError, match=PS0):
            r.fetch()
    with pytest.raises(UnavailableError, match=PS0):
        coord.schedule(step)
    with pytest.raises(UnavailableError, match=PS0):
        coord.join()
    t1 = time.monotonic()
    with pytest.raises(UnavailableError, match=PS0):
        w.numpy()
    took_read = time.monotonic() - t1
    assert took_join < 8.0 and took_read < 3.0, (took_join, took_read)

    t2 = time.monotonic()
    assert s.recover(manager, timeout=60) == manager.latest_checkpoint
    took_recover = time.monotonic() - t2
    assert np.array_equal(w.numpy(), np.full(3, 5, np.float32)) and int(n.numpy()) == 5
    for _ in range(4):
        coord.schedule(step)
    coord.join()
    assert np.array_equal(w.numpy(), np.full(3, 9, np.float32)) and int(n.numpy()) == 9
    print(f"\n[faults] ps killed: UnavailableError from join after {took_join:.2f} s, from a read after "
          f"{took_read:.2f} s; recover (restart + restore) {took_recover:.2f} s")


def test_a_variable_not_in_the_checkpoint_stays_lost(
    ps: tuple[ParameterServerStrategy, ClusterCoordinator], tmp_path: Any
) -> None:
    s, coord = ps
    with s.scope():
        a = idist.Variable(np.float32(1.0), name="a")
        b = idist.Variable(np.float32(2.0), name="b")
    path = idist.Checkpoint(a=a).save(str(tmp_path / "ck"))
    _ = a.assign(7.0)
    idist.debug.inject(s, replica="ps:0", fault="kill", at="ps_step")  # the ps dies applying the next step
    coord.schedule(lambda: a.assign_add(1.0) and None)
    with pytest.raises(UnavailableError, match=PS0):
        coord.join()
    with pytest.raises(UnavailableError, match=PS0):
        a.numpy()
    with pytest.raises(ValueError, match="no value for"):  # checked before anything changes
        s.recover(idist.Checkpoint(a=a, b=b), path=path, timeout=60)
    with pytest.raises(UnavailableError, match=PS0):
        a.numpy()
    s.recover(idist.Checkpoint(a=a), path=path, timeout=60)
    assert float(a.numpy()) == 1.0
    with pytest.raises(UnavailableError, match=f"{PS0}.*not in the checkpoint"):
        b.numpy()
    coord.schedule(lambda: a.assign_add(1.0) and None)
    coord.join()
    assert float(a.numpy()) == 2.0
