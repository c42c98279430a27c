"""Process-wide settings (``interdist.config``).

>>> import interdist
>>> interdist.config.set_logical_cpu_devices(2)
>>> interdist.config.get_logical_cpu_devices()
2
>>> interdist.config.set_logical_cpu_devices(1)
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass

_lock = threading.Lock()


@dataclass
class _Settings:
    logical_cpu_devices: int = 1
    # A collective that waits longer than this for its peers raises instead of hanging.
    collective_timeout: float = float(os.environ.get("INTERDIST_COLLECTIVE_TIMEOUT", "60"))
    # A replica waiting this long for its next batch of a Dask read raises instead of hanging.
    input_timeout: float = float(os.environ.get("INTERDIST_INPUT_TIMEOUT", "300"))
    # Embedded clusters idle this long after their last strategy closed are shut down.
    cluster_idle_timeout: float = float(os.environ.get("INTERDIST_CLUSTER_IDLE_TIMEOUT", "30"))
    # Collectives backend between the replicas of a group on Dask workers, by its name in
    # interdist.collectives.registry ("dask"; "local" serves one replica; "shm" and "nccl" cannot).
    collectives_backend: str = os.environ.get(
        "INTERDIST_COLLECTIVES_BACKEND", os.environ.get("INTERDIST_COLLECTIVES", "dask")
    )
    # After a replica failed, how long the notebook waits for the others before reporting them stuck.
    stuck_grace: float = float(os.environ.get("INTERDIST_STUCK_GRACE", "10"))
    # A replica whose process stays stopped (SIGSTOP, a debugger) this long while a step waits for it is
    # reported frozen (client/liveness.py), long before the collective timeout.
    frozen_after: float = float(os.environ.get("INTERDIST_FROZEN_AFTER", "5"))
    # After Kernel > Interrupt, how long the notebook waits for the replicas to leave the step.
    interrupt_wait: float = float(os.environ.get("INTERDIST_INTERRUPT_WAIT", "5"))
    # Values at most this many bytes travel with the reply of ``run`` and are shown by repr.
    inline_bytes: int = 4096
    # Programs go to replicas on the notebook's host over a Unix socket (control.py)
    # instead of Dask comms; 0 keeps every message on Dask comms.
    local_control: bool = os.environ.get("INTERDIST_LOCAL_CONTROL", "1") != "0"
    # Embedded clusters speak TLS with credentials made for them alone (Dask's Security.temporary),
    # so no other client on the host (another account on a shared server) can use their workers.
    # 0 gives plain TCP on 127.0.0.1, as before.
    embedded_tls: bool = os.environ.get("INTERDIST_EMBEDDED_TLS", "1") != "0"


settings = _Settings()


def set_logical_cpu_devices(n: int) -> None:
    """How many CPU devices ``MirroredStrategy()`` uses when no GPU is present (TF's logical devices)."""
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise ValueError(f"set_logical_cpu_devices requires a positive int, but got {n!r}")
    with _lock:
        settings.logical_cpu_devices = n


def get_logical_cpu_devices() -> int:
    """The number set by :func:`set_logical_cpu_devices` (default 1)."""
    return settings.logical_cpu_devices


def set_collective_timeout(seconds: float) -> None:
    """Seconds a collective waits for its peers before it raises ``CollectiveTimeoutError``."""
    if not seconds > 0:
        raise ValueError(f"collective timeout must be > 0 seconds, but got {seconds!r}")
    settings.collective_timeout = float(seconds)


def get_collective_timeout() -> float:
    """The current collective timeout in seconds."""
    return settings.collective_timeout
