"""The ``tf.distribute.experimental`` namespace (re-exports only)."""

from __future__ import annotations

from . import coordinator, partitioners
from .input.input_context import InputContext, InputOptions, InputReplicationMode
from .runtime.programs import ValueContext
from .strategy.central_storage import CentralStorageStrategy
from .strategy.multi_worker import CollectiveCommunication, CommunicationImplementation, CommunicationOptions
from .strategy.multi_worker import ExperimentalMultiWorkerMirroredStrategy as MultiWorkerMirroredStrategy
from .strategy.parameter_server import ParameterServerStrategy

__all__ = ["CentralStorageStrategy", "CollectiveCommunication", "CommunicationImplementation",
           "CommunicationOptions", "InputContext", "InputOptions", "InputReplicationMode",
           "MultiWorkerMirroredStrategy", "ParameterServerStrategy", "ValueContext", "coordinator",
           "partitioners"]
