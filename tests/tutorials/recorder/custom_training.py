"""Record "Custom training with tf.distribute.Strategy" (tensorflow.org/tutorials/distribute/custom_training).

Run with TensorFlow 2.21's Python, from anywhere (writes ../data/custom_training.json)::

    nice -n 10 /tmp/tfenv/bin/python tests/tutorials/recorder/custom_training.py

The tutorial's code, in its order, with these changes (each one also made in the interdist port):

- Data: ``_data.image_data()`` (288 training and 80 test images of 28x28x1, drawn by NumPy) in place of
  Fashion-MNIST, no ``shuffle`` (the data is already in random order); 3 epochs in place of 10.
- The model starts from ``_data.cnn_weights()`` (``model.set_weights``), so it has an ``Input`` layer.
- ``strategy.run`` is called eagerly: under ``@tf.function``, the first ``apply_gradients`` of Keras 3's Adam
  fails on 2 logical CPUs (recorded under ``"tf_function"``; docs/tf_behaviour.md).
- Two variants: ``tutorial`` (the tutorial today: L2 kernel regularizers, ``compute_average_loss`` without
  ``global_batch_size``) and ``global_batch_size`` (the tutorial before: no regularizer,
  ``compute_average_loss(..., global_batch_size=GLOBAL_BATCH_SIZE)``). The last training batch is partial
  (32 of 64), which is where the two ways of averaging differ.
"""

from __future__ import annotations

import os
import tempfile

import _common
import numpy as np

_common.two_cpus()

import _data  # noqa: E402
import tensorflow as tf  # noqa: E402

floats = _common.floats


def create_model(regularized: bool) -> tf.keras.Model:
    regularizer = tf.keras.regularizers.L2(1e-5) if regularized else None
    return tf.keras.Sequential(
        [
            tf.keras.Input(shape=(28, 28, 1)),
            tf.keras.layers.Conv2D(32, 3, activation="relu", kernel_regularizer=regularizer),
            tf.keras.layers.MaxPooling2D(),
            tf.keras.layers.Conv2D(64, 3, activation="relu", kernel_regularizer=regularizer),
            tf.keras.layers.MaxPooling2D(),
            tf.keras.layers.Flatten(),
            tf.keras.layers.Dense(64, activation="relu", kernel_regularizer=regularizer),
            tf.keras.layers.Dense(10, kernel_regularizer=regularizer),
        ]
    )


