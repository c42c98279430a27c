"""What user code sees on a replica: ``ReplicaContext`` and the strategy it belongs to.

``merge_call`` gathers its arguments from every replica, then each replica runs
``merge_fn`` in a cross-replica context on a view holding all replicas' values.
Every replica computes the same result (TF's), and keeps its own component.
Side effects inside ``merge_fn`` therefore happen once per replica.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from interdist import _context, _nest, _reduction
from interdist._convert import as_array, same_object_across
from interdist._gpu import to_host
from interdist.input.distributed_dataset import DistributedDataset
from interdist.protocol import VariableMeta, resolve_strategy
from interdist.reduce_op import ReduceOp, resolve
from interdist.replica import programs
from interdist.replica.central import CentralReplicaVariable, central_sync, reduce_to_holder
from interdist.replica.programs import ValueContext, convert_value
from interdist.replica.variable import ReplicaVariable
from interdist.values.distributed import DistributedValues, Mirrored, PerReplica
from interdist.values.distributed_variable import variable_kind
from interdist.values.variables import (
    VariableAggregation,
    VariableSynchronization,
    check_mean_dtype,
    normalize_args,
    variable_meta,
)

if TYPE_CHECKING:
    from interdist.replica.replica import Replica


def _unwrap(x: Any) -> Any:

    if isinstance(x, ReplicaVariable):
        return x.read_value()
    return x


def _is_central(x: Any) -> bool:

    return isinstance(x, CentralReplicaVariable)


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


class ReplicaStrategyView:
    """The strategy as seen on one replica (what ``get_strategy()`` returns there)."""

    _is_default = False

    def __init__(self, replica: Replica) -> None:
        self._replica = replica
        self.extended = ReplicaExtendedView(self)

    def __reduce__(self) -> Any:

        return (resolve_strategy, (self._replica.group_id,))

    @property
    def num_replicas_in_sync(self) -> int:
        return self._replica.world_size

    @property
    def cluster_resolver(self) -> Any:
        return None

    @contextmanager
    def scope(self) -> Iterator[None]:
        if _context.get_replica_context() is not None:
            raise RuntimeError(
                "strategy.scope() requires being in cross-replica context; it was entered inside a replica function"
            )
        entry = _context.current()
        if entry.strategy is self:
            yield
            return
        with _context.enter(self, None):
            yield

    def _create_variable(
        self,
        initial_value: Any = None,
        trainable: bool | None = None,
        name: str | None = None,
        dtype: Any = None,
        synchronization: Any = None,
        aggregation: Any = None,
        shape: Any = None,
        **_: Any,
    ) -> Any:
        """``Variable(...)`` inside a replica function: one distributed variable for all replicas.

        As TF 2.21's eager ``MirroredStrategy.run`` (checked): every replica's call returns the
        same ``MirroredVariable`` (``SyncOnReadVariable`` for ON_READ), whose copies all start
        from **replica 0's** initial value (the others' are ignored); each call of the function
        makes a new variable; inside ``merge_fn`` too. Replicas must create their variables in
        the same order. The notebook gets a handle when the step returns.
        """

        replica = self._replica
        kind_of_strategy = replica.spec.get("kind")
        if kind_of_strategy not in ("mirrored", "one_device"):
            raise NotImplementedError(
                "interdist creates variables inside a replica function only under MirroredStrategy, "
                f"MultiWorkerMirroredStrategy and OneDeviceStrategy (this is {kind_of_strategy!r}); "
                "create it in strategy.scope() instead"
            )
        a = normalize_args(
            initial_value,
            name,
            trainable,
            dtype,
            VariableSynchronization.AUTO if synchronization is None else synchronization,
            VariableAggregation.NONE if aggregation is None else aggregation,
        )
        if a["synchronization"] == VariableSynchronization.NONE:
            # TF 2.21's words, inside run (checked), whatever `trainable` is.
            raise ValueError(
                "`NONE` variable synchronization mode is not supported with tf.distribute strategy. "
                f"Please change the `synchronization` for variable: {name}"
            )
        if a["synchronization"] == VariableSynchronization.AUTO:
            a["synchronization"] = VariableSynchronization.ON_WRITE
        check_mean_dtype(a)
        kind = variable_kind(a["synchronization"])
        # Ids the notebook never hands out (its own count from 1): step and order within the step.
        var_id = (1 << 40) + replica.step * (1 << 16) + len(replica.created)
        meta = cast(VariableMeta, variable_meta(a, kind, kind_of_strategy))  # variable_meta is typed dict[str, Any]
        value = a["value"]
        if replica.world_size > 1:
            value = replica.collective(
                "broadcast", int(value.nbytes), lambda s, q, w: replica.collectives.broadcast(s, q, value, 0, w)
            )
        programs.create_variable(replica, var_id, meta, value)
        replica.created.append(
            {"var_id": var_id, "meta": meta, "shape": tuple(value.shape), "dtype": np.dtype(value.dtype).str}
        )
        return replica.variables[var_id]

    def _require_cross_replica(self, what: str) -> None:
        if _context.get_replica_context() is not None:
            raise RuntimeError(
                f"Method {what} requires being in cross-replica context, use get_replica_context().merge_call()"
            )

    def experimental_local_results(self, value: Any) -> tuple[Any, ...]:

        if isinstance(value, DistributedValues):
            return value.values
        if isinstance(value, ReplicaVariable) and not _is_central(value):
            return value._all_copies()
        return (value,)  # a central variable is one value, as in the notebook

    def reduce(self, reduce_op: Any, value: Any, axis: int | None = None) -> Any:
        op = resolve(reduce_op)
        self._require_cross_replica("reduce")
        if isinstance(value, DistributedValues):
            return _reduction.reduce_components(op, [_unwrap(v) for v in value.values], axis)

        if isinstance(value, ReplicaVariable) and not _is_central(value):
            return _reduction.reduce_components(op, [as_array(c) for c in value._all_copies()], axis)
        if _is_central(value):
            value = value.read_value()  # one value, reduced as a non-distributed one (as in the notebook)
        if axis is not None:
            return (
                _reduction.reduce_components(op, [value] * self.num_replicas_in_sync, axis)
                if op == ReduceOp.SUM
                else _reduction.reduce_components(op, [value], axis)
            )
        return _reduction.reduce_non_distributed(op, value, self.num_replicas_in_sync)

    def gather(self, value: Any, axis: int) -> Any:
        self._require_cross_replica("gather")
        comps = value.values if isinstance(value, DistributedValues) else (value,)
        return _reduction.gather_components([_unwrap(c) for c in comps], axis)

    def run(self, fn: Callable[..., Any], args: Any = (), kwargs: Any = None, options: Any = None) -> Any:
        """Inside ``merge_fn``: run ``fn`` for this replica in its replica context."""
        if _context.get_replica_context() is not None:
            raise RuntimeError(
                "strategy.run was called inside a replica function (replica context); "
                "call it from the notebook (cross-replica context)"
            )
        args = _select(tuple(args), self._replica.rank)
        kwargs = _select(dict(kwargs or {}), self._replica.rank)
        with _context.enter(self, self._replica.context):
            out = fn(*args, **kwargs)
        # Every replica runs merge_fn, so every replica is here: share the outputs.
        return _regroup_local(self._replica.exchange("run", out), self.num_replicas_in_sync)

    def experimental_distribute_values_from_function(self, value_fn: Callable[..., Any]) -> Any:

        n = self.num_replicas_in_sync
        return PerReplica([convert_value(value_fn(ValueContext(r, n))) for r in range(n)])

    def experimental_distribute_dataset(self, dataset: Any, options: Any = None) -> Any:

        return DistributedDataset(self, dataset, options)

    def __repr__(self) -> str:
        return f"<interdist strategy view: replica {self._replica.rank} of group {self._replica.group_id}>"


class ReplicaExtendedView:
    """``StrategyExtended`` on a replica, used inside ``merge_fn``."""

    def __init__(self, strategy: ReplicaStrategyView) -> None:
        self._strategy = strategy
        self._replica = strategy._replica

    @property
    def worker_devices(self) -> tuple[str, ...]:
        return tuple(self._replica.devices)

    @property
    def parameter_devices(self) -> tuple[str, ...]:
        return tuple(self._replica.spec.get("parameter_devices") or self._replica.devices)

    def _n(self) -> int:
        return self._replica.world_size

    def reduce_to(self, reduce_op: Any, value: Any, destinations: Any, options: Any = None) -> Any:
        op = resolve(reduce_op)
        self._strategy._require_cross_replica("reduce_to")
        if isinstance(destinations, str):
            # One device: a single (not mirrored) value, as TF returns it.
            out = self.reduce_to(op, value, None)
            return out._component(0) if isinstance(out, DistributedValues) else out

        if isinstance(value, DistributedValues):
            if isinstance(value, Mirrored) and op == ReduceOp.MEAN:
                return value
            out = _reduction.reduce_components(op, [_unwrap(v) for v in value.values], None)
        elif isinstance(value, ReplicaVariable) and not _is_central(value):
            out = _reduction.reduce_components(op, [as_array(c) for c in value._all_copies()], None)
        elif _is_central(value):
            out = as_array(_reduction.reduce_non_distributed(op, value, self._n()))
        else:
            out = _reduction.reduce_non_distributed(op, value, self._n())
        return Mirrored([out] * self._n())

    def batch_reduce_to(self, reduce_op: Any, value_destination_pairs: Any, options: Any = None) -> list[Any]:
        return [self.reduce_to(reduce_op, v, d, options) for v, d in value_destination_pairs]

    def broadcast_to(self, tensor: Any, destinations: Any) -> Any:
        self._strategy._require_cross_replica("broadcast_to")
        if isinstance(destinations, str):
            return tensor
        return Mirrored([tensor] * self._n())

    def update(self, var: Any, fn: Callable[..., Any], args: Any = (), kwargs: Any = None, group: bool = True) -> Any:
        if _is_central(var):
            return self._central_update(var, fn, args, kwargs, group)
        # TF 2.21 also allows it in replica context: each replica updates its own copy.
        rank = self._replica.rank
        args = _select(tuple(args), rank)
        kwargs = _select(dict(kwargs or {}), rank)
        with _context.enter(self._strategy, None, update_replica_id=rank):
            out = fn(var, *args, **kwargs)
        if group:
            return _nest.map_structure(lambda o: Mirrored([o] * self._n()) if o is not None else None, out)
        return tuple([out] * self._n())

    def _central_update(self, var: Any, fn: Callable[..., Any], args: Any, kwargs: Any, group: bool) -> Any:
        """``update`` of a central variable: ``fn`` applies on the holder only (replica/variable.py).

        The other replicas run ``fn`` too, on a variable that checks and remembers the writes
        without applying them, so ``fn`` returns the same thing everywhere.
        """
        if _context.get_replica_context() is not None:
            # As TF does in replica context: a merge_call, then one update in cross-replica context.
            return self._replica.context.merge_call(
                lambda s, *a, **k: s.extended.update(var, fn, a, k, group), args=tuple(args), kwargs=kwargs
            )
        rank = self._replica.rank
        args = _select(tuple(args), rank)
        kwargs = _select(dict(kwargs or {}), rank)
        with var._state.op(update=True), _context.enter(self._strategy, None, update_replica_id=rank):
            out = fn(var, *args, **kwargs)
        return out if group else (out,)  # one copy, one result

    def _apply_gradients_in_replica_context(self, optimizer: Any, pairs: list[tuple[Any, Any]]) -> bool:
        """``optimizer.apply_gradients`` inside ``run`` when every variable is central.

        The gradients are summed onto the holder in one message per replica (not all-gathered
        by a ``merge_call``), and the optimizer's update runs there once. The values equal the
        ``merge_call`` path's: the same sums, added in rank order. False: not central, use that path.
        """

        variables = [v for _, v in pairs]
        if not variables or not all(_is_central(v) for v in variables):
            return False
        grads = [to_host(as_array(_unwrap(g))) for g, _ in pairs]  # summed in the holder's host memory
        summed = reduce_to_holder(self._replica, grads, "SUM")
        state = variables[0]._state
        rank = self._replica.rank
        with _context.enter(self._strategy, None):
            for var, grad in zip(variables, summed, strict=True):
                with state.op(update=True), _context.enter(self._strategy, None, update_replica_id=rank):
                    if state.is_holder:
                        optimizer._update_one(var, grad)
            optimizer.iterations.assign_add(np.int64(1))
        return True

    def call_for_each_replica(self, fn: Callable[..., Any], args: Any = (), kwargs: Any = None) -> Any:
        return self._strategy.run(fn, args, kwargs)

    def value_container(self, value: Any) -> Any:
        return value

    @contextmanager
    def colocate_vars_with(self, colocate_with_variable: Any) -> Iterator[None]:
        yield

    def variable_created_in_scope(self, v: Any) -> bool:

        return isinstance(v, ReplicaVariable) and v.group_id == self._replica.group_id

    experimental_between_graph = False
    experimental_require_static_shapes = False
    experimental_should_init = True
    should_checkpoint = True
    should_save_summary = True
