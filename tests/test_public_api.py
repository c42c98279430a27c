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
