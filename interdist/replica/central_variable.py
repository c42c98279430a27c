"""A central variable on a replica (CentralStorageStrategy) and the programs that make and write it.

``CentralReplicaVariable`` holds the value on the holder and only a name elsewhere: other
replicas read it by a message and send their updates there (central.py holds the state and the
messages). The program functions are what the notebook's strategy
(strategy/central_storage.py) and the worker ask replicas to run.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from interdist import _context
from interdist._convert import apply_op, convert_for_variable
from interdist._gpu import to_host
from interdist.protocol import VariableMeta
from interdist.replica.central import central_state, reduce_to_holder
from interdist.replica.variable import ReplicaVariable, emit_created, variable_class
from interdist.values.distributed import DistributedValues

if TYPE_CHECKING:
    from interdist.replica.replica import Replica


class CentralReplicaVariable(ReplicaVariable):
    """A central variable as one replica sees it: the value on the holder, a name elsewhere."""

    def __init__(self, replica: Replica, var_id: int, meta: VariableMeta, value: np.ndarray | None) -> None:
        self._replica = replica
        self.var_id = var_id
        self.meta = meta  # also shape, dtype and device (the parameter device)
        self.group_id = replica.group_id
        self._shape: tuple[int, ...] = tuple(meta["shape"])
        self._dtype: np.dtype[Any] = np.dtype(meta["dtype"])
        self._state = central_state(replica)
        self._tag = 0  # the epoch from which _value holds
        self._history: list[tuple[int, np.ndarray]] = []  # (epoch from which it held, value), holder only
        self._value: np.ndarray | None = None
        if self._state.is_holder:
            if value is None:
                raise ValueError(f"the holder of central variable {meta['name']!r} got no value")
            self._value = np.array(value, copy=True)
        self._state.variables[var_id] = self

    @property
    def raw(self) -> np.ndarray:  # type: ignore[override]  # read-only here: the value lives on the holder only
        if self._value is None:
            raise RuntimeError(
                f"replica {self._replica.rank} holds no copy of central variable "
                f"{self.meta['name']!r}: it lives on replica {self._state.holder}"
            )
        return self._value

    @property
    def _applies_updates(self) -> bool:
        """Whether updates are applied here (optimizers skip their work, and slots, elsewhere)."""
        return self._state.is_holder

    @property
    def name(self) -> str:
        return f"{self.meta['name']}:0"

    @property
    def shape(self) -> tuple[int, ...]:
        return self._shape

    @property
    def dtype(self) -> np.dtype[Any]:
        return self._dtype

    # -- reads -------------------------------------------------------------------
    def _at(self, epoch: int) -> np.ndarray:
        """The holder's value as it was after ``epoch`` updates of this program (under the lock)."""
        if self._tag <= epoch:
            assert self._value is not None
            return self._value
        for tag, old in reversed(self._history):
            if tag <= epoch:
                value: np.ndarray = old
                return value
        raise RuntimeError(f"central variable {self.meta['name']!r}: the value after update {epoch} is gone")

    def _current(self) -> np.ndarray:
        state = self._state
        if state.is_holder:
            return self.raw
        value = state.cache.get(self.var_id)
        if value is None:
            value = state.cache[self.var_id] = state.fetch(self)
        for op, v in state.op_writes.get(self.var_id, ()):  # this update's own writes, seen by its reads
            value = apply_op(op, value, v)
        return value

    def read_value(self) -> np.ndarray:
        return np.array(self._current(), copy=True)

    def __float__(self) -> float:
        return float(self._current())

    def __int__(self) -> int:
        return int(self._current())

    def __bool__(self) -> bool:
        return bool(self._current())

    def __len__(self) -> int:
        if not self._shape:
            raise TypeError("len() of unsized object")
        return int(self._shape[0])

    def _all_copies(self) -> tuple[np.ndarray, ...]:
        return (self.read_value(),)  # one copy: no collective

    # -- writes ------------------------------------------------------------------
    def _write(self, op: str, value: np.ndarray) -> None:
        state = self._state
        if not state.is_holder:
            state.op_writes.setdefault(self.var_id, []).append((op, value))
            return
        with state.cond:
            assert self._value is not None
            new = apply_op(op, self._value, value)
            target = state.epoch + 1
            if self._tag != target:  # keep the value a slower replica may still read
                self._history.append((self._tag, self._value))
                self._tag = target
            self._value = new
        self._replica.touched.add(self.var_id)

    def _local(self, op: str, value: Any) -> ReplicaVariable:
        v = convert_for_variable(to_host(value), self._dtype, self._shape, self.meta["name"])
        state = self._state
        if state.op_depth:
            self._write(op, v)
        else:
            with state.op():
                self._write(op, v)
        return self

    def _update(self, op: str, value: Any) -> ReplicaVariable:
        rank = self._replica.rank
        if isinstance(value, ReplicaVariable):
            value = value.read_value()
        if isinstance(value, DistributedValues):
            value = value._component(rank)
        if _context.current().replica_context is None:  # cross-replica: inside merge_fn or update
            return self._local(op, value)
        agg = self.meta["aggregation"]
        n = self._replica.world_size
        if agg == "NONE":
            if n > 1:
                raise ValueError(
                    "You must specify an aggregation method to update a variable in replica context "
                    f"(variable {self.meta['name']}, strategy CentralStorageStrategy)"
                )
            return self._local(op, value)
        if agg == "MEAN" and self._dtype.kind not in "fc":
            raise ValueError(
                "Cannot update non-float variables with tf.VariableAggregation.MEAN aggregation in replica "
                "context. Either change the variable dtype to float or update it in cross-replica context."
            )
        # The value lives in the parameter device's host memory: a GPU replica's part goes there.
        v = convert_for_variable(to_host(value), self._dtype, self._shape, self.meta["name"])
        (reduced,) = reduce_to_holder(self._replica, [v], agg)
        state = self._state
        with state.op():
            if reduced is not None:  # the holder
                self._write(op, reduced)
            else:
                state.op_writes[self.var_id] = []  # the holder changed it: read it anew
        return self

    def __repr__(self) -> str:
        if self._value is None:
            return (
                f"<interdist.Variable '{self.name}' shape={self.shape} dtype={self.dtype.name}, held by replica "
                f"{self._state.holder}>"
            )
        num = np.array2string(self._value, separator=", ") if self._value.ndim else repr(self._value.item())
        return f"<interdist.Variable '{self.name}' shape={self.shape} dtype={self.dtype.name}, numpy={num}>"


