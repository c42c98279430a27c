"""A variable's copy on one replica, with TF's aggregation rules for writes and reads."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.lib.mixins import NDArrayOperatorsMixin

from .. import _context
from .._convert import as_array
from ..collectives.base import reduce_arrays
from ..reduce_op import ReduceOp
from ..values.distributed import DistributedValues
from ..values.variables import _maybe

if TYPE_CHECKING:
    from .replica import Replica


def convert_for_variable(value: Any, dtype: np.dtype[Any], shape: tuple[int, ...], name: str) -> np.ndarray:
    """``value`` as the variable's dtype and shape, or the error TF gives."""
    if isinstance(value, (np.ndarray, np.generic)) and value.dtype != dtype and value.dtype.kind in "fc":
        # Values that carry a dtype must match, as TF's convert_to_tensor(value, dtype) requires.
        raise ValueError(f"Tensor conversion requested dtype {dtype.name} for a value of dtype {value.dtype.name} "
                         f"(assigning to variable {name})")
    a = as_array(value)
    if a.dtype != dtype:
        if a.dtype.kind == "f" and dtype.kind in "iub":
            raise TypeError(f"Cannot convert {value!r} of dtype {a.dtype.name} to the dtype {dtype.name} of "
                            f"variable {name}")
        if a.dtype.kind in "c" and dtype.kind != "c":
            raise TypeError(f"Cannot convert a complex value to the dtype {dtype.name} of variable {name}")
        a = a.astype(dtype)
    if a.shape != tuple(shape):
        raise ValueError(f"Shapes {tuple(shape)} and {a.shape} are incompatible (assigning to variable {name})")
    return a


def apply_op(op: str, current: np.ndarray, value: np.ndarray) -> np.ndarray:
    if op == "assign":
        return np.array(value, copy=True)
    if op == "assign_add":
        return np.asarray(current + value, dtype=current.dtype)
    if op == "assign_sub":
        return np.asarray(current - value, dtype=current.dtype)
    raise ValueError(f"unknown variable update {op!r}")


