"""The public namespace is pinned: a change to it is a deliberate change to this test."""

from __future__ import annotations

import interdist as idist


def test_all_is_pinned() -> None:
    assert sorted(idist.__all__) == sorted(
        [
            "Checkpoint",
            "CheckpointManager",
            "CollectiveAbortedError",
            "CollectiveTimeoutError",
            "CrossDeviceOps",
            "DistributedDataset",
            "DistributedIterator",
            "DistributedValues",
            "ParameterServerStrategy",
            "TPUStrategy",
            "coordinator",
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
            "GradientTape",
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
    )
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


# dir(tf.distribute) in TF 2.21 (checked), by kind: interdist exports every one of them.
TF_DISTRIBUTE = {
    "classes": [
        "CrossDeviceOps",
        "DistributedDataset",
        "DistributedIterator",
        "DistributedValues",
        "HierarchicalCopyAllReduce",
        "InputContext",
        "InputOptions",
        "InputReplicationMode",
        "MirroredStrategy",
        "MultiWorkerMirroredStrategy",
        "NcclAllReduce",
        "OneDeviceStrategy",
        "ParameterServerStrategy",
        "ReduceOp",
        "ReductionToOneDevice",
        "ReplicaContext",
        "RunOptions",
        "Server",
        "Strategy",
        "StrategyExtended",
        "TPUStrategy",
    ],
    "functions": [
        "experimental_set_strategy",
        "get_replica_context",
        "get_strategy",
        "has_strategy",
        "in_cross_replica_context",
    ],
    "modules": ["cluster_resolver", "coordinator", "experimental"],
}
# tf.distribute.experimental names interdist implements (TF also has CollectiveHints,
# PreemptionCheckpointHandler, PreemptionWatcher, TerminationConfig and rpc, which interdist does not).
TF_EXPERIMENTAL = [
    "CentralStorageStrategy",
    "CollectiveCommunication",
    "CommunicationImplementation",
    "CommunicationOptions",
    "MultiWorkerMirroredStrategy",
    "ParameterServerStrategy",
    "TPUStrategy",
    "ValueContext",
    "coordinator",
    "partitioners",
]


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
        # but the module's own attribute hooks (PEP 562): ``interdist.Server`` is imported on first use, so that
        # ``python -m interdist.server`` finds interdist.server not yet imported (runpy's RuntimeWarning)
        hooks = ["__getattr__", "__dir__"] if module == "__init__.py" else []
        assert defined == hooks, (module, defined)


def test_no_leaked_names_at_the_top() -> None:
    """``annotations`` (a __future__ import) and helpers TF does not expose stay out of the top level."""
    assert not hasattr(idist, "annotations")
    assert "get_cross_replica_context" not in idist.__all__ and not hasattr(idist, "get_cross_replica_context")
    from interdist.distribute_lib import get_cross_replica_context  # still importable from its module

    assert callable(get_cross_replica_context)


def test_tpu_strategy_is_refused_clearly() -> None:
    import pytest

    for cls in (idist.TPUStrategy, idist.experimental.TPUStrategy):
        assert issubclass(cls, idist.Strategy)
        with pytest.raises(NotImplementedError, match="no TPU support"):
            cls()


def test_reduce_op_kinds_are_checked_as_tf() -> None:
    """``check_reduce_op``: names in any case; another string ValueError; anything else AssertionError."""
    import enum

    import pytest

    from interdist.reduce_op import check_reduce_op

    assert check_reduce_op("sum", "reduce") is idist.ReduceOp.SUM
    assert check_reduce_op("Mean", "all_reduce") is idist.ReduceOp.MEAN
    with pytest.raises(ValueError, match="'BOGUS' is not a valid ReduceOp"):
        check_reduce_op("BOGUS", "reduce")

    class E(enum.Enum):
        SUM = "SUM"

    for bad in (1, None, object(), E.SUM, idist.VariableAggregation.SUM):
        with pytest.raises(AssertionError, match=r"reduce_op must be a tf\.distribute\.ReduceOp"):
            check_reduce_op(bad, "reduce")
        with pytest.raises(ValueError, match=r"must be Reduce\.SUM or Reduce\.MEAN"):
            check_reduce_op(bad, "all_reduce", kind="central_storage")
