"""Record "Distributed input" (tensorflow.org/tutorials/distribute/input): what each of its blocks yields.

Run with TensorFlow 2.21's Python (writes ../data/distributed_input.json)::

    nice -n 10 /tmp/tfenv/bin/python tests/tutorials/recorder/distributed_input.py

Each ``block_*`` is one of the tutorial's code blocks, on ``MirroredStrategy()`` over 2 logical CPUs, called
eagerly (the tutorial's ``@tf.function`` steps are plain functions; ``in_function`` records what the
``@tf.function`` forms give). A block returns what its ``print``s would show, as JSON: for a distributed value,
each replica's component (``replicas``: values, ``shapes``: shapes, since an empty component's values do not
show its shape). A few blocks use distinct values (``np.arange``) where the tutorial's ``[1.]`` everywhere
could not show which example went where; the interdist port runs the same blocks.
"""

from __future__ import annotations

import _common
import numpy as np

_common.two_cpus()

import _data  # noqa: E402
import tensorflow as tf  # noqa: E402


def show(strategy, value):
    """One distributed (or plain) value as each replica sees it: values and shapes, nested as the value."""
    local = strategy.experimental_local_results(value)
    return {
        "replicas": [tf.nest.map_structure(lambda t: np.asarray(t).tolist(), r) for r in local],
        "shapes": [tf.nest.map_structure(lambda t: list(np.shape(t)), r) for r in local],
    }


def spec(s):
    """An element_spec leaf: each replica's shape (None: unknown) and the dtype's name."""
    if hasattr(s, "_value_specs"):  # PerReplicaSpec
        return {"per_replica": [s2.shape.as_list() for s2 in s._value_specs], "dtype": s._value_specs[0].dtype.name}
    return {"shape": s.shape.as_list(), "dtype": s.dtype.name}


def specs(element_spec):
    return tf.nest.map_structure(spec, element_spec, expand_composites=False)


def train_step(inputs):
    features, labels = inputs
    return labels - 0.3 * features


def block_dataset_without_strategy():
    global_batch_size = 16
    dataset = tf.data.Dataset.from_tensors(([1.0], [1.0])).repeat(100).batch(global_batch_size)
    return [np.asarray(train_step(inputs)).tolist() for inputs in dataset]


def block_experimental_distribute_dataset():
    global_batch_size = 16
    mirrored_strategy = tf.distribute.MirroredStrategy()
    dataset = tf.data.Dataset.from_tensors(([1.0], [1.0])).repeat(100).batch(global_batch_size)
    dist_dataset = mirrored_strategy.experimental_distribute_dataset(dataset)
    # 1 global batch of data fed to the model in 1 step.
    first = next(iter(dist_dataset))
    return {"first": show(mirrored_strategy, first)}


def block_rebatch():
    """ "Batching": Dataset.range(6).batch(4) over 2 replicas, and the same with distinct rows."""
    mirrored_strategy = tf.distribute.MirroredStrategy()
    out = {}
    dataset = tf.data.Dataset.range(6).batch(4, drop_remainder=False)
    out["range6_batch4"] = [
        show(mirrored_strategy, x) for x in mirrored_strategy.experimental_distribute_dataset(dataset)
    ]
    dataset = tf.data.Dataset.range(9).batch(2)
    out["range9_batch2"] = [
        show(mirrored_strategy, x) for x in mirrored_strategy.experimental_distribute_dataset(dataset)
    ]
    dataset = tf.data.Dataset.range(8).batch(4, drop_remainder=True)
    out["range8_batch4_drop"] = [
        show(mirrored_strategy, x) for x in mirrored_strategy.experimental_distribute_dataset(dataset)
    ]
    return out


def block_auto_shard_policy():
    mirrored_strategy = tf.distribute.MirroredStrategy()
    dataset = tf.data.Dataset.from_tensor_slices(np.arange(12.0, dtype=np.float32).reshape(6, 2)).batch(4)
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    dataset = dataset.with_options(options)
    return [show(mirrored_strategy, x) for x in mirrored_strategy.experimental_distribute_dataset(dataset)]


