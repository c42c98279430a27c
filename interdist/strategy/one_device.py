"""``OneDeviceStrategy``: everything on one device, run by one Dask worker."""

from __future__ import annotations

from typing import Any

from interdist import _nest
from interdist._convert import as_array
from interdist.device import refuse_none, refuse_sequence
from interdist.reduce_op import check_reduce_op
from interdist.strategy.base import Strategy
from interdist.strategy.extended import StrategyExtended
from interdist.strategy.mirrored import resolve_devices
from interdist.values.distributed import PerReplica
from interdist.values.distributed_variable import OneDeviceVariable
from interdist.values.tensor import ArrayValue, Tensor


class _OneDeviceExtended(StrategyExtended):
    """As TF's ``OneDeviceExtended``: reductions hand the value back as it is (one replica, one device)."""

    def reduce_to(self, reduce_op: Any, value: Any, destinations: Any, options: Any = None) -> Any:
        self._strategy._require_cross_replica("reduce_to")
        refuse_sequence(destinations, "reduce_to")
        check_reduce_op(reduce_op, "reduce_to", "one_device")
        return value

    def batch_reduce_to(self, reduce_op: Any, value_destination_pairs: Any, options: Any = None) -> list[Any]:
        self._strategy._require_cross_replica("batch_reduce_to")
        check_reduce_op(reduce_op, "batch_reduce_to", "one_device")
        pairs = list(value_destination_pairs)
        for _, d in pairs:
            refuse_sequence(d, "batch_reduce_to")
        return [v for v, _ in pairs]

    def broadcast_to(self, tensor: Any, destinations: Any) -> Any:
        self._strategy._require_cross_replica("broadcast_to")
        refuse_none(destinations, "broadcast_to")
        refuse_sequence(destinations, "broadcast_to")
        if isinstance(tensor, ArrayValue):
            return tensor  # TF hands the tensor back as it is
        return Tensor(as_array(tensor), self._strategy._devices[0])


class OneDeviceStrategy(Strategy):
    """A distribution strategy for running on a single device.

    ``run`` returns plain values (not ``PerReplica``) and variables are regular
    variables placed on the device.

    ``security`` (a ``distributed.security.Security``): the TLS credentials to reach the scheduler named
    by ``cluster`` (an address or a cluster object); with no ``cluster``, the embedded cluster speaks
    TLS with these credentials instead of ones made for it alone, so that other clients holding them
    (and only those) can reach it.

    Examples
    --------
    >>> import interdist as idist, numpy as np
    >>> with idist.OneDeviceStrategy("CPU:0") as s:
    ...     with s.scope():
    ...         w = idist.Variable(np.float32(1.0))
    ...     s.num_replicas_in_sync
    ...     s.run(lambda: w + 1.0)  # a plain value, not a PerReplica
    ...     w  # a regular variable, not a MirroredVariable
    1
    <interdist.Tensor: shape=(), dtype=float32, numpy=2.0>
    <interdist.Variable 'Variable:0' shape=() dtype=float32, numpy=1.0>
    """

    _variable_class = OneDeviceVariable  # type: ignore[assignment]  # a regular variable, not a DistributedVariable
    _kind = "one_device"
    _extended_class = _OneDeviceExtended

    def __init__(self, device: str, cluster: Any = None, security: Any = None) -> None:
        if not isinstance(device, str):
            raise TypeError(f"OneDeviceStrategy requires one device string such as 'CPU:0', but got {device!r}")
        super().__init__(resolve_devices([device]), cluster, security=security)

    def _variable_kind(self, args: dict[str, Any]) -> str:
        return "mirrored"

    def experimental_distribute_values_from_function(self, value_fn: Any) -> Any:
        # TF: value_fn's value itself (a nest stays that nest), not PerReplica values.
        return _nest.map_structure(
            lambda x: x.values[0] if isinstance(x, PerReplica) else x,
            super().experimental_distribute_values_from_function(value_fn),
        )
