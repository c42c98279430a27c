"""The public namespace is pinned: a change to it is a deliberate change to this test."""

from __future__ import annotations

import interdist as idist


def test_all_is_pinned() -> None:
    assert sorted(idist.__all__) == sorted([
        "Checkpoint", "CollectiveAbortedError", "CollectiveTimeoutError", "CrossDeviceOps", "DistributedValues",
        "HierarchicalCopyAllReduce", "InputContext", "InputOptions", "InputReplicationMode", "InterdistError",
        "Mirrored", "MirroredStrategy", "MirroredVariable", "MultiWorkerMirroredStrategy", "NcclAllReduce", "NoGPUError", "OneDeviceStrategy",
        "PerReplica", "ReduceOp", "ReductionToOneDevice", "RemoteValue", "ReplicaContext", "ReplicaError",
        "RunOptions", "Server", "Strategy", "StrategyExtended", "SyncOnReadVariable", "Tensor", "ValueContext", "Variable",
        "VariableAggregation", "VariableSynchronization", "WorkerLostError", "__version__", "cluster_resolver",
        "config", "data", "debug", "experimental", "experimental_set_strategy", "get_cross_replica_context",
        "get_replica_context", "get_strategy", "has_strategy", "in_cross_replica_context", "metrics", "optimizers",
    ])
    for name in idist.__all__:
        assert hasattr(idist, name), name


def test_reduce_op_lookup() -> None:
    import pytest

    assert idist.ReduceOp("SUM") is idist.ReduceOp.SUM
    with pytest.raises(ValueError):
        idist.ReduceOp("sum")  # the enum looks up by exact value, as TF's
    from interdist.reduce_op import resolve

    assert resolve("mEaN") is idist.ReduceOp.MEAN
    with pytest.raises(ValueError, match="'SUM', 'MEAN'"):
        resolve("max")


def test_device_strings() -> None:
    import pytest

    from interdist.device import canonicalize

    assert canonicalize("cpu:3") == "/job:localhost/replica:0/task:0/device:CPU:3"
    assert canonicalize("/job:worker/task:1/device:GPU:0") == "/job:worker/replica:0/task:1/device:GPU:0"
    with pytest.raises(ValueError):
        canonicalize("TPU-ish")


# tf.distribute's own index (TF 2.21 API docs, "Module: tf.distribute"): classes, functions, modules.
TF_DISTRIBUTE = {
    "classes": ["CrossDeviceOps", "DistributedValues", "HierarchicalCopyAllReduce", "InputContext",
                "InputReplicationMode", "MirroredStrategy", "NcclAllReduce", "OneDeviceStrategy", "ReduceOp",
                "ReductionToOneDevice", "ReplicaContext", "RunOptions", "Server", "Strategy", "StrategyExtended"],
    "functions": ["experimental_set_strategy", "get_replica_context", "get_strategy", "has_strategy",
                  "in_cross_replica_context"],
    "modules": ["cluster_resolver", "experimental"],
}
# tf.distribute.experimental names interdist implements (TF also has TPUStrategy, CollectiveHints,
# PreemptionCheckpointHandler, PreemptionWatcher, TerminationConfig and rpc, which interdist does not).
TF_EXPERIMENTAL = ["CentralStorageStrategy", "CollectiveCommunication", "CommunicationImplementation",
                   "CommunicationOptions", "MultiWorkerMirroredStrategy", "ParameterServerStrategy", "ValueContext",
                   "coordinator", "partitioners"]


def test_tf_distribute_names_are_public_with_their_kind() -> None:
    import inspect

    for name in TF_DISTRIBUTE["classes"]:
        assert name in idist.__all__ and inspect.isclass(getattr(idist, name)), name
    for name in TF_DISTRIBUTE["functions"]:
        assert name in idist.__all__ and inspect.isfunction(getattr(idist, name)), name
    for name in TF_DISTRIBUTE["modules"]:
        assert name in idist.__all__ and inspect.ismodule(getattr(idist, name)), name


def test_experimental_namespace_is_pinned() -> None:
    import interdist.experimental as ex

    # TF's names, plus the input classes TF also exports from tf.distribute (InputContext & co.).
    assert sorted(ex.__all__) == sorted([*TF_EXPERIMENTAL, "InputContext", "InputOptions", "InputReplicationMode"])
    for name in ex.__all__:
        assert hasattr(ex, name), name
    assert ex.coordinator.ClusterCoordinator.__name__ == "ClusterCoordinator"
    assert ex.MultiWorkerMirroredStrategy is not idist.MultiWorkerMirroredStrategy  # TF's deprecated alias class
    assert issubclass(ex.MultiWorkerMirroredStrategy, idist.MultiWorkerMirroredStrategy)


def test_public_modules_only_re_export() -> None:
    """``interdist/__init__.py`` and ``experimental.py`` define nothing: code lives below them (JAX's habit)."""
    import ast
    from pathlib import Path

    for module in ("__init__.py", "experimental.py", "data.py"):
        tree = ast.parse((Path(idist.__file__).parent / module).read_text())
        defined = [n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef))]
        assert defined == [], (module, defined)
