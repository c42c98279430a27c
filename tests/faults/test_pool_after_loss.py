"""A strategy made right after a replica's worker died gets that worker started again, not its dead address.

Strategies of the same devices share a pooled embedded cluster (``client/cluster.py``). When a worker's process
dies, its ``WorkerProcess`` starts it again at a new address; the scheduler drops the dead one a moment later.
A strategy made in that moment was lent the dead address: its join waited out Dask's 30 s connect timeout, then
failed with ``OSError`` (seen in CI: a replica killed by one test, the next test's strategy made at once). The
pool now lends each worker at the address of its running process, waiting for one being started again.
"""

from __future__ import annotations

import os
import signal
import time
from types import SimpleNamespace

import numpy as np
import pytest

import interdist as idist
from interdist.client import cluster, zygote

pytestmark = pytest.mark.slow


def _pids(s: idist.MirroredStrategy) -> list[int]:
    return [int(p) for p in s.experimental_local_results(s.run(lambda: np.int64(os.getpid())))]


def test_a_strategy_made_at_once_after_a_worker_died_runs_on_its_restarted_worker() -> None:
    with idist.MirroredStrategy(["CPU:0", "CPU:1"]) as s:
        before = _pids(s)
        dead = s._lease.addresses[1]
    os.kill(before[1], signal.SIGKILL)  # the cluster is back in the pool: the next strategy of 2 CPUs takes it
    deadline = time.monotonic() + 10
    while zygote.alive(before[1]):  # dead, as a replica seen lost is (a signal lands a moment after kill())
        assert time.monotonic() < deadline, "the killed worker did not end"
        time.sleep(0.005)
    t0 = time.monotonic()
    with idist.MirroredStrategy(["CPU:0", "CPU:1"]) as s2:
        assert s2._lease.addresses[1] != dead
        after = _pids(s2)
        total = s2.run(lambda: idist.get_replica_context().all_reduce("sum", np.float32(1)))
    assert after[0] == before[0] and after[1] != before[1]  # the same worker 0, worker 1 started again
    assert [float(x) for x in s2.experimental_local_results(total)] == [2.0, 2.0]
    assert time.monotonic() - t0 < cluster.RESTART_WAIT_S + 10  # not Dask's 30 s connect timeout, then OSError


def test_a_cluster_of_other_workers_is_judged_by_the_schedulers_list_alone() -> None:
    class Nanny:  # a GPU cluster's worker (dask-cuda's nannies): a process without ``poll``
        process = object()

    lease = cluster.Lease(
        client=None, addresses=["tls://127.0.0.1:1"], names=[0], cluster=SimpleNamespace(workers={0: Nanny()})
    )
    lease.embedded = True
    assert cluster._current(lease) is True  # no AttributeError from its process, no wait
    assert lease.addresses == ["tls://127.0.0.1:1"]
