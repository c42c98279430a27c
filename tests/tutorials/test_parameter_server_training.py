""" "Parameter server training with ParameterServerStrategy" (tensorflow.org/tutorials/distribute/
parameter_server_training), its custom training loop, ported.

The program is the recorder's (``recorder/parameter_server_training.py``): the tutorial's loop with the
corrections Keras 3 needs and an in-process cluster of 1 worker and 2 ps, so the scheduled steps run one after
another in schedule order. Here the cluster is Dask's, with workers named as the tasks. Compared with TF 2.21
(``data/parameter_server_training.json``): where the variables' shards live, each step's loss, the accuracy
per epoch, the final loss, the weights, and the inline and distributed evaluations.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

import interdist as idist
from tests._clusters import InProcessCluster

from . import _data
from ._compare import RTOL, assert_close

NUM_WORKERS = 1
NUM_PS = 2
LEARNING_RATE = 0.1


def floats(x: Any) -> Any:
    return np.asarray(x).astype(np.float64).tolist()


@pytest.fixture(scope="module")
def cluster_resolver() -> Iterator[str]:
    """The tutorial's ``create_in_process_cluster(NUM_WORKERS, NUM_PS)``: here a Dask cluster's address."""
    cluster = InProcessCluster([f"ps-{i}" for i in range(NUM_PS)] + [f"worker-{i}" for i in range(NUM_WORKERS)])
    yield cluster.address
    cluster.close()


def run_tutorial(cluster_resolver: str, shards: bool) -> dict:
    features, labels = _data.ps_data()
    eval_features, eval_labels = _data.ps_data(seed=7, n=16)
    rec: dict = {}

    variable_partitioner = idist.experimental.partitioners.MinSizePartitioner(min_shard_bytes=256, max_shards=NUM_PS)
    strategy = idist.ParameterServerStrategy(cluster=cluster_resolver, variable_partitioner=variable_partitioner)
    try:
        rec["num_replicas_in_sync"] = strategy.num_replicas_in_sync

        def dataset_fn(_: Any) -> Any:
            raw_dataset = idist.data.Dataset.from_tensor_slices(({"features": features}, labels))
            train_dataset = raw_dataset.batch(32).repeat()
            return train_dataset

        # These variables created under the `Strategy.scope` will be placed on parameter servers in a
        # round-robin fashion.
        initial = _data.ps_weights()
        with strategy.scope():
            embedding = idist.Variable(initial[0], name="embedding")
            kernel = idist.Variable(initial[1], name="kernel")
            bias = idist.Variable(initial[2], name="bias")
            optimizer = idist.optimizers.RMSprop(learning_rate=LEARNING_RATE)
            accuracy = idist.metrics.Accuracy()

        # shards: what TF 2.21 needs (the gradient of a ShardedVariable itself fails there)
        trainable_variables = [*embedding.variables, kernel, bias] if shards else [embedding, kernel, bias]

        def model(batch_data: Any) -> Any:
            emb_output = np.mean(embedding[batch_data["features"]], axis=1)  # tf.nn.embedding_lookup
            return emb_output @ kernel + bias  # logits: the tutorial's Dense(1, "sigmoid") before the sigmoid

        regularizer = idist.regularizers.L2(1e-4)

        def model_losses() -> list[Any]:
            return [regularizer(kernel)]  # the tutorial's Dense(..., kernel_regularizer=L2(1e-4))

        rec["variables"] = {
            "embedding": {
                "shape": list(embedding.shape),
                "shards": [[list(v.shape), v.device] for v in embedding.variables],
            },
            "kernel": {"shape": list(kernel.shape), "device": kernel.device},
            "bias": {"shape": list(bias.shape), "device": bias.device},
        }

        def step_fn(iterator: Any) -> Any:
            def replica_fn(batch_data: Any, labels: Any) -> Any:
                with idist.GradientTape() as tape:
                    logits = model(batch_data)
                    per_example_loss = idist.losses.BinaryCrossentropy(from_logits=True, reduction="none")(
                        labels, logits
                    )
                    loss = idist.nn.compute_average_loss(per_example_loss)
                    loss += idist.nn.scale_regularization_loss(idist.math.add_n(model_losses()))
                gradients = tape.gradient(loss, trainable_variables)
                optimizer.apply_gradients(zip(gradients, trainable_variables, strict=True))

                pred = idist.nn.sigmoid(logits)
                actual_pred = (np.asarray(pred) > 0.5).astype(np.int64)
                accuracy.update_state(labels, actual_pred)
                return loss

            batch_data, labels = next(iterator)
            losses = strategy.run(replica_fn, args=(batch_data, labels))
            return strategy.reduce(idist.ReduceOp.SUM, losses, axis=None)

        coordinator = idist.coordinator.ClusterCoordinator(strategy)

        def per_worker_dataset_fn() -> Any:
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
            print(f"Finished epoch {i}, accuracy is {floats(accuracy.result()):f}.")
            rec["epochs"].append(
                {"accuracy": floats(accuracy.result()), "step_losses": [floats(loss.fetch()) for loss in step_losses]}
            )

        loss = coordinator.schedule(step_fn, args=(per_worker_iterator,))
        print(f"Final loss is {floats(loss.fetch()):f}")
        rec["final_loss"] = floats(loss.fetch())
        rec["final_accuracy"] = floats(accuracy.result())
        rec["weights"] = {
            "embedding": floats(embedding.numpy()),
            "kernel": floats(kernel.numpy()),
            "bias": floats(bias.numpy()),
        }
        rec["optimizer_iterations"] = int(np.asarray(optimizer.iterations.numpy()))

        # Inline evaluation.
        eval_dataset = idist.data.Dataset.from_tensor_slices(({"features": eval_features}, eval_labels)).batch(8)
        eval_accuracy = idist.metrics.Accuracy()
        for batch_data, labels in eval_dataset:
            pred = idist.nn.sigmoid(model(batch_data))
            actual_pred = (np.asarray(pred) > 0.5).astype(np.int64)
            eval_accuracy.update_state(labels, actual_pred)
        print(f"Evaluation accuracy: {floats(eval_accuracy.result()):f}")
        rec["inline_eval_accuracy"] = floats(eval_accuracy.result())

        # Distributed evaluation.
        with strategy.scope():
            # Define the eval metric on parameter servers.
            eval_accuracy = idist.metrics.Accuracy()

        def eval_step(iterator: Any) -> None:
            def replica_fn(batch_data: Any, labels: Any) -> None:
                pred = idist.nn.sigmoid(model(batch_data))
                actual_pred = (np.asarray(pred) > 0.5).astype(np.int64)
                eval_accuracy.update_state(labels, actual_pred)

            batch_data, labels = next(iterator)
            strategy.run(replica_fn, args=(batch_data, labels))

        def eval_dataset_fn() -> Any:
            return idist.data.Dataset.from_tensor_slices(({"features": eval_features}, eval_labels)).repeat().batch(8)

        per_worker_eval_dataset = coordinator.create_per_worker_dataset(eval_dataset_fn)
        per_worker_eval_iterator = iter(per_worker_eval_dataset)

        eval_steps_per_epoch = 2
        for _ in range(eval_steps_per_epoch):
            coordinator.schedule(eval_step, args=(per_worker_eval_iterator,))
        coordinator.join()
        print(f"Evaluation accuracy: {floats(eval_accuracy.result()):f}")
        rec["distributed_eval_accuracy"] = floats(eval_accuracy.result())
        rec["final_weight_sums"] = [floats(np.sum(v.numpy())) for v in (embedding, kernel, bias)]
        return rec
    finally:
        strategy.close()


@pytest.fixture(scope="module")
def recorded() -> dict:
    rec = _data.load("parameter_server_training")
    features, labels = _data.ps_data()
    eval_features, eval_labels = _data.ps_data(seed=7, n=16)
    assert _data.digest(features, labels, eval_features, eval_labels) == rec["data_digest"]
    assert _data.digest(*_data.ps_weights()) == rec["weights_digest"]
    return rec


@pytest.mark.parametrize(
    "shards",
    [
        pytest.param(True, id="gradient_of_shards"),
        pytest.param(False, id="gradient_of_sharded_variable"),
    ],
)
def test_custom_loop(cluster_resolver: str, recorded: dict, shards: bool) -> None:
    """The gradient with respect to the embedding's shards, as TF needs it, or to the sharded variable itself,
    where TF 2.21 raises (``recorded["gradient_of_sharded_variable"]``) and interdist gives the same numbers."""
    expected = {k: v for k, v in recorded.items() if k not in _NOT_PORTED}
    actual = run_tutorial(cluster_resolver, shards)
    # Measured: losses and accuracies 2.5e-7 at most; one weight of 0.016 differs by 1.9e-7 (float32's
    # rounding, carried over 21 RMSprop steps), hence an absolute tolerance for the weights.
    assert_close(actual.pop("weights"), expected.pop("weights"), rtol=RTOL, atol=1e-6, path="weights")
    assert_close(actual, expected, rtol=RTOL)


#: What the recording has that the port does not compute: provenance, and what TF 2.21 itself failed at.
_NOT_PORTED = {
    "tf_version",
    "data_digest",
    "weights_digest",
    "keras3_failures",
    "gradient_of_sharded_variable",
    "indexed_slices_gradients",
}
