"""The strategy as replica code sees it: ``ReplicaStrategyView`` (its ``ReplicaExtendedView`` is in extended_view.py).

What ``get_strategy()`` returns on a replica, inside the replica function and inside
``merge_fn`` (``ReplicaContext`` is in context.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from interdist import _context, _nest, _reduction
from interdist._convert import as_array
from interdist.input.distributed_dataset import DistributedDataset
from interdist.protocol import VariableMeta, resolve_strategy
from interdist.reduce_op import ReduceOp, check_reduce_op
from interdist.replica import faults, programs
from interdist.replica._notebook_class import _named, _ReportsNotebookClass
from interdist.replica.central_variable import create_central_variable
from interdist.replica.context import _regroup_local, _select, _unwrap
from interdist.replica.extended_view import ReplicaExtendedView as ReplicaExtendedView  # (this module's API too)
from interdist.replica.extended_view import _copies, _is_central
from interdist.replica.lazy_merge import LazyPerReplica, all_reduce_held
from interdist.replica.programs import ValueContext, convert_value
from interdist.replica.variable import ReplicaVariable
from interdist.values.distributed import DistributedValues, PerReplica, regroup
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


def _per_replica(x: Any) -> bool:
    """A value with one component per replica (a distributed value, a non-central variable's copies)."""
    return isinstance(x, DistributedValues) or (isinstance(x, ReplicaVariable) and not _is_central(x))


def make_view(replica: Replica) -> ReplicaStrategyView:
    """The view of ``replica``'s strategy, named as the notebook's strategy class (``MirroredStrategy``...)."""
    name = replica.spec.get("strategy_name")
    return _named(ReplicaStrategyView, name)(replica) if name else ReplicaStrategyView(replica)


class ReplicaStrategyView(_ReportsNotebookClass):
    """The strategy as seen on one replica (what ``get_strategy()`` returns there)."""

    _is_default = False

    def __init__(self, replica: Replica) -> None:
        self._replica = replica
        name = replica.spec.get("extended_name")
        self.extended = _named(ReplicaExtendedView, name)(self) if name else ReplicaExtendedView(self)

    def _class_path(self) -> Any:
        return self._replica.spec.get("strategy_class")

    def _class_pickle(self) -> bytes | None:
        return self._replica.spec.get("strategy_class_pickle")

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
        if kind_of_strategy not in ("mirrored", "one_device", "central_storage"):
            raise NotImplementedError(
                "interdist creates variables inside a replica function only under MirroredStrategy, "
                f"MultiWorkerMirroredStrategy, OneDeviceStrategy and CentralStorageStrategy (this is "
                f"{kind_of_strategy!r}); create it in strategy.scope() instead"
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
        if a["synchronization"] == VariableSynchronization.AUTO and kind_of_strategy == "mirrored":
            a["synchronization"] = VariableSynchronization.ON_WRITE  # OneDevice keeps AUTO, as TF reports it
        check_mean_dtype(a)
        central = kind_of_strategy == "central_storage"
        kind = "central" if central else variable_kind(a["synchronization"])
        # Ids the notebook never hands out (its own count from 1): step and order within the step.
        var_id = (1 << 40) + replica.step * (1 << 16) + len(replica.created)
        meta = cast(VariableMeta, variable_meta(a, kind, kind_of_strategy))  # variable_meta is typed dict[str, Any]
        value = a["value"]
        if replica.world_size > 1:
            value = replica.collective(
                "broadcast", int(value.nbytes), lambda s, q, w: replica.collectives.broadcast(s, q, value, 0, w)
            )
        if central:
            # TF 2.21: an AggregatingVariable on the parameter device, from replica 0's value; one copy, on
            # the holder (replica/central_variable.py).
            (device,) = self.extended.parameter_devices
            meta.update({"shape": list(value.shape), "dtype": np.dtype(value.dtype).str, "device": device})
            create_central_variable(replica, var_id, meta, value)
        else:
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

        if _nest.is_nested(value):
            # As TF (and the notebook's strategy): one copy of the nest per replica, components picked.
            return tuple(
                _nest.map_structure(
                    lambda x, r=r: self.experimental_local_results(x)[r] if _per_replica(x) else x, value
                )
                for r in range(self.num_replicas_in_sync)
            )
        if _copies(value):
            return tuple(value.values)  # TF: the component variables (see ReplicaComponent)
        if isinstance(value, DistributedValues):
            return value.values
        return (value,)  # a OneDevice or central variable is one value, as in the notebook

    def reduce(self, reduce_op: Any, value: Any, axis: _reduction.Axis = None) -> Any:
        op = check_reduce_op(reduce_op, "reduce")
        self._require_cross_replica("reduce")
        if self._replica.armed_fault is not None:  # an all-reduce, even of values already here (faults.py)
            faults.fire(self._replica, "collective", "all_reduce", "strategy.reduce")
        if _nest.is_nested(value):
            return _nest.map_structure(lambda v: self.reduce(op, v, axis), value)  # as TF: leaf by leaf
        if isinstance(value, ReplicaVariable) and not _is_central(value):
            return _reduction.reduce_components(op, [as_array(c) for c in value._all_copies()], axis)
        if isinstance(value, LazyPerReplica) and axis is None and value.reducible():
            return all_reduce_held(self._replica, op, [value])[0]  # one all-reduce, no gather (lazy_merge.py)
        if isinstance(value, DistributedValues):
            return _reduction.reduce_components(op, [_unwrap(v) for v in value.values], axis)
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
        if _copies(value):
            comps: Any = value._all_copies()
        else:
            comps = value.values if isinstance(value, DistributedValues) else (value,)
        return _reduction.gather_components([_unwrap(c) for c in comps], axis)

    def run(self, fn: Callable[..., Any], args: Any = (), kwargs: Any = None, options: Any = None) -> Any:
        """Inside ``merge_fn``: run ``fn`` for this replica in its replica context."""
        if _context.get_replica_context() is not None:
            raise RuntimeError(
                "strategy.run was called inside a replica function (replica context); "
                "call it from the notebook (cross-replica context)"
            )
        args, kwargs = _nest.check_call_args(fn, args, kwargs)
        args = _select(args, self._replica.rank)
        kwargs = _select(kwargs, self._replica.rank)
        with _context.enter(self, self._replica.context):
            out = fn(*args, **kwargs)
        # Every replica runs merge_fn, so every replica is here: share the outputs.
        return _regroup_local(self._replica.exchange("run", out), self.num_replicas_in_sync)

    def experimental_distribute_values_from_function(self, value_fn: Callable[..., Any]) -> Any:

        n = self.num_replicas_in_sync
        values = [_nest.map_structure(convert_value, value_fn(ValueContext(r, n))) for r in range(n)]
        return regroup(values, PerReplica)  # a nest of PerReplica values, as TF

    def experimental_distribute_dataset(self, dataset: Any, options: Any = None) -> Any:

        return DistributedDataset(self, dataset, options)

    def __repr__(self) -> str:
        return f"<interdist strategy view: replica {self._replica.rank} of group {self._replica.group_id}>"
