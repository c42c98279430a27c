"""GPU tests: skipped cleanly where CuPy or a GPU is missing (CI); run on a GPU machine (docs/gpu.md).

Files named ``test_gpu_*`` need a GPU through the ``gpu`` fixture; ``test_no_gpu.py``
runs everywhere (it hides the GPU where there is one).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest


def _gpu_info() -> tuple[dict[str, Any] | None, str]:
    if os.environ.get("INTERDIST_SKIP_GPU_TESTS"):
        return None, "INTERDIST_SKIP_GPU_TESTS is set"
    try:
        import cupy  # noqa: F401
    except Exception as e:  # noqa: BLE001 - ImportError, or CUDA libraries that fail to load
        return None, f"CuPy is not importable here ({type(e).__name__}: {e})"
    from interdist._gpu import require_gpu
    from interdist.errors import NoGPUError

    try:
        return require_gpu("the test process"), ""
    except NoGPUError as e:
        return None, str(e)


@pytest.fixture(scope="session")
def gpu() -> dict[str, Any]:
    """This machine's GPU 0 (name, PCI bus id, CuPy version), or skip the test."""
    info, reason = _gpu_info()
    if info is None:
        pytest.skip(f"needs a GPU with CuPy: {reason}")
    return info


@pytest.fixture
def cluster_mode(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch,
                 gpu: dict[str, Any]) -> Iterator[str]:
    """How embedded GPU clusters start (``INTERDIST_GPU_CLUSTER``); pooled clusters are closed around it."""
    from interdist.client import cluster as cluster_lib

    mode = request.param
    if mode == "dask-cuda":
        try:
            import dask_cuda  # noqa: F401
        except Exception as e:  # noqa: BLE001
            pytest.skip(f"dask-cuda does not import here: {type(e).__name__}: {e}")
    monkeypatch.setenv("INTERDIST_GPU_CLUSTER", mode)
    cluster_lib.shutdown_all()
    yield mode
    cluster_lib.shutdown_all()
