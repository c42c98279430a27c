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

from interdist import _context, _nest, _reduction
from interdist import device as device_lib
from interdist.collectives.local import local_group
from interdist.device import refuse_none, refuse_sequence
from interdist.input.input_context import InputContext
from interdist.protocol import GroupSpec
from interdist.reduce_op import check_reduce_op
from interdist.replica.context import ReplicaContext
from interdist.replica.programs import ValueContext
from interdist.replica.replica import Replica
from interdist.strategy.base import Strategy
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

    @property
    def worker_devices(self) -> tuple[str, ...]:
        raise RuntimeError("worker_devices() method unsupported by default tf.distribute.Strategy.")

    @property
    def parameter_devices(self) -> tuple[str, ...]:
        raise RuntimeError("parameter_devices() method unsupported by default tf.distribute.Strategy.")

    experimental_between_graph = False
    experimental_require_static_shapes = False
    experimental_should_init = True
    should_checkpoint = True
    should_save_summary = True

    def reduce_to(self, reduce_op: Any, value: Any, destinations: Any, options: Any = None) -> Any:
        refuse_sequence(destinations, "reduce_to")
        check_reduce_op(reduce_op, "reduce_to")
        return value

    def batch_reduce_to(self, reduce_op: Any, value_destination_pairs: Any, options: Any = None) -> list[Any]:
        check_reduce_op(reduce_op, "batch_reduce_to")
        pairs = list(value_destination_pairs)
        for _, d in pairs:
            refuse_sequence(d, "batch_reduce_to")
        return [v for v, _ in pairs]

    def broadcast_to(self, tensor: Any, destinations: Any) -> Any:
        refuse_none(destinations, "broadcast_to")
        refuse_sequence(destinations, "broadcast_to")
        # TF 2.21's default strategy raises NotImplementedError("TODO") here.
        raise NotImplementedError(
            "broadcast_to is not implemented by the default strategy (as in TF 2.21); "
            "use a strategy's extended.broadcast_to inside its scope"
        )

    def update(self, var: Any, fn: Callable[..., Any], args: Any = (), kwargs: Any = None, group: bool = True) -> Any:
        with _context.enter(self._strategy, None, update_replica_id=0):
            out = fn(var, *args, **(kwargs or {}))
        # group=False: each leaf of fn's result as its one-replica tuple (TF's local results).
        return out if group else _nest.pack_sequence_as(out, [(x,) for x in _nest.flatten(out)])

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
        self._replica_context = _DefaultReplicaContext._for_replica(self._replica)
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
        args, kwargs = _nest.check_call_args(fn, args, kwargs)
        with _context.enter(self, self._replica_context):
            return fn(*args, **kwargs)

    def reduce(self, reduce_op: Any, value: Any, axis: _reduction.Axis = None) -> Any:
        op = check_reduce_op(reduce_op, "reduce")
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


Strategy.register(_DefaultStrategy)  # TF's default strategy is a tf.distribute.Strategy
_default_strategy = _DefaultStrategy()
_context.set_default_factory(lambda: (_default_strategy, _default_strategy._replica_context))


def get_default_strategy() -> Any:
    return _default_strategy
