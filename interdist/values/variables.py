"""Variables: a plain one in the notebook, and handles to distributed ones on the replicas.

``interdist.Variable(...)`` asks the current strategy to create the variable:
outside any scope it is a plain variable in the notebook; inside a strategy's
scope it is a ``MirroredVariable`` or ``SyncOnReadVariable`` whose copies live
on the replicas' workers.

TF's enums and the description of a distributed variable are in ``aggregation.py``, another strategy's
variable (``ForeignVariable``) in ``foreign.py``; both are re-exported here.
"""

from __future__ import annotations

import copyreg
import itertools
from typing import Any

import numpy as np
from numpy.lib.mixins import NDArrayOperatorsMixin

from interdist import _context, autodiff
from interdist._convert import apply_op, as_array, convert_for_variable
from interdist.autodiff import Differentiable
from interdist.protocol import (
    current_resolving,
    pickling_target,
    register_plain,
    registered_plain,
)
from interdist.values.aggregation import VariableAggregation as VariableAggregation  # (this module's API too)
from interdist.values.aggregation import VariableSynchronization as VariableSynchronization
from interdist.values.aggregation import _enum
from interdist.values.aggregation import args_from_meta as args_from_meta
from interdist.values.aggregation import check_mean_dtype as check_mean_dtype
from interdist.values.aggregation import variable_meta as variable_meta
from interdist.values.distributed import DistributedValues, PerReplica
from interdist.values.foreign import ForeignVariable as ForeignVariable
from interdist.values.tensor import ArrayValue


def _maybe(read_value: bool, variable: Any) -> Any:
    """TF's ``assign(..., read_value=False)`` returns nothing to read (None in eager mode)."""
    return variable if read_value else None


_ids = itertools.count(1)


class _VariableMeta(type):
    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        if cls is Variable:
            strategy = _context.get_strategy()
            creator = getattr(strategy, "_create_variable", None)
            if creator is not None and not _context.is_default(strategy):
                return creator(*args, **kwargs)
        return super().__call__(*args, **kwargs)


def normalize_args(
    initial_value: Any, name: str | None, trainable: bool | None, dtype: Any, synchronization: Any, aggregation: Any
) -> dict[str, Any]:
    """Check a variable's constructor arguments the way TF does; the value as an array."""
    if initial_value is None:
        raise ValueError("initial_value must be specified.")
    if callable(initial_value):
        initial_value = initial_value()
    if isinstance(initial_value, (Variable, ArrayValue, DistributedValues)):
        initial_value = np.asarray(initial_value)
    sync = _enum(VariableSynchronization, synchronization, "synchronization")
    agg = _enum(VariableAggregation, aggregation, "aggregation")
    if trainable is None:
        trainable = sync != VariableSynchronization.ON_READ
    value = np.array(as_array(initial_value, dtype=np.dtype(dtype) if dtype is not None else None), copy=True)
    return {
        "value": value,
        "name": name or "Variable",
        "trainable": bool(trainable),
        "synchronization": sync,
        "aggregation": agg,
    }


