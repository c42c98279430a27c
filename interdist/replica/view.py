"""The strategy as replica code sees it: ``ReplicaStrategyView`` and its ``ReplicaExtendedView``.

What ``get_strategy()`` returns on a replica, inside the replica function and inside
``merge_fn`` (``ReplicaContext`` is in context.py).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, TypeVar, cast

import cloudpickle
import numpy as np

from interdist import _context, _nest, _reduction
from interdist import device as device_lib
from interdist._convert import as_array
from interdist._gpu import to_host
from interdist.input.distributed_dataset import DistributedDataset
from interdist.protocol import VariableMeta, resolve_strategy
from interdist.reduce_op import ReduceOp, check_reduce_op
from interdist.replica import faults, programs
from interdist.replica.central import reduce_to_holder
from interdist.replica.central_variable import CentralReplicaVariable, create_central_variable
from interdist.replica.context import _regroup_local, _select, _unwrap
from interdist.replica.lazy_merge import LazyPerReplica, all_reduce_held
from interdist.replica.programs import ValueContext, convert_value
from interdist.replica.variable import ReplicaComponent, ReplicaVariable, single_copy
from interdist.values.distributed import DistributedValues, Mirrored, PerReplica, regroup
from interdist.values.distributed_variable import variable_kind
from interdist.values.tensor import ArrayValue
from interdist.values.variables import (
    Variable,
    VariableAggregation,
    VariableSynchronization,
    check_mean_dtype,
    normalize_args,
    variable_meta,
)

if TYPE_CHECKING:
    from interdist.replica.replica import Replica

_T = TypeVar("_T")


def _is_central(x: Any) -> bool:

    return isinstance(x, CentralReplicaVariable)


def _copies(x: Any) -> bool:
    """A variable with one copy per replica (Mirrored/SyncOnRead; not OneDevice, not central)."""
    return isinstance(x, ReplicaVariable) and not single_copy(x.meta)


def _per_replica(x: Any) -> bool:
    """A value with one component per replica (a distributed value, a non-central variable's copies)."""
    return isinstance(x, DistributedValues) or (isinstance(x, ReplicaVariable) and not _is_central(x))


def _import_class(path: Any, pickled: bytes | None = None) -> type | None:
    """The notebook's class: unpickled, else the first class of ``path`` (``[module, qualname]`` pairs,
    nearest first) that imports here."""
    if pickled:
        try:
            cls = cloudpickle.loads(pickled)
        except Exception:  # noqa: BLE001 - e.g. a module of the notebook's that this worker lacks
            cls = None
        if isinstance(cls, type):
            return cls
    for module, qualname in path or ():
        try:
            obj: Any = importlib.import_module(module)
            for part in qualname.split("."):
                obj = getattr(obj, part)
        except Exception:  # noqa: BLE001 - a class this worker cannot import: try its base
            continue
        if isinstance(obj, type):
            return obj
    return None


def _check_one_dtype(values: list[Any]) -> None:
    """``batch_reduce_to`` packs its values into one collective: TF refuses mixed dtypes there."""
    dtypes = set()
    for v in values:
        if isinstance(v, ReplicaVariable):
            dtypes.add(np.dtype(v.dtype))  # not read: reading another replica's copy is a collective
        elif isinstance(v, LazyPerReplica):
            dtypes.add(v.local_dtype())  # not gathered
        elif isinstance(v, DistributedValues):
            dtypes |= {np.asarray(_unwrap(c)).dtype for c in v.values[:1]}
        else:
            dtypes.add(np.asarray(_unwrap(v)).dtype)
    if len(dtypes) > 1:
        raise ValueError(
            f"batch_reduce_to cannot reduce values of different dtypes in one batch: {sorted(d.name for d in dtypes)}"
        )


_NAMED: dict[tuple[type, str], type] = {}


def _named(base: type[_T], name: str) -> type[_T]:
    """A subclass of ``base`` called ``name``, so that ``type(view).__name__`` is the notebook class's name."""
    key = (base, name)
    cls = _NAMED.get(key)
    if cls is None:
        cls = _NAMED[key] = type(name, (base,), {"__module__": base.__module__, "__qualname__": name})
    return cast("type[_T]", cls)


def make_view(replica: Replica) -> ReplicaStrategyView:
    """The view of ``replica``'s strategy, named as the notebook's strategy class (``MirroredStrategy``...)."""
    name = replica.spec.get("strategy_name")
    return _named(ReplicaStrategyView, name)(replica) if name else ReplicaStrategyView(replica)


class _ReportsNotebookClass:
    """Reports the notebook's class as ``__class__``, so that ``isinstance`` sees the notebook's strategy.

    ``isinstance(x, C)`` consults ``x.__class__`` when ``type(x)`` is not a subclass of ``C`` (as
    ``unittest.mock`` relies on): replica code that branches on ``isinstance(get_strategy(),
    MirroredStrategy)`` takes the notebook's branch. The class is imported by name, lazily, the first
    time it is asked for (the replica layer does not import the strategy layer); a class the worker
    cannot import (one defined in the notebook's ``__main__``) arrives pickled by value (cloudpickle keeps
    its identity across messages, so replica code naming it finds the same class), else stands for its
    nearest importable base.
    ``type(x)`` stays this class (``type(x) is MirroredStrategy`` is False, unlike TF).
    """

    def _class_path(self) -> Any:
        raise NotImplementedError

    def _class_pickle(self) -> bytes | None:
        return None

    @property  # type: ignore[misc]  # a read-only __class__, for isinstance (see the class docstring)
    def __class__(self) -> type:
        found = self.__dict__.get("_notebook_class")
        if found is None:
            found = _import_class(self._class_path(), self._class_pickle()) or type(self)
            self.__dict__["_notebook_class"] = found
        return cast(type, found)


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


class ReplicaExtendedView(_ReportsNotebookClass):
    """``StrategyExtended`` on a replica, used inside ``merge_fn``."""

    def __init__(self, strategy: ReplicaStrategyView) -> None:
        self._strategy = strategy
        self._replica = strategy._replica

    def _class_path(self) -> Any:
        return self._replica.spec.get("extended_class")

    @property
    def worker_devices(self) -> tuple[str, ...]:
        return tuple(self._replica.devices)

    @property
    def parameter_devices(self) -> tuple[str, ...]:
        return tuple(self._replica.spec.get("parameter_devices") or self._replica.devices)

    def _n(self) -> int:
        return self._replica.world_size

    def _kind(self) -> str:
        return str(self._replica.spec.get("kind", ""))

    # reduce_to / batch_reduce_to / broadcast_to: what the notebook's StrategyExtended returns (TF's
    # simple_broadcast): a plain value for one destination device, a Mirrored for several.

    def _devices_of(self, destinations: Any) -> list[str]:
        """The devices ``destinations`` stands for (TF's ``validate_destinations``/``get_devices_from``)."""
        if isinstance(destinations, str):
            if not destinations:
                raise ValueError(device_lib.BAD_DESTINATIONS + " Got an empty string.")
            return [device_lib.canonicalize(destinations)]
        if _copies(destinations):
            return [str(d) for d in self._replica.devices]
        if isinstance(destinations, (ReplicaVariable, ReplicaComponent)):
            return [str(destinations.device)]
        if isinstance(destinations, DistributedValues):
            devices = [str(d) for d in self._replica.devices]
            n = len(destinations.values)
            return [devices[i] if i < len(devices) else devices[-1] for i in range(n)]
        if isinstance(destinations, (Variable, ArrayValue)):
            return [str(destinations.device)]  # a handle that knows its device
        # A NumPy value is no destination, as in the notebook (TF 2.21 refuses NumPy values too).
        raise ValueError(f"{device_lib.BAD_DESTINATIONS} Got {destinations!r}.")

    def _broadcast(self, value: Any, destinations: Any) -> Any:
        devices = self._devices_of(destinations)
        if len(devices) == 1:
            return value
        return Mirrored([value] * len(devices))

    def reduce_to(self, reduce_op: Any, value: Any, destinations: Any, options: Any = None) -> Any:
        self._strategy._require_cross_replica("reduce_to")
        device_lib.refuse_sequence(destinations, "reduce_to")
        op = check_reduce_op(reduce_op, "reduce_to", self._kind())
        if self._kind() == "one_device":
            return value  # TF's OneDeviceExtended hands the value back as it is
        if self._replica.armed_fault is not None:  # an all-reduce, even of values already here (faults.py)
            faults.fire(self._replica, "collective", "all_reduce", "reduce_to")
        return self._reduce_to(op, value, destinations)

    def _reduce_to(self, op: ReduceOp, value: Any, destinations: Any) -> Any:
        if isinstance(value, Mirrored):  # a MirroredVariable too
            if op == ReduceOp.MEAN:
                return value  # TF hands a mirrored value (a MirroredVariable too) back as it is
            raise AssertionError(
                f"reduce_to(SUM) of a mirrored value {type(value).__name__}: its copies are already equal; "
                "use ReduceOp.MEAN (TF 2.21 fails an assert here)"
            )
        if not isinstance(value, DistributedValues):  # a plain value, a central variable
            reduced = _reduction.reduce_non_distributed(op, value, self._n())
            if op == ReduceOp.MEAN:
                return value  # TF returns a non-distributed value itself for MEAN, to any destination
            return self._broadcast(as_array(reduced), destinations)
        self._devices_of(destinations)  # checked before the replicas reduce
        return self._broadcast(as_array(self._strategy.reduce(op, value, axis=None)), destinations)

    def batch_reduce_to(self, reduce_op: Any, value_destination_pairs: Any, options: Any = None) -> list[Any]:
        self._strategy._require_cross_replica("batch_reduce_to")
        op = check_reduce_op(reduce_op, "batch_reduce_to", self._kind())
        pairs = list(value_destination_pairs)
        if self._kind() == "one_device":
            for _, d in pairs:
                device_lib.refuse_sequence(d, "batch_reduce_to")
            return [v for v, _ in pairs]
        for _, d in pairs:
            self._devices_of(d)  # TF: ValueError for None and for a list of devices here
        if self._replica.armed_fault is not None:  # an all-reduce, even of values already here (faults.py)
            faults.fire(self._replica, "collective", "all_reduce", "batch_reduce_to")
        if self._n() > 1:
            _check_one_dtype([v for v, _ in pairs])
        # merge_call's held arguments (an optimizer's gradients): one all-reduce for the whole batch.
        lazy = [i for i, (v, _) in enumerate(pairs) if isinstance(v, LazyPerReplica) and v.reducible()]
        reduced = (
            dict(zip(lazy, all_reduce_held(self._replica, op, [pairs[i][0] for i in lazy]), strict=True))
            if lazy
            else {}
        )
        out = []
        for i, (v, d) in enumerate(pairs):
            if i in reduced:
                out.append(self._broadcast(reduced[i], d))
            elif isinstance(v, ReplicaVariable) and (self._n() == 1 or not _copies(v)):
                out.append(v)  # TF 2.21: a variable comes back as it is with one replica and from CentralStorage
            elif isinstance(v, Mirrored):
                # Unlike reduce_to, TF's batched path reduces a mirrored value's copies (SUM adds them, no assert).
                out.append(self._broadcast(as_array(self._strategy.reduce(op, v, axis=None)), d))
            elif isinstance(v, DistributedValues):
                out.append(self._reduce_to(op, v, d))
            else:
                out.append(self._broadcast(as_array(v), d))  # TF's batched path copies a plain value
        return out

    def broadcast_to(self, tensor: Any, destinations: Any) -> Any:
        self._strategy._require_cross_replica("broadcast_to")
        device_lib.refuse_none(destinations, "broadcast_to")
        device_lib.refuse_sequence(destinations, "broadcast_to")
        if self._kind() == "one_device":
            return tensor  # TF hands the tensor back as it is
        return self._broadcast(as_array(tensor), destinations)

    def update(self, var: Any, fn: Callable[..., Any], args: Any = (), kwargs: Any = None, group: bool = True) -> Any:
        if isinstance(var, DistributedValues) and not isinstance(var, ReplicaVariable):
            # e.g. another strategy's OneDevice variable: each replica holds its own snapshot, regrouped by
            # merge_call into a PerReplica. TF 2.21 fails an internal assert here (checked with Keras SGD).
            raise AssertionError(
                f"update() requires a variable created in this strategy's scope, but got a {type(var).__name__} "
                "(a variable of another strategy, one copy per replica?); create the variable in "
                "this strategy's scope"
            )
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
