"""Without a usable GPU: nothing GPU-related is imported, and GPU devices fail with a clear ``NoGPUError``.

These run on every machine: where a GPU exists, it is hidden from the code under test.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import numpy as np
import pytest

import interdist as idist
from interdist import _gpu
from interdist.client import gpus


def test_import_loads_no_gpu_library() -> None:
    code = ("import sys, interdist, interdist.client.cluster, interdist.client.gpus, interdist._gpu; "
            "print(sorted(m for m in ('cupy', 'dask_cuda', 'cupy_backends') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "[]"


def test_helpers_leave_numpy_values_alone() -> None:
    a = np.arange(3, dtype=np.float32)
    assert _gpu.to_host(a) is a and not _gpu.is_cupy(a) and _gpu.xp_of(a, 1.0) is np
    assert _gpu.asarray(a) is a and _gpu.same_place([a, a]) == [a, a]
    c = _gpu.copy(a)
    assert c is not a and np.array_equal(c, a)
    assert _gpu.is_gpu_device("/job:localhost/replica:0/task:0/device:GPU:0") and not _gpu.is_gpu_device("CPU:0")
    p = _gpu.place(a, "/job:localhost/replica:0/task:0/device:CPU:0")
    assert isinstance(p, np.ndarray) and p is not a


def test_no_visible_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    with pytest.raises(idist.NoGPUError, match="no NVIDIA GPU.*CPU devices"):
        idist.MirroredStrategy(["GPU:0", "GPU:1"])
    with pytest.raises(idist.NoGPUError, match="no NVIDIA GPU"):
        idist.OneDeviceStrategy("GPU:0")


def test_more_gpus_than_the_machine_has(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")  # one GPU, whether or not it exists
    with pytest.raises(idist.NoGPUError, match=r"shows 1 GPU.*local_gpu_cluster\(gpus=\[0, 0\]\)"):
        idist.MirroredStrategy(["GPU:0", "GPU:1"])


def test_missing_cupy(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "cupy" else real(name, *a))
    with pytest.raises(idist.NoGPUError, match="need CuPy"):
        idist.OneDeviceStrategy("GPU:0")


def test_require_gpu_without_gpu() -> None:
    code = ("import interdist._gpu as g, interdist\n"
            "try:\n    import cupy\n    print('cupy imports')\nexcept Exception:\n    print('no cupy')\n"
            "try:\n    g.require_gpu('here')\nexcept interdist.NoGPUError as e:\n    print('NoGPUError:', e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False,
                         env={**_env(), "CUDA_VISIBLE_DEVICES": "-1"})
    cupy_line, _, msg = out.stdout.partition("\n")
    assert msg.startswith("NoGPUError:"), out.stdout + out.stderr
    if cupy_line == "no cupy":  # the first check: CuPy itself
        assert msg.startswith("NoGPUError: GPU replicas need CuPy in here: pip install 'interdist[gpu]'"), msg
    else:  # CuPy imports, but CUDA_VISIBLE_DEVICES=-1 leaves CUDA no device: an error, or a count of 0
        assert cupy_line == "cupy imports", out.stdout
        assert msg.startswith(("NoGPUError: here has no usable GPU: CUDA reports ",
                               "NoGPUError: here sees no GPU")), msg
        assert "(CUDA_VISIBLE_DEVICES='-1')" in msg, msg


def test_gpu_devices_on_cpu_workers_name_the_workers() -> None:
    import dask
    from distributed import LocalCluster

    # A worker that hides the GPUs (CUDA_VISIBLE_DEVICES=-1) fails to start where NVML works:
    # distributed's NVML monitor asks for the device that variable names. Turned off here
    # (in the parent's config: the nanny hands its config to the worker).
    with (dask.config.set({"distributed.diagnostics.nvml": False}),
          LocalCluster(n_workers=1, threads_per_worker=1, processes=True, host="127.0.0.1",
                       dashboard_address="127.0.0.1:0", env=_NO_GPU) as cluster,
          pytest.raises(idist.NoGPUError, match=r"1 of 1 worker\(s\) cannot use a GPU: tcp://127\.0\.0\.1")):
        idist.OneDeviceStrategy("GPU:0", cluster=cluster)


_NO_GPU = {"CUDA_VISIBLE_DEVICES": "-1"}


def test_unknown_gpu_cluster_choice(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("INTERDIST_GPU_CLUSTER", "magic")
    with pytest.raises(ValueError, match="INTERDIST_GPU_CLUSTER"):
        gpus._use_dask_cuda()


def test_worker_visible_devices_rotate() -> None:
    assert [gpus._rotated(["0", "1", "2"], i) for i in range(3)] == ["0,1,2", "1,0,2", "2,0,1"]
    assert [gpus._rotated(["0", "0"], i) for i in range(2)] == ["0", "0"]


def _env() -> dict[str, str]:
    import os

    return dict(os.environ)
