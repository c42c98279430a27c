"""A variable's copy on one replica, with TF's aggregation rules for writes and reads."""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING, Any

import numpy as np

from interdist import _context, _gpu, autodiff, events
from interdist._convert import apply_op, as_array, convert_for_variable, small_values, summarize
from interdist._reduction import reduce_arrays
from interdist.protocol import VariableMeta, resolve_variable
from interdist.reduce_op import ReduceOp
from interdist.replica import faults
from interdist.replica._variable_classes import _notebook_class
from interdist.replica._variable_classes import single_copy as single_copy  # (this module's API too)
from interdist.replica._variable_classes import variable_class as variable_class
from interdist.replica.component import ReplicaComponent as ReplicaComponent  # (this module's API too)
from interdist.replica.component import _ReplicaSide
from interdist.values.distributed import DistributedValues
from interdist.values.variables import Variable, VariableAggregation, VariableSynchronization, _maybe

if TYPE_CHECKING:
    from interdist.replica.replica import Replica


# sys.getrefcount of ``ReplicaVariable.raw`` when only the variable holds it: its attribute, the call's argument.
_SOLE_HOLDER = 2


def read_only_view(raw: Any) -> Any:
    """A read of a replica's copy without copying it: a read-only view of a NumPy copy (a TF tensor read
    from a variable cannot be written either), a copy of a CuPy one (CuPy has no read-only arrays).

    The view keeps the copy's memory alive through ``base``, so ``sys.getrefcount(raw)`` counts the reads
    still held, and ``ReplicaVariable._local`` writes in place only when there are none (copy on write).
    """
    if type(raw) is np.ndarray and raw.base is None:
        view = raw.view()
        view.flags.writeable = False
        return view
    return _gpu.copy(raw)


