"""``StrategyExtended``: TF's additional APIs for distribution-aware algorithms (``strategy.extended``).

``reduce_to``, ``batch_reduce_to``, ``broadcast_to``, ``update``, ``colocate_vars_with``,
``value_container`` and the device properties, in the notebook (cross-replica context).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Protocol

import numpy as np

from interdist import _context, _reduction
from interdist import device as device_lib
from interdist._convert import as_array
from interdist.reduce_op import ReduceOp, check_reduce_op
from interdist.values.distributed import DistributedValues, Mirrored
from interdist.values.distributed_variable import (
    VariableComponent,
    _Handle,
)
from interdist.values.tensor import ArrayValue, Tensor
from interdist.values.variables import (
    Variable,
)


class _ContainerStrategy(Protocol):
    """What ``StrategyExtended`` uses of its strategy: a ``strategy.base.Strategy``, named by what it has
    (that module imports this one, so this one names nothing of it)."""

    _devices: list[str]
    _kind: str
    _colocate_with: Any

    @property
    def num_replicas_in_sync(self) -> int: ...
    def _parameter_devices(self) -> list[str]: ...
    def _require_cross_replica(self, what: str) -> None: ...
    def _check_usable(self) -> None: ...
    def _update(
        self, var: Any, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any], group: bool
    ) -> Any: ...
    def run(self, fn: Callable[..., Any], args: Any = (), kwargs: Any = None, options: Any = None) -> Any: ...
    def reduce(self, reduce_op: Any, value: Any, axis: Any = None) -> Any: ...
    def experimental_local_results(self, value: Any) -> tuple[Any, ...]: ...


class StrategyExtended:
    """Additional APIs for algorithms that need to be distribution-aware.

    A strategy's ``extended`` attribute: devices, ``reduce_to``, ``broadcast_to``, ``update`` and
    their batched forms, as ``tf.distribute.StrategyExtended``.

    Examples
    --------
    >>> import interdist as idist, numpy as np
    >>> with idist.MirroredStrategy(["CPU:0", "CPU:1"]) as s:
    ...     per_replica = s.experimental_distribute_values_from_function(
    ...         lambda ctx: np.float32(ctx.replica_id_in_sync_group + 1)
    ...     )
    ...     summed = s.extended.reduce_to("SUM", per_replica, "CPU:0")
    ...     isinstance(s.extended, idist.StrategyExtended), s.extended.worker_devices[1], float(summed)
    (True, '/job:localhost/replica:0/task:0/device:CPU:1', 3.0)
    """

    #: ``MirroredStrategy``'s ``batch_reduce_to`` refuses int32 among several values (``device.refuse_int32_in_batch``);
    #: ``MultiWorkerMirroredStrategy``'s collectives take them (TF's ``CollectiveAllReduceExtended``).
    _int32_on_host = True

    def __init__(self, strategy: _ContainerStrategy) -> None:
        self._container_strategy_weakref = weakref.ref(strategy)

    @property
    def _strategy(self) -> _ContainerStrategy:
        s = self._container_strategy_weakref()
        assert s is not None
        return s

    def __repr__(self) -> str:
        s = self._container_strategy_weakref()
        if s is None:
            return f"<interdist.{type(self).__name__} of a strategy that no longer exists>"
        return f"<interdist.{type(self).__name__} of {type(s).__name__} on {', '.join(s._devices)}>"

    @property
    def worker_devices(self) -> tuple[str, ...]:
        return tuple(self._strategy._devices)

    @property
    def parameter_devices(self) -> tuple[str, ...]:
        return tuple(self._strategy._parameter_devices())

    experimental_between_graph = False
    experimental_require_static_shapes = False
    experimental_should_init = True
    should_checkpoint = True
    should_save_summary = True

    def reduce_to(self, reduce_op: Any, value: Any, destinations: Any, options: Any = None) -> Any:
        """Combine ``value`` across replicas onto ``destinations``.

        As TF: a single value when the destinations are one device (a device string, a
        one-device variable or tensor), a ``Mirrored`` value when they are several (a
        ``MirroredVariable``, a ``PerReplica``/``Mirrored`` value of several replicas).
        """
        self._strategy._require_cross_replica("reduce_to")
        device_lib.refuse_sequence(destinations, "reduce_to")
        return self._reduce_to(check_reduce_op(reduce_op, "reduce_to", self._strategy._kind), value, destinations)

    def _reduce_to(self, op: ReduceOp, value: Any, destinations: Any) -> Any:
        s = self._strategy
        if isinstance(value, Mirrored):
            if op == ReduceOp.MEAN:
                return value  # TF hands a mirrored value (a MirroredVariable too) back as it is
            raise AssertionError(
                f"reduce_to(SUM) of a mirrored value {type(value).__name__}: its copies are already equal; "
                "use ReduceOp.MEAN (TF 2.21 fails an assert here)"
            )
        if not isinstance(value, DistributedValues):
            reduced = _reduction.reduce_non_distributed(op, value, s.num_replicas_in_sync)
            if op == ReduceOp.MEAN:
                # TF returns a non-distributed value itself for MEAN, to any destination (a tensor
                # where it is; a NumPy value stands for a tensor on the host).
                return value if isinstance(value, (ArrayValue, Variable)) else Tensor(as_array(value))
            return self._broadcast(as_array(reduced), destinations)
        _devices_of(destinations, s)  # checked before the replicas reduce
        return self._broadcast(as_array(np.asarray(s.reduce(op, value, axis=None))), destinations)

    def batch_reduce_to(self, reduce_op: Any, value_destination_pairs: Any, options: Any = None) -> list[Any]:
        """Many ``reduce_to`` calls; every destination is checked first."""
        self._strategy._require_cross_replica("batch_reduce_to")
        op = check_reduce_op(reduce_op, "batch_reduce_to", self._strategy._kind)
        pairs = list(value_destination_pairs)
        for _, d in pairs:
            _devices_of(d, self._strategy)  # TF: ValueError for None and for a list of devices here
        if self._int32_on_host and self._strategy._kind == "mirrored":
            device_lib.refuse_int32_in_batch([_dtypes(v) for v, _ in pairs])
        out = []
        n = self._strategy.num_replicas_in_sync
        for v, d in pairs:
            if isinstance(v, Variable) and (n == 1 or not isinstance(v, DistributedValues)):
                # TF 2.21: a variable comes back as it is with one replica (M1) and from CentralStorage.
                out.append(v)
            elif isinstance(v, Mirrored):
                # Unlike reduce_to, TF's batched path reduces a mirrored value's copies (SUM adds them, no assert).
                copies = [as_array(np.asarray(c)) for c in self._strategy.experimental_local_results(v)]
                out.append(self._broadcast(as_array(_reduction.reduce_components(op, copies, None)), d))
            elif isinstance(v, DistributedValues):
                out.append(self._reduce_to(op, v, d))
            else:
                # TF's batched path copies a plain value to the destinations (no SUM check).
                # (TF 2.21's MirroredStrategy with several replicas fails an IndexError there.)
                out.append(self._broadcast(as_array(v), d))
        return out

    def broadcast_to(self, tensor: Any, destinations: Any) -> Any:
        """Mirror ``tensor`` to the destination devices (one device: a single value)."""
        self._strategy._check_usable()  # a closed strategy's devices are gone
        self._strategy._require_cross_replica("broadcast_to")
        device_lib.refuse_none(destinations, "broadcast_to")
        device_lib.refuse_sequence(destinations, "broadcast_to")
        return self._broadcast(as_array(tensor), destinations)

    def _broadcast(self, value: Any, destinations: Any) -> Any:
        """TF's ``simple_broadcast``: one device gives a plain value there, several a ``Mirrored``."""
        devices = _devices_of(destinations, self._strategy)
        if len(devices) == 1:
            return Tensor(value, devices[0])
        return Mirrored([Tensor(value, d) for d in devices], self._strategy)

    def update(self, var: Any, fn: Callable[..., Any], args: Any = (), kwargs: Any = None, group: bool = True) -> Any:
        """Run ``fn(copy, *args)`` on every copy of ``var`` (on the replicas)."""
        self._strategy._require_cross_replica("update")
        if not isinstance(var, Variable):
            # TF 2.21 fails an internal assert here.
            raise AssertionError(f"update() requires a variable created in this strategy's scope, but got {var!r}")
        return self._strategy._update(var, fn, tuple(args), dict(kwargs or {}), group)

    def call_for_each_replica(self, fn: Callable[..., Any], args: Any = (), kwargs: Any = None) -> Any:
        """Run ``fn`` once per replica (``strategy.run`` without options)."""
        return self._strategy.run(fn, args=args, kwargs=kwargs)

    def value_container(self, value: Any) -> Any:
        """The distributed variable a component belongs to (else ``value`` itself)."""

        if isinstance(value, VariableComponent):
            return value._variable
        return value

    @contextmanager
    def colocate_vars_with(self, colocate_with_variable: Any) -> Iterator[None]:
        """Variables created in this block live on the same devices as ``colocate_with_variable``."""
        if _context.get_strategy() is not self._strategy:
            raise RuntimeError("colocate_vars_with() may only be used inside the strategy's scope()")
        if not self.variable_created_in_scope(colocate_with_variable):
            raise ValueError(
                f"colocate_vars_with requires a variable created in this strategy's scope, "
                f"but got {colocate_with_variable!r}"
            )
        s = self._strategy
        prev = s._colocate_with
        s._colocate_with = colocate_with_variable
        try:
            yield
        finally:
            s._colocate_with = prev

    def variable_created_in_scope(self, v: Any) -> bool:
        """True when ``v`` was created in this strategy's scope."""
        if isinstance(v, VariableComponent):  # a copy of a distributed variable is a variable of the scope too
            v = v._variable
        return isinstance(v, _Handle) and v._strategy is self._strategy

    def _local_results(self, value: Any) -> tuple[Any, ...]:
        return self._strategy.experimental_local_results(value)


