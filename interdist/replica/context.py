"""``ReplicaContext`` on a replica (``tf.distribute.ReplicaContext``): what replica code calls.

``merge_call`` gathers its arguments from every replica, then each replica runs
``merge_fn`` in a cross-replica context on a view holding all replicas' values
(large arrays lazily: a reduction of them is one all-reduce, lazy_merge.py).
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
from interdist import device as device_lib
from interdist._convert import as_array, same_object_across
from interdist.reduce_op import check_reduce_op, known_reduce_op
from interdist.replica.central import central_sync
from interdist.replica.lazy_merge import Held, HeldArgs, LazyPerReplica
from interdist.replica.variable import ReplicaVariable
from interdist.values.distributed import DistributedValues, PerReplica

if TYPE_CHECKING:
    from interdist.replica.replica import Replica


def _unwrap(x: Any) -> Any:

    if isinstance(x, ReplicaVariable):
        return x.read_value()
    return x


def _leaves(value: Any, world_size: int) -> list[Any]:
    """``all_reduce``'s arrays: the leaves of ``value``, variables read."""
    raw = [_unwrap(v) for v in _nest.flatten(value)]
    if world_size > 1:
        for v in raw:
            if isinstance(v, (bool, int, float, complex)) and not isinstance(v, np.generic):
                # TF 2.21 needs tensors here: a Python number fails with this AttributeError.
                raise AttributeError(
                    f"'{type(v).__name__}' object has no attribute 'dtype' (all_reduce needs "
                    "arrays, e.g. np.float32(x), not Python numbers)"
                )
    return [as_array(v) for v in raw]


def _nbytes(leaves: list[Any]) -> int:
    return int(sum(getattr(x, "nbytes", 0) for x in leaves))


