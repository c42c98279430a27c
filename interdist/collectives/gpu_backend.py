"""The ``gpu`` collectives backend: GPU replicas' CuPy batches along the path the cost model picks.

Where the replicas share one GPU it weighs ``cuda_ipc`` against host staging, where each has a GPU
of its own ``nccl`` against host staging (``cost_model.device_choice``, from the group's topology and
the batch size; the same choice on every rank). A path the replicas' processes cannot take (no NCCL
library, say) is left out, and a group that fits neither (some replicas share a GPU, others do not)
stages through host memory as the ``dask`` backend does; NumPy batches always do.

It is available where CuPy is installed (checked without importing it, so that choosing it costs
a notebook no CUDA work); the workers find out for themselves what their GPUs can do.
"""

from __future__ import annotations

from typing import ClassVar

from interdist.collectives.cuda_ipc import IpcEngine
from interdist.collectives.device_common import CUDA_IPC, NCCL, cupy_not_installed
from interdist.collectives.device_transport import DeviceTransport, EngineFactory
from interdist.collectives.nccl import NcclEngine


class GpuTransport(DeviceTransport):
    """``cuda_ipc``, ``nccl`` or host staging for each CuPy batch, by the cost model (the module docstring)."""

    name = "gpu"
    paths: ClassVar[tuple[str, ...]] = (CUDA_IPC, NCCL)
    host_fallback: ClassVar[bool] = True
    engine_factories: ClassVar[dict[str, EngineFactory]] = {CUDA_IPC: IpcEngine, NCCL: NcclEngine}

    @classmethod
    def unavailable_reason(cls) -> str:
        return cupy_not_installed()


__all__ = ["GpuTransport"]
