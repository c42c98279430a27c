"""``OneDeviceStrategy``: everything on one device, run by one Dask worker."""

from __future__ import annotations

from typing import Any

from interdist.strategy.base import Strategy
from interdist.strategy.mirrored import resolve_devices
from interdist.values.distributed_variable import OneDeviceVariable


class OneDeviceStrategy(Strategy):
    """A distribution strategy for running on a single device.

    ``run`` returns plain values (not ``PerReplica``) and variables are regular
    variables placed on the device.
    """

    _variable_class = OneDeviceVariable  # type: ignore[assignment]  # a regular variable, not a DistributedVariable
    _kind = "one_device"

    def __init__(self, device: str, cluster: Any = None) -> None:
        if not isinstance(device, str):
            raise TypeError(f"OneDeviceStrategy requires one device string such as 'CPU:0', but got {device!r}")
        super().__init__(resolve_devices([device]), cluster)

    def _variable_kind(self, args: dict[str, Any]) -> str:
        return "mirrored"

    def experimental_distribute_values_from_function(self, value_fn: Any) -> Any:
        return super().experimental_distribute_values_from_function(value_fn).values[0]