# numpy's stub declares NDArrayOperatorsMixin an ABC; at runtime its metaclass is ``type``, _VariableMeta's base.
class Variable(Differentiable, NDArrayOperatorsMixin, metaclass=_VariableMeta):  # type: ignore[metaclass]
    """A variable (``tf.Variable``); distributed when created in a strategy's scope.

    >>> v = Variable(1.0)
    >>> _ = v.assign_add(2.0)
    >>> float(v), v.dtype.name
    (3.0, 'float32')
    """

    def __init__(
        self,
        initial_value: Any = None,
        trainable: bool | None = None,
        name: str | None = None,
        dtype: Any = None,
        synchronization: Any = VariableSynchronization.AUTO,
        aggregation: Any = VariableAggregation.NONE,
        shape: Any = None,
    ) -> None:
        a = normalize_args(initial_value, name, trainable, dtype, synchronization, aggregation)
        self._value: np.ndarray = a["value"]
        self._name: str = a["name"]
        self._trainable: bool = a["trainable"]
        self._synchronization: VariableSynchronization = a["synchronization"]
        self._aggregation: VariableAggregation = a["aggregation"]
        self._id = next(_ids)

    # attributes
    @property
    def name(self) -> str:
        return f"{self._name}:0"

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self._value.shape)

    @property
    def dtype(self) -> np.dtype[Any]:
        return self._value.dtype

    @property
    def trainable(self) -> bool:
        return self._trainable

    @property
    def synchronization(self) -> VariableSynchronization:
        return self._synchronization

    @property
    def aggregation(self) -> VariableAggregation:
        return self._aggregation

    @property
    def device(self) -> str:
        return "/job:localhost/replica:0/task:0/device:CPU:0"

    # reads
    def read_value(self) -> np.ndarray:
        return np.array(self._value, copy=True)

    def _tape_value(self) -> Any:
        # A tape keeps what it reads until its gradient: a read-only view, no copy, of an array this class
        # never writes in place (_apply makes a new one); subclasses keep their values elsewhere.
        value = self.__dict__.get("_value")
        if type(value) is np.ndarray and type(self).read_value is Variable.read_value:
            view = value.view()
            view.flags.writeable = False
            return view
        return np.asarray(self)

    def value(self) -> np.ndarray:
        value = self.read_value()
        return autodiff.read(self, value) if autodiff.recording() else value

    def numpy(self) -> np.ndarray:
        return self.read_value()

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        a = self.read_value()
        return a.astype(dtype) if dtype is not None else a

    def __array_ufunc__(self, ufunc: Any, method: str, *inputs: Any, **kwargs: Any) -> Any:
        if autodiff.recording():  # on a GradientTape: the read is recorded
            return autodiff.apply_ufunc(ufunc, method, inputs, kwargs)
        conv = tuple(np.asarray(x) if isinstance(x, (Variable, ArrayValue)) else x for x in inputs)
        return getattr(ufunc, method)(*conv, **kwargs)

    def __float__(self) -> float:
        return float(self.read_value())

    def __int__(self) -> int:
        return int(self.read_value())

    def __bool__(self) -> bool:
        return bool(self.read_value())

    def __len__(self) -> int:
        return len(self.read_value())

    def __getitem__(self, item: Any) -> Any:
        if autodiff.recording():
            return autodiff.read(self)[item]
        return self.read_value()[item]

    def __hash__(self) -> int:
        return id(self)

    def __reduce__(self) -> Any:
        if pickling_target() is None:
            return (copyreg.__newobj__, (type(self),), self.__dict__.copy())  # type: ignore[attr-defined]
        return plain_snapshot(self, self.read_value())

    # writes
    def _check(self, value: Any) -> np.ndarray:

        if isinstance(value, PerReplica):
            raise ValueError(f"Cannot assign a PerReplica value to the variable {self._name}")
        return convert_for_variable(
            np.asarray(value) if isinstance(value, (Variable, ArrayValue, DistributedValues)) else value,
            self.dtype,
            self.shape,
            self._name,
        )

    def _apply(self, op: str, value: Any) -> Any:

        self._value = apply_op(op, self._value, self._check(value))
        return self

    def assign(self, value: Any, use_locking: Any = None, name: Any = None, read_value: bool = True) -> Any:
        return _maybe(read_value, self._apply("assign", value))

    def assign_add(self, delta: Any, use_locking: Any = None, name: Any = None, read_value: bool = True) -> Any:
        return _maybe(read_value, self._apply("assign_add", delta))

    def assign_sub(self, delta: Any, use_locking: Any = None, name: Any = None, read_value: bool = True) -> Any:
        return _maybe(read_value, self._apply("assign_sub", delta))

    def _repr_numpy(self) -> str:
        a = self.read_value()
        return np.array2string(a, separator=", ") if a.ndim else repr(a.item())

    def __repr__(self) -> str:
        return (
            f"<interdist.Variable '{self.name}' shape={self.shape} dtype={self.dtype.name}, numpy={self._repr_numpy()}>"
        )


