"""Collectives backends by name: the table a worker picks its transport from.

A backend is a ``Transport`` class (``base.py`` lists the class methods it must
have). Backends are registered as ``"module:Class"`` strings and imported on first
use, so registering one costs nothing and importing the engine
(``collectives.algorithms``) never imports Dask or CuPy. The built-in ones are registered
in ``collectives/__init__.py``, the device-resident ones of GPU replicas below (``DEVICE_BACKENDS``).

- ``get_backend(name)``: the class; ``ValueError`` listing the known names for an
  unknown one, the backend's ``unavailable_error`` (a ``RuntimeError``) for a known
  one that cannot run here.
- ``worker_transport(name, ...)``: what a worker calls when a replica joins;
  ``name`` None means ``config.settings.collectives_backend`` (``auto`` there: ``dask``).
- ``backend_for(devices)``: the backend a strategy over ``devices`` would use: the setting, whose
  default ``auto`` means ``gpu`` for GPU devices where CuPy is installed and ``dask`` otherwise.
"""

from __future__ import annotations

import importlib
import threading
from typing import Any

from interdist._gpu import is_gpu_device
from interdist.collectives.base import BackendUnavailableError, Transport
from interdist.collectives.mailbox import Mailbox
from interdist.config import settings

#: The device-resident backends of GPU replicas (docs/gpu.md): CuPy batches all-reduced on the GPUs,
#: everything else through the ``dask`` backend's transport, which each of them wraps. ``cuda_ipc``
#: and ``nccl`` are available where CuPy sees a GPU (and, for ``nccl``, finds NCCL); ``gpu`` everywhere.
DEVICE_BACKENDS = {
    "cuda_ipc": "interdist.collectives.cuda_ipc:CudaIpcTransport",
    "nccl": "interdist.collectives.nccl:NcclTransport",
    "gpu": "interdist.collectives.gpu_backend:GpuTransport",
}
#: The setting's default: ``backend_for`` resolves it from the devices (never a registered name).
AUTO = "auto"
#: What ``auto`` is for GPU devices (where CuPy is installed), and for everything else.
GPU_DEFAULT = "gpu"
_DEFAULT = "dask"

_BACKENDS: dict[str, str] = dict(DEVICE_BACKENDS)
_loaded: dict[str, type[Transport]] = {}
_lock = threading.Lock()


def register_backend(name: str, target: str | type[Transport]) -> None:
    """Register a transport class, or ``"module:Class"`` (imported on first use), as backend ``name``."""
    with _lock:
        _loaded.pop(name, None)
        if isinstance(target, str):
            _BACKENDS[name] = target
        else:
            _BACKENDS[name] = f"{target.__module__}:{target.__qualname__}"
            _loaded[name] = target


def backend_names() -> list[str]:
    """Every registered name, available here or not."""
    return sorted(_BACKENDS)


def load_backend(name: str) -> type[Transport]:
    """The class of backend ``name`` whether or not it can run here (``ValueError`` if unknown)."""
    cls = _loaded.get(name)
    if cls is not None:
        return cls
    try:
        target = _BACKENDS[name]
    except KeyError:
        raise ValueError(
            f"unknown collectives backend {name!r}; known backends: {', '.join(backend_names())} "
            f"(or {AUTO!r}, the setting's default: chosen by the devices)"
        ) from None
    module, _, attr = target.partition(":")
    try:
        loaded = getattr(importlib.import_module(module), attr)
    except ImportError as e:
        raise BackendUnavailableError(
            f"collectives backend {name!r} could not be imported ({target}): {type(e).__name__}: {e}"
        ) from e
    if not (isinstance(loaded, type) and issubclass(loaded, Transport)):
        raise TypeError(f"collectives backend {name!r} ({target}) is not a Transport class")
    with _lock:
        _loaded.setdefault(name, loaded)
    return loaded


def get_backend(name: str) -> type[Transport]:
    """The transport class of backend ``name``, which can run here (else a clear error)."""
    cls = load_backend(name)
    if not cls.is_available():
        raise cls.unavailable_error(f"collectives backend {name!r} is not available here: {cls.unavailable_reason()}")
    return cls


def available_backends() -> list[str]:
    """The registered names whose backend can run here."""
    out = []
    for name in backend_names():
        try:
            if load_backend(name).is_available():
                out.append(name)
        except BackendUnavailableError:
            continue
    return out


def worker_transport(
    name: str | None,
    worker: Any,
    group_id: str,
    rank: int,
    peers: list[str],
    mailbox: Mailbox,
    sockets: bool = True,
) -> Transport:
    """The transport of a replica joining on a Dask worker, from backend ``name`` (None: the setting)."""
    backend = get_backend(backend_for([], name))
    return backend.for_worker(worker, group_id, rank, peers, mailbox, sockets)


def backend_for(devices: list[str], configured: str | None = None) -> str:
    """The backend of a strategy over ``devices``: ``configured`` when given (a strategy's own spec),
    else the setting. ``auto`` (the setting's default) is ``gpu`` when every device is a GPU and ``gpu``
    is available here (CuPy installed: CuPy batches then go along the path the cost model picks,
    everything else as on ``dask``), else ``dask``; any other name is kept as it is (``dask`` set
    explicitly stages GPU replicas' batches through host memory)."""
    name = configured or settings.collectives_backend
    if name != AUTO:
        return name
    every_gpu = bool(devices) and all(is_gpu_device(d) for d in devices)
    return GPU_DEFAULT if every_gpu and load_backend(GPU_DEFAULT).is_available() else _DEFAULT


__all__ = [
    "AUTO",
    "DEVICE_BACKENDS",
    "available_backends",
    "backend_for",
    "backend_names",
    "get_backend",
    "load_backend",
    "register_backend",
    "worker_transport",
]
