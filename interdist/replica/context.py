"""``ReplicaContext`` on a replica (``tf.distribute.ReplicaContext``): what replica code calls.

``merge_call`` gathers its arguments from every replica, then each replica runs
``merge_fn`` in a cross-replica context on a view holding all replicas' values.
Every replica computes the same result (TF's), and keeps its own component.
Side effects inside ``merge_fn`` therefore happen once per replica.

Also the helpers that turn one structure per replica into one of ``PerReplica`` values and
back (``_regroup_local``, ``_select``), which the strategy's view (view.py) uses too.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from interdist import _context, _nest, _reduction
from interdist._convert import as_array, same_object_across
from interdist.reduce_op import resolve
from interdist.replica.central import central_sync
from interdist.replica.variable import ReplicaVariable
from interdist.values.distributed import DistributedValues, PerReplica

if TYPE_CHECKING:
    from interdist.replica.replica import Replica


def _unwrap(x: Any) -> Any:

    if isinstance(x, ReplicaVariable):
        return x.read_value()
    return x


def _nbytes(leaves: list[Any]) -> int:
    return int(sum(getattr(x, "nbytes", 0) for x in leaves))


class ReplicaContext:
    """``tf.distribute.ReplicaContext`` on a replica."""

    def __init__(self, replica: Replica) -> None:
        self._replica = replica

    @property
    def replica_id_in_sync_group(self) -> Any:
        # TF returns an int32 scalar tensor here (a Python int only in the default context).
        return np.int32(self._replica.rank)

    @property
    def num_replicas_in_sync(self) -> int:
        return self._replica.world_size

    @property
    def strategy(self) -> Any:
        return self._replica.view

    @property
    def devices(self) -> tuple[tuple[str, ...], ...]:
        # TF 2.21 nests it: one tuple of devices per replica on this worker.
        return ((self._replica.device,),)

    def __enter__(self) -> ReplicaContext:
        self._cm = _context.enter(self._replica.view, self)
        self._cm.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._cm.__exit__(*exc)

    def _require_replica_context(self, what: str) -> None:
        if _context.get_replica_context() is not self:
            raise RuntimeError(f"{what} must be called in this replica's context (inside strategy.run)")

    def all_reduce(self, reduce_op: Any, value: Any, options: Any = None) -> Any:
        """Reduce ``value`` (a nested structure) across replicas; every replica gets the result."""
        op = resolve(reduce_op)
        self._require_replica_context("all_reduce")
        raw = [_unwrap(v) for v in _nest.flatten(value)]
        if self._replica.world_size > 1:
            for v in raw:
                if isinstance(v, (bool, int, float, complex)) and not isinstance(v, np.generic):
                    # TF 2.21 needs tensors here: a Python number fails with this AttributeError.
                    raise AttributeError(
                        f"'{type(v).__name__}' object has no attribute 'dtype' (all_reduce needs "
                        "arrays, e.g. np.float32(x), not Python numbers)"
                    )
        _check_cross_device_ops(self._replica)
        leaves = [as_array(v) for v in raw]
        if self._replica.world_size > 1 and any(a.dtype == np.bool_ for a in leaves):
            raise ValueError(
                f"all_reduce cannot {op.value} boolean values (TF has no {op.value} kernel for bool); "
                "cast them to a number first"
            )
        out = self._replica.collective(
            "all_reduce", _nbytes(leaves), lambda s, q, w: self._replica.collectives.all_reduce(s, q, leaves, op, w)
        )
        central_sync(self._replica)
        return _nest.pack_sequence_as(value, out)

    def all_gather(self, value: Any, axis: int, options: Any = None) -> Any:
        """Concatenate every replica's ``value`` along ``axis`` (nested structures leaf by leaf)."""
        self._require_replica_context("all_gather")
        if axis < 0:
            raise ValueError(f"all_gather requires 0 <= axis < rank of the value, but got axis={axis}")
        leaves = [as_array(_unwrap(v)) for v in _nest.flatten(value)]
        gathered = self._replica.exchange("all_gather", leaves, _nbytes(leaves))
        central_sync(self._replica)
        out = [_reduction.gather_components([g[i] for g in gathered], axis) for i in range(len(leaves))]
        return _nest.pack_sequence_as(value, out)

    def merge_call(self, merge_fn: Callable[..., Any], args: Any = (), kwargs: Any = None) -> Any:
        """Enter the cross-replica context, run ``merge_fn`` on all replicas' values, come back."""
        self._require_replica_context("merge_call")
        kwargs = dict(kwargs or {})
        gathered = self._replica.exchange("merge_call", (tuple(args), kwargs))
        central_sync(self._replica)  # every replica is here: values older than now are not needed
        merged = _regroup_local([g for g in gathered], self._replica.world_size)
        m_args, m_kwargs = merged
        with _context.enter(self._replica.view, None):
            result = merge_fn(self._replica.view, *m_args, **m_kwargs)
        out = _select(result, self._replica.rank)
        # A value merge_fn returns as such is, in TF, the very same object on every replica:
        # remember it, so that run() can hand it back as one value.
        for leaf in _nest.flatten(result):
            if leaf is not None and not isinstance(leaf, DistributedValues):
                self._replica.shared_results[id(leaf)] = leaf
        return out

    def __repr__(self) -> str:
        return f"ReplicaContext(replica_id_in_sync_group={self.replica_id_in_sync_group})"


def _check_cross_device_ops(replica: Replica) -> None:
    """Fail as TF 2.21 does when a strategy's cross_device_ops cannot all-reduce here."""
    cdo = replica.spec.get("cross_device_ops")
    if not cdo or replica.world_size == 1:
        return
    kind, num_packs = cdo
    if kind not in ("CrossDeviceOps", "ReductionToOneDevice", "HierarchicalCopyAllReduce", "NcclAllReduce"):
        raise AttributeError(
            f"'{kind}' object has no attribute 'batch_reduce' (cross_device_ops must be a tf.distribute.CrossDeviceOps)"
        )
    if (
        kind in ("HierarchicalCopyAllReduce", "NcclAllReduce")
        and num_packs
        and all("/device:CPU:" in d for d in replica.devices)
    ):
        # TF packs the values for these algorithms and fails doing so for CPU devices (num_packs=0 works).
        raise AttributeError(
            f"{kind}(num_packs={num_packs}) cannot all-reduce between CPU devices in replica "
            "context (as in TF 2.21); use num_packs=0 or ReductionToOneDevice"
        )


def _regroup_local(per_rank: list[Any], n: int) -> Any:
    """Turn one structure per replica into one structure of ``PerReplica`` leaves."""

    if n == 1:
        return per_rank[0]

    def leaf(*vals: Any) -> Any:
        v0 = vals[0]
        if isinstance(v0, ReplicaVariable):
            return v0
        if isinstance(v0, DistributedValues):
            return v0
        if same_object_across(list(vals)):
            return v0
        return PerReplica(list(vals))

    return _nest.map_structure(leaf, *per_rank)


def _select(x: Any, rank: int) -> Any:
    def leaf(v: Any) -> Any:
        if isinstance(v, DistributedValues):
            return v._component(rank)
        return v

    return _nest.map_structure(leaf, x)