class ReplicaVariable(_ReplicaSide):
    """One replica's copy of a distributed variable (what a replica function sees).

    It passes for the notebook's variable: ``isinstance(v, MirroredVariable)`` (``SyncOnReadVariable``,
    ``DistributedValues``, ``interdist.Variable``) holds as in TF, ``v.values`` gives every copy
    (``ReplicaComponent`` views: their names and devices at once, their values by a collective), and
    ``type(v).__name__`` is TF's (``variable_class``). ``type(v)`` stays a replica class.
    """

    @property  # type: ignore[misc]  # a read-only __class__, for isinstance (see the class docstring)
    def __class__(self) -> type:
        return _notebook_class(self.meta)

    def __init__(self, replica: Replica, var_id: int, meta: VariableMeta, value: np.ndarray) -> None:
        self._replica = replica
        self.var_id = var_id
        self.meta = meta  # name, trainable, synchronization, aggregation, kind
        self.raw = value
        self.group_id = replica.group_id

    def __reduce__(self) -> Any:

        return (resolve_variable, (self.group_id, self.var_id))

    # -- attributes ----------------------------------------------------------
    @property
    def name(self) -> str:
        # TF: a distributed variable is named as its first copy on every replica ("w:0"); v.values[r].name
        # is the copy's own name.
        return f"{self.meta['name']}:0"

    @property
    def values(self) -> tuple[ReplicaComponent, ...]:
        """Every replica's copy (TF's ``v.values`` inside ``run``): the other replicas' live in other processes.

        Names, devices, shapes and attributes are known here; reading any copy is a collective (every
        replica must read the same number of copies, as SPMD code does); a copy is written only by its
        own replica.
        """
        if single_copy(self.meta):
            raise AttributeError(f"'{type(self).__name__}' object has no attribute 'values'")
        comps: tuple[ReplicaComponent, ...] | None = self.__dict__.get("_components")
        if comps is None:  # made once: v.values[i] is experimental_local_results(v)[i], as in TF
            comps = self.__dict__["_components"] = tuple(
                ReplicaComponent(self, r) for r in range(self._replica.world_size)
            )
        return comps

    @property
    def _primary(self) -> ReplicaComponent:
        if single_copy(self.meta):
            raise AttributeError(f"'{type(self).__name__}' object has no attribute '_primary'")
        return self.values[0]

    @property
    def distribute_strategy(self) -> Any:
        if self.meta.get("strategy_kind") in ("one_device", "default"):
            # TF: a OneDevice variable is a plain ResourceVariable, which has no distribute_strategy.
            raise AttributeError(f"'{type(self).__name__}' object has no attribute 'distribute_strategy'")
        return self._replica.view

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

        return VariableAggregation[self.meta["aggregation"]]

    @property
    def synchronization(self) -> Any:

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
                raise ValueError(
                    "Could not convert from `tf.VariableAggregation` VariableAggregation.NONE to "
                    "`tf.distribute.ReduceOp` type"
                )
            if agg in ("SUM", "MEAN"):
                return reduce_arrays(list(self._all_copies()), ReduceOp(agg))
        read: np.ndarray = read_only_view(self.raw)
        return read

    def value(self) -> np.ndarray:
        value = self.read_value()
        return autodiff.read(self, value) if autodiff.recording() else value

    def _tape_value(self) -> Any:
        return self.read_value()

    def _tape_key(self) -> Any:
        return ("replica", self.group_id, self.var_id)

    def numpy(self) -> np.ndarray:
        # TF: ``numpy()`` is a copy of its own, writable. ``read_value`` already copies everything but a
        # NumPy copy's read (a read-only view): only that one is copied here.
        value: np.ndarray = self.read_value()
        return np.array(value, copy=True) if type(value) is np.ndarray and not value.flags.writeable else value

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        a: np.ndarray = _gpu.to_host(self.read_value())
        if dtype is not None and np.dtype(dtype) != a.dtype:
            return a.astype(dtype)
        # NumPy's contract: np.asarray(v) may be a (here read-only) view, np.array(v) is a copy.
        return np.array(a, copy=True) if copy else a

    def __array_ufunc__(self, ufunc: Any, method: str, *inputs: Any, **kwargs: Any) -> Any:
        if autodiff.recording():  # on a GradientTape: the read is recorded
            return autodiff.apply_ufunc(ufunc, method, inputs, kwargs)
        conv = tuple(x.read_value() if isinstance(x, ReplicaVariable) else x for x in inputs)
        return getattr(ufunc, method)(*conv, **kwargs)

    def __float__(self) -> float:
        if not single_copy(self.meta):
            # As TF 2.21 (and the notebook's handle): a distributed variable does not convert to a Python number.
            raise TypeError(f"float() argument must be a string or a real number, not '{type(self).__name__}'")
        return float(self.raw)

    def __int__(self) -> int:
        if not single_copy(self.meta):
            raise TypeError(
                f"int() argument must be a string, a bytes-like object or a real number, not '{type(self).__name__}'"
            )
        return int(self.raw)

    def __bool__(self) -> bool:
        return bool(self.raw)

    def __getitem__(self, item: Any) -> Any:
        if autodiff.recording():
            return autodiff.read(self)[item]
        return self.read_value()[item]

    def __len__(self) -> int:
        return len(self.raw)

    def __hash__(self) -> int:
        return id(self)

    def _all_copies(self) -> tuple[np.ndarray, ...]:
        """Every replica's copy (a collective: all replicas call it in step)."""
        return tuple(_gpu.asarray(c) for c in self._replica.exchange("read_variable", self.raw, self.raw.nbytes))

    # -- writes --------------------------------------------------------------
    def assign(self, value: Any, use_locking: Any = None, name: Any = None, read_value: bool = True) -> Any:
        return _maybe(read_value, self._update("assign", value))

    def assign_add(self, delta: Any, use_locking: Any = None, name: Any = None, read_value: bool = True) -> Any:
        return _maybe(read_value, self._update("assign_add", delta))

    def assign_sub(self, delta: Any, use_locking: Any = None, name: Any = None, read_value: bool = True) -> Any:
        return _maybe(read_value, self._update("assign_sub", delta))

    def _local(self, op: str, value: Any) -> ReplicaVariable:
        v = convert_for_variable(value, self.raw.dtype, self.raw.shape, self.meta["name"])
        # In place while nothing else holds the copy: a read (``read_only_view``) that is still alive
        # keeps the value it saw, as a TF tensor read from a variable does; the write then makes a new array.
        sole = sys.getrefcount(self.raw) <= _SOLE_HOLDER  # before the call below puts self.raw on the stack
        self.raw = apply_op(op, self.raw, v, in_place=sole)
        self._replica.touched.add(self.var_id)
        return self

    def _update(self, op: str, value: Any) -> ReplicaVariable:
        rank = self._replica.rank
        if getattr(self._replica, "armed_fault", None) is not None and _context.current().replica_context is not None:
            faults.fire(self._replica, "update")
        if isinstance(value, ReplicaVariable):
            value = value.read_value()
        entry = _context.current()
        if entry.replica_context is None:  # cross-replica (inside merge_fn or update)
            if isinstance(value, DistributedValues):
                value = value._component(rank)  # TF 2.21: each copy gets its replica's component
            if entry.update_replica_id is not None:
                return UnreadVariable(self._local(op, value))
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
            if self._replica.world_size > 1 and self.var_id not in self._replica.diverged:
                self._replica.diverged.add(self.var_id)
                self._replica.warnings.append(
                    f"Variable {self.meta['name']!r} (aggregation NONE) was updated in replica context: each "
                    "replica changed only its own copy, and the copies may now differ (as in TensorFlow). "
                    "Give the variable an aggregation (SUM, MEAN, ONLY_FIRST_REPLICA) to keep them in sync."
                )
            return self._local(op, value)
        v = as_array(value)
        if agg == "MEAN" and self.raw.dtype.kind not in "fc":
            raise ValueError(
                "Cannot update non-float variables with tf.VariableAggregation.MEAN aggregation in replica "
                "context. Either change the variable dtype to float or update it in cross-replica context."
            )
        if agg == "ONLY_FIRST_REPLICA":
            v = self._replica.collective(
                "broadcast", v.nbytes, lambda s, q, w: self._replica.collectives.broadcast(s, q, v, 0, w)
            )
        else:
            v = (
                convert_for_variable(v, self.raw.dtype, self.raw.shape, self.meta["name"])
                if v.dtype.kind == "f" and self.raw.dtype.kind == "f"
                else v
            )
            (v,) = self._replica.collective(
                "all_reduce",
                v.nbytes,
                lambda s, q, w: self._replica.collectives.all_reduce(s, q, [v], ReduceOp(agg), w),
            )
        return self._local(op, v)

    def _sync_on_read_cross_replica(self, op: str, value: Any) -> ReplicaVariable:
        agg = self.meta["aggregation"]
        if agg == "SUM":
            if op != "assign":
                raise ValueError(
                    f"SyncOnReadVariable does not support `{op}` in cross-replica context when aggregation "
                    "is set to `tf.VariableAggregation.SUM`."
                )
            a = as_array(value)
            value = _gpu.asarray(a / self._replica.world_size, dtype=self.raw.dtype)
        return self._local(op, value)

    def __repr__(self) -> str:
        return (
            f"<interdist.Variable '{self.name}' shape={self.shape} dtype={self.dtype.name}, "
            f"numpy={np.array2string(_gpu.to_host(self.raw), separator=', ') if self.raw.ndim else self.raw.item()!r}>"
        )


