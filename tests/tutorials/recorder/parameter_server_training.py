"""Record "Parameter server training with ParameterServerStrategy" (tensorflow.org/tutorials/distribute/
parameter_server_training), its custom training loop, corrected for Keras 3.

Run with TensorFlow 2.21's Python (writes ../data/parameter_server_training.json)::

    nice -n 10 /tmp/tfenv/bin/python tests/tutorials/recorder/parameter_server_training.py

The tutorial's program fails in TF 2.21 (Keras 3); ``keras3_failures`` records how, step by step (see
docs/tf_behaviour.md). The recorded program is the tutorial's custom loop with these corrections and changes,
each one also made in the interdist port:

- The cluster: 1 worker (not 3) and 2 ps, in process, so the scheduled steps run one after another in the
  order scheduled; ``MinSizePartitioner(min_shard_bytes=256, max_shards=2)`` for the tutorial's 256 KiB, with
  an embedding of 16 columns (not 16384), so the embedding still has 2 shards, one per ps.
- The data: ``_data.ps_data()``, the tutorial's examples with its lookup layers applied beforehand (Keras 3's
  Functional model refuses the unbatched examples the tutorial maps it over), in a fixed order (no shuffle).
- The model: plain ``tf.Variable``s (the embedding, the dense kernel and bias), from ``_data.ps_weights()``:
  Keras 3's ``Embedding`` wraps the ShardedVariable in one ``keras.Variable`` whose gradient fails. The gradient
  is taken with respect to the embedding's shards (``embedding.variables``), as Keras 2's
  ``trainable_variables`` listed them. The dense layer gives logits, the loss is
  ``BinaryCrossentropy(from_logits=True)`` and the prediction ``sigmoid(logits)`` (the tutorial's
  ``Dense(1, activation="sigmoid")`` and ``BinaryCrossentropy()`` compute the same but for Keras' clipping
  of probabilities); the L2(1e-4) kernel regularizer is called on the kernel.
- The optimizer: ``tf.keras.optimizers.RMSprop(learning_rate=0.1)`` for the tutorial's
  ``optimizers.legacy.RMSprop``, gone in Keras 3.
- ``accuracy.reset_state()`` for the tutorial's ``reset_states()`` (gone in Keras 3).
- The gradients are made dense (``tf.convert_to_tensor``) before ``apply_gradients``: with the embedding's
  IndexedSlices gradient, Keras 3's RMSprop computes another update (see ``run``); that run is recorded
  too, under ``indexed_slices_gradients``.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import _common
import numpy as np

os.environ["GRPC_FAIL_FAST"] = "use_caller"

import _data  # noqa: E402
import tensorflow as tf  # noqa: E402

floats = _common.floats

NUM_WORKERS = 1
NUM_PS = 2
LEARNING_RATE = 0.1


def _port() -> int:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def create_in_process_cluster(num_workers, num_ps):
    """Creates and starts local servers and returns the cluster_resolver."""
    cluster_dict = {}
    cluster_dict["worker"] = ["localhost:%s" % _port() for _ in range(num_workers)]
    if num_ps > 0:
        cluster_dict["ps"] = ["localhost:%s" % _port() for _ in range(num_ps)]

    cluster_spec = tf.train.ClusterSpec(cluster_dict)

    # Workers need some inter_ops threads to work properly.
    worker_config = tf.compat.v1.ConfigProto()
    worker_config.inter_op_parallelism_threads = num_workers + 1

    servers = []
    for i in range(num_workers):
        servers.append(
            tf.distribute.Server(cluster_spec, job_name="worker", task_index=i, config=worker_config, protocol="grpc")
        )
    for i in range(num_ps):
        servers.append(tf.distribute.Server(cluster_spec, job_name="ps", task_index=i, protocol="grpc"))

    cluster_resolver = tf.distribute.cluster_resolver.SimpleClusterResolver(cluster_spec, rpc_layer="grpc")
    return cluster_resolver, servers


def keras3_failures(strategy) -> dict:
    """The tutorial's own model and optimizer, step by step, on TF 2.21: what each step raises."""
    out = {}
    feature_vocab = _data.FEATURE_VOCAB
    label_vocab = ["yes", "no"]
    with strategy.scope():
        feature_lookup_layer = tf.keras.layers.StringLookup(vocabulary=feature_vocab, mask_token=None)
        label_lookup_layer = tf.keras.layers.StringLookup(vocabulary=label_vocab, num_oov_indices=0, mask_token=None)
        raw_feature_input = tf.keras.layers.Input(shape=(3,), dtype=tf.string, name="feature")
        feature_id_input = feature_lookup_layer(raw_feature_input)
        feature_preprocess_stage = tf.keras.Model({"features": raw_feature_input}, feature_id_input)
        raw_label_input = tf.keras.layers.Input(shape=(1,), dtype=tf.string, name="label")
        label_id_input = label_lookup_layer(raw_label_input)
        label_preprocess_stage = tf.keras.Model({"label": raw_label_input}, label_id_input)

    examples = {
        "features": [["avenger", "ironman", "hulk"], ["batman", "kingkong", "hulk"]],
        "label": [["yes"], ["no"]],
    }
    raw_dataset = tf.data.Dataset.from_tensor_slices(examples)
    try:
        raw_dataset.map(
            lambda x: ({"features": feature_preprocess_stage(x["features"])}, label_preprocess_stage(x["label"]))
        )
        out["dataset_map"] = None
    except Exception as e:  # noqa: BLE001 -- the outcome is recorded
        out["dataset_map"] = _common.error(e)

    try:
        with strategy.scope():
            model_input = tf.keras.layers.Input(shape=(3,), dtype=tf.int64, name="model_input")
            emb_layer = tf.keras.layers.Embedding(
                input_dim=len(feature_lookup_layer.get_vocabulary()), output_dim=16384
            )
            tf.reduce_mean(emb_layer(model_input), axis=1)
        out["reduce_mean_of_keras_tensor"] = None
    except Exception as e:  # noqa: BLE001
        out["reduce_mean_of_keras_tensor"] = _common.error(e)

    try:
        tf.keras.optimizers.legacy.RMSprop(learning_rate=0.1)
        out["legacy_rmsprop"] = None
    except Exception as e:  # noqa: BLE001
        out["legacy_rmsprop"] = _common.error(e)

    # keras.ops.mean in place of tf.reduce_mean: the model builds, but the embedding is one Keras variable.
    with strategy.scope():
        model_input = tf.keras.layers.Input(shape=(3,), dtype=tf.int64, name="model_input")
        emb_layer = tf.keras.layers.Embedding(input_dim=len(feature_lookup_layer.get_vocabulary()), output_dim=16384)
        emb_output = tf.keras.ops.mean(emb_layer(model_input), axis=1)
        dense_output = tf.keras.layers.Dense(
            units=1, activation="sigmoid", kernel_regularizer=tf.keras.regularizers.L2(1e-4)
        )(emb_output)
        model = tf.keras.Model({"features": model_input}, dense_output)
        optimizer = tf.keras.optimizers.RMSprop(learning_rate=0.1)
        accuracy = tf.keras.metrics.Accuracy()
    out["embedding_weights"] = [
        [w.shape.as_list(), type(w).__name__, type(getattr(w, "value", w)).__name__] for w in emb_layer.weights
    ]

    coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)

    @tf.function
    def step_fn():
        def replica_fn(batch_data, labels):
            with tf.GradientTape() as tape:
                pred = model(batch_data, training=True)
                per_example_loss = tf.keras.losses.BinaryCrossentropy(reduction="none")(labels, pred)
                loss = tf.nn.compute_average_loss(per_example_loss)
                model_losses = model.losses
                if model_losses:
                    loss += tf.nn.scale_regularization_loss(tf.add_n(model_losses))
            gradients = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(gradients, model.trainable_variables))
            return loss

        batch = {"features": tf.constant([[1, 2, 4]], tf.int64)}
        return strategy.run(replica_fn, args=(batch, tf.constant([[0]], tf.int64)))

    try:
        coordinator.fetch(coordinator.schedule(step_fn))
        out["keras3_model_step"] = None
    except Exception as e:  # noqa: BLE001
        out["keras3_model_step"] = _common.error(e)

    try:
        coordinator.schedule(lambda: strategy.run(lambda: tf.constant(1.0)))
        out["schedule_python_function"] = None
    except Exception as e:  # noqa: BLE001
        out["schedule_python_function"] = _common.error(e)

    try:
        accuracy.reset_states()
        out["reset_states"] = None
    except AttributeError as e:
        out["reset_states"] = _common.error(e)
    return out


