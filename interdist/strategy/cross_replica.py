"""``Strategy``'s cross-replica API: local results, ``reduce`` and ``gather`` of the replicas' values.

These read what a ``run`` left on the replicas and bring it to the notebook (host CPU:0), reducing
on the replicas when the values are stored there (``replica/programs.py``). ``_mirror`` places a
notebook value on the replicas' devices, for ``StrategyExtended.reduce_to``/``broadcast_to``.
A mixin of ``Strategy`` (base.py), on the round trip of ``dispatch.py``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from interdist import _nest, _reduction
from interdist import device as device_lib
from interdist.protocol import StoreRef
from interdist.reduce_op import ReduceOp, check_reduce_op
from interdist.replica import programs
from interdist.strategy.dispatch import ReplicaDispatch
from interdist.values.distributed import DistributedValues, Mirrored, PerReplica
from interdist.values.distributed_variable import DistributedVariable, _Handle
from interdist.values.tensor import ArrayValue, RemoteValue, Tensor


class CrossReplicaMixin(ReplicaDispatch):
    """Reading the replicas' values from the notebook: ``experimental_local_results``, ``reduce``, ``gather``."""

    def experimental_local_results(self, value: Any) -> tuple[Any, ...]:
        """The per-replica values contained in ``value``; ``(value,)`` for a single value."""
        if isinstance(value, DistributedValues):
            return value.values
        if _nest.is_nested(value):
            # TF maps over the nest: one copy of the structure per replica, components picked.
            return tuple(
                _nest.map_structure(lambda x, r=r: x.values[r] if isinstance(x, DistributedValues) else x, value)
                for r in range(self.num_replicas_in_sync)
            )
        return (value,)

    def reduce(self, reduce_op: Any, value: Any, axis: _reduction.Axis = None) -> Any:
        """Reduce ``value`` across replicas and return the result in the notebook (host CPU:0).

        ``axis=None`` reduces across replicas only; ``axis=0`` also across the batch
        (MEAN divides by the true number of elements, also for uneven last batches).
        """
        op = check_reduce_op(reduce_op, "reduce")  # TF 2.21: AssertionError for a VariableAggregation too
        self._check_usable()
        self._require_cross_replica("reduce")
        if _nest.is_nested(value):
            return _nest.map_structure(lambda v: self.reduce(op, v, axis), value)
        n = self.num_replicas_in_sync
        if isinstance(value, Mirrored) and n > 1:
            if op == ReduceOp.SUM and axis is None:
                # TF 2.21 asserts that a SUM never gets a mirrored value (checked with TF).
                raise AssertionError(f"reduce(SUM) of a mirrored value {value!r}: its copies are already equal")
            if axis is None:
                return Tensor(np.asarray(value), device_lib.host_device())
        host = device_lib.host_device()
        if isinstance(value, DistributedVariable):
            value = PerReplica([np.asarray(c) for c in value.values])
        elif isinstance(value, _Handle):
            value = value.read_value()
        if not isinstance(value, DistributedValues):
            if axis is None:
                return Tensor(_reduction.reduce_non_distributed(op, value, n), host)
            return Tensor(_reduction.reduce_components(op, [value] * n, axis), host)
        owner = getattr(value, "_strategy", None)
        if owner is not None and owner is not self:
            # Deliberate deviation: TF 2.21 reduces another strategy's PerReplica without a word
            # (component i as replica i's), a silent wrong answer when the strategies differ.
            raise ValueError(
                f"strategy.reduce got a {type(value).__name__} made by another strategy ({owner!r}); reduce it "
                f"with that strategy, or pass plain values to {self!r}"
            )
        comps = self._select_all(value)
        self._refuse_python_values(value, comps)
        if all(not isinstance(c, StoreRef) for c in comps):
            return Tensor(_reduction.reduce_components(op, list(comps), axis), host)
        results = self._system(programs.reduce_values, per_rank=[(op, axis, c) for c in comps])
        return Tensor(_meta_value(results[0], self, 0), host)

    def _refuse_python_values(self, value: DistributedValues, comps: list[Any]) -> None:
        """TF 2.21's Mirrored reduction needs tensors: a PerReplica of Python numbers (kept as they are by
        experimental_distribute_values_from_function, or returned by run) fails there (checked)."""
        python = [c for c in comps if type(c) in (int, float, bool, complex, str)]
        if python and self._kind == "mirrored":
            raise AttributeError(
                f"strategy.reduce cannot reduce a {type(value).__name__} of Python {type(python[0]).__name__} "
                f"values on {type(self).__name__} ('{type(python[0]).__name__}' object has no attribute 'device', "
                "as in TF 2.21); return NumPy values (e.g. np.float32(x)) from value_fn or the replica function"
            )

    def _select_all(self, value: DistributedValues) -> list[Any]:
        out: list[Any] = []
        for r, c in enumerate(self._select_values(value)):
            if isinstance(c, RemoteValue) and c._owner is self._group and c._rank == r and not c.is_fetched:
                out.append(StoreRef(c._key))
            else:
                out.append(np.asarray(c) if isinstance(c, ArrayValue) else c)
        return out

    def gather(self, value: Any, axis: int) -> Any:
        """Concatenate the replicas' values along ``axis`` into one value in the notebook."""
        self._check_usable()
        self._require_cross_replica("gather")
        host = device_lib.host_device()
        if axis < 0:
            raise ValueError(f"gather requires 0 <= axis < rank of the value, but got axis={axis}")
        if not isinstance(value, DistributedValues):
            return Tensor(_reduction.gather_components([value], axis), host)  # TF: the value itself
        comps = self._select_all(value)
        self._refuse_python_values(value, comps)
        if all(not isinstance(c, StoreRef) for c in comps):
            return Tensor(_reduction.gather_components(list(comps), axis), host)
        results = self._system(programs.gather_values, per_rank=[(axis, c) for c in comps])
        return Tensor(_meta_value(results[0], self, 0), host)

    def _mirror(self, value: np.ndarray, destinations: Any) -> Any:
        """``value`` on ``destinations``: one device string gives a single value, else a ``Mirrored``."""
        if isinstance(destinations, str):
            return Tensor(value, device_lib.canonicalize(destinations))
        return Mirrored([Tensor(value, d) for d in self._devices], self)


def _meta_value(meta: Any, strategy: ReplicaDispatch, rank: int) -> Any:
    if meta is None:
        return None
    if meta.has_value:
        return meta.value
    return strategy._group.fetch(rank, meta.key)