def block_distribute_datasets_from_function():
    global_batch_size = 16
    mirrored_strategy = tf.distribute.MirroredStrategy()
    contexts = []

    def dataset_fn(input_context):
        contexts.append(
            [
                input_context.num_input_pipelines,
                input_context.input_pipeline_id,
                input_context.num_replicas_in_sync,
                input_context.get_per_replica_batch_size(global_batch_size),
            ]
        )
        batch_size = input_context.get_per_replica_batch_size(global_batch_size)
        dataset = tf.data.Dataset.from_tensors(([1.0], [1.0])).repeat(64).batch(16)
        dataset = dataset.shard(input_context.num_input_pipelines, input_context.input_pipeline_id)
        dataset = dataset.batch(batch_size)
        dataset = dataset.prefetch(2)  # This prefetches 2 batches per device.
        return dataset

    dist_dataset = mirrored_strategy.distribute_datasets_from_function(dataset_fn)
    steps = [show(mirrored_strategy, x) for x in dist_dataset]
    return {"contexts": contexts, "steps": steps, "element_spec": specs(dist_dataset.element_spec)}


def block_distribute_datasets_from_function_values():
    """The same dataset_fn on distinct rows (0..63), without the tutorial's second batch."""
    global_batch_size = 16
    mirrored_strategy = tf.distribute.MirroredStrategy()

    def dataset_fn(input_context):
        batch_size = input_context.get_per_replica_batch_size(global_batch_size)
        dataset = tf.data.Dataset.from_tensor_slices(np.arange(40.0, dtype=np.float32).reshape(40, 1))
        dataset = dataset.shard(input_context.num_input_pipelines, input_context.input_pipeline_id)
        dataset = dataset.batch(batch_size)
        dataset = dataset.prefetch(2)
        return dataset

    dist_dataset = mirrored_strategy.distribute_datasets_from_function(dataset_fn)
    return [show(mirrored_strategy, x) for x in dist_dataset]


def block_for_loop():
    """ "Distributed iterators", the for loop: a step per global batch of 16, the last one partial (4 of 16)."""
    global_batch_size = 16
    mirrored_strategy = tf.distribute.MirroredStrategy()
    dataset = tf.data.Dataset.from_tensors(([1.0], [1.0])).repeat(100).batch(global_batch_size)
    dist_dataset = mirrored_strategy.experimental_distribute_dataset(dataset)
    losses = []
    for x in dist_dataset:
        # train_step trains the model using the dataset elements
        loss = mirrored_strategy.run(train_step, args=(x,))
        print("Loss is ", loss)
        losses.append(show(mirrored_strategy, loss))
    return losses


def block_iter_next():
    """ "Distributed iterators", iter/next: a fresh iterator each epoch; get_next is next."""
    global_batch_size = 16
    mirrored_strategy = tf.distribute.MirroredStrategy()
    features = np.arange(100.0, dtype=np.float32).reshape(100, 1)
    dataset = tf.data.Dataset.from_tensor_slices((features, 2 * features)).batch(global_batch_size)
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


def block_get_next_as_optional():
    # You can break the loop with `get_next_as_optional` by checking if the `Optional` contains a value
    global_batch_size = 4
    steps_per_loop = 5
    strategy = tf.distribute.MirroredStrategy()

    dataset = tf.data.Dataset.range(9).batch(global_batch_size)
    distributed_iterator = iter(strategy.experimental_distribute_dataset(dataset))

    out = {"steps": [], "stopped_at": None}

    def train_fn(distributed_iterator):
        for step in range(steps_per_loop):
            optional_data = distributed_iterator.get_next_as_optional()
            if not optional_data.has_value():
                out["stopped_at"] = step
                break
            per_replica_results = strategy.run(lambda x: x, args=(optional_data.get_value(),))
            out["steps"].append(show(strategy, per_replica_results))

    train_fn(distributed_iterator)
    return out