class ReplicaVariable(NDArrayOperatorsMixin):
    """One replica's copy of a distributed variable (what a replica function sees)."""

    def __init__(self, replica: Replica, var_id: int, meta: dict[str, Any], value: np.ndarray) -> None:
        self._replica = replica
        self.var_id = var_id
        self.meta = meta  # name, trainable, synchronization, aggregation, kind
        self.raw = value
        self.group_id = replica.group_id

    def __reduce__(self) -> Any:
        from .resolve import resolve_variable

        return (resolve_variable, (self.group_id, self.var_id))

    # -- attributes ----------------------------------------------------------
    @property
    def name(self) -> str:
        base = self.meta["name"]
        return f"{base}:0" if self._replica.rank == 0 else f"{base}/replica_{self._replica.rank}:0"

    @property
    def device(self) -> str:
        return str(self.meta.get("device") or self._replica.device)

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.raw.shape)

    @property
    def dtype(self) -> np.dtype[Any]:
        return self.raw.dtype

    @property
    def trainable(self) -> bool:
        return bool(self.meta["trainable"])

    @property
    def aggregation(self) -> Any:
        from ..values.variables import VariableAggregation

        return VariableAggregation[self.meta["aggregation"]]

    @property
    def synchronization(self) -> Any:
        from ..values.variables import VariableSynchronization

        return VariableSynchronization[self.meta["synchronization"]]

    @property
    def _sync_on_read(self) -> bool:
        return self.meta["kind"] == "sync_on_read"

    # -- reads ---------------------------------------------------------------
    def read_value(self) -> np.ndarray:
        entry = _context.current()
        if self._sync_on_read and entry.replica_context is None and entry.update_replica_id is None:
            agg = self.meta["aggregation"]
            if agg == "NONE":
                raise ValueError("Could not convert from `tf.VariableAggregation` VariableAggregation.NONE to "
                                 "`tf.distribute.ReduceOp` type")
            if agg in ("SUM", "MEAN"):
                return reduce_arrays(list(self._all_copies()), ReduceOp(agg))
        return np.array(self.raw, copy=True)

    def value(self) -> np.ndarray:
        return self.read_value()

    def numpy(self) -> np.ndarray:
        return self.read_value()

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        a = self.read_value()
        return a.astype(dtype) if dtype is not None else a

    def __array_ufunc__(self, ufunc: Any, method: str, *inputs: Any, **kwargs: Any) -> Any:
        conv = tuple(x.read_value() if isinstance(x, ReplicaVariable) else x for x in inputs)
        return getattr(ufunc, method)(*conv, **kwargs)

    def __float__(self) -> float:
        return float(self.raw)

    def __int__(self) -> int:
        return int(self.raw)

    def __bool__(self) -> bool:
        return bool(self.raw)

    def __getitem__(self, item: Any) -> Any:
        return self.read_value()[item]

    def __len__(self) -> int:
        return len(self.raw)

    def __hash__(self) -> int:
        return id(self)

    def _all_copies(self) -> tuple[np.ndarray, ...]:
        """Every replica's copy (a collective: all replicas call it in step)."""
        return tuple(np.asarray(c) for c in self._replica.exchange("read_variable", self.raw, self.raw.nbytes))

    # -- writes --------------------------------------------------------------
    def assign(self, value: Any, use_locking: Any = None, name: Any = None, read_value: bool = True) -> Any:
        return _maybe(read_value, self._update("assign", value))

    def assign_add(self, delta: Any, use_locking: Any = None, name: Any = None, read_value: bool = True) -> Any:
        return _maybe(read_value, self._update("assign_add", delta))

    def assign_sub(self, delta: Any, use_locking: Any = None, name: Any = None, read_value: bool = True) -> Any:
        return _maybe(read_value, self._update("assign_sub", delta))

    def _local(self, op: str, value: Any) -> ReplicaVariable:
        v = convert_for_variable(value, self.raw.dtype, self.raw.shape, self.meta["name"])
        self.raw = apply_op(op, self.raw, v)
        self._replica.touched.add(self.var_id)
        return self

    def _update(self, op: str, value: Any) -> ReplicaVariable:
        rank = self._replica.rank
        if isinstance(value, ReplicaVariable):
            value = value.read_value()
        entry = _context.current()
        if entry.replica_context is None:  # cross-replica (inside merge_fn or update)
            if isinstance(value, DistributedValues):
                value = value._component(rank)  # TF 2.21: each copy gets its replica's component
            if entry.update_replica_id is not None:
                return self._local(op, value)
            if self._sync_on_read:
                return self._sync_on_read_cross_replica(op, value)
            return self._local(op, value)
        # replica context
        if isinstance(value, DistributedValues):
            value = value._component(rank)
        if self._sync_on_read:
            return self._local(op, value)
        agg = self.meta["aggregation"]
        if agg == "NONE":
            if self.meta.get("strategy_kind") == "central_storage" and self._replica.world_size > 1:
                raise ValueError(
                    "You must specify an aggregation method to update a variable in replica context "
                    f"(variable {self.meta['name']}, strategy CentralStorageStrategy)")
            if self._replica.world_size > 1 and self.var_id not in self._replica.diverged:
                self._replica.diverged.add(self.var_id)
                self._replica.warnings.append(
                    f"Variable {self.meta['name']!r} (aggregation NONE) was updated in replica context: each "
                    "replica changed only its own copy, and the copies may now differ (as in TensorFlow). "
                    "Give the variable an aggregation (SUM, MEAN, ONLY_FIRST_REPLICA) to keep them in sync.")
            return self._local(op, value)
        v = as_array(value)
        if agg == "MEAN" and self.raw.dtype.kind not in "fc":
            raise ValueError(
                "Cannot update non-float variables with tf.VariableAggregation.MEAN aggregation in replica "
                "context. Either change the variable dtype to float or update it in cross-replica context.")
        if agg == "ONLY_FIRST_REPLICA":
            v = self._replica.collective(
                "broadcast", v.nbytes, lambda s, q, w: self._replica.collectives.broadcast(s, q, v, 0, w))
        else:
            v = convert_for_variable(v, self.raw.dtype, self.raw.shape, self.meta["name"]) \
                if v.dtype.kind == "f" and self.raw.dtype.kind == "f" else v
            (v,) = self._replica.collective(
                "all_reduce", v.nbytes,
                lambda s, q, w: self._replica.collectives.all_reduce(s, q, [v], ReduceOp(agg), w))
        return self._local(op, v)

    def _sync_on_read_cross_replica(self, op: str, value: Any) -> ReplicaVariable:
        agg = self.meta["aggregation"]
        if agg == "SUM":
            if op != "assign":
                raise ValueError(
                    f"SyncOnReadVariable does not support `{op}` in cross-replica context when aggregation "
                    "is set to `tf.VariableAggregation.SUM`.")
            a = as_array(value)
            value = np.asarray(a / self._replica.world_size, dtype=self.raw.dtype)
        return self._local(op, value)

    def __repr__(self) -> str:
        return (f"<interdist.Variable '{self.name}' shape={self.shape} dtype={self.dtype.name}, "
                f"numpy={np.array2string(self.raw, separator=', ') if self.raw.ndim else self.raw.item()!r}>")
