"""One GPU replica: OneDeviceStrategy("GPU:0") and MirroredStrategy(["GPU:0"]) on an embedded GPU cluster.

Each test runs with both ways of starting GPU workers: interdist's own
(``INTERDIST_GPU_CLUSTER=builtin``) and dask-cuda's ``LocalCUDACluster`` (skipped
where dask-cuda does not import).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import interdist as idist

GPU0 = "/job:localhost/replica:0/task:0/device:GPU:0"
MODES = pytest.mark.parametrize("cluster_mode", ["builtin", "dask-cuda"], indirect=True)


def _where() -> dict[str, Any]:
    import os

    import cupy

    return {"bus": cupy.cuda.Device(0).pci_bus_id, "visible": os.environ.get("CUDA_VISIBLE_DEVICES")}


@MODES
def test_one_device_strategy_on_gpu(cluster_mode: str, gpu: dict[str, Any]) -> None:
    with idist.OneDeviceStrategy("GPU:0") as s:
        cluster = s._lease.cluster
        if cluster_mode == "dask-cuda":  # (a subclass of it that asks for the dashboard's token, on an embedded one)
            assert "LocalCUDACluster" in [c.__name__ for c in type(cluster).__mro__], type(cluster).__mro__
        else:
            assert type(cluster).__name__ == "SpecCluster"
        (where,) = s._lease.client.run(_where, workers=s._lease.addresses).values()
        assert where["bus"] == gpu["pci_bus_id"]

        def fn(x: Any) -> Any:
            import cupy

            assert isinstance(x, cupy.ndarray), type(x)  # the NumPy argument was moved to the device
            big = cupy.arange(1 << 20, dtype=cupy.float32)  # over inline_bytes: fetched on demand
            return x * 2, big, type(x).__module__.split(".")[0], int(x.device.id)

        small, big, module, device_id = s.run(fn, args=(np.arange(5, dtype=np.float32),))
        assert (module, device_id) == ("cupy", 0)
        for v in (small, big):
            assert isinstance(v, idist.RemoteValue) and v.device == GPU0
        assert small.shape == (5,) and small.dtype == np.float32
        np.testing.assert_array_equal(np.asarray(small), np.arange(5, dtype=np.float32) * 2)
        assert isinstance(small.numpy(), np.ndarray)
        assert not big.is_fetched and big.shape == (1 << 20,)
        b = big.numpy()
        assert type(b) is np.ndarray and b.dtype == np.float32
        np.testing.assert_array_equal(b, np.arange(1 << 20, dtype=np.float32))
        # Values handed back to run stay on the worker (and on its GPU).
        again = s.run(lambda y: (y + 1, type(y).__module__.split(".")[0]), args=(big,))
        assert again[1] == "cupy"
        np.testing.assert_array_equal(np.asarray(again[0]), b + 1)


@MODES
def test_variables_live_on_the_gpu(cluster_mode: str, gpu: dict[str, Any]) -> None:
    with idist.OneDeviceStrategy("GPU:0") as s:
        with s.scope():
            v = idist.Variable(np.ones(3, np.float32), name="v")
        assert v.device == GPU0

        def step(delta: Any) -> Any:
            v.assign_add(delta)
            r = v.read_value()
            return type(v.raw).__module__.split(".")[0], type(r).__module__.split(".")[0], r * 10

        raw_mod, read_mod, times10 = s.run(step, args=(np.full(3, 2, np.float32),))
        assert (raw_mod, read_mod) == ("cupy", "cupy")
        np.testing.assert_array_equal(np.asarray(times10), np.full(3, 30, np.float32))
        np.testing.assert_array_equal(np.asarray(v), np.full(3, 3, np.float32))
        v.assign(np.arange(3, dtype=np.float32))  # from the notebook
        v.assign_sub(np.ones(3, np.float32))
        np.testing.assert_array_equal(np.asarray(v), np.arange(3, dtype=np.float32) - 1)
        assert s.run(lambda: type(v.raw).__module__.split(".")[0]) == "cupy"


@MODES
def test_mirrored_on_one_gpu(cluster_mode: str, gpu: dict[str, Any]) -> None:
    with idist.MirroredStrategy(["GPU:0"]) as s:
        assert list(s.extended.worker_devices) == [GPU0]

        def fn(x: Any) -> Any:
            ctx = idist.get_replica_context()
            total = ctx.all_reduce("sum", x)
            mean = ctx.all_reduce("mean", x.astype("int32"))  # integers: float64, as TF's truediv
            return total, mean, type(total).__module__.split(".")[0], str(mean.dtype)

        total, mean, module, mean_dtype = s.run(fn, args=(np.arange(4, dtype=np.float32),))
        assert (module, mean_dtype) == ("cupy", "float64")
        (t,) = s.experimental_local_results(total)
        assert t.device == GPU0
        np.testing.assert_array_equal(np.asarray(t), np.arange(4, dtype=np.float32))
        np.testing.assert_array_equal(np.asarray(mean), np.arange(4, dtype=np.float64))
        red = s.reduce("SUM", s.run(lambda: __import__("cupy").full(2000, 1.5, dtype="float32")), axis=0)
        assert isinstance(red, idist.Tensor) and float(red) == 3000.0
