"""Devices and clusters: defaults, GPUs without a GPU, existing Dask clusters."""

from __future__ import annotations

import numpy as np
import pytest
from distributed import Client, LocalCluster

import interdist as idist


def test_default_devices_follow_logical_cpu_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # no GPU visible: CPU devices
    idist.config.set_logical_cpu_devices(2)
    try:
        with idist.MirroredStrategy() as s:
            assert s.num_replicas_in_sync == 2
            assert list(s.extended.worker_devices) == [
                "/job:localhost/replica:0/task:0/device:CPU:0", "/job:localhost/replica:0/task:0/device:CPU:1"]
    finally:
        idist.config.set_logical_cpu_devices(1)
    with pytest.raises(ValueError):
        idist.config.set_logical_cpu_devices(0)


def test_gpu_devices_without_a_gpu_fail_clearly() -> None:
    with pytest.raises(idist.NoGPUError, match="GPU"):
        idist.MirroredStrategy(["GPU:0", "GPU:1"])


def test_existing_cluster_by_address_and_client() -> None:
    with LocalCluster(n_workers=2, threads_per_worker=1, host="127.0.0.1", dashboard_address="127.0.0.1:0",
                      processes=True) as cluster, Client(cluster) as client:
        for target in (cluster.scheduler_address, client, cluster):
            with idist.MirroredStrategy(["CPU:0", "CPU:1"], cluster=target) as s:
                out = s.run(lambda: idist.get_replica_context().all_reduce("sum", np.float32(2.0)))
                assert [float(v) for v in s.experimental_local_results(out)] == [4.0, 4.0]
        with pytest.raises(ValueError, match="2 worker"):
            idist.MirroredStrategy(["CPU:0", "CPU:1", "CPU:2"], cluster=client)


def test_bad_cluster_argument() -> None:
    with pytest.raises(TypeError, match="cluster must be"):
        idist.MirroredStrategy(["CPU:0"], cluster=42)


def test_closed_strategy_refuses_work() -> None:
    s = idist.OneDeviceStrategy("CPU:0")
    s.close()
    with pytest.raises(RuntimeError, match="closed"):
        s.run(lambda: 1)
