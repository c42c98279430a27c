"""``MultiWorkerMirroredStrategy`` on Dask workers named as TF tasks: exact values, as ``MirroredStrategy``."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

import interdist as idist
from interdist.experimental import CommunicationImplementation, CommunicationOptions


@pytest.fixture(scope="module")
def mwms(named_cluster: Any) -> Any:
    s = idist.MultiWorkerMirroredStrategy(cluster=named_cluster.address,
                                          communication_options=CommunicationOptions(timeout_seconds=20))
    yield s
    s.close()


def test_devices_and_resolver(mwms: Any) -> None:
    assert mwms.num_replicas_in_sync == 2
    assert mwms.extended.worker_devices == ("/job:worker/replica:0/task:0/device:CPU:0",
                                            "/job:worker/replica:0/task:1/device:CPU:0")
    assert isinstance(mwms.cluster_resolver, idist.cluster_resolver.DaskClusterResolver)
    assert mwms.cluster_resolver.cluster_spec().num_tasks("worker") == 2
    assert mwms.extended.experimental_between_graph is True
    # Replica i is played by the worker named worker-i.
    assert mwms._lease.names == ["worker-0", "worker-1"]


def test_run_all_reduce_reduce(mwms: Any) -> None:
    def step() -> Any:
        ctx = idist.get_replica_context()
        r = ctx.replica_id_in_sync_group
        return ctx.all_reduce("sum", np.float32(r + 1)), ctx.all_gather(np.array([r], np.int32), axis=0)

    total, gathered = mwms.run(step)
    assert [float(v) for v in mwms.experimental_local_results(total)] == [3.0, 3.0]
    assert [np.asarray(g).tolist() for g in mwms.experimental_local_results(gathered)] == [[0, 1], [0, 1]]
    ids = mwms.run(lambda: idist.get_replica_context().replica_id_in_sync_group)
    assert int(np.asarray(mwms.reduce("SUM", ids, axis=None))) == 1
    assert float(np.asarray(mwms.reduce("MEAN", ids, axis=None))) == 0.5


def test_mirrored_variable_over_workers(mwms: Any) -> None:
    with mwms.scope():
        v = idist.Variable(1.0, aggregation=idist.VariableAggregation.SUM)
    mwms.run(lambda: v.assign_add(np.float32(idist.get_replica_context().replica_id_in_sync_group) + 1))
    assert [float(np.asarray(c)) for c in mwms.experimental_local_results(v)] == [4.0, 4.0]
    assert v.values[1].device == "/job:worker/replica:0/task:1/device:CPU:0"


def _train(strategy: Any, steps: int = 6) -> np.ndarray:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(48, 3)).astype(np.float32)
    y = (x @ np.array([1.0, -2.0, 0.5], np.float32) + 0.25).astype(np.float32)
    with strategy.scope():
        w = idist.Variable(np.zeros(3, np.float32), aggregation=idist.VariableAggregation.MEAN)
    data = iter(strategy.experimental_distribute_dataset(idist.data.Dataset.from_tensor_slices((x, y)).batch(8)))

    def step(batch: Any) -> Any:
        bx, by = batch
        err = np.asarray(bx) @ np.asarray(w) - np.asarray(by)
        grad = (2.0 * np.asarray(bx).T @ err / len(by)).astype(np.float32)
        w.assign_sub(np.float32(0.1) * grad)  # MEAN over replicas, as the global batch's gradient

    for _ in range(steps):
        strategy.run(step, args=(next(data),))
    return np.asarray(w)


def test_same_weights_as_mirrored(mwms: Any, mirrored2: Any) -> None:
    a, b = _train(mwms), _train(mirrored2)
    assert a.dtype == b.dtype and np.array_equal(a, b)
    assert not np.array_equal(a, np.zeros(3, np.float32))


def test_timeout_seconds_reaches_replicas(mwms: Any) -> None:
    assert mwms._group.spec["timeout"] == 20


def test_communication_options_checked() -> None:
    assert CommunicationOptions(implementation="ring").implementation is CommunicationImplementation.RING
    with pytest.raises(ValueError, match="timeout_seconds"):
        CommunicationOptions(timeout_seconds=0)
    with pytest.raises(ValueError, match="communication_options"):
        idist.MultiWorkerMirroredStrategy(communication_options={"timeout_seconds": 3})


def test_tf_config_names_missing_task(named_cluster: Any, monkeypatch: Any) -> None:
    """A worker task with no Dask worker: a TimeoutError naming it, within timeout_seconds."""
    import time

    host_port = named_cluster.address.split("://")[1]
    monkeypatch.setenv("TF_CONFIG", json.dumps({
        "cluster": {"chief": [host_port], "worker": ["127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"]},
        "task": {"type": "chief", "index": 0}}))
    t0 = time.monotonic()
    with pytest.raises(TimeoutError, match=r"chief:0 .*worker:2"):
        idist.MultiWorkerMirroredStrategy(communication_options=CommunicationOptions(timeout_seconds=1.5))
    assert time.monotonic() - t0 < 10


def test_unreachable_scheduler_times_out(monkeypatch: Any) -> None:
    from .conftest import free_port

    monkeypatch.setenv("TF_CONFIG", json.dumps({
        "cluster": {"chief": [f"127.0.0.1:{free_port()}"], "worker": ["127.0.0.1:1"]},
        "task": {"type": "chief", "index": 0}}))
    with pytest.raises(TimeoutError, match="chief:0"):
        idist.MultiWorkerMirroredStrategy(communication_options=CommunicationOptions(timeout_seconds=1))


def test_experimental_name_takes_communication(named_cluster: Any) -> None:
    s = idist.experimental.MultiWorkerMirroredStrategy(CommunicationImplementation.RING,
                                                       cluster=named_cluster.address)
    try:
        assert s._communication_options.implementation is CommunicationImplementation.RING
        assert s.num_replicas_in_sync == 2
    finally:
        s.close()
