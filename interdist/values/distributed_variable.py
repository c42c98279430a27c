"""Handles in the notebook to variables whose copies live on the replicas."""

from __future__ import annotations

import math
import weakref
from typing import Any

import numpy as np

from interdist import _context, autodiff
from interdist.protocol import pickling_target, register_variable, resolve_variable
from interdist.values import reprs
from interdist.values.distributed import DistributedValues, Mirrored, PerReplica
from interdist.values.tensor import ArrayValue
from interdist.values.variables import (
    ForeignVariable,
    Variable,
    VariableAggregation,
    VariableSynchronization,
    plain_snapshot,
)


# ArrayValue before Variable: a component reads from its worker like any remote value (and, being a
# Variable, passes for one: ``isinstance(c, interdist.Variable)``, ``assign``, ``trainable``...).
class VariableComponent(ArrayValue, Variable):  # type: ignore[metaclass]  # numpy stub: the mixin is an ABC (see Variable)
    """One replica's copy of a distributed variable: a variable of its own, as TF's components are.

    Reads come from its worker; ``assign``/``assign_add``/``assign_sub`` change this copy only (the
    copies of a ``MirroredVariable`` then differ, and the variable reads as its first copy).
    """

    def __init__(self, variable: _Handle, rank: int, device: str) -> None:
        self._variable = variable
        self._rank = rank
        self._device = device
        self._name = variable._name
        self._trainable = variable._trainable
        self._synchronization = variable._synchronization
        self._aggregation = variable._aggregation

    def _get(self) -> Any:
        return self._variable._strategy._read_copy(self._variable, self._rank)

    @property
    def device(self) -> str:
        return self._device

    @property
    def name(self) -> str:
        base = self._variable._name
        return f"{base}:0" if self._rank == 0 else f"{base}/replica_{self._rank}:0"

    @property
    def shape(self) -> tuple[int, ...]:
        return self._variable._shape

    @property
    def dtype(self) -> np.dtype[Any]:
        return self._variable._dtype

    def read_value(self) -> np.ndarray:
        return np.array(self._get(), copy=True)

    def _peek(self, limit: int) -> tuple[tuple[int, ...] | None, str | None, Any]:
        # A copy is read from its worker for a repr only when small (values/reprs.py).
        if math.prod(self.shape) <= limit:
            a = np.asarray(self._get())
            return a.shape, a.dtype.name, a
        return self.shape, self.dtype.name, reprs.NOT_READ

    def value(self) -> np.ndarray:
        return self.read_value()

    def numpy(self) -> np.ndarray:
        return self.read_value()

    def _apply(self, op: str, value: Any) -> Any:
        self._variable._strategy._assign_copy(self._variable, self._rank, op, self._check(value))
        return self

    def __hash__(self) -> int:
        return id(self)

    def __repr__(self) -> str:
        a = np.asarray(self._get())
        num = np.array2string(a, separator=", ") if a.ndim else repr(a.item())
        return f"<interdist.Variable '{self.name}' shape={a.shape} dtype={a.dtype.name}, numpy={num}>"


class _Handle:
    """What every notebook-side handle to a worker-held variable does (mixed in first)."""

    _strategy: Any
    _values: tuple[VariableComponent, ...]
    kind: str

    def __init__(self, strategy: Any, var_id: int, args: dict[str, Any], devices: list[str]) -> None:
        self._strategy = strategy
        self._var_id = var_id
        self._name: str = args["name"]
        self._trainable: bool = args["trainable"]
        self._synchronization: VariableSynchronization = args["synchronization"]
        self._aggregation: VariableAggregation = args["aggregation"]
        self._shape = tuple(args["value"].shape)
        self._dtype: np.dtype[Any] = args["value"].dtype
        self._values = tuple(VariableComponent(self, r, d) for r, d in enumerate(devices))
        self._id = var_id
        register_variable(strategy._group_id, var_id, self)
        # When this handle is collected, the workers drop their copies with the next program.
        weakref.finalize(self, _forget, weakref.ref(strategy), var_id)

    def __reduce__(self) -> Any:
        target = pickling_target()
        if target is not None and target[0] != self._strategy._group_id:
            # Used in another strategy's replica function: OneDevice's variables are plain ones there
            # (written once per replica, as in TF); distributed ones can be converted, not written.
            value = np.asarray(self.read_value())
            central = isinstance(self, CentralVariable)  # TF's AggregatingVariable: read_value works there
            if isinstance(self, OneDeviceVariable) and not central:
                return plain_snapshot(self, value)
            group, copies = self._strategy._group_id, target[1] if central else len(self._values)
            return (ForeignVariable, (group, self._var_id, self._name, value, copies, repr(self._strategy), central))
        return (resolve_variable, (self._strategy._group_id, self._var_id))

    def __interdist_fingerprint__(self) -> Any:
        """What this handle pickles to (``fn_pickle``'s cache): the reference ``(group, id)``, which never
        changes, unless it is pickled for another strategy's replicas (a snapshot of its value: None)."""
        target = pickling_target()
        if target is not None and target[0] != self._strategy._group_id:
            return None
        return ("variable", self._strategy._group_id, self._var_id)

    @property
    def shape(self) -> tuple[int, ...]:
        return self._shape

    @property
    def dtype(self) -> np.dtype[Any]:
        return self._dtype

    @property
    def device(self) -> str:
        return self._values[0].device

    @property
    def distribute_strategy(self) -> Any:
        return self._strategy

    def read_value(self) -> np.ndarray:
        return np.asarray(self._strategy._read_variable(self))

    def numpy(self) -> np.ndarray:
        return self.read_value()

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        a = self.read_value()
        return a.astype(dtype) if dtype is not None else a

    def __array_ufunc__(self, ufunc: Any, method: str, *inputs: Any, **kwargs: Any) -> Any:
        if autodiff.recording():  # on a GradientTape: the read is recorded
            return autodiff.apply_ufunc(ufunc, method, inputs, kwargs)
        conv = tuple(np.asarray(x) if isinstance(x, (Variable, ArrayValue, Mirrored)) else x for x in inputs)
        return getattr(ufunc, method)(*conv, **kwargs)

    def _apply(self, op: str, value: Any) -> Any:
        snapshot = self._strategy._assign_variable(self, op, value)
        return self if snapshot is None else snapshot

    def __repr__(self) -> str:
        body = ",\n".join(f"  {i}: {v!r}" for i, v in enumerate(self._values))
        return f"{type(self).__name__}:{{\n{body}\n}}"

    def _repr_html_(self) -> str:
        # Mirrored copies that differ are marked (when small enough to read: values/reprs.py).
        title = f"{type(self).__name__} {self._name!r}"
        if self._synchronization == VariableSynchronization.ON_READ:
            title += f" (aggregation {self._aggregation.name})"
        return reprs.values_html(self, self._values, mirrored=self.kind == "mirrored", title=title)


