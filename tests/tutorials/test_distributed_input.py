""" "Distributed input" (tensorflow.org/tutorials/distribute/input), ported block by block.

Each ``block_*`` is the recorder's block (``recorder/distributed_input.py``) on interdist: the same datasets,
distributed over ``MirroredStrategy()`` with 2 replicas, and what each replica gets (values and shapes)
compared with TF 2.21's (``data/distributed_input.json``): batching and the rebatching of partial batches,
``distribute_datasets_from_function`` with its ``InputContext``, ``for x in dist_dataset``, ``iter``/``next``/
``get_next``, ``get_next_as_optional``, ``element_spec``, ``InputOptions``,
``experimental_distribute_values_from_function`` and ``Dataset.from_generator``. ``in_function``: the
tutorial's ``@tf.function`` loops, as plain loops.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest

import interdist as idist

from . import _data
from ._compare import RTOL, assert_close


def _nest_map(fn: Callable[[Any], Any], x: Any) -> Any:
    if isinstance(x, tuple | list):
        return [_nest_map(fn, i) for i in x]
    if isinstance(x, dict):
        return {k: _nest_map(fn, v) for k, v in x.items()}
    return fn(x)


def show(strategy: Any, value: Any) -> dict:
    """One distributed (or plain) value as each replica sees it: values and shapes, nested as the value."""
    local = strategy.experimental_local_results(value)
    return {
        "replicas": [_nest_map(lambda t: np.asarray(t).tolist(), r) for r in local],
        "shapes": [_nest_map(lambda t: list(np.shape(t)), r) for r in local],
    }


def spec(s: Any) -> dict:
    """An element_spec leaf as the recorder writes it: each replica's shape (None: unknown), the dtype's name."""
    if hasattr(s, "num_replicas"):  # PerReplicaSpec
        return {"per_replica": [list(s.spec.shape)] * s.num_replicas, "dtype": np.dtype(s.spec.dtype).name}
    return {"shape": list(s.shape), "dtype": np.dtype(s.dtype).name}


def specs(element_spec: Any) -> Any:
    return _nest_map(spec, element_spec)


def train_step(inputs: Any) -> Any:
    features, labels = inputs
    return labels - 0.3 * features


def block_dataset_without_strategy() -> Any:
    global_batch_size = 16
    dataset = idist.data.Dataset.from_tensors(([1.0], [1.0])).repeat(100).batch(global_batch_size)
    return [np.asarray(train_step(inputs)).tolist() for inputs in dataset]


def block_experimental_distribute_dataset() -> Any:
    global_batch_size = 16
    mirrored_strategy = idist.MirroredStrategy()
    dataset = idist.data.Dataset.from_tensors(([1.0], [1.0])).repeat(100).batch(global_batch_size)
    dist_dataset = mirrored_strategy.experimental_distribute_dataset(dataset)
    # 1 global batch of data fed to the model in 1 step.
    first = next(iter(dist_dataset))
    return {"first": show(mirrored_strategy, first)}


def block_rebatch() -> Any:
    mirrored_strategy = idist.MirroredStrategy()
    out = {}
    dataset = idist.data.Dataset.range(6).batch(4, drop_remainder=False)
    out["range6_batch4"] = [
        show(mirrored_strategy, x) for x in mirrored_strategy.experimental_distribute_dataset(dataset)
    ]
    dataset = idist.data.Dataset.range(9).batch(2)
    out["range9_batch2"] = [
        show(mirrored_strategy, x) for x in mirrored_strategy.experimental_distribute_dataset(dataset)
    ]
    dataset = idist.data.Dataset.range(8).batch(4, drop_remainder=True)
    out["range8_batch4_drop"] = [
        show(mirrored_strategy, x) for x in mirrored_strategy.experimental_distribute_dataset(dataset)
    ]
    return out


def block_auto_shard_policy() -> Any:
    mirrored_strategy = idist.MirroredStrategy()
    dataset = idist.data.Dataset.from_tensor_slices(np.arange(12.0, dtype=np.float32).reshape(6, 2)).batch(4)
    options = idist.data.Options()
    options.experimental_distribute.auto_shard_policy = idist.data.experimental.AutoShardPolicy.DATA
    dataset = dataset.with_options(options)
    return [show(mirrored_strategy, x) for x in mirrored_strategy.experimental_distribute_dataset(dataset)]


def block_distribute_datasets_from_function() -> Any:
    global_batch_size = 16
    mirrored_strategy = idist.MirroredStrategy()
    contexts = []

    def dataset_fn(input_context: Any) -> Any:
        contexts.append(
            [
                input_context.num_input_pipelines,
                input_context.input_pipeline_id,
                input_context.num_replicas_in_sync,
                input_context.get_per_replica_batch_size(global_batch_size),
            ]
        )
        batch_size = input_context.get_per_replica_batch_size(global_batch_size)
        dataset = idist.data.Dataset.from_tensors(([1.0], [1.0])).repeat(64).batch(16)
        dataset = dataset.shard(input_context.num_input_pipelines, input_context.input_pipeline_id)
        dataset = dataset.batch(batch_size)
        dataset = dataset.prefetch(2)  # This prefetches 2 batches per device.
        return dataset

    dist_dataset = mirrored_strategy.distribute_datasets_from_function(dataset_fn)
    steps = [show(mirrored_strategy, x) for x in dist_dataset]
    return {"contexts": contexts, "steps": steps, "element_spec": specs(dist_dataset.element_spec)}


def block_distribute_datasets_from_function_values() -> Any:
    global_batch_size = 16
    mirrored_strategy = idist.MirroredStrategy()

    def dataset_fn(input_context: Any) -> Any:
        batch_size = input_context.get_per_replica_batch_size(global_batch_size)
        dataset = idist.data.Dataset.from_tensor_slices(np.arange(40.0, dtype=np.float32).reshape(40, 1))
        dataset = dataset.shard(input_context.num_input_pipelines, input_context.input_pipeline_id)
        dataset = dataset.batch(batch_size)
        dataset = dataset.prefetch(2)
        return dataset

    dist_dataset = mirrored_strategy.distribute_datasets_from_function(dataset_fn)
    return [show(mirrored_strategy, x) for x in dist_dataset]


def block_for_loop() -> Any:
    global_batch_size = 16
    mirrored_strategy = idist.MirroredStrategy()
    dataset = idist.data.Dataset.from_tensors(([1.0], [1.0])).repeat(100).batch(global_batch_size)
    dist_dataset = mirrored_strategy.experimental_distribute_dataset(dataset)
    losses = []
    for x in dist_dataset:
        # train_step trains the model using the dataset elements
        loss = mirrored_strategy.run(train_step, args=(x,))
        print("Loss is ", loss)
        losses.append(show(mirrored_strategy, loss))
    return losses


def block_iter_next() -> Any:
    global_batch_size = 16
    mirrored_strategy = idist.MirroredStrategy()
    features = np.arange(100.0, dtype=np.float32).reshape(100, 1)
    dataset = idist.data.Dataset.from_tensor_slices((features, 2 * features)).batch(global_batch_size)
    dist_dataset = mirrored_strategy.experimental_distribute_dataset(dataset)
    num_epochs = 2
    steps_per_epoch = 5
    epochs = []
    for _epoch in range(num_epochs):
        dist_iterator = iter(dist_dataset)
        losses = []
        for step in range(steps_per_epoch):
            # train_step trains the model using the dataset elements
            if step % 2 == 0:
                loss = mirrored_strategy.run(train_step, args=(next(dist_iterator),))
            else:
                # which is the same as
                loss = mirrored_strategy.run(train_step, args=(dist_iterator.get_next(),))
            losses.append(show(mirrored_strategy, loss))
        epochs.append(losses)
    return epochs


def block_get_next_as_optional() -> Any:
    # You can break the loop with `get_next_as_optional` by checking if the `Optional` contains a value
    global_batch_size = 4
    steps_per_loop = 5
    strategy = idist.MirroredStrategy()

    dataset = idist.data.Dataset.range(9).batch(global_batch_size)
    distributed_iterator = iter(strategy.experimental_distribute_dataset(dataset))

    out: dict = {"steps": [], "stopped_at": None}

    def train_fn(distributed_iterator: Any) -> None:
        for step in range(steps_per_loop):
            optional_data = distributed_iterator.get_next_as_optional()
            if not optional_data.has_value():
                out["stopped_at"] = step
                break
            per_replica_results = strategy.run(lambda x: x, args=(optional_data.get_value(),))
            out["steps"].append(show(strategy, per_replica_results))

    train_fn(distributed_iterator)
    return out


def block_element_spec() -> Any:
    global_batch_size = 16
    epochs = 2
    steps_per_epoch = 2
    mirrored_strategy = idist.MirroredStrategy()

    dataset = idist.data.Dataset.from_tensors(([1.0], [1.0])).repeat(100).batch(global_batch_size)
    dist_dataset = mirrored_strategy.experimental_distribute_dataset(dataset)

    def train_step(per_replica_inputs: Any) -> Any:  # @tf.function(input_signature=[dist_dataset.element_spec])
        def step_fn(inputs: Any) -> Any:
            return 2 * inputs

        return mirrored_strategy.run(step_fn, args=(per_replica_inputs,))

    outputs = []
    for _ in range(epochs):
        iterator = iter(dist_dataset)
        for _ in range(steps_per_epoch):
            output = train_step(next(iterator))
            outputs.append(show(mirrored_strategy, output))
    return {
        "dataset": specs(dataset.element_spec),
        "dist_dataset": specs(dist_dataset.element_spec),
        "iterator": specs(iter(dist_dataset).element_spec),
        "outputs": outputs,
    }


def block_input_options() -> Any:
    mirrored_strategy = idist.MirroredStrategy()

    def dataset_fn(input_context: Any) -> Any:
        return idist.data.Dataset.from_tensor_slices(np.arange(6.0, dtype=np.float32)).batch(2)

    input_options = idist.InputOptions(experimental_fetch_to_device=False)
    dist_dataset = mirrored_strategy.distribute_datasets_from_function(dataset_fn, input_options)
    return [show(mirrored_strategy, x) for x in dist_dataset]


def block_values_from_function() -> Any:
    mirrored_strategy = idist.MirroredStrategy()

    def value_fn(ctx: Any) -> Any:
        return np.float32(1.0) + ctx.replica_id_in_sync_group

    def step_fn(inputs: Any) -> Any:
        return 2 * inputs

    distributed_values = mirrored_strategy.experimental_distribute_values_from_function(value_fn)
    results = []
    for _ in range(2):
        result = mirrored_strategy.run(step_fn, args=(distributed_values,))
        results.append(show(mirrored_strategy, result))
    return results


def block_generator() -> Any:
    mirrored_strategy = idist.MirroredStrategy()
    rng = np.random.default_rng(6)

    def input_gen() -> Any:
        while True:
            yield rng.random(4).astype(np.float32)

    def step_fn(inputs: Any) -> Any:
        return 2 * inputs

    # use Dataset.from_generator
    dataset = idist.data.Dataset.from_generator(input_gen, output_types=(np.float32), output_shapes=(4,))
    dist_dataset = mirrored_strategy.experimental_distribute_dataset(dataset)
    iterator = iter(dist_dataset)
    results = []
    for _ in range(3):
        result = mirrored_strategy.run(step_fn, args=(next(iterator),))
        results.append(show(mirrored_strategy, result))
    return results


def in_function() -> Any:
    """The tutorial's ``@tf.function`` loops, as plain loops (interdist has no ``tf.function``)."""
    out = {}
    mirrored_strategy = idist.MirroredStrategy()
    dataset = idist.data.Dataset.from_tensors(([1.0], [1.0])).repeat(100).batch(16)
    dist_dataset = mirrored_strategy.experimental_distribute_dataset(dataset)

    def train(dist_dataset: Any) -> Any:
        total = np.float32(0.0)
        for x in dist_dataset:
            loss = mirrored_strategy.run(train_step, args=(x,))
            total += np.sum(mirrored_strategy.reduce("SUM", loss, axis=0))
        return total

    out["for_loop_total"] = float(train(dist_dataset))

    dataset = idist.data.Dataset.range(9).batch(4)
    distributed_iterator = iter(mirrored_strategy.experimental_distribute_dataset(dataset))

    def train_fn(distributed_iterator: Any) -> Any:
        total = np.int64(0)
        for _ in range(5):
            optional_data = distributed_iterator.get_next_as_optional()
            if not optional_data.has_value():
                break
            per_replica_results = mirrored_strategy.run(lambda x: np.sum(x), args=(optional_data.get_value(),))
            total += mirrored_strategy.reduce("SUM", per_replica_results, axis=None)
        return total

    out["get_next_as_optional_total"] = int(train_fn(distributed_iterator))
    return out


