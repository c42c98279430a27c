"""``ParameterServerStrategy`` + ``ClusterCoordinator``: asynchronous updates, each step applied once."""

from __future__ import annotations

import json
import os
from typing import Any

import numpy as np
import pytest

import interdist as idist
from interdist.strategy.coordinator import ClusterCoordinator
from interdist.experimental import ParameterServerStrategy, partitioners
from interdist.worker.ps_store import ShardStore


@pytest.fixture(scope="module")
def ps(named_cluster: Any) -> Any:
    s = ParameterServerStrategy(cluster=named_cluster.address,
                                variable_partitioner=partitioners.FixedShardsPartitioner(2))
    coord = ClusterCoordinator(s)
    yield s, coord
    s.close()


def test_roles(ps: Any) -> None:
    s, _ = ps
    assert s.extended.parameter_devices == ("/job:ps/replica:0/task:0/device:CPU:0",)
    assert [t.name for t in s._worker_tasks] == ["worker-0", "worker-1"]
    assert s.num_replicas_in_sync == 1


def test_async_updates_sum(ps: Any) -> None:
    s, coord = ps
    with s.scope():
        v = idist.Variable(np.zeros(5, np.float32))
        n = idist.Variable(0)
    assert len(v.variables) == 2 and [x.shape for x in v.variables] == [(3,), (2,)]

    def step(i: int) -> Any:
        v.assign_add(np.full(5, i, np.float32))
        n.assign_add(1)
        return s.run(lambda: idist.get_replica_context().replica_id_in_sync_group)

    before = {st.get("applied_count", 0) for st in s._ps_stats()}
    rvs = [coord.schedule(step, args=(i,)) for i in range(30)]
    coord.join()
    assert coord.done()
    assert np.array_equal(v.numpy(), np.full(5, sum(range(30)), np.float32))
    assert int(n.numpy()) == 30
    assert [int(r.fetch()) for r in rvs] == [0] * 30
    stats = s._ps_stats()[0]
    ids = [r.step_id for r in rvs]
    assert all(i in stats["applied_ids"] for i in ids) and len(set(stats["applied_ids"])) == len(stats["applied_ids"])
    assert stats["applied_count"] - max(before) == 30
    assert {r.worker for r in rvs} <= {"worker:0", "worker:1"}


def test_step_reads_at_start_and_sees_own_writes(ps: Any) -> None:
    s, coord = ps
    with s.scope():
        c = idist.Variable(10.0)

    def step() -> Any:
        first = float(c)
        c.assign_add(5.0)
        return first, float(c)

    assert coord.fetch(coord.schedule(step)) == (10.0, 15.0)
    assert float(c.numpy()) == 15.0
    assert float(np.asarray(s.run(lambda: c.assign_sub(1.0).read_value()))) == 14.0


def test_step_error_reaches_join(ps: Any) -> None:
    _, coord = ps

    def bad() -> None:
        raise KeyError("boom")

    rv = coord.schedule(bad)
    with pytest.raises(KeyError, match="boom"):
        coord.join()
    with pytest.raises(KeyError):
        rv.fetch()


def test_per_worker_dataset(ps: Any) -> None:
    s, coord = ps
    with s.scope():
        total = idist.Variable(0)
    it = iter(coord.create_per_worker_dataset(lambda: idist.data.Dataset.range(1000)))

    def step(iterator: Any) -> int:
        x = next(iterator)
        total.assign_add(1)
        return int(x)

    rvs = [coord.schedule(step, args=(it,)) for _ in range(10)]
    coord.join()
    assert int(total.numpy()) == 10
    # Each worker reads its own iterator from the first element, in the order it ran the steps.
    for w in {r.worker for r in rvs}:
        assert [r.fetch() for r in rvs if r.worker == w] == list(range(sum(r.worker == w for r in rvs)))


@pytest.mark.slow
def test_worker_killed_mid_step_is_retried_once(ps: Any, tmp_path: Any) -> None:
    """A worker dies (``os._exit``) inside step 4 on its first attempt: the step runs again elsewhere."""
    s, coord = ps
    with s.scope():
        v = idist.Variable(np.zeros(3, np.float32))
    marker = str(tmp_path / "killed")

    def step(i: int) -> int:
        if i == 4 and not os.path.exists(marker):
            open(marker, "w").close()
            os._exit(1)  # the worker process dies in the middle of the step
        v.assign_add(np.full(3, i, np.float32))
        return i

    rvs = [coord.schedule(step, args=(i,)) for i in range(12)]
    coord.join()
    assert os.path.exists(marker)
    assert [r.fetch() for r in rvs] == list(range(12))
    assert rvs[4].attempts >= 2  # a retry may also meet the dead worker before the scheduler notices
    assert np.array_equal(v.numpy(), np.full(3, sum(range(12)), np.float32))
    applied = s._ps_stats()[0]["applied_ids"]
    assert all(applied.count(r.step_id) == 1 for r in rvs)


def test_store_applies_a_step_id_once() -> None:
    store = ShardStore()
    store.create(1, np.zeros(2, np.float32))
    _, version = store.read([1])
    assert store.apply("s1", [(1, "assign_add", np.ones(2, np.float32))], version)
    assert store.apply("s2", [(1, "assign_add", np.ones(2, np.float32))], version)
    assert not store.apply("s1", [(1, "assign_add", np.ones(2, np.float32))], version)
    assert store.read([1])[0][0].tolist() == [2.0, 2.0]
    assert store.stats()["staleness"] == [0, 1] and store.stats()["duplicates"] == 1


def test_partitioners() -> None:
    assert partitioners.FixedShardsPartitioner(4)((3, 2), "float32") == [3, 1]
    assert partitioners.MinSizePartitioner(min_shard_bytes=16, max_shards=8)((10,), "float32") == [3]
    assert partitioners.MaxSizePartitioner(max_shard_bytes=8)((10,), "float32") == [5]


def test_no_ps_task_raises(monkeypatch: Any) -> None:
    monkeypatch.setenv("TF_CONFIG", json.dumps({"cluster": {"chief": ["127.0.0.1:1"], "worker": ["127.0.0.1:2"]},
                                                "task": {"type": "chief", "index": 0}}))
    with pytest.raises(ValueError, match="'ps' task"):
        ParameterServerStrategy()


def test_malformed_tf_config_names_field(monkeypatch: Any) -> None:
    monkeypatch.setenv("TF_CONFIG", json.dumps({"cluster": {"ps": ["a:1"], "worker": ["b:1"]},
                                                "task": {"type": "worker", "index": 5}}))
    with pytest.raises(ValueError, match="task.index"):
        ParameterServerStrategy()


def test_no_cluster_raises(monkeypatch: Any) -> None:
    monkeypatch.delenv("TF_CONFIG", raising=False)
    with pytest.raises(ValueError, match="needs a cluster"):
        ParameterServerStrategy()
