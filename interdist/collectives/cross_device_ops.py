"""``CrossDeviceOps``: the all-reduce algorithm a strategy's replicas use.

interdist's replicas are processes, so every algorithm moves data worker to
worker through the collectives backend (``registry.py``). A strategy puts
:func:`all_reduce_choice` of its ``cross_device_ops`` into the group spec; every
replica builds its ``Collectives`` with it, and the algorithm that ran is in each
``CollectiveExited`` event (``strategy.events``). Every algorithm gives the same
bits on every replica (``algorithms.py``), so the choice changes speed only.

- ``None`` (the default), ``CrossDeviceOps()``, ``HierarchicalCopyAllReduce`` and
  ``NcclAllReduce``: chosen per call by the measured thresholds (``AUTO``);
- ``ReductionToOneDevice``: reduce-broadcast at every size (one replica reduces,
  then sends the result to every replica).

The cross-device ops do not choose the transport: the collectives backend does (``interdist.collectives.backend``;
the ``nccl``, ``cuda_ipc`` and ``gpu`` backends reduce GPU replicas' CuPy arrays on the device, docs/gpu.md).
"""

from __future__ import annotations

from typing import Any

from interdist import device as device_lib
from interdist.collectives.algorithms import AUTO, RB


class CrossDeviceOps:
    """Base class for cross-device reduction and broadcasting algorithms.

    In TF the base class is abstract (its reduce methods raise ``NotImplementedError``);
    here an instance keeps the default choice: each all_reduce picks all-gather-reduce,
    reduce-scatter + all-gather or reduce-broadcast by batch size, group size and
    whether the replicas span hosts (the thresholds measured in ``algorithms.py``).

    Examples
    --------
    >>> import interdist as idist
    >>> idist.CrossDeviceOps(), issubclass(idist.ReductionToOneDevice, idist.CrossDeviceOps)
    (CrossDeviceOps(), True)
    """

    algorithm = AUTO

    def __init__(self) -> None:
        pass

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class ReductionToOneDevice(CrossDeviceOps):
    """Always do reduction to one device first and then do broadcasting.

    Here: every replica sends its values to one replica, which reduces them once
    (in replica order) and sends the result to every replica (the reduce-broadcast
    algorithm, at every size). That replica is the one on ``reduce_to_device`` when
    it names a replica's device, else replica 0. ``accumulation_fn`` is kept for
    inspection; the reduction is always the rank-order sum (or mean) of the arrays.

    Examples
    --------
    The algorithm that ran is in each collective's event:

    >>> import interdist as idist, numpy as np
    >>> with idist.MirroredStrategy(["CPU:0", "CPU:1"], cross_device_ops=idist.ReductionToOneDevice()) as s:
    ...     out = s.run(lambda: idist.get_replica_context().all_reduce("SUM", np.float32(1.0)))
    ...     [float(x) for x in s.experimental_local_results(out)]
    ...     sorted({e.algorithm for e in s.events.events if e.kind == "collective-exited"})
    [2.0, 2.0]
    ['reduce-broadcast']
    """

    algorithm = RB

    def __init__(self, reduce_to_device: str | None = None, accumulation_fn: Any = None) -> None:
        super().__init__()
        self.reduce_to_device = reduce_to_device
        self.accumulation_fn = accumulation_fn


class HierarchicalCopyAllReduce(CrossDeviceOps):
    """Hierarchical copy all-reduce (TF's algorithm for GPUs linked by NVLink).

    Here: the default choice by measured thresholds (as ``cross_device_ops=None``);
    ``num_packs`` is kept, and as in TF 2.21 a non-zero ``num_packs`` cannot
    all-reduce between CPU replicas in replica context (``num_packs=0`` can).

    Examples
    --------
    >>> import interdist as idist, numpy as np
    >>> ops = idist.HierarchicalCopyAllReduce(num_packs=0)
    >>> with idist.MirroredStrategy(["CPU:0", "CPU:1"], cross_device_ops=ops) as s:
    ...     out = s.run(lambda: idist.get_replica_context().all_reduce("MEAN", np.float32(2.0)))
    ...     [float(x) for x in s.experimental_local_results(out)]
    [2.0, 2.0]
    """

    algorithm = AUTO

    def __init__(self, num_packs: int = 1) -> None:
        if num_packs < 0:
            raise ValueError(f"HierarchicalCopy requires num_packs >= 0, but {num_packs} is specified")
        super().__init__()
        self.num_packs = num_packs


class NcclAllReduce(CrossDeviceOps):
    """TF's NCCL all-reduce, accepted for compatibility: it does not select NCCL by itself.

    Here: the default choice by measured thresholds (as ``cross_device_ops=None``);
    GPU replicas' arrays are reduced on the device under the ``nccl``, ``cuda_ipc`` or ``gpu``
    collectives backend (``gpu`` is GPU strategies' default), and staged through host memory under
    ``dask`` (docs/gpu.md).
    ``num_packs`` is kept, and as in TF 2.21 a non-zero ``num_packs`` cannot all-reduce between CPU replicas in
    replica context (``num_packs=0`` can).

    Examples
    --------
    >>> import interdist as idist, numpy as np
    >>> ops = idist.NcclAllReduce(num_packs=0)
    >>> with idist.MirroredStrategy(["CPU:0", "CPU:1"], cross_device_ops=ops) as s:
    ...     out = s.run(lambda: idist.get_replica_context().all_reduce("SUM", np.float32(1.0)))
    ...     [float(x) for x in s.experimental_local_results(out)]
    [2.0, 2.0]
    """

    algorithm = AUTO

    def __init__(self, num_packs: int = 1) -> None:
        if num_packs < 0:
            raise ValueError(f"NCCL all-reduce requires num_packs >= 0, but {num_packs} is specified")
        super().__init__()
        self.num_packs = num_packs


def all_reduce_choice(cross_device_ops: Any, devices: list[str]) -> dict[str, Any]:
    """What a group spec carries for ``Collectives``: ``{"algorithm": ..., "root": rank}``.

    Anything that is not a ``CrossDeviceOps`` (``None``, or a wrong type that fails on
    use as in TF) keeps the default choice.
    """
    if not isinstance(cross_device_ops, CrossDeviceOps):
        return {"algorithm": AUTO, "root": 0}
    root = 0
    target = getattr(cross_device_ops, "reduce_to_device", None)
    if isinstance(target, str):
        try:
            canon = device_lib.canonicalize(target)
        except ValueError:  # not a device string: TF would fail placing there; the first replica reduces
            canon = None
        if canon in devices:
            root = devices.index(canon)
    return {"algorithm": str(cross_device_ops.algorithm), "root": root}


__all__ = ["CrossDeviceOps", "HierarchicalCopyAllReduce", "NcclAllReduce", "ReductionToOneDevice", "all_reduce_choice"]
