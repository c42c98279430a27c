"""``CentralStorageStrategy``: variables in one place, compute replicated on the compute devices.

interdist keeps each variable as one logical variable on the parameter device:
``experimental_local_results(v)`` is ``(v,)`` and its device the parameter
device. Replicas read it at use and updates are reduced before they apply.
"""

from __future__ import annotations

from typing import Any

from .. import device as device_lib
from .base import Strategy, StrategyExtended
from .mirrored import resolve_devices


class _CentralExtended(StrategyExtended):
    experimental_between_graph = True  # as TF 2.21 reports it for CentralStorageStrategy

    @property
    def worker_devices(self) -> Any:
        return list(self._strategy._devices)  # a list here, not a tuple (as TF 2.21)


class CentralStorageStrategy(Strategy):
    """A one-machine strategy that puts all variables on a single device."""

    _extended_class = _CentralExtended

    _kind = "central_storage"

    def __init__(self, compute_devices: Any = None, parameter_device: str | None = None, cluster: Any = None) -> None:
        devices = resolve_devices(compute_devices, allow_duplicates=True)
        if parameter_device is None:
            # TF's default with several compute devices is the host's CPU, spelled "/device:CPU:0".
            parameter_device = devices[0] if len(devices) == 1 else "/device:CPU:0"
        self._parameter_device_as_given = parameter_device  # TF reports parameter_devices as given
        self._parameter_device = device_lib.canonicalize(parameter_device)
        super().__init__(devices, cluster, spec={"parameter_devices": [self._parameter_device]})

    def _parameter_devices(self) -> list[str]:
        return [self._parameter_device_as_given]

    def _variable_kind(self, args: dict[str, Any]) -> str:
        return "central"

    def _variable_devices(self, kind: str) -> list[str]:
        return [self._parameter_device]
