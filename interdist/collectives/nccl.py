"""The ``nccl`` collectives backend: registered so that the name is known, but not implemented.

GPU replicas all-reduce through host memory with the ``dask`` backend
(``Collectives.all_reduce`` copies CuPy arrays to the host and back; docs/gpu.md).
NCCL refuses two ranks on one GPU, and the only GPU machine this was developed on
had one, so no NCCL path could have been tested. ``is_available()`` is therefore
always False, and asking for the backend raises ``NotImplementedError`` saying so
(and, where CuPy or a GPU is missing, that it would need them as well).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from typing import ClassVar

from interdist.collectives.base import Packet, Transport


def _gpu_missing() -> str:
    """What NCCL would need that this process lacks ("" when CuPy is installed and CUDA sees a GPU)."""
    if importlib.util.find_spec("cupy") is None:
        return "CuPy is not installed (pip install 'interdist[gpu]')"
    try:
        import cupy

        if int(cupy.cuda.runtime.getDeviceCount()) < 1:
            return "CUDA sees no GPU"
    except Exception as e:  # noqa: BLE001 - any CUDA failure means no usable GPU; it is reported as text
        return f"CUDA sees no usable GPU ({type(e).__name__}: {e})"
    return ""


class NcclTransport(Transport):
    """NCCL collectives between GPU replicas: not implemented (see the module docstring)."""

    name = "nccl"
    unavailable_error: ClassVar[type[Exception]] = NotImplementedError

    @classmethod
    def unavailable_reason(cls) -> str:
        reason = (
            "NCCL collectives are not implemented yet; GPU replicas all-reduce through host memory "
            "with the 'dask' backend (the default)"
        )
        missing = _gpu_missing()
        return f"{reason}. NCCL would also need CuPy and a GPU: {missing}" if missing else reason

    def send_packet(
        self,
        dsts: list[int],
        step: int,
        seq: int,
        packet: Packet,
        on_error: Callable[[BaseException], None] | None = None,
        detached: bool = False,
    ) -> None:
        raise NotImplementedError(self.unavailable_reason())
