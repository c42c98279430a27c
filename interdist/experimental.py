"""The ``tf.distribute.experimental`` namespace (re-exports only)."""

from __future__ import annotations

from .input.input_context import InputContext, InputOptions, InputReplicationMode
from .runtime.programs import ValueContext
from .strategy.central_storage import CentralStorageStrategy

__all__ = ["CentralStorageStrategy", "InputContext", "InputOptions", "InputReplicationMode", "ValueContext"]
