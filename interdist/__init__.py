"""interdist: TensorFlow's ``tf.distribute`` API for NumPy arrays, with replicas on Dask workers.

This module only re-exports; the code lives below it, in layers by where it runs. Each layer
imports only the layers under it, function-local imports included (``tests/test_architecture.py``):

====================  ===========================================================================
layer                 modules
====================  ===========================================================================
core                  ``_context _convert _gpu _nest _reduction reduce_op errors events config
                      device``: stdlib and NumPy only (``config``: and ``dask.config``)
contract              ``protocol`` (the notebook <-> replica messages as types), ``control``
                      (the same-host socket framing)
collectives           ``collectives/`` (backends, algorithms, ``CrossDeviceOps``),
                      ``cluster_resolver/``, ``partitioners``
values, input         ``values/`` (distributed values, variables), ``input/`` (datasets)
replica               ``replica/``: the SPMD engine, Dask-agnostic
worker                ``worker/``: the Dask binding (one ``WorkerPlugin``)
views                 ``dashboard/``, ``lab/``: read events only
client                ``client/``: the notebook's side (clusters, groups, event log)
api                   ``strategy/``, ``optimizers``, ``metrics``, ``checkpoint``, ``data``...
top                   this module, ``experimental``, ``server``, ``demo``
====================  ===========================================================================
"""

from importlib import metadata as _metadata
from typing import TYPE_CHECKING as _TYPE_CHECKING
from typing import Any as _Any

from . import (
    autodiff,
    cluster_resolver,
    config,
    data,
    debug,
    experimental,
    initializers,
    layers,
    losses,
    math,
    metrics,
    nn,
    optimizers,
    random,
    regularizers,
    train,
)
from .autodiff import GradientTape, UnconnectedGradients, stop_gradient, value_and_grad
from .checkpoint import Checkpoint, CheckpointManager
from .collectives.cross_device_ops import CrossDeviceOps, HierarchicalCopyAllReduce, NcclAllReduce, ReductionToOneDevice
from .debug import performance_report
from .distribute_lib import (
    experimental_set_strategy,
    get_replica_context,
    get_strategy,
    has_strategy,
    in_cross_replica_context,
)
from .errors import (
    CollectiveAbortedError,
    CollectiveTimeoutError,
    InterdistError,
    IteratorLostError,
    NoGPUError,
    ReplicaError,
    WorkerLostError,
)
from .input.distributed_dataset import DistributedDataset, DistributedIterator
from .input.input_context import InputContext, InputOptions, InputReplicationMode
from .nn import add_n
from .reduce_op import ReduceOp
from .replica.context import ReplicaContext
from .replica.programs import ValueContext
from .strategy import coordinator
from .strategy.base import RunOptions, Strategy
from .strategy.extended import StrategyExtended
from .strategy.mirrored import MirroredStrategy
from .strategy.multi_worker import MultiWorkerMirroredStrategy
from .strategy.one_device import OneDeviceStrategy
from .strategy.parameter_server import ParameterServerStrategy
from .strategy.tpu import TPUStrategy
from .values.distributed import DistributedValues, Mirrored, PerReplica
from .values.distributed_variable import MirroredVariable, SyncOnReadVariable
from .values.reprs import visualize
from .values.tensor import RemoteValue, Tensor
from .values.variables import Variable, VariableAggregation, VariableSynchronization

if _TYPE_CHECKING:
    from .server import Server


def __getattr__(name: str) -> _Any:
    """``Server`` is imported on first use: ``python -m interdist.server`` runs that module as ``__main__``,
    and runpy warns (a RuntimeWarning) when importing the package has imported it already."""
    if name == "Server":
        from .server import Server

        globals()["Server"] = Server
        return Server
    raise AttributeError(f"module 'interdist' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), "Server"})


try:  # one version, in extension/package.json: the build writes it into the metadata (pyproject.toml)
    __version__ = _metadata.version("interdist")
    """The installed version of interdist (``"0+unknown"`` in a source tree that was never installed).

    >>> import interdist as idist
    >>> isinstance(idist.__version__, str) and idist.__version__[0].isdigit()
    True
    """
except _metadata.PackageNotFoundError:  # a source tree on sys.path that was never installed
    __version__ = "0+unknown"

__all__ = [
    "Checkpoint",
    "CheckpointManager",
    "CollectiveAbortedError",
    "CollectiveTimeoutError",
    "CrossDeviceOps",
    "DistributedDataset",
    "DistributedIterator",
    "DistributedValues",
    "GradientTape",
    "HierarchicalCopyAllReduce",
    "InputContext",
    "InputOptions",
    "InputReplicationMode",
    "InterdistError",
    "IteratorLostError",
    "Mirrored",
    "MirroredStrategy",
    "MirroredVariable",
    "MultiWorkerMirroredStrategy",
    "NcclAllReduce",
    "NoGPUError",
    "OneDeviceStrategy",
    "ParameterServerStrategy",
    "PerReplica",
    "ReduceOp",
    "ReductionToOneDevice",
    "RemoteValue",
    "ReplicaContext",
    "ReplicaError",
    "RunOptions",
    "Server",
    "Strategy",
    "StrategyExtended",
    "SyncOnReadVariable",
    "TPUStrategy",
    "Tensor",
    "UnconnectedGradients",
    "ValueContext",
    "Variable",
    "VariableAggregation",
    "VariableSynchronization",
    "WorkerLostError",
    "__version__",
    "add_n",
    "autodiff",
    "cluster_resolver",
    "config",
    "coordinator",
    "data",
    "debug",
    "experimental",
    "experimental_set_strategy",
    "get_replica_context",
    "get_strategy",
    "has_strategy",
    "in_cross_replica_context",
    "initializers",
    "layers",
    "losses",
    "math",
    "metrics",
    "nn",
    "optimizers",
    "performance_report",
    "random",
    "regularizers",
    "stop_gradient",
    "train",
    "value_and_grad",
    "visualize",
]