def run_tutorial(regularized: bool, pass_global_batch_size: bool, extras: bool) -> dict:
    rec: dict = {}
    train_images, train_labels, test_images, test_labels = _data.image_data()

    strategy = tf.distribute.MirroredStrategy()
    rec["num_replicas_in_sync"] = strategy.num_replicas_in_sync

    BATCH_SIZE_PER_REPLICA = _data.GLOBAL_BATCH_SIZE // strategy.num_replicas_in_sync
    GLOBAL_BATCH_SIZE = BATCH_SIZE_PER_REPLICA * strategy.num_replicas_in_sync
    EPOCHS = 3

    train_dataset = tf.data.Dataset.from_tensor_slices((train_images, train_labels)).batch(GLOBAL_BATCH_SIZE)
    test_dataset = tf.data.Dataset.from_tensor_slices((test_images, test_labels)).batch(GLOBAL_BATCH_SIZE)
    train_dist_dataset = strategy.experimental_distribute_dataset(train_dataset)
    test_dist_dataset = strategy.experimental_distribute_dataset(test_dataset)

    checkpoint_dir = tempfile.mkdtemp(prefix="training_checkpoints")
    checkpoint_prefix = os.path.join(checkpoint_dir, "ckpt")

    with strategy.scope():
        loss_object = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")

        def compute_loss(labels, predictions, model_losses):
            per_example_loss = loss_object(labels, predictions)
            if pass_global_batch_size:
                loss = tf.nn.compute_average_loss(per_example_loss, global_batch_size=GLOBAL_BATCH_SIZE)
            else:
                loss = tf.nn.compute_average_loss(per_example_loss)
            if model_losses:
                loss += tf.nn.scale_regularization_loss(tf.add_n(model_losses))
            return loss

    with strategy.scope():
        test_loss = tf.keras.metrics.Mean(name="test_loss")
        train_accuracy = tf.keras.metrics.SparseCategoricalAccuracy(name="train_accuracy")
        test_accuracy = tf.keras.metrics.SparseCategoricalAccuracy(name="test_accuracy")

    with strategy.scope():
        model = create_model(regularized)
        model.set_weights(_data.cnn_weights())
        optimizer = tf.keras.optimizers.Adam(learning_rate=0.001)
        checkpoint = tf.train.Checkpoint(optimizer=optimizer, model=model)

    rec["initial_regularization_loss"] = floats(tf.add_n(model.losses)) if model.losses else 0.0
    rec["initial_weight_sums"] = [floats(np.sum(w)) for w in model.get_weights()]

    def train_step(inputs):
        images, labels = inputs
        with tf.GradientTape() as tape:
            predictions = model(images, training=True)
            loss = compute_loss(labels, predictions, model.losses)
        gradients = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(gradients, model.trainable_variables))
        train_accuracy.update_state(labels, predictions)
        return loss

    def test_step(inputs):
        images, labels = inputs
        predictions = model(images, training=False)
        t_loss = loss_object(labels, predictions)
        test_loss.update_state(t_loss)
        test_accuracy.update_state(labels, predictions)

    # The tutorial's @tf.function, eager here (see the module's docstring).
    def distributed_train_step(dataset_inputs):
        per_replica_losses = strategy.run(train_step, args=(dataset_inputs,))
        return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica_losses, axis=None)

    def distributed_test_step(dataset_inputs):
        return strategy.run(test_step, args=(dataset_inputs,))

    rec["epochs"] = []
    for epoch in range(EPOCHS):
        # TRAIN LOOP
        total_loss = 0.0
        num_batches = 0
        step_losses = []
        for x in train_dist_dataset:
            step_loss = distributed_train_step(x)
            step_losses.append(floats(step_loss))
            total_loss += step_loss
            num_batches += 1
        train_loss = total_loss / num_batches

        # TEST LOOP
        for x in test_dist_dataset:
            distributed_test_step(x)

        if epoch % 2 == 0:
            checkpoint.save(checkpoint_prefix)

        rec["epochs"].append(
            {
                "step_losses": step_losses,
                "train_loss": floats(train_loss),
                "train_accuracy": floats(train_accuracy.result()),
                "test_loss": floats(test_loss.result()),
                "test_accuracy": floats(test_accuracy.result()),
            }
        )
        template = "Epoch {}, Loss: {}, Accuracy: {}, Test Loss: {}, Test Accuracy: {}"
        print(
            template.format(
                epoch + 1, train_loss, train_accuracy.result() * 100, test_loss.result(), test_accuracy.result() * 100
            )
        )

        test_loss.reset_state()
        train_accuracy.reset_state()
        test_accuracy.reset_state()

    rec["weight_sums"] = [floats(np.sum(w)) for w in model.get_weights()]
    rec["optimizer_iterations"] = int(optimizer.iterations.numpy())
    if not extras:
        return rec

    # Restore the latest checkpoint and test, without a strategy.
    latest = tf.train.latest_checkpoint(checkpoint_dir)
    rec["latest_checkpoint"] = os.path.basename(latest)
    rec["checkpoint_files"] = sorted(f for f in os.listdir(checkpoint_dir) if f.endswith(".index"))

    eval_accuracy = tf.keras.metrics.SparseCategoricalAccuracy(name="eval_accuracy")
    new_model = create_model(regularized)
    new_optimizer = tf.keras.optimizers.Adam()
    test_dataset = tf.data.Dataset.from_tensor_slices((test_images, test_labels)).batch(GLOBAL_BATCH_SIZE)

    def eval_step(images, labels):
        predictions = new_model(images, training=False)
        eval_accuracy(labels, predictions)

    checkpoint = tf.train.Checkpoint(optimizer=new_optimizer, model=new_model)
    checkpoint.restore(latest)
    for images, labels in test_dataset:
        eval_step(images, labels)
    rec["restored_eval_accuracy"] = floats(eval_accuracy.result())
    rec["restored_weight_sums"] = [floats(np.sum(w)) for w in new_model.get_weights()]
    rec["restored_optimizer_iterations"] = int(new_optimizer.iterations.numpy())
    print("Accuracy after restoring the saved model without strategy: {}".format(eval_accuracy.result() * 100))

    # Alternate ways of iterating: using iterators (3 steps of each epoch).
    rec["iterator_epochs"] = []
    for epoch in range(2):
        total_loss = 0.0
        num_batches = 0
        step_losses = []
        train_iter = iter(train_dist_dataset)
        for _ in range(3):
            step_loss = distributed_train_step(next(train_iter))
            step_losses.append(floats(step_loss))
            total_loss += step_loss
            num_batches += 1
        average_train_loss = total_loss / num_batches
        rec["iterator_epochs"].append(
            {
                "step_losses": step_losses,
                "train_loss": floats(average_train_loss),
                "train_accuracy": floats(train_accuracy.result()),
            }
        )
        print(f"Epoch {epoch + 1}, Loss: {average_train_loss}, Accuracy: {train_accuracy.result() * 100}")
        try:
            train_accuracy.reset_states()  # what the tutorial calls here
        except AttributeError as e:
            rec["reset_states_error"] = _common.error(e)
            train_accuracy.reset_state()

    # Iterating inside a tf.function (eager here): one call per epoch.
    def distributed_train_epoch(dataset):
        total_loss = 0.0
        num_batches = 0
        for x in dataset:
            per_replica_losses = strategy.run(train_step, args=(x,))
            total_loss += strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica_losses, axis=None)
            num_batches += 1
        return total_loss / tf.cast(num_batches, dtype=tf.float32)

    rec["in_function_epochs"] = []
    for epoch in range(2):
        train_loss = distributed_train_epoch(train_dist_dataset)
        rec["in_function_epochs"].append(
            {"train_loss": floats(train_loss), "train_accuracy": floats(train_accuracy.result())}
        )
        print(f"Epoch {epoch + 1}, Loss: {train_loss}, Accuracy: {train_accuracy.result() * 100}")
        train_accuracy.reset_state()

    rec["final_weight_sums"] = [floats(np.sum(w)) for w in model.get_weights()]
    rec["final_optimizer_iterations"] = int(optimizer.iterations.numpy())
    return rec