class UnreadVariable(ReplicaVariable):
    """What an assign inside ``extended.update`` returns (TF's ``_UnreadVariable``): the same copy,
    read when used, but not the variable object itself, so that ``update`` can tell ``fn``
    returning ``v.assign(...)`` (TF: its value) from ``fn`` returning ``v`` (TF: the variable)."""

    @property  # type: ignore[misc]  # TF's _UnreadVariable is a plain variable, not a distributed one
    def __class__(self) -> type:
        return Variable

    def __float__(self) -> float:
        return float(self.raw)

    def __int__(self) -> int:
        return int(self.raw)

    def __init__(self, var: ReplicaVariable) -> None:
        self._var = var
        self._replica = var._replica
        self.var_id = var.var_id
        self.meta = var.meta
        self.group_id = var.group_id

    @property
    def raw(self) -> np.ndarray:
        return self._var.raw

    @raw.setter
    def raw(self, value: np.ndarray) -> None:
        self._var.raw = value


# -- central storage ------------------------------------------------------------
#
# A ``CentralStorageStrategy`` variable has one value, kept by one replica's worker (the
# *holder*: the worker of the parameter device, or replica 0's worker when the parameter
# device is no compute device, see strategy/central_storage.py). Every other replica keeps
# only the variable's name, shape and dtype. How every replica still reads exact values:
#
# - Every replica counts the updates of central variables made in the current program
#   (``epoch``). All replicas run the same program (SPMD), so at the same point of it they
#   hold the same count. A replica that does not hold the value asks the holder for "the
#   value after ``epoch`` updates of program ``program``" on its first read in a step and
#   keeps the answer until the variable is written or the program ends (read at use).
# - The holder answers from a thread beside its replica thread: at once when it is at that
#   epoch, after waiting when it is behind, and from the previous values it keeps when it
#   already ran ahead (it applies cross-replica updates inside ``merge_fn`` without waiting
#   for the others). It drops them when every replica has provably passed them: at a
#   collective that every replica entered, and at the start of a program.
# - A write in replica context is reduced onto the holder (the others send their part and
#   go on), applied there once, and counted everywhere. A cross-replica write (inside
#   ``merge_fn`` or ``extended.update``) is applied by the holder only; the others check the
#   value (so errors are the same everywhere) and remember it, so that a read later in the
#   same update sees it.


# -- programs the notebook runs for central variables ---------------------------------


def emit_created(replica: Replica, var: ReplicaVariable) -> None:
    """The ``VariableCreated`` event of a copy this replica holds (the dashboard's first row for it)."""
    norm, checksum = summarize(var.raw)
    replica.emit(
        events.VariableCreated(
            replica.group_id,
            replica.step,
            replica.rank,
            time.time(),
            var.var_id,
            var.meta["name"],
            tuple(var.raw.shape),
            var.raw.dtype.name,
            var.device,
            var.meta["synchronization"],
            var.meta["aggregation"],
            norm,
            checksum,
            small_values(var.raw, events.SMALL_VALUES),
        )
    )