BLOCKS = sorted(name[len("block_") :] for name in globals() if name.startswith("block_"))


@pytest.fixture(scope="module")
def recorded() -> dict:
    return _data.load("distributed_input")


@pytest.fixture
def close_strategies(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Close the strategies a block made (the tutorial never closes its own)."""
    made: list[Any] = []
    original = idist.MirroredStrategy.__init__

    def init(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        made.append(self)

    monkeypatch.setattr(idist.MirroredStrategy, "__init__", init)
    yield
    for s in made:
        s.close()


@pytest.mark.parametrize("block", BLOCKS)
def test_block(block: str, two_cpus: None, close_strategies: None, recorded: dict) -> None:
    assert_close(globals()[f"block_{block}"](), recorded[block], rtol=RTOL)


def test_in_function(two_cpus: None, close_strategies: None, recorded: dict) -> None:
    """The tutorial's two ``@tf.function`` loops (``for x in dist_dataset``, ``get_next_as_optional`` until it is
    empty), which TF 2.21 ran on 2 logical CPUs, as plain loops: the same totals."""
    expected = recorded["in_function"]
    actual = in_function()
    assert actual["get_next_as_optional_total"] == expected["get_next_as_optional_total"]
    assert actual["for_loop_total"] == pytest.approx(expected["for_loop_total"], rel=RTOL)
