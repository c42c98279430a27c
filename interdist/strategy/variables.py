"""``Strategy``'s variables: creating them, adopting those a run made, restoring them, and their metadata.

A variable made in ``strategy.scope()`` gets an id and its metadata (``VariableMeta``) here, and
one copy on each replica (``replica/programs.py``); its notebook handle (``values/distributed_variable.py``)
reads, assigns and updates it through these methods. When a replica's worker is replaced, the
variables are copied to it from a survivor (``_restore_replicas``, with the check and the resync of the
copies after a fault in ``variable_repair.py``, a base of this mixin). A mixin of ``Strategy``
(base.py), on the round trip of ``dispatch.py``; the other strategies override its hooks
(``central_storage.py``, ``parameter_server.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, cast

import numpy as np

from interdist import _context, _gpu, _nest
from interdist._convert import convert_for_variable, same_object_across
from interdist._reduction import reduce_arrays
from interdist.protocol import VARIABLE_KEY, CreatedVariable, ValueMeta, VariableMeta, VarRef
from interdist.reduce_op import ReduceOp
from interdist.replica import programs
from interdist.replica.variable import UnreadVariable
from interdist.strategy.variable_repair import VariableRepairMixin
from interdist.values.distributed import DistributedValues, Mirrored, PerReplica
from interdist.values.distributed_variable import (
    CentralVariable,
    DistributedVariable,
    MirroredVariable,
    SyncOnReadVariable,
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


class VariablesMixin(VariableRepairMixin):
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
        if a["synchronization"] == VariableSynchronization.AUTO and self._kind not in ("central_storage", "one_device"):
            # TF 2.21: a MirroredStrategy's variable reports ON_WRITE; OneDevice and CentralStorage keep AUTO.
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
            cls: Any = {
                "mirrored": self._variable_class,
                "sync_on_read": SyncOnReadVariable,
                "central": CentralVariable,
            }[meta["kind"]]
            # Kept until the step's results are decoded (they may be this variable); after that it
            # lives as long as the notebook holds it, as TF's variable lives with its object.
            self._run_variables.append(cls(self, c["var_id"], a, self._variable_devices(meta["kind"])))

    def _create_on_replicas(self, var_id: int, meta: VariableMeta, value: np.ndarray) -> None:
        """Make the replicas' copies (a hook: central storage keeps one, strategy/central_storage.py)."""
        self._system(programs.create_variable, var_id, meta, value)

    def _live_variables(self) -> list[Any]:
        """The variables created in this strategy's scope that still exist, in creation order."""
        return [v for v in (self._variable_by_id(i) for i in sorted(self._var_metas)) if v is not None]

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

    def _assign_copy(self, var: Any, rank: int, op: str, value: np.ndarray) -> None:
        """A write to one replica's copy only (TF: assigning a component of a distributed variable)."""
        if _context.get_replica_context() is not None and not _context.is_default(_context.get_strategy()):
            raise RuntimeError("a distributed variable's copy was assigned in the notebook inside a replica context")
        n = self.num_replicas_in_sync
        self._system(_assign_copy_program, per_rank=[(var._var_id, op, value if r == rank else None) for r in range(n)])

    def _update(
        self, var: Any, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any], group: bool
    ) -> Any:
        if not self.extended.variable_created_in_scope(var):
            raise ValueError(f"update() requires a variable created in this strategy's scope, but got {var!r}")
        n = self.num_replicas_in_sync
        per_rank = [self._select(r, (var, args, kwargs)) for r in range(n)]
        results = self._group.execute(
            _update_program, [((fn, *p), {}) for p in per_rank], system=True, what=f"update of {var._name}"
        )
        # Each reply: (fn's result, with assigns' results as values, and which leaves were assigns).
        unread = [m == "1" for m in str(_decode_plain(results[0][1]))]
        flat = [_nest.flatten(r[0]) for r in results]

        def regroup(i: int, metas: list[Any]) -> Any:
            """TF's ``regroup(..., Mirrored)`` of one leaf of fn's results."""
            if unread[i]:  # an assign's result: TF's _UnreadVariable, one per copy
                return var._values[0] if n == 1 else Mirrored(list(var._values[:n]), self)
            decoded = [self._decode_leaf(r, m) for r, m in enumerate(metas)]
            d0 = decoded[0]
            if n == 1 or all(d is d0 for d in decoded) or same_object_across(decoded):
                return d0
            return Mirrored(decoded, self)

        def grouped(i: int, metas: list[Any]) -> Any:
            """TF's ``update_regroup(group=True)``: tensors as a ``Mirrored``, other values as nothing."""
            if unread[i] and n > 1:
                return Mirrored([self._decode_leaf(r, m) for r, m in enumerate(metas)], self)
            leaf = regroup(i, metas)
            if type(leaf) is Mirrored and not all(isinstance(m, ValueMeta) and m.shape is not None for m in metas):
                return None  # TF groups non-tensor values into an op: None in eager mode
            return leaf

        leaves = []
        for i in range(len(flat[0])):
            metas = [f[i] for f in flat]
            if group:
                leaves.append(grouped(i, metas))
            else:
                leaf = regroup(i, metas)
                leaves.append(tuple(leaf.values) if isinstance(leaf, DistributedValues) else (leaf,))
        return _nest.pack_sequence_as(results[0][0], leaves)

    def _decode_leaf(self, rank: int, m: Any) -> Any:
        if m is None:
            return None
        if isinstance(m, VarRef):
            return self._variable_by_id(m.var_id)
        if m.shape is None:
            return m.value
        return self._remote(rank, m)


def _decode_plain(m: Any) -> Any:
    return m.value if isinstance(m, ValueMeta) else m


def _assign_copy_program(replica: Any, var_id: int, op: str, value: Any) -> None:
    if value is not None:  # only the copy's own replica writes
        replica.variables[var_id]._local(op, value)


def _update_program(
    replica: Any, fn: Callable[..., Any], var: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Any:
    with _context.enter(replica.view, None, update_replica_id=replica.rank):
        out = fn(var, *args, **kwargs)
    # An assign's result (TF's _UnreadVariable) goes back as its value, marked, so that the notebook
    # tells it from the variable itself.
    leaves = _nest.flatten(out)
    marks = "".join("1" if isinstance(x, UnreadVariable) else "0" for x in leaves)
    values = [_gpu.host_copy(x.raw) if isinstance(x, UnreadVariable) else x for x in leaves]
    return _nest.pack_sequence_as(out, values), marks