class DistributedVariable(_Handle, DistributedValues, Variable):
    """A variable with a copy on each replica (or one, for central storage)."""

    kind = "mirrored"

    def __float__(self) -> float:
        # TF 2.21's distributed variables do not convert to Python numbers; use np.asarray(v).
        raise TypeError(f"float() argument must be a string or a real number, not '{type(self).__name__}'")

    def __int__(self) -> int:
        raise TypeError(
            f"int() argument must be a string, a bytes-like object or a real number, not '{type(self).__name__}'"
        )


class OneDeviceVariable(_Handle, Variable):
    """A regular (not distributed) variable of ``OneDeviceStrategy``, held by its one worker."""

    kind = "mirrored"

    def __repr__(self) -> str:
        return repr(self._values[0])


# Mirrored's NDArrayOperatorsMixin is an ABC in numpy's stub only (see Variable).
class MirroredVariable(DistributedVariable, Mirrored):  # type: ignore[metaclass]
    """Copies kept equal by applying the same (aggregated) update to each.

    What ``Variable(...)`` makes in a ``MirroredStrategy``'s scope (``synchronization`` ``AUTO`` or
    ``ON_WRITE``). An update in replica context is first combined across the replicas by the
    variable's ``aggregation``, then applied to every copy.

    Examples
    --------
    >>> import interdist as idist, numpy as np
    >>> with idist.MirroredStrategy(["CPU:0", "CPU:1"]) as s:
    ...     with s.scope():
    ...         v = idist.Variable(np.float32(0.0), aggregation=idist.VariableAggregation.SUM)
    ...     _ = s.run(lambda: v.assign_add(np.float32(1.0)))  # each replica adds 1: the SUM, 2, goes to each copy
    ...     type(v).__name__, [float(c) for c in idist.debug.replica_values(s, v)]
    ('MirroredVariable', [2.0, 2.0])
    """

    kind = "mirrored"


class SyncOnReadVariable(DistributedVariable):
    """Copies updated locally by each replica, aggregated when read in cross-replica context.

    What ``Variable(..., synchronization=VariableSynchronization.ON_READ)`` makes in a strategy's
    scope; a metric's state is one. In replica context a read gives the replica's own copy.

    Examples
    --------
    >>> import interdist as idist
    >>> with idist.MirroredStrategy(["CPU:0", "CPU:1"]) as s:
    ...     with s.scope():
    ...         count = idist.Variable(
    ...             0,
    ...             synchronization=idist.VariableSynchronization.ON_READ,
    ...             aggregation=idist.VariableAggregation.SUM,
    ...         )
    ...     _ = s.run(lambda: count.assign_add(idist.get_replica_context().replica_id_in_sync_group + 1))
    ...     type(count).__name__, [int(c) for c in idist.debug.replica_values(s, count)], int(count.numpy())
    ('SyncOnReadVariable', [1, 2], 3)
    """

    kind = "sync_on_read"


class CentralVariable(OneDeviceVariable):
    """A variable of ``CentralStorageStrategy``: one copy, on the parameter device.

    Only the worker of the parameter device (or replica 0's worker when the parameter
    device computes nothing) holds the value; the notebook reads it from there, and the
    other replicas read it at use (``replica/variable.py``).
    """

    kind = "central"


def _forget(strategy_ref: Any, var_id: int) -> None:
    strategy = strategy_ref()
    if strategy is not None:
        strategy._forget_variable(var_id)  # only queues: a finalizer must not talk to the network


def variable_kind(synchronization: VariableSynchronization) -> str:
    return "sync_on_read" if synchronization == VariableSynchronization.ON_READ else "mirrored"


__all__ = [
    "CentralVariable",
    "DistributedVariable",
    "MirroredVariable",
    "PerReplica",
    "SyncOnReadVariable",
    "VariableAggregation",
    "VariableComponent",
    "VariableSynchronization",
    "_context",
]