def run(densify: bool) -> dict:
    """The tutorial's custom loop (corrected); ``densify``: turn the gradients into dense tensors first."""
    features, labels = _data.ps_data()
    eval_features, eval_labels = _data.ps_data(seed=7, n=16)
    rec: dict = {
        "tf_version": tf.__version__,
        "data_digest": _data.digest(features, labels, eval_features, eval_labels),
        "weights_digest": _data.digest(*_data.ps_weights()),
    }

    cluster_resolver, _servers = create_in_process_cluster(NUM_WORKERS, NUM_PS)

    variable_partitioner = tf.distribute.experimental.partitioners.MinSizePartitioner(
        min_shard_bytes=256, max_shards=NUM_PS
    )
    strategy = tf.distribute.ParameterServerStrategy(cluster_resolver, variable_partitioner=variable_partitioner)
    rec["num_replicas_in_sync"] = strategy.num_replicas_in_sync

    def dataset_fn(_):
        raw_dataset = tf.data.Dataset.from_tensor_slices(({"features": features}, labels))
        train_dataset = raw_dataset.batch(32).repeat()
        return train_dataset

    # These variables created under the `Strategy.scope` will be placed on parameter servers in a round-robin
    # fashion.
    initial = _data.ps_weights()
    with strategy.scope():
        embedding = tf.Variable(initial[0], name="embedding")
        kernel = tf.Variable(initial[1], name="kernel")
        bias = tf.Variable(initial[2], name="bias")
        optimizer = tf.keras.optimizers.RMSprop(learning_rate=LEARNING_RATE)
        accuracy = tf.keras.metrics.Accuracy()

    trainable_variables = [*embedding.variables, kernel, bias]

    def model(batch_data):
        emb_output = tf.reduce_mean(tf.nn.embedding_lookup(embedding, batch_data["features"]), axis=1)
        return tf.matmul(emb_output, kernel) + bias  # logits: the tutorial's Dense(1, "sigmoid") before the sigmoid

    regularizer = tf.keras.regularizers.L2(1e-4)

    def model_losses():
        return [regularizer(kernel)]  # the tutorial's Dense(..., kernel_regularizer=L2(1e-4))

    rec["variables"] = {
        "embedding": {
            "shape": embedding.shape.as_list(),
            "shards": [[v.shape.as_list(), v.device] for v in embedding.variables],
        },
        "kernel": {"shape": kernel.shape.as_list(), "device": kernel.device},
        "bias": {"shape": bias.shape.as_list(), "device": bias.device},
    }

    @tf.function
    def step_fn(iterator):
        def replica_fn(batch_data, labels):
            with tf.GradientTape() as tape:
                logits = model(batch_data)
                per_example_loss = tf.keras.losses.BinaryCrossentropy(from_logits=True, reduction="none")(
                    labels, logits
                )
                loss = tf.nn.compute_average_loss(per_example_loss)
                loss += tf.nn.scale_regularization_loss(tf.add_n(model_losses()))
            gradients = tape.gradient(loss, trainable_variables)
            if densify:
                # The embedding's gradient is an IndexedSlices with a row per lookup, so repeated rows; Keras 3's
                # RMSprop squares those rows one by one (its velocity gets the sum of their squares, not the
                # square of their sum). A dense gradient, as interdist's, gives the textbook update.
                gradients = [tf.convert_to_tensor(g) for g in gradients]
            optimizer.apply_gradients(zip(gradients, trainable_variables))

            pred = tf.nn.sigmoid(logits)
            actual_pred = tf.cast(tf.greater(pred, 0.5), tf.int64)
            accuracy.update_state(labels, actual_pred)
            return loss

        batch_data, labels = next(iterator)
        losses = strategy.run(replica_fn, args=(batch_data, labels))
        return strategy.reduce(tf.distribute.ReduceOp.SUM, losses, axis=None)

    coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)

    @tf.function
    def per_worker_dataset_fn():
        return strategy.distribute_datasets_from_function(dataset_fn)

    per_worker_dataset = coordinator.create_per_worker_dataset(per_worker_dataset_fn)
    per_worker_iterator = iter(per_worker_dataset)

    num_epochs = 4
    steps_per_epoch = 5
    rec["epochs"] = []
    for i in range(num_epochs):
        accuracy.reset_state()
        step_losses = [coordinator.schedule(step_fn, args=(per_worker_iterator,)) for _ in range(steps_per_epoch)]
        # Wait at epoch boundaries.
        coordinator.join()
        print("Finished epoch %d, accuracy is %f." % (i, accuracy.result().numpy()))
        rec["epochs"].append(
            {"accuracy": floats(accuracy.result()), "step_losses": [floats(loss.fetch()) for loss in step_losses]}
        )

    loss = coordinator.schedule(step_fn, args=(per_worker_iterator,))
    print("Final loss is %f" % loss.fetch())
    rec["final_loss"] = floats(loss.fetch())
    rec["final_accuracy"] = floats(accuracy.result())
    rec["weights"] = {
        "embedding": floats(embedding.numpy()),
        "kernel": floats(kernel.numpy()),
        "bias": floats(bias.numpy()),
    }
    rec["optimizer_iterations"] = int(optimizer.iterations.numpy())

    # Inline evaluation.
    eval_dataset = tf.data.Dataset.from_tensor_slices(({"features": eval_features}, eval_labels)).batch(8)
    eval_accuracy = tf.keras.metrics.Accuracy()
    for batch_data, labels in eval_dataset:
        pred = tf.nn.sigmoid(model(batch_data))
        actual_pred = tf.cast(tf.greater(pred, 0.5), tf.int64)
        eval_accuracy.update_state(labels, actual_pred)
    print("Evaluation accuracy: %f" % eval_accuracy.result())
    rec["inline_eval_accuracy"] = floats(eval_accuracy.result())

    # Distributed evaluation.
    with strategy.scope():
        # Define the eval metric on parameter servers.
        eval_accuracy = tf.keras.metrics.Accuracy()

    @tf.function
    def eval_step(iterator):
        def replica_fn(batch_data, labels):
            pred = tf.nn.sigmoid(model(batch_data))
            actual_pred = tf.cast(tf.greater(pred, 0.5), tf.int64)
            eval_accuracy.update_state(labels, actual_pred)

        batch_data, labels = next(iterator)
        strategy.run(replica_fn, args=(batch_data, labels))

    def eval_dataset_fn():
        return tf.data.Dataset.from_tensor_slices(({"features": eval_features}, eval_labels)).repeat().batch(8)

    per_worker_eval_dataset = coordinator.create_per_worker_dataset(eval_dataset_fn)
    per_worker_eval_iterator = iter(per_worker_eval_dataset)

    eval_steps_per_epoch = 2
    for _ in range(eval_steps_per_epoch):
        coordinator.schedule(eval_step, args=(per_worker_eval_iterator,))
    coordinator.join()
    print("Evaluation accuracy: %f" % eval_accuracy.result())
    rec["distributed_eval_accuracy"] = floats(eval_accuracy.result())
    rec["final_weight_sums"] = [floats(np.sum(v.numpy())) for v in (embedding, kernel, bias)]

    @tf.function
    def gradient_of_sharded_variable():
        def replica_fn():
            with tf.GradientTape() as tape:
                loss = tf.reduce_sum(tf.nn.embedding_lookup(embedding, tf.constant([1, 5], tf.int64)))
            return tape.gradient(loss, [embedding])

        return strategy.run(replica_fn)

    try:
        coordinator.fetch(coordinator.schedule(gradient_of_sharded_variable))
        rec["gradient_of_sharded_variable"] = None
    except Exception as e:  # noqa: BLE001 -- the outcome is recorded
        rec["gradient_of_sharded_variable"] = _common.error(e)

    if densify:
        rec["keras3_failures"] = keras3_failures(strategy)
    return rec


def main() -> None:
    if "--indexed-slices" in sys.argv:  # the child run: TF's own gradients, printed
        rec = run(densify=False)
        print("@@RESULT@@" + json.dumps({k: rec[k] for k in ("epochs", "final_loss", "final_weight_sums")}))
        return
    rec = run(densify=True)
    # A fresh process for the other run: one in-process cluster per process.
    child = subprocess.run(
        [sys.executable, __file__, "--indexed-slices"], capture_output=True, text=True, check=True
    ).stdout
    rec["indexed_slices_gradients"] = json.loads(child.split("@@RESULT@@", 1)[1])
    print("wrote", _data.save("parameter_server_training", rec))


if __name__ == "__main__":
    main()
