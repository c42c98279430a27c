"""Collectives backends by name; the error for an unknown name lists the known ones."""

from __future__ import annotations

from typing import Any

_BACKENDS: dict[str, str] = {
    "local": "interdist.collectives.local:LocalTransport",
    "dask": "interdist.collectives.dask_comms:DaskTransport",
    "shm": "interdist.collectives.shared_memory:SharedMemoryTransport",
}


def register_backend(name: str, target: str) -> None:
    """Register ``"module:Class"`` as the transport of backend ``name``."""
    _BACKENDS[name] = target


def backend_names() -> list[str]:
    return sorted(_BACKENDS)


def get_backend(name: str) -> Any:
    """The transport class of backend ``name``."""
    try:
        target = _BACKENDS[name]
    except KeyError:
        raise ValueError(
            f"unknown collectives backend {name!r}; known backends: {', '.join(backend_names())}"
        ) from None
    import importlib

    module, _, attr = target.partition(":")
    return getattr(importlib.import_module(module), attr)