# -- variables that replicas use but do not hold ------------------------------------------
#
# A plain variable (made outside any strategy's scope, or by OneDeviceStrategy) used in a
# replica function travels as a snapshot of its value. As in TF, where every replica thread
# writes the one variable, each replica's writes apply once in the notebook, replica by replica
# in rank order, when the program ends (``protocol.apply_plain_updates``). A replica reads its
# own writes; the others' writes it sees only in the next program (TF's replica threads run one
# after the other, so there replica r also reads the writes of replicas 0..r-1).
_plain_keys = itertools.count(1)


def plain_snapshot(variable: Any, value: np.ndarray) -> Any:
    """What pickles for a replica instead of the notebook's plain ``variable``."""
    key = getattr(variable, "_plain_key", None)
    if key is None:
        key = variable._plain_key = next(_plain_keys)
    register_plain(key, variable)
    return (resolve_plain, (key, variable._name, np.asarray(value), bool(variable.trainable)))


def resolve_plain(key: int, name: str = "", value: Any = None, trainable: bool = True) -> Any:
    """A plain variable in a payload: the replica's proxy of it (one per program), or the notebook's own."""
    replica = current_resolving()
    if replica is None:
        variable = registered_plain(key)
        if variable is None:
            raise ValueError(f"the plain variable {name or key!r} sent to the replicas no longer exists")
        return variable
    proxies: dict[int, PlainVariableProxy] | None = getattr(replica, "plain_proxies", None)
    if proxies is None:
        proxies = replica.plain_proxies = {}
    proxy = proxies.get(key)
    if proxy is None:
        proxy = proxies[key] = PlainVariableProxy(key, name, np.array(value, copy=True), trainable)
    return proxy


class PlainVariableProxy(Variable):
    """A replica's view of a plain variable: reads its snapshot, records its writes."""

    def __init__(self, key: int, name: str, value: np.ndarray, trainable: bool) -> None:
        self._key = key
        self._value = value
        self._name = name
        self._trainable = trainable
        self._synchronization = VariableSynchronization.AUTO
        self._aggregation = VariableAggregation.NONE
        self._id = next(_ids)
        self.updates: list[tuple[str, np.ndarray]] = []

    def __reduce__(self) -> Any:
        return (resolve_plain, (self._key, self._name))

    def _apply(self, op: str, value: Any) -> Any:
        checked = self._check(value)
        self._value = apply_op(op, self._value, checked)
        self.updates.append((op, checked))
        return PlainRead(self)


class PlainRead(Differentiable, NDArrayOperatorsMixin):
    """What a write to a plain variable returns (TF: a read of the variable when it is used): on a
    replica, the replica's view of it; back in the notebook, the variable's value once the program's
    writes are all applied."""

    def __init__(self, variable: Any) -> None:
        self._variable = variable

    def __reduce__(self) -> Any:
        return (_plain_read, (self._variable._key if isinstance(self._variable, PlainVariableProxy) else 0,))

    def read_value(self) -> np.ndarray:
        return np.asarray(self._variable.read_value())

    value = numpy = read_value

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        a = self.read_value()
        return a.astype(dtype) if dtype is not None else a

    def __array_ufunc__(self, ufunc: Any, method: str, *inputs: Any, **kwargs: Any) -> Any:
        if autodiff.recording():  # on a GradientTape: the read is recorded
            return autodiff.apply_ufunc(ufunc, method, inputs, kwargs)
        conv = tuple(x.read_value() if isinstance(x, PlainRead) else x for x in inputs)
        return getattr(ufunc, method)(*conv, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._variable, name)

    def __repr__(self) -> str:
        return repr(self._variable)


def _plain_read(key: int) -> PlainRead:
    return PlainRead(resolve_plain(key))


def plain_updates(proxies: dict[int, PlainVariableProxy]) -> list[tuple[int, str, Any]]:
    """The writes a program's replica function made to plain variables (for the reply)."""
    return [(key, op, value) for key, proxy in proxies.items() for op, value in proxy.updates]