class ReplicaContext:
    """``tf.distribute.ReplicaContext``: on a replica, or made directly as in TF.

    The strategy makes one per replica (``_for_replica``). ``ReplicaContext(strategy,
    replica_id_in_sync_group)`` makes one in the notebook, as TF allows: it knows its strategy and
    id, and ``with ctx:`` makes it the current replica context of ``strategy`` (``merge_call`` then
    runs ``merge_fn`` on the arguments as they are; ``all_reduce`` reduces them as one value).

    Examples
    --------
    >>> import interdist as idist, numpy as np
    >>> with idist.MirroredStrategy(["CPU:0", "CPU:1"]) as s:
    ...     def step():
    ...         ctx = idist.get_replica_context()
    ...         return ctx.all_reduce("SUM", np.float32(ctx.replica_id_in_sync_group + 1))
    ...     [float(x) for x in s.experimental_local_results(s.run(step))]
    ...     idist.ReplicaContext(s, 1)
    [3.0, 3.0]
    ReplicaContext(replica_id_in_sync_group=1)
    """

    _replica: Replica | None

    def __init__(self, strategy: Any, replica_id_in_sync_group: Any) -> None:
        rid = replica_id_in_sync_group
        if not (rid is None or isinstance(rid, (int, np.integer)) or _is_int_tensor(rid)):
            raise ValueError("replica_id_in_sync_group can only be an integer, a Tensor or None.")
        self._replica = None
        self._strategy = strategy
        self._id = rid
        self._cms: list[Any] = []

    @classmethod
    def _for_replica(cls, replica: Replica) -> ReplicaContext:
        """The context of one replica of a group (what ``get_replica_context()`` gives inside ``run``)."""
        ctx = cls.__new__(cls)
        ctx._replica = replica
        ctx._strategy = None
        ctx._id = replica.rank
        ctx._cms = []
        return ctx

    @property
    def _r(self) -> Replica:
        if self._replica is None:
            raise RuntimeError(
                "this ReplicaContext was made with ReplicaContext(strategy, id), not by strategy.run: "
                "it has no replica to communicate with"
            )
        return self._replica

    @property
    def replica_id_in_sync_group(self) -> Any:
        # TF returns an int32 scalar tensor here (a Python int only in the default context).
        return None if self._id is None else np.int32(self._id)

    @property
    def num_replicas_in_sync(self) -> int:
        if self._replica is None:
            return int(self._strategy.num_replicas_in_sync)
        return self._replica.world_size

    @property
    def strategy(self) -> Any:
        return self._strategy if self._replica is None else self._replica.view

    @property
    def devices(self) -> tuple[tuple[str, ...], ...]:
        if self._replica is None:
            self._require_replica_context("devices")
            devices = tuple(self._strategy.extended.worker_devices)
            return ((devices[int(self._id)] if self._id is not None and 0 <= int(self._id) < len(devices) else "",),)
        # TF 2.21 nests it: one tuple of devices per replica on this worker.
        return ((self._replica.device,),)

    def __enter__(self) -> None:
        cm = _context.enter(self.strategy, self)
        cm.__enter__()
        self._cms.append(cm)
        # TF's ``with ctx as c`` binds None (checked, for a replica's context and one made directly).

    def __exit__(self, *exc: Any) -> None:
        self._cms.pop().__exit__(*exc)

    def _require_replica_context(self, what: str) -> None:
        if _context.get_replica_context() is not self:
            if self._replica is None:
                # TF: "Mismatching tf.distribute.Strategy objects: ... is not ..."
                raise RuntimeError(
                    f"{what} requires this ReplicaContext to be the current one: use it inside `with ctx:`"
                )
            raise RuntimeError(f"{what} must be called in this replica's context (inside strategy.run)")

    def all_reduce(self, reduce_op: Any, value: Any, options: Any = None) -> Any:
        """Reduce ``value`` (a nested structure) across replicas; every replica gets the result."""
        # Each check in one look for the commonest call (a ReduceOp or its name, one array):
        # a loop of small all-reduces passes here every time, and at 4 replicas on 2 cores a microsecond of each
        # replica's Python costs several of the collective's (docs/performance.md, "The eleventh run").
        op = known_reduce_op(reduce_op)
        if op is None:
            op = check_reduce_op(reduce_op, "all_reduce", self._kind())
        self._require_replica_context("all_reduce")
        r = self._replica
        if r is None:
            # As TF: a merge_call whose batch_reduce_to hands each (non-distributed) value back.
            return self.merge_call(lambda s, v: _nest.map_structure(lambda x: x, v), args=(value,))
        one = type(value) is np.ndarray  # the commonest (a loss, a gradient): one leaf, nothing to unwrap
        leaves = [value] if one else _leaves(value, r.world_size)
        _check_cross_device_ops(r)
        if r.world_size > 1 and (value.dtype.kind == "b" if one else any(a.dtype.kind == "b" for a in leaves)):
            raise ValueError(
                f"all_reduce cannot {op.value} boolean values (TF has no {op.value} kernel for bool); "
                "cast them to a number first"
            )
        if not one and len(leaves) > 1 and r.spec.get("int32_on_host"):
            # TF reduces a structure with one batch_reduce_to: MirroredStrategy refuses int32 among its leaves
            device_lib.refuse_int32_in_batch([{a.dtype} for a in leaves])
        nbytes = value.nbytes if one else _nbytes(leaves)
        call = r.collectives.all_reduce
        out = r.collective("all_reduce", nbytes, lambda s, q, w: call(s, q, leaves, op, w), resolve=False)
        central_sync(r)
        return out[0] if one else _nest.pack_sequence_as(value, out)

    def all_gather(self, value: Any, axis: int, options: Any = None) -> Any:
        """Concatenate every replica's ``value`` along ``axis`` (nested structures leaf by leaf)."""
        self._require_replica_context("all_gather")
        if self._replica is None:
            raise NotImplementedError(
                "all_gather on a ReplicaContext made directly (not by strategy.run) is not supported; "
                "call it inside strategy.run"
            )
        if axis < 0:
            raise ValueError(f"all_gather requires 0 <= axis < rank of the value, but got axis={axis}")
        leaves = [as_array(_unwrap(v)) for v in _nest.flatten(value)]
        gathered = self._r.exchange("all_gather", leaves, _nbytes(leaves))
        central_sync(self._r)
        out = [_reduction.gather_components([g[i] for g in gathered], axis) for i in range(len(leaves))]
        return _nest.pack_sequence_as(value, out)

    def merge_call(self, merge_fn: Callable[..., Any], args: Any = (), kwargs: Any = None) -> Any:
        """Enter the cross-replica context, run ``merge_fn`` on all replicas' values, come back."""
        self._require_replica_context("merge_call")
        args, kwargs = _nest.check_call_args(merge_fn, args, kwargs, positional=False)
        if self._replica is None:
            with _context.enter(self._strategy, None):
                return merge_fn(self._strategy, *args, **kwargs)
        held = HeldArgs(self._r) if self._r.world_size > 1 else None
        skeleton = (tuple(args), kwargs) if held is None else _nest.map_structure(held.hold, (tuple(args), kwargs))
        gathered = self._r.exchange("merge_call", skeleton)
        central_sync(self._r)  # every replica is here: values older than now are not needed
        merged = _regroup_local([g for g in gathered], self._r.world_size, held)
        m_args, m_kwargs = merged
        try:
            with _context.enter(self._r.view, None):
                result = merge_fn(self._r.view, *m_args, **m_kwargs)
            out = _select(result, self._r.rank)
        finally:
            if held is not None:
                held.open = False  # the peers move on: their held values are gone
        # A value merge_fn returns as such is, in TF, the very same object on every replica:
        # remember it, so that run() can hand it back as one value.
        for leaf in _nest.flatten(result):
            if leaf is not None and (isinstance(leaf, ReplicaVariable) or not isinstance(leaf, DistributedValues)):
                self._r.shared_results[id(leaf)] = leaf
        return out

    def _kind(self) -> str:
        if self._replica is not None:
            return str(self._replica.spec.get("kind", ""))
        return str(getattr(self._strategy, "_kind", ""))

    def __repr__(self) -> str:
        return f"ReplicaContext(replica_id_in_sync_group={self.replica_id_in_sync_group})"


def _is_int_tensor(x: Any) -> bool:
    """An interdist tensor (NumPy scalar/array, or a value with a dtype) of integers, standing for TF's int tensor."""
    dtype = getattr(x, "dtype", None)
    return dtype is not None and np.dtype(dtype).kind in "iu"


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


def _regroup_local(per_rank: list[Any], n: int, held: HeldArgs | None = None) -> Any:
    """Turn one structure per replica into one structure of ``PerReplica`` leaves.

    ``held``: the structures are ``merge_call`` skeletons; a leaf some replica held back
    (lazy_merge.py) becomes a ``LazyPerReplica``.
    """

    if n == 1:
        return per_rank[0]

    def leaf(*vals: Any) -> Any:
        v0 = vals[0]
        if isinstance(v0, ReplicaVariable):
            return v0
        if isinstance(v0, DistributedValues):
            return v0
        if held is not None and any(isinstance(v, Held) for v in vals):
            return LazyPerReplica(held, list(vals))
        if same_object_across(list(vals)):
            return v0
        return PerReplica(list(vals))

    return _nest.map_structure(leaf, *per_rank)


def _select(x: Any, rank: int) -> Any:
    def leaf(v: Any) -> Any:
        # A variable stays itself (TF's select_replica keeps DistributedVariables).
        if isinstance(v, DistributedValues) and not isinstance(v, ReplicaVariable):
            return v._component(rank)
        return v

    return _nest.map_structure(leaf, x)
