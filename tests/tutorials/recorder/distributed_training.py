"""Record "Distributed training with TensorFlow" (tensorflow.org/guide/distributed_training), its custom loop.

Run with TensorFlow 2.21's Python (writes ../data/distributed_training.json)::

    nice -n 10 /tmp/tfenv/bin/python tests/tutorials/recorder/distributed_training.py

The guide's section "Use tf.distribute.Strategy with custom training loops", in its order, with these changes
(each one also made in the interdist port):

- Data: ``_data.regression_data()`` (100 examples, 4 features, a linear target plus noise) in place of
  ``Dataset.from_tensors(([1.], [1.])).repeat(1000)``, so the numbers say something; global batch 10, which
  makes the guide's learning rate for it 0.15 (``LEARNING_RATES_BY_BATCH_SIZE``).
- Loss: ``MeanSquaredError(reduction="none")`` (the guide's Keras part compiles with ``loss='mse'``) in place
  of ``BinaryCrossentropy(from_logits=True)``, which interdist does not have.
- The model starts from ``_data.dense_weights()``, and ``strategy.run`` is called eagerly (no ``@tf.function``).
"""

from __future__ import annotations

import _common
import numpy as np

_common.two_cpus()

import _data  # noqa: E402
import tensorflow as tf  # noqa: E402

floats = _common.floats


def main() -> None:
    features, labels = _data.regression_data()
    rec: dict = {
        "tf_version": tf.__version__,
        "data_digest": _data.digest(features, labels),
        "weights_digest": _data.digest(*_data.dense_weights()),
    }

    mirrored_strategy = tf.distribute.MirroredStrategy()
    rec["num_replicas_in_sync"] = mirrored_strategy.num_replicas_in_sync

    BATCH_SIZE_PER_REPLICA = 5
    global_batch_size = BATCH_SIZE_PER_REPLICA * mirrored_strategy.num_replicas_in_sync
    LEARNING_RATES_BY_BATCH_SIZE = {5: 0.1, 10: 0.15, 20: 0.175}
    learning_rate = LEARNING_RATES_BY_BATCH_SIZE[global_batch_size]

    with mirrored_strategy.scope():
        model = tf.keras.Sequential(
            [tf.keras.Input(shape=(4,)), tf.keras.layers.Dense(1, kernel_regularizer=tf.keras.regularizers.L2(1e-4))]
        )
        model.set_weights(_data.dense_weights())
        optimizer = tf.keras.optimizers.SGD(learning_rate=learning_rate)

    dataset = tf.data.Dataset.from_tensor_slices((features, labels)).batch(global_batch_size)
    dist_dataset = mirrored_strategy.experimental_distribute_dataset(dataset)

    # Sets `reduction=NONE` to leave it to tf.nn.compute_average_loss() below.
    loss_object = tf.keras.losses.MeanSquaredError(reduction="none")

    def train_step(inputs):
        features, labels = inputs

        with tf.GradientTape() as tape:
            predictions = model(features, training=True)
            per_example_loss = loss_object(labels, predictions)
            loss = tf.nn.compute_average_loss(per_example_loss)
            model_losses = model.losses
            if model_losses:
                loss += tf.nn.scale_regularization_loss(tf.add_n(model_losses))

        gradients = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(gradients, model.trainable_variables))
        return loss

    def distributed_train_step(dist_inputs):
        per_replica_losses = mirrored_strategy.run(train_step, args=(dist_inputs,))
        return mirrored_strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica_losses, axis=None)

    rec["for_loop_losses"] = []
    for dist_inputs in dist_dataset:
        loss = distributed_train_step(dist_inputs)
        print(loss)
        rec["for_loop_losses"].append(floats(loss))
    rec["weights_after_for_loop"] = [floats(w) for w in model.get_weights()]

    rec["iterator_losses"] = []
    iterator = iter(dist_dataset)
    for _ in range(10):
        loss = distributed_train_step(next(iterator))
        print(loss)
        rec["iterator_losses"].append(floats(loss))
    rec["final_weights"] = [floats(w) for w in model.get_weights()]
    rec["optimizer_iterations"] = int(optimizer.iterations.numpy())
    try:
        next(iterator)
        rec["next_after_end"] = None
    except (StopIteration, tf.errors.OutOfRangeError) as e:
        rec["next_after_end"] = type(e).__name__
    rec["final_mse"] = floats(np.mean((features @ model.get_weights()[0] + model.get_weights()[1] - labels) ** 2))
    print("wrote", _data.save("distributed_training", rec))


if __name__ == "__main__":
    main()
