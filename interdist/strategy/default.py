"""The default strategy: what ``get_strategy()`` returns outside any scope.

It runs everything in the notebook's process, on one replica, with TF's
"reasonable default behaviour": ``run`` calls ``fn``, ``reduce`` returns the
value, variables are plain variables.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

from interdist import _context, _reduction
from interdist import device as device_lib
from interdist.collectives.local import local_group
from interdist.input.input_context import InputContext
from interdist.protocol import GroupSpec
from interdist.reduce_op import resolve
from interdist.replica.context import ReplicaContext
from interdist.replica.programs import ValueContext
from interdist.replica.replica import Replica
from interdist.values.distributed import DistributedValues
from interdist.values.variables import Variable


class _DefaultReplicaContext(ReplicaContext):
    @property
    def replica_id_in_sync_group(self) -> Any:
        return 0

    @property
    def strategy(self) -> Any:
        return _default_strategy


class _DefaultExtended:
    def __init__(self, strategy: _DefaultStrategy) -> None:
        self._strategy = strategy

    worker_devices = (device_lib.host_device(),)
    parameter_devices = (device_lib.host_device(),)
    experimental_between_graph = False
    experimental_require_static_shapes = False
    experimental_should_init = True
    should_checkpoint = True
    should_save_summary = True

    def reduce_to(self, reduce_op: Any, value: Any, destinations: Any, options: Any = None) -> Any:
        resolve(reduce_op)
        return value

    def batch_reduce_to(self, reduce_op: Any, value_destination_pairs: Any, options: Any = None) -> list[Any]:
        resolve(reduce_op)
        return [v for v, _ in value_destination_pairs]

    def broadcast_to(self, tensor: Any, destinations: Any) -> Any:
        return tensor

    def update(self, var: Any, fn: Callable[..., Any], args: Any = (), kwargs: Any = None, group: bool = True) -> Any:
        with _context.enter(self._strategy, None, update_replica_id=0):
            return fn(var, *args, **(kwargs or {}))

    def call_for_each_replica(self, fn: Callable[..., Any], args: Any = (), kwargs: Any = None) -> Any:
        return self._strategy.run(fn, args, kwargs)

    def value_container(self, value: Any) -> Any:
        return value

    @contextmanager
    def colocate_vars_with(self, colocate_with_variable: Any) -> Iterator[None]:
        yield

    def variable_created_in_scope(self, v: Any) -> bool:

        return isinstance(v, Variable) and getattr(v, "_strategy", None) is None


class _DefaultStrategy:
    """The default no-op strategy (one replica, in the notebook)."""

    _is_default = True

    def __init__(self) -> None:
        transport = local_group(1)[0]
        spec: GroupSpec = {"world_size": 1, "devices": [device_lib.host_device()], "kind": "default"}
        self._replica = Replica("default", 0, spec, transport, lambda e: None, lambda s, r: None)
        self._replica.view = self  # type: ignore[assignment]  # the default strategy is its replica's view
        self._replica_context = _DefaultReplicaContext(self._replica)
        self._replica.context = self._replica_context
        self.extended = _DefaultExtended(self)

    num_replicas_in_sync = 1
    cluster_resolver = None

    @contextmanager
    def scope(self) -> Iterator[Any]:
        with _context.enter(self, None):
            yield self

    def run(self, fn: Callable[..., Any], args: Any = (), kwargs: Any = None, options: Any = None) -> Any:
        self._replica.step += 1
        self._replica.seq = 0
        with _context.enter(self, self._replica_context):
            return fn(*args, **(kwargs or {}))

    def reduce(self, reduce_op: Any, value: Any, axis: int | None = None) -> Any:
        op = resolve(reduce_op)
        if isinstance(value, DistributedValues):
            return _reduction.reduce_components(op, list(value.values), axis)
        if axis is None:
            return value
        return _reduction.reduce_components(op, [value], axis)

    def gather(self, value: Any, axis: int) -> Any:
        return np.asarray(value)

    def experimental_local_results(self, value: Any) -> tuple[Any, ...]:
        if isinstance(value, DistributedValues):
            return value.values
        return (value,)

    def experimental_distribute_values_from_function(self, value_fn: Callable[..., Any]) -> Any:
        return value_fn(ValueContext(0, 1))

    def experimental_distribute_dataset(self, dataset: Any, options: Any = None) -> Any:
        return dataset

    def distribute_datasets_from_function(self, dataset_fn: Callable[..., Any], options: Any = None) -> Any:

        return dataset_fn(InputContext())

    experimental_distribute_datasets_from_function = distribute_datasets_from_function

    def __repr__(self) -> str:
        return "<interdist default strategy>"


_default_strategy = _DefaultStrategy()
_context.set_default_factory(lambda: (_default_strategy, _default_strategy._replica_context))


def get_default_strategy() -> Any:
    return _default_strategy