def tf_function_failure() -> dict:
    """The tutorial's ``@tf.function distributed_train_step``, first call, on 2 logical CPUs."""
    train_images, train_labels, _, _ = _data.image_data()
    strategy = tf.distribute.MirroredStrategy()
    dataset = strategy.experimental_distribute_dataset(
        tf.data.Dataset.from_tensor_slices((train_images, train_labels)).batch(_data.GLOBAL_BATCH_SIZE)
    )
    with strategy.scope():
        loss_object = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")
        model = create_model(False)
        optimizer = tf.keras.optimizers.Adam(learning_rate=0.001)

    def train_step(inputs):
        images, labels = inputs
        with tf.GradientTape() as tape:
            loss = tf.nn.compute_average_loss(loss_object(labels, model(images, training=True)))
        optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
        return loss

    @tf.function
    def distributed_train_step(dataset_inputs):
        per_replica_losses = strategy.run(train_step, args=(dataset_inputs,))
        return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica_losses, axis=None)

    try:
        distributed_train_step(next(iter(dataset)))
    except Exception as e:  # noqa: BLE001 -- the failure is what is recorded
        return {"error": _common.error(e)}
    return {"error": None}


def main() -> None:
    train_images, train_labels, test_images, test_labels = _data.image_data()
    record = {
        "tf_version": tf.__version__,
        "keras_version": tf.keras.__version__ if hasattr(tf.keras, "__version__") else None,
        "data_digest": _data.digest(train_images, train_labels, test_images, test_labels),
        "weights_digest": _data.digest(*_data.cnn_weights()),
        "tutorial": run_tutorial(regularized=True, pass_global_batch_size=False, extras=True),
        "global_batch_size": run_tutorial(regularized=False, pass_global_batch_size=True, extras=False),
        "tf_function": tf_function_failure(),
    }
    print("wrote", _data.save("custom_training", record))


if __name__ == "__main__":
    main()
