""" "Distributed training with TensorFlow" (tensorflow.org/guide/distributed_training), its custom training loop,
ported line by line to interdist and compared with TF 2.21's numbers (``data/distributed_training.json``,
recorded by ``recorder/distributed_training.py``, which lists the changes made to the guide's code): the
loss of each step of the ``for`` loop and of the ``iter``/``next`` loop, and the weights after each.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import interdist as idist

from . import _data
from ._compare import RTOL, assert_close


def floats(x: Any) -> Any:
    return np.asarray(x).astype(np.float64).tolist()


def run_guide() -> dict:
    features, labels = _data.regression_data()
    rec: dict = {
        "tf_version": "2.21.0",
        "data_digest": _data.digest(features, labels),
        "weights_digest": _data.digest(*_data.dense_weights()),
    }

    mirrored_strategy = idist.MirroredStrategy()
    try:
        rec["num_replicas_in_sync"] = mirrored_strategy.num_replicas_in_sync

        BATCH_SIZE_PER_REPLICA = 5
        global_batch_size = BATCH_SIZE_PER_REPLICA * mirrored_strategy.num_replicas_in_sync
        LEARNING_RATES_BY_BATCH_SIZE = {5: 0.1, 10: 0.15, 20: 0.175}
        learning_rate = LEARNING_RATES_BY_BATCH_SIZE[global_batch_size]

        with mirrored_strategy.scope():
            model = idist.layers.Sequential(
                [idist.layers.Input(shape=(4,)), idist.layers.Dense(1, kernel_regularizer=idist.regularizers.L2(1e-4))]
            )
            model.set_weights(_data.dense_weights())
            optimizer = idist.optimizers.SGD(learning_rate=learning_rate)

        dataset = idist.data.Dataset.from_tensor_slices((features, labels)).batch(global_batch_size)
        dist_dataset = mirrored_strategy.experimental_distribute_dataset(dataset)

        # Sets `reduction=NONE` to leave it to idist.nn.compute_average_loss() below.
        loss_object = idist.losses.MeanSquaredError(reduction="none")

        def train_step(inputs: Any) -> Any:
            features, labels = inputs

            with idist.GradientTape() as tape:
                predictions = model(features, training=True)
                per_example_loss = loss_object(labels, predictions)
                loss = idist.nn.compute_average_loss(per_example_loss)
                model_losses = model.losses
                if model_losses:
                    loss += idist.nn.scale_regularization_loss(idist.math.add_n(model_losses))

            gradients = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(gradients, model.trainable_variables, strict=True))
            return loss

        def distributed_train_step(dist_inputs: Any) -> Any:
            per_replica_losses = mirrored_strategy.run(train_step, args=(dist_inputs,))
            return mirrored_strategy.reduce(idist.ReduceOp.SUM, per_replica_losses, axis=None)

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
        rec["optimizer_iterations"] = int(np.asarray(optimizer.iterations.numpy()))
        try:
            next(iterator)
            rec["next_after_end"] = None
        except StopIteration as e:
            rec["next_after_end"] = type(e).__name__
        kernel, bias = model.get_weights()
        rec["final_mse"] = floats(np.mean((features @ kernel + bias - labels) ** 2))
        return rec
    finally:
        mirrored_strategy.close()


def test_custom_loop(two_cpus: None) -> None:
    """Every number at ``RTOL`` (measured: 1.1e-6 at most, a loss)."""
    assert_close(run_guide(), _data.load("distributed_training"), rtol=RTOL)


def test_guide_model_with_input_shape() -> None:
    """The guide's model line as written, ``Dense(1, input_shape=(1,), ...)`` in a ``Sequential`` (Keras 3 accepts
    it with a warning to prefer an ``Input``; the port above starts with ``Input``)."""
    model = idist.layers.Sequential(
        [idist.layers.Dense(1, input_shape=(1,), kernel_regularizer=idist.regularizers.L2(1e-4))]
    )
    assert [w.shape for w in model.get_weights()] == [(1, 1), (1,)]
    assert len(model.losses) == 1
