"""The ``tf.distribute.experimental`` namespace (re-exports only).

>>> import interdist as idist
>>> idist.experimental.partitioners.FixedShardsPartitioner(2)((4, 3), "float32")
[2, 1]
"""

from interdist import partitioners
from interdist.input.input_context import InputContext, InputOptions, InputReplicationMode
from interdist.replica.programs import ValueContext
from interdist.strategy import coordinator
from interdist.strategy.central_storage import CentralStorageStrategy
from interdist.strategy.multi_worker import CollectiveCommunication, CommunicationImplementation, CommunicationOptions
from interdist.strategy.multi_worker import ExperimentalMultiWorkerMirroredStrategy as MultiWorkerMirroredStrategy
from interdist.strategy.parameter_server import ParameterServerStrategy
from interdist.strategy.tpu import TPUStrategy

__all__ = [
    "CentralStorageStrategy",
    "CollectiveCommunication",
    "CommunicationImplementation",
    "CommunicationOptions",
    "InputContext",
    "InputOptions",
    "InputReplicationMode",
    "MultiWorkerMirroredStrategy",
    "ParameterServerStrategy",
    "TPUStrategy",
    "ValueContext",
    "coordinator",
    "partitioners",
]