def make_replica_variable(replica: Replica, var_id: int, meta: VariableMeta, value: Any) -> ReplicaVariable:
    """A replica's variable object for ``meta`` (central variables have their own kind)."""
    if meta.get("kind") == "central":
        return variable_class(CentralReplicaVariable, meta)(replica, var_id, meta, value)
    return variable_class(ReplicaVariable, meta)(replica, var_id, meta, value)


def create_central_variable(replica: Replica, var_id: int, meta: VariableMeta, value: Any) -> None:
    var = variable_class(CentralReplicaVariable, meta)(replica, var_id, meta, value)
    replica.variables[var_id] = var
    if var._state.is_holder:
        emit_created(replica, var)


def assign_central_variable(replica: Replica, var_id: int, op: str, value: Any) -> None:
    """A cross-replica write from the notebook: only the holder gets the (checked) value."""
    if value is None:
        return  # not the holder: the end of this program is where every replica meets again
    with _context.enter(replica.view, None):
        replica.variables[var_id]._update(op, value)


def update_central_variable(replica: Replica, fn: Any, var: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """``extended.update`` from the notebook: ``fn`` runs once, on the holder."""
    if fn is None:
        return None
    with var._state.op(update=True), _context.enter(replica.view, None, update_replica_id=replica.rank):
        return fn(var, *args, **kwargs)
