"""``Strategy``'s variables: creating them, adopting those a run made, restoring them, and their metadata.

A variable made in ``strategy.scope()`` gets an id and its metadata (``VariableMeta``) here, and
one copy on each replica (``replica/programs.py``); its notebook handle (``values/distributed_variable.py``)
reads, assigns and updates it through these methods. When a replica's worker is replaced, the
variables are copied to it from a survivor (``_restore_replicas``). A mixin of ``Strategy``
(base.py), on the round trip of ``dispatch.py``; the other strategies override its hooks
(``central_storage.py``, ``parameter_server.py``).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator
from typing import Any, cast

import numpy as np

from interdist import _context
from interdist._convert import convert_for_variable
from interdist._reduction import reduce_arrays
from interdist.errors import WorkerLostError
from interdist.protocol import VARIABLE_KEY, CreatedVariable, VariableMeta
from interdist.reduce_op import ReduceOp
from interdist.replica import programs
from interdist.strategy.dispatch import ReplicaDispatch
from interdist.values.distributed import DistributedValues, Mirrored, PerReplica
from interdist.values.distributed_variable import (
    CentralVariable,
    DistributedVariable,
    MirroredVariable,
    SyncOnReadVariable,
    _Handle,
    variable_kind,
)
from interdist.values.tensor import ArrayValue
from interdist.values.variables import (
    Variable,
    VariableAggregation,
    VariableSynchronization,
    args_from_meta,
    check_mean_dtype,
    normalize_args,
    variable_meta,
)


class VariablesMixin(ReplicaDispatch):
    """The variables of a strategy: their ids and metadata in the notebook, their copies on the replicas."""

    _variable_class: type[DistributedVariable] = MirroredVariable

    # Set by ``Strategy.__init__`` (base.py).
    _var_ids: Iterator[int]
    _var_metas: dict[int, VariableMeta]
    _run_variables: list[Any]

    def _create_variable(
        self,
        initial_value: Any = None,
        trainable: bool | None = None,
        name: str | None = None,
        dtype: Any = None,
        synchronization: Any = VariableSynchronization.AUTO,
        aggregation: Any = None,
        shape: Any = None,
        **_: Any,
    ) -> Any:

        if _context.get_replica_context() is not None:
            raise NotImplementedError(
                "interdist creates distributed variables in strategy.scope() (cross-replica context); "
                "creating them inside strategy.run is not supported yet"
            )
        a = normalize_args(
            initial_value,
            name,
            trainable,
            dtype,
            synchronization,
            VariableAggregation.NONE if aggregation is None else aggregation,
        )
        if a["synchronization"] == VariableSynchronization.NONE and a["trainable"]:
            raise ValueError(
                "Synchronization value NONE is not supported for trainable variables in a "
                f"distribution strategy (variable {a['name']!r}); set trainable=False"
            )
        if a["synchronization"] == VariableSynchronization.AUTO and self._kind != "central_storage":
            a["synchronization"] = VariableSynchronization.ON_WRITE
        check_mean_dtype(a)
        var_id = next(self._var_ids)
        kind = self._variable_kind(a)
        meta = cast(VariableMeta, variable_meta(a, kind, self._kind))  # variable_meta is typed dict[str, Any]
        self._create_on_replicas(var_id, meta, a["value"])
        self._var_metas[var_id] = meta
        cls: Any = {"mirrored": self._variable_class, "sync_on_read": SyncOnReadVariable, "central": CentralVariable}[
            kind
        ]
        return cls(self, var_id, a, self._variable_devices(kind))

    def _forget_variable(self, var_id: int) -> None:
        """A variable's handle was collected: its copies go with the next program (called by a finalizer)."""

        group = getattr(self, "_group", None)
        if group is None or group.closed:
            return
        self._var_metas.pop(var_id, None)
        for rank in range(self.num_replicas_in_sync):
            group.queue_release(rank, f"{VARIABLE_KEY}{var_id}")

    def _adopt_run_variables(self, created: list[CreatedVariable]) -> None:
        """Handles for the variables a replica function created (one per variable, as TF's eager run)."""
        for c in created:
            if self._variable_by_id(c["var_id"]) is not None:
                continue
            meta = c["meta"]
            a = args_from_meta(cast("dict[str, Any]", meta), c["shape"], c["dtype"])  # typed dict[str, Any]
            self._var_metas[c["var_id"]] = meta
            cls: Any = {"mirrored": self._variable_class, "sync_on_read": SyncOnReadVariable}[meta["kind"]]
            # Kept until the step's results are decoded (they may be this variable); after that it
            # lives as long as the notebook holds it, as TF's variable lives with its object.
            self._run_variables.append(cls(self, c["var_id"], a, self._variable_devices(meta["kind"])))

    def _create_on_replicas(self, var_id: int, meta: VariableMeta, value: np.ndarray) -> None:
        """Make the replicas' copies (a hook: central storage keeps one, strategy/central_storage.py)."""
        self._system(programs.create_variable, var_id, meta, value)

    def _live_variables(self) -> list[Any]:
        """The variables created in this strategy's scope that still exist, in creation order."""
        return [v for v in (self._variable_by_id(i) for i in sorted(self._var_metas)) if v is not None]

    def _restore_replicas(self, ranks: list[int]) -> None:
        """After a worker restart: give the new replicas the variables, copied from a survivor."""
        self._lease.addresses = list(self._group.addresses)
        survivors = [r for r in range(self.num_replicas_in_sync) if r not in ranks]
        if not survivors:
            raise WorkerLostError("every replica of this strategy was lost; its variables are gone")
        source = survivors[0]
        restored = []
        for var_id, meta in list(self._var_metas.items()):
            if self._variable_by_id(var_id) is None:
                continue
            value = self._group.read_variable(source, var_id)
            if meta["kind"] == "sync_on_read" and meta["aggregation"] == "SUM":
                value = np.zeros_like(value)  # a lost replica's share of a sum is lost, not duplicated
            for r in ranks:
                self._group.restore_variable(r, var_id, meta, value)
            restored.append(meta["name"])
        warnings.warn(
            f"replica(s) {ranks} of {self!r} were restarted on new workers; {len(restored)} variable(s) were copied "
            f"there from replica {source}. Values the lost replicas held (run results, dataset iterators) are gone.",
            UserWarning,
            stacklevel=4,
        )

    def _variable_kind(self, args: dict[str, Any]) -> str:
        return variable_kind(args["synchronization"])

    def _variable_devices(self, kind: str) -> list[str]:
        return list(self._devices)

    def _read_copy(self, var: Any, rank: int) -> Any:
        return self._group.read_variable(rank, var._var_id)

    def _read_variable(self, var: Any) -> Any:
        # In the notebook a strategy's variables are always read in cross-replica context.
        if isinstance(var, SyncOnReadVariable):
            agg = var.aggregation.name
            if agg == "NONE":
                raise ValueError(
                    "Could not convert from `tf.VariableAggregation` VariableAggregation.NONE to "
                    "`tf.distribute.ReduceOp` type (reading a sync-on-read variable in cross-replica "
                    "context needs SUM, MEAN or ONLY_FIRST_REPLICA aggregation)"
                )
            if agg in ("SUM", "MEAN"):
                return reduce_arrays([np.asarray(c) for c in var.values], ReduceOp(agg))
        return self._read_copy(var, 0)

    def _assign_variable(self, var: Any, op: str, value: Any) -> Any:

        if _context.get_replica_context() is not None and not _context.is_default(_context.get_strategy()):
            raise RuntimeError("a distributed variable was assigned in the notebook inside a replica context")
        if isinstance(var, SyncOnReadVariable) and var.aggregation.name == "SUM" and op != "assign":
            raise ValueError(
                f"SyncOnReadVariable does not support `{op}` in cross-replica context when "
                "aggregation is set to `tf.VariableAggregation.SUM`."
            )
        n = self.num_replicas_in_sync
        if isinstance(value, PerReplica) and n > 1:
            # TF 2.21 (unlike its docs) gives each copy its replica's component; the copies may diverge.
            parts = [np.asarray(c) for c in self._select_values(value)]
        else:
            if isinstance(value, DistributedValues):
                value = value.values[0]
            parts = [np.asarray(value) if isinstance(value, (Variable, ArrayValue)) else value] * n
        # Every replica's value is checked before any replica changes.
        checked = [convert_for_variable(p, var.dtype, var.shape, var._name) for p in parts]
        after = self._system(programs.assign_variable, per_rank=[(var._var_id, op, c) for c in checked])
        if isinstance(var, MirroredVariable) and n > 1:
            # TF returns the values as they are right after this assign (a snapshot), not the live variable.
            return Mirrored([self._remote(r, m) for r, m in enumerate(after)], self)
        return None

    def _update(
        self, var: Any, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any], group: bool
    ) -> Any:
        if not self.extended.variable_created_in_scope(var):
            raise ValueError(f"update() requires a variable created in this strategy's scope, but got {var!r}")
        per_rank = [self._select(r, (var, args, kwargs)) for r in range(self.num_replicas_in_sync)]
        results = self._group.execute(
            _update_program, [((fn, *p), {}) for p in per_rank], system=True, what=f"update of {var._name}"
        )
        out = self._regroup(results)
        if not group and self._kind == "central_storage":
            return (out.values[0] if isinstance(out, DistributedValues) else out,)  # one copy, one result
        if not group:
            # One result per replica (TF's update_regroup with group=False).
            if isinstance(out, PerReplica):
                return tuple(out.values)
            if isinstance(out, _Handle):
                return (
                    tuple(out._values)
                    if len(out._values) == self.num_replicas_in_sync
                    else (out,) * self.num_replicas_in_sync
                )
            return (out,) * self.num_replicas_in_sync
        return out


def _update_program(
    replica: Any, fn: Callable[..., Any], var: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Any:
    with _context.enter(replica.view, None, update_replica_id=replica.rank):
        return fn(var, *args, **kwargs)