def _devices_of(destinations: Any, strategy: Any = None) -> list[str]:
    """The devices ``destinations`` stands for (TF's ``validate_destinations``/``get_devices_from``)."""
    if isinstance(destinations, str):
        if not destinations:
            raise ValueError(device_lib.BAD_DESTINATIONS + " Got an empty string.")
        return [device_lib.canonicalize(destinations)]
    if isinstance(destinations, DistributedValues):
        # Component i lives on replica i's device (values made in the notebook carry the host's).
        devices = list(strategy._devices) if strategy is not None else []
        return [devices[i] if i < len(devices) else str(c.device) for i, c in enumerate(destinations.values)]
    if isinstance(destinations, (Variable, ArrayValue)):
        return [str(destinations.device)]
    raise ValueError(f"{device_lib.BAD_DESTINATIONS} Got {destinations!r}.")


def _dtypes(value: Any) -> set[Any]:
    """The dtypes of ``value``'s components (a distributed value's may differ), as TF's int32 check reads them."""
    if isinstance(value, Variable):
        return {np.dtype(value.dtype)}
    comps = value.values if isinstance(value, DistributedValues) else (value,)
    # a value held on a replica knows its dtype: not fetched for this
    return {np.dtype(c.dtype) if isinstance(c, ArrayValue) else np.asarray(c).dtype for c in comps}
