"""``StrategyExtended``: TF's additional APIs for distribution-aware algorithms (``strategy.extended``).

``reduce_to``, ``batch_reduce_to``, ``broadcast_to``, ``update``, ``colocate_vars_with``,
``value_container`` and the device properties, in the notebook (cross-replica context).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import numpy as np

from interdist import _context, _reduction
from interdist import device as device_lib
from interdist._convert import as_array
from interdist.reduce_op import ReduceOp, resolve
from interdist.values.distributed import DistributedValues, Mirrored
from interdist.values.distributed_variable import (
    DistributedVariable,
    VariableComponent,
    _Handle,
)
from interdist.values.tensor import Tensor
from interdist.values.variables import (
    Variable,
)

if TYPE_CHECKING:
    from interdist.strategy.base import Strategy


class StrategyExtended:
    """Additional APIs for algorithms that need to be distribution-aware."""

    def __init__(self, strategy: Strategy) -> None:
        self._container_strategy_weakref = weakref.ref(strategy)

    @property
    def _strategy(self) -> Strategy:
        s = self._container_strategy_weakref()
        assert s is not None
        return s

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
        """Combine ``value`` across replicas onto ``destinations``: a ``Mirrored`` value (in the notebook)."""
        op = resolve(reduce_op)
        self._strategy._require_cross_replica("reduce_to")
        self._check_destinations(destinations)
        s = self._strategy
        if isinstance(value, Mirrored) and op == ReduceOp.MEAN and not isinstance(value, DistributedVariable):
            return s._mirror(np.asarray(value), destinations) if isinstance(destinations, str) else value
        if isinstance(value, (DistributedValues, DistributedVariable)):
            reduced = np.asarray(s.reduce(op, value, axis=None))
        else:
            reduced = _reduction.reduce_non_distributed(op, value, s.num_replicas_in_sync)
            if isinstance(destinations, str):
                return Tensor(as_array(reduced), device_lib.host_device())  # TF hands the value back as it is
        return s._mirror(as_array(reduced), destinations)

    def batch_reduce_to(self, reduce_op: Any, value_destination_pairs: Any, options: Any = None) -> list[Any]:
        """Many ``reduce_to`` calls; the replicas' parts travel in one program."""
        op = resolve(reduce_op)
        pairs = list(value_destination_pairs)
        if self._strategy.num_replicas_in_sync > 1:
            _check_one_dtype([v for v, _ in pairs])
        out = []
        for v, d in pairs:
            if isinstance(v, (DistributedValues, DistributedVariable)):
                out.append(self.reduce_to(op, v, d, options))
            else:
                # TF's batched path hands plain values back as they are (no SUM check).
                out.append(Tensor(as_array(v), device_lib.host_device()))
        return out

    def broadcast_to(self, tensor: Any, destinations: Any) -> Any:
        """Mirror ``tensor`` to the destination devices."""
        self._strategy._require_cross_replica("broadcast_to")
        self._check_destinations(destinations)
        return self._strategy._mirror(as_array(tensor), destinations)

    def _check_destinations(self, destinations: Any) -> None:
        if isinstance(destinations, str):
            device_lib.parse(destinations)
        elif destinations is None:
            raise ValueError("destinations can not be None")

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
        return isinstance(v, _Handle) and v._strategy is self._strategy

    def _local_results(self, value: Any) -> tuple[Any, ...]:
        return self._strategy.experimental_local_results(value)


def _check_one_dtype(values: list[Any]) -> None:
    """``batch_reduce_to`` packs its values into one collective: TF refuses mixed dtypes there."""
    dtypes = set()
    for v in values:
        comps = v.values if isinstance(v, DistributedValues) else (v,)
        dtypes |= {np.asarray(c).dtype for c in comps[:1]}
    if len(dtypes) > 1:
        raise ValueError(
            f"batch_reduce_to cannot reduce values of different dtypes in one batch: {sorted(d.name for d in dtypes)}"
        )
