"""``CrossDeviceOps``: the reduction algorithm a strategy uses between replicas.

interdist's replicas are processes, so every algorithm moves data worker to
worker through the collectives backend; these classes choose among them.
"""

from __future__ import annotations

from typing import Any


class CrossDeviceOps:
    """Base class for cross-device reduction and broadcasting algorithms."""

    algorithm = "all-gather-reduce"

    def __init__(self) -> None:
        pass

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class ReductionToOneDevice(CrossDeviceOps):
    """Always do reduction to one device first and then do broadcasting."""

    algorithm = "reduce-to-one"

    def __init__(self, reduce_to_device: str | None = None, accumulation_fn: Any = None) -> None:
        super().__init__()
        self.reduce_to_device = reduce_to_device
        self.accumulation_fn = accumulation_fn


class HierarchicalCopyAllReduce(CrossDeviceOps):
    """Reduction using hierarchical copy all-reduce."""

    algorithm = "hierarchical-copy"

    def __init__(self, num_packs: int = 1) -> None:
        if num_packs < 0:
            raise ValueError(f"NCCL all-reduce requires num_packs >= 0, but {num_packs} is specified")
        super().__init__()
        self.num_packs = num_packs


class NcclAllReduce(CrossDeviceOps):
    """Reduction using NCCL all-reduce (GPU replicas; needs the ``gpu`` extra)."""

    algorithm = "nccl"

    def __init__(self, num_packs: int = 1) -> None:
        if num_packs < 0:
            raise ValueError(f"NCCL all-reduce requires num_packs >= 0, but {num_packs} is specified")
        super().__init__()
        self.num_packs = num_packs
