"""``MirroredStrategy``: synchronous replicas, one per device, each a Dask worker process."""

from __future__ import annotations

from typing import Any

from interdist import device as device_lib
from interdist.client.gpus import visible_gpus
from interdist.collectives.cross_device_ops import all_reduce_choice
from interdist.config import get_logical_cpu_devices
from interdist.strategy.base import Strategy


def resolve_devices(devices: Any, allow_duplicates: bool = False) -> list[str]:
    """Canonical device strings; ``None`` (or ``[]``, as TF) means every GPU, else the logical CPU devices."""
    if isinstance(devices, str):
        raise ValueError(
            f"`devices` must be a list of device strings such as ['CPU:0'], but got the string {devices!r}"
        )
    if devices is not None and not list(devices):
        devices = None
    if devices is None:
        n_gpu = visible_gpus()
        devices = (
            [f"GPU:{i}" for i in range(n_gpu)] if n_gpu else [f"CPU:{i}" for i in range(get_logical_cpu_devices())]
        )
    devices = list(devices)
    qualified = {isinstance(d, str) and d.strip().startswith("/job:") for d in devices}
    if len(qualified) > 1:
        # TF reads job-qualified and unqualified names as devices of two workers.
        raise RuntimeError(
            "In-graph multi-worker training with MirroredStrategy is not supported in eager mode: "
            f"the devices {devices} mix job-qualified and unqualified names"
        )
    canon = [device_lib.canonicalize(d) for d in devices]
    if not allow_duplicates and len(set(canon)) != len(canon):
        # TF 2.21 fails an internal assert here (AssertionError), also for different spellings.
        raise AssertionError(f"No duplicates allowed in `devices` argument: {devices}")
    kinds = {device_lib.parse(d).device_type for d in canon}
    if len(kinds) > 1:
        raise ValueError(f"interdist replicas must all be CPU or all be GPU devices, but got {devices}")
    return canon


class MirroredStrategy(Strategy):
    """Synchronous training across multiple replicas on one machine.

    Each device is one replica, run by its own Dask worker process (an embedded
    ``LocalCluster`` on 127.0.0.1 unless ``cluster`` names another).

    ``security`` (a ``distributed.security.Security``): the TLS credentials to reach the scheduler named
    by ``cluster`` (an address or a cluster object); with no ``cluster``, the embedded cluster speaks
    TLS with these credentials instead of ones made for it alone, so that other clients holding them
    (and only those) can reach it.

    >>> import interdist as idist, numpy as np
    >>> with idist.MirroredStrategy(["CPU:0", "CPU:1"]) as s:
    ...     r = s.run(lambda: idist.get_replica_context().replica_id_in_sync_group)
    ...     [int(v) for v in s.experimental_local_results(r)]
    [0, 1]
    """

    def __init__(
        self, devices: Any = None, cross_device_ops: Any = None, cluster: Any = None, security: Any = None
    ) -> None:
        # TF accepts any object here and fails only when it is used (replica/context.py); a
        # CrossDeviceOps picks the replicas' all_reduce algorithm (collectives/cross_device_ops.py).
        self._cross_device_ops = cross_device_ops
        cdo = (
            None
            if cross_device_ops is None
            else (type(cross_device_ops).__name__, getattr(cross_device_ops, "num_packs", None))
        )
        resolved = resolve_devices(devices)
        choice = all_reduce_choice(cross_device_ops, resolved)
        super().__init__(resolved, cluster, spec={"cross_device_ops": cdo, "all_reduce": choice}, security=security)
