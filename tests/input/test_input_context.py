"""InputContext, InputOptions, AutoShardPolicy and the ``interdist.data`` namespace."""

from __future__ import annotations

import dataclasses
import enum
import pickle

import pytest

import interdist.data as idata
from interdist.input import input_context as ic
from interdist.input.input_context import (
    AutoShardPolicy,
    InputContext,
    InputOptions,
    InputReplicationMode,
)
from interdist.input.options import DistributeOptions, Options


def test_input_context_defaults_and_properties() -> None:
    ctx = InputContext()
    assert (ctx.num_input_pipelines, ctx.input_pipeline_id, ctx.num_replicas_in_sync) == (1, 0, 1)
    ctx = InputContext(num_input_pipelines=2, input_pipeline_id=1, num_replicas_in_sync=4)
    assert (ctx.num_input_pipelines, ctx.input_pipeline_id, ctx.num_replicas_in_sync) == (2, 1, 4)
    with pytest.raises(AttributeError):
        ctx.num_replicas_in_sync = 3  # type: ignore[misc]


@pytest.mark.parametrize("global_batch,replicas", [(4, 2), (8, 4), (6, 3), (0, 2), (5, 1)])
def test_per_replica_batch_size(global_batch: int, replicas: int) -> None:
    ctx = InputContext(num_replicas_in_sync=replicas)
    assert ctx.get_per_replica_batch_size(global_batch) == global_batch // replicas


def test_per_replica_batch_size_not_divisible() -> None:
    ctx = InputContext(num_replicas_in_sync=2)
    with pytest.raises(ValueError) as info:
        ctx.get_per_replica_batch_size(7)
    assert str(info.value) == (
        "The `global_batch_size` 7 is not divisible by `num_replicas_in_sync` 2 "
    )


def test_input_context_repr_and_pickle() -> None:
    ctx = InputContext(2, 1, 4)
    assert repr(ctx) == "tf.distribute.InputContext(input pipeline id 1, total: 2)"
    assert repr(InputContext()) == "tf.distribute.InputContext(input pipeline id 0, total: 1)"
    clone = pickle.loads(pickle.dumps(ctx))
    assert clone == ctx and clone.num_replicas_in_sync == 4


def test_input_replication_mode() -> None:
    assert [m.value for m in InputReplicationMode] == ["PER_WORKER", "PER_REPLICA"]
    assert InputReplicationMode("PER_REPLICA") is InputReplicationMode.PER_REPLICA


def test_input_options_defaults_follow_tf() -> None:
    opts = InputOptions()
    # TF stores experimental_fetch_to_device=None as True.
    assert opts.experimental_fetch_to_device is True
    assert opts.experimental_replication_mode is InputReplicationMode.PER_WORKER
    assert opts.experimental_place_dataset_on_device is False
    assert opts.experimental_per_replica_buffer_size == 1
    assert InputOptions(experimental_fetch_to_device=False).experimental_fetch_to_device is False
    with pytest.raises(dataclasses.FrozenInstanceError):
        opts.experimental_per_replica_buffer_size = 2  # type: ignore[misc]


def test_option_checks_for_datasets_from_function() -> None:
    check = ic.check_options_for_datasets_from_function
    check(None)
    check(InputOptions())
    per_replica = InputReplicationMode.PER_REPLICA
    check(
        InputOptions(
            experimental_fetch_to_device=False,
            experimental_replication_mode=per_replica,
            experimental_place_dataset_on_device=True,
        )
    )
    with pytest.raises(ValueError, match="PER_REPLICA"):
        check(InputOptions(experimental_place_dataset_on_device=True))
    with pytest.raises(ValueError, match="experimental_fetch_to_device"):
        # fetch_to_device defaults to True, so this combination is refused.
        check(
            InputOptions(
                experimental_replication_mode=per_replica,
                experimental_place_dataset_on_device=True,
            )
        )
    with pytest.raises(NotImplementedError):
        check(InputOptions(experimental_replication_mode=per_replica), per_replica_supported=False)


def test_option_checks_for_distribute_dataset() -> None:
    ic.check_options_for_distribute_dataset(None)
    ic.check_options_for_distribute_dataset(InputOptions())
    with pytest.raises(NotImplementedError):
        ic.check_options_for_distribute_dataset(
            InputOptions(experimental_replication_mode=InputReplicationMode.PER_REPLICA)
        )


def test_auto_shard_policy_values() -> None:
    assert issubclass(AutoShardPolicy, enum.IntEnum)
    assert {p.name: int(p) for p in AutoShardPolicy} == {
        "OFF": -1,
        "AUTO": 0,
        "FILE": 1,
        "DATA": 2,
        "HINT": 3,
    }


def test_data_options_like_tf() -> None:
    opts = idata.Options()
    assert opts.experimental_distribute.auto_shard_policy is AutoShardPolicy.AUTO
    assert opts.experimental_distribute.num_devices is None
    opts.experimental_distribute.auto_shard_policy = idata.experimental.AutoShardPolicy.DATA
    assert opts.experimental_distribute.auto_shard_policy is AutoShardPolicy.DATA
    assert Options() == Options() and opts != Options()
    opts.experimental_deterministic = False
    assert opts.deterministic is False
    with pytest.raises(AttributeError):
        DistributeOptions().policy = AutoShardPolicy.OFF
    with pytest.raises(TypeError):
        opts.deterministic = 1  # type: ignore[assignment]


def test_options_merge_only_overrides_what_was_set() -> None:
    a = Options()
    a.experimental_distribute.auto_shard_policy = AutoShardPolicy.DATA
    a.deterministic = True
    b = Options()
    b.deterministic = False
    merged = a.merge(b)
    assert merged.experimental_distribute.auto_shard_policy is AutoShardPolicy.DATA
    assert merged.deterministic is False
    assert a.deterministic is True  # merge does not mutate


def test_data_namespace() -> None:
    assert idata.INFINITE_CARDINALITY == -1
    assert idata.UNKNOWN_CARDINALITY == -2
    assert idata.experimental.AutoShardPolicy is AutoShardPolicy
    assert idata.AutoShardPolicy is AutoShardPolicy
    assert idata.Dataset.range(3).cardinality() == 3
    assert idata.TensorSpec((), "int64").dtype.name == "int64"