def block_element_spec():
    global_batch_size = 16
    epochs = 2
    steps_per_epoch = 2
    mirrored_strategy = tf.distribute.MirroredStrategy()

    dataset = tf.data.Dataset.from_tensors(([1.0], [1.0])).repeat(100).batch(global_batch_size)
    dist_dataset = mirrored_strategy.experimental_distribute_dataset(dataset)

    def train_step(per_replica_inputs):  # @tf.function(input_signature=[dist_dataset.element_spec])
        def step_fn(inputs):
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


def block_input_options():
    mirrored_strategy = tf.distribute.MirroredStrategy()

    def dataset_fn(input_context):
        return tf.data.Dataset.from_tensor_slices(np.arange(6.0, dtype=np.float32)).batch(2)

    input_options = tf.distribute.InputOptions(experimental_fetch_to_device=False)
    dist_dataset = mirrored_strategy.distribute_datasets_from_function(dataset_fn, input_options)
    return [show(mirrored_strategy, x) for x in dist_dataset]


def block_values_from_function():
    mirrored_strategy = tf.distribute.MirroredStrategy()

    def value_fn(ctx):
        return tf.constant(1.0) + ctx.replica_id_in_sync_group

    def step_fn(inputs):
        return 2 * inputs

    distributed_values = mirrored_strategy.experimental_distribute_values_from_function(value_fn)
    results = []
    for _ in range(2):
        result = mirrored_strategy.run(step_fn, args=(distributed_values,))
        results.append(show(mirrored_strategy, result))
    return results


def block_generator():
    mirrored_strategy = tf.distribute.MirroredStrategy()
    rng = np.random.default_rng(6)

    def input_gen():
        while True:
            yield rng.random(4).astype(np.float32)

    def step_fn(inputs):
        return 2 * inputs

    # use Dataset.from_generator
    dataset = tf.data.Dataset.from_generator(input_gen, output_types=(tf.float32), output_shapes=tf.TensorShape([4]))
    dist_dataset = mirrored_strategy.experimental_distribute_dataset(dataset)
    iterator = iter(dist_dataset)
    results = []
    for _ in range(3):
        result = mirrored_strategy.run(step_fn, args=(next(iterator),))
        results.append(show(mirrored_strategy, result))
    return results


def in_function():
    """The tutorial's tf.function forms on 2 logical CPUs: the loop over a dataset, get_next_as_optional."""
    out = {}
    mirrored_strategy = tf.distribute.MirroredStrategy()
    dataset = tf.data.Dataset.from_tensors(([1.0], [1.0])).repeat(100).batch(16)
    dist_dataset = mirrored_strategy.experimental_distribute_dataset(dataset)

    @tf.function
    def train(dist_dataset):
        total = tf.constant(0.0)
        for x in dist_dataset:
            loss = mirrored_strategy.run(train_step, args=(x,))
            total += tf.reduce_sum(mirrored_strategy.reduce("SUM", loss, axis=0))
        return total

    try:
        out["for_loop_total"] = float(train(dist_dataset))
    except Exception as e:  # noqa: BLE001 -- the outcome is recorded
        out["for_loop_error"] = _common.error(e)

    dataset = tf.data.Dataset.range(9).batch(4)
    distributed_iterator = iter(mirrored_strategy.experimental_distribute_dataset(dataset))

    @tf.function
    def train_fn(distributed_iterator):
        total = tf.constant(0, tf.int64)
        for _ in tf.range(5):
            optional_data = distributed_iterator.get_next_as_optional()
            if not optional_data.has_value():
                break
            per_replica_results = mirrored_strategy.run(lambda x: tf.reduce_sum(x), args=(optional_data.get_value(),))
            total += mirrored_strategy.reduce("SUM", per_replica_results, axis=None)
        return total

    try:
        out["get_next_as_optional_total"] = int(train_fn(distributed_iterator))
    except Exception as e:  # noqa: BLE001 -- the outcome is recorded
        out["get_next_as_optional_error"] = _common.error(e)
    return out


def main() -> None:
    rec = {"tf_version": tf.__version__}
    for name, fn in sorted(globals().items()):
        if name.startswith("block_"):
            rec[name[len("block_") :]] = fn()
    rec["in_function"] = in_function()
    print("wrote", _data.save("distributed_input", rec))


if __name__ == "__main__":
    main()
