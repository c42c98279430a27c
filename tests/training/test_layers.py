"""``idist.layers`` against Keras 3 in TF 2.21: the same CNN, the same weights, the same batch
(recorder/layers_tf.py wrote data/layers_tf.json): logits, losses, regularization and gradients."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import interdist as idist

TF = json.loads((Path(__file__).parent / "data" / "layers_tf.json").read_text())


def model() -> idist.layers.Sequential:
    idist.layers.clear_session()
    L = idist.layers
    return L.Sequential(
        [
            L.Input(shape=(10, 10, 1)),
            L.Conv2D(4, 3, activation="relu"),
            L.MaxPooling2D(),
            L.Conv2D(6, 3, activation="relu", padding="same"),
            L.Flatten(),
            L.Dense(8, activation="relu", kernel_regularizer=idist.regularizers.L2(0.01)),
            L.Dense(3),
        ]
    )


def assert_close(got: object, want: object, rtol: float = 1e-5) -> None:
    np.testing.assert_allclose(np.asarray(got, np.float64), np.asarray(want, np.float64), rtol=rtol, atol=1e-6)


def test_names_shapes_and_weights_as_keras() -> None:
    m = model()
    assert [v.name for v in m.variables] == [p + ":0" for p in TF["paths"]]
    assert m.count_params() == TF["params"]
    m.set_weights([np.array(w, np.float32) for w in TF["weights"]])
    for got, want in zip(m.get_weights(), TF["weights"], strict=True):
        assert got.dtype == np.float32
        np.testing.assert_array_equal(got, np.array(want, np.float32))
    with pytest.raises(ValueError, match="expected 8 weights"):
        m.set_weights([np.zeros((3, 3, 1, 4))])


def test_forward_loss_and_gradients_as_tf() -> None:
    m = model()
    m.set_weights([np.array(w, np.float32) for w in TF["weights"]])
    x, y = np.array(TF["x"], np.float32), np.array(TF["y"])
    loss_object = idist.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=None)
    with idist.GradientTape() as tape:
        logits = m(x, training=True)
        per_example = loss_object(y, logits)
        loss = idist.nn.compute_average_loss(per_example, global_batch_size=4) + idist.nn.scale_regularization_loss(
            idist.add_n(m.losses)
        )
    grads = tape.gradient(loss, m.trainable_variables)
    assert_close(logits, TF["logits"])
    assert_close(per_example, TF["per_example"])
    assert_close([float(r) for r in m.losses], TF["reg"])
    assert_close(loss, TF["loss"])
    for g, want in zip(grads, TF["grads"], strict=True):
        assert_close(g, want, rtol=1e-4)


def test_a_layer_built_inside_run_is_refused(mirrored2: idist.MirroredStrategy) -> None:
    with mirrored2.scope():
        dense = idist.layers.Dense(2)
    with pytest.raises(Exception, match="build the model in the notebook"):
        mirrored2.run(lambda: dense(np.ones((1, 3), np.float32)))


def test_layers_in_a_strategy_are_mirrored(mirrored2: idist.MirroredStrategy) -> None:
    with mirrored2.scope():
        m = idist.layers.Sequential([idist.layers.Input((3,)), idist.layers.Dense(2, kernel_initializer="ones")])
    assert all(isinstance(v, idist.MirroredVariable) for v in m.variables)
    out = mirrored2.run(lambda: m(np.ones((1, 3), np.float32)))
    for r in mirrored2.experimental_local_results(out):
        assert_close(r, [[3.0, 3.0]])


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="units"):
        idist.layers.Dense(0)
    with pytest.raises(ValueError, match="activation"):
        idist.layers.Dense(2, activation="swishy")
    with pytest.raises(ValueError, match="rank 4"):
        idist.layers.Sequential([idist.layers.Input((3,)), idist.layers.Conv2D(2, 3)])


def test_training_reaches_a_layer_whose_call_takes_it_and_only_that_one() -> None:
    """Keras passes ``training`` to a layer's ``call`` that names it, and calls others without it; the answer is
    looked up once per class's ``call`` (a subclass that overrides it, or an instance's own ``call``, asks again)."""
    seen: list[object] = []

    class Takes(idist.layers.Layer):
        def call(self, inputs: object, training: object = None) -> object:
            seen.append(training)
            return inputs

    class Plain(idist.layers.Layer):
        def call(self, inputs: object) -> object:
            seen.append("plain")
            return inputs

    class PlainAgain(Takes):
        def call(self, inputs: object) -> object:  # type: ignore[override]
            seen.append("again")
            return inputs

    x = np.ones((1, 2), np.float32)
    for _ in range(2):  # the second time from what was looked up
        Takes()(x, training=True)
        Plain()(x, training=True)
        PlainAgain()(x, training=False)
    own = Takes()
    own.call = lambda inputs, training=None: seen.append(("own", training)) or inputs  # type: ignore[method-assign]
    own(x, training=False)
    assert seen == [True, "plain", "again", True, "plain", "again", ("own", False)]
