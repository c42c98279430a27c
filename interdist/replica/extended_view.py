"""``ReplicaExtendedView``: the strategy's ``extended`` as replica code sees it, used inside ``merge_fn``.

``reduce_to``/``batch_reduce_to``/``broadcast_to``/``update`` on one replica; the strategy view itself
(``ReplicaStrategyView``) is in view.py.
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import numpy as np

from interdist import _context, _nest, _reduction
from interdist import device as device_lib
from interdist._convert import as_array, dtype_of
from interdist._gpu import is_cupy, to_host
from interdist.collectives.reducing import COLLECTIVE_DTYPES
from interdist.reduce_op import ReduceOp, check_reduce_op
from interdist.replica import faults
from interdist.replica._notebook_class import _ReportsNotebookClass
from interdist.replica.central import reduce_to_holder
from interdist.replica.central_variable import CentralReplicaVariable
from interdist.replica.context import _select, _unwrap
from interdist.replica.lazy_merge import LazyPerReplica, all_reduce_held
from interdist.replica.variable import ReplicaComponent, ReplicaVariable, single_copy
from interdist.values.distributed import DistributedValues, Mirrored
from interdist.values.tensor import ArrayValue
from interdist.values.variables import Variable

if TYPE_CHECKING:
    from interdist.replica.view import ReplicaStrategyView


def _is_central(x: Any) -> bool:

    return isinstance(x, CentralReplicaVariable)


def _copies(x: Any) -> bool:
    """A variable with one copy per replica (Mirrored/SyncOnRead; not OneDevice, not central)."""
    return isinstance(x, ReplicaVariable) and not single_copy(x.meta)


def _dtypes(value: Any) -> set[Any]:
    """The dtypes of ``value``, as TF's int32 check in ``batch_reduce_to`` reads them (``refuse_int32_in_batch``)."""
    if isinstance(value, ReplicaVariable):
        return {np.dtype(value.dtype)}  # not read: reading another replica's copy is a collective
    if isinstance(value, LazyPerReplica):
        return {value.local_dtype()}  # not gathered
    if isinstance(value, DistributedValues):
        return {dtype_of(_unwrap(c)) for c in value.values}  # a GPU replica's CuPy values too
    return {dtype_of(_unwrap(value))}


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
        if self._replica.spec.get("int32_on_host"):
            device_lib.refuse_int32_in_batch([_dtypes(v) for v, _ in pairs])
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
        if not variables:
            return False
        if not all(_is_central(v) for v in variables):
            return self._apply_mirrored_in_replica_context(optimizer, pairs)
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

    def _apply_mirrored_in_replica_context(self, optimizer: Any, pairs: list[tuple[Any, Any]]) -> bool:
        """``optimizer.apply_gradients`` inside ``run`` when every variable is mirrored and every gradient a
        NumPy array or scalar, or a CuPy array on a GPU replica (reduced on the device under a device backend:
        ``Collectives.all_reduce``): the ``merge_call`` path without its skeleton exchange.

        That path exchanges the arguments' skeletons (one collective), all-reduces the held gradients
        (``batch_reduce_to``: one all-reduce of the whole batch) and updates each replica's copy with the
        reduced gradient. Here the same all-reduce (the same leaves, the same collective: the same bits),
        then the same updates in the same contexts. A replica whose batch differs (shapes, dtypes, count)
        fails the all-reduce's checks on every replica, before any update. False: not such a batch (a
        central, sync-on-read or foreign variable, a distributed gradient, an optimizer with its own
        ``_distributed_apply``); the caller takes the ``merge_call`` path.
        """
        replica = self._replica
        if self._n() < 2 or not optimizer._merges_plainly():
            return False
        grads = []
        for g, v in pairs:
            if (
                (type(g) is not np.ndarray and not isinstance(g, np.generic) and not is_cupy(g))
                or g.dtype.name not in COLLECTIVE_DTYPES
                or not isinstance(v, ReplicaVariable)
                or v.group_id != replica.group_id
                or v.meta["kind"] != "mirrored"
                or single_copy(v.meta)
            ):
                return False
            grads.append(np.asarray(g) if isinstance(g, np.generic) else g)  # a NumPy scalar: a 0-d array
        if len({g.dtype for g in grads}) > 1:
            return False  # variables of several dtypes: the merge's batch_reduce_to (one all-reduce of the list)
        if replica.armed_fault is not None:  # as batch_reduce_to: the fault stops the step before values leave
            faults.fire(replica, "collective", "all_reduce", "batch_reduce_to")
        nbytes = int(sum(g.nbytes for g in grads))
        rank, coll = replica.rank, replica.collectives

        consume = _FusedUpdates(self._strategy, optimizer, [v for _, v in pairs], rank)

        def all_reduce(step: int, seq: int, what: str) -> list[Any]:
            fused = coll.all_reduce_consumed(step, seq, grads, ReduceOp.SUM, what, consume)
            return fused if fused is not None else coll.all_reduce(step, seq, grads, ReduceOp.SUM, what)

        reduced: list[Any] = replica.collective("all_reduce", nbytes, all_reduce)
        with _context.enter(self._strategy, None):  # merge_fn's cross-replica context
            for (_, var), grad in zip(pairs, reduced, strict=True):
                if grad is None:
                    continue  # updated with the sum (consume)
                with _context.enter(self._strategy, None, update_replica_id=rank):
                    optimizer._update_one(var, grad, False)
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


class _FusedUpdates:
    """``Collectives.all_reduce_consumed``'s consumer of ``apply_gradients``: each large gradient's update fused
    with its sum, inside the contexts of the ``merge_call`` path's update (the sum's cross-replica context,
    the update of this replica's copy)."""

    def __init__(self, strategy: Any, optimizer: Any, variables: list[Any], rank: int) -> None:
        self._strategy, self._optimizer, self._variables, self._rank = strategy, optimizer, variables, rank
        # A variable given twice: its updates apply one after the other (the all-gather-reduce's, in place); new
        # copies made from the same old one would keep only the last, so the ring returns its sums instead.
        counts = collections.Counter(id(v) for v in variables)
        self._twice = {k for k, c in counts.items() if c > 1}

    def __call__(self, i: int, parts: list[np.ndarray]) -> bool:
        """The all-gather-reduce's (and reduce-broadcast's): the update made from every rank's part."""
        with _context.enter(self._strategy, None), _context.enter(self._strategy, None, update_replica_id=self._rank):
            return bool(self._optimizer._update_from_parts(self._variables[i], parts))

    def chunks(self, i: int, pieces: list[np.ndarray]) -> bool:
        """The split reduce-broadcast's (``collectives/split.py``): the update made from the sum's chunks in order."""
        with _context.enter(self._strategy, None), _context.enter(self._strategy, None, update_replica_id=self._rank):
            return bool(self._optimizer._update_from_chunks(self._variables[i], pieces))

    def ring_update(self, i: int, grad: np.ndarray) -> Any | None:
        """The ring's (``ring.RingUpdate``): the update written into a new copy as the sum comes."""
        if id(self._variables[i]) in self._twice:
            return None
        with _context.enter(self._strategy, None), _context.enter(self._strategy, None, update_replica_id=self._rank):
            return self._optimizer._ring_update(self._variables[i], grad)
