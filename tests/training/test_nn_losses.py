"""``idist.nn``, ``idist.losses``, ``idist.regularizers`` against TF 2.21 / Keras 3.15.

The numbers were recorded by recorder/nn_tf.py, recorder/nn_replica_tf.py and
recorder/conv_pool_tf.py (data/conv_pool_tf.json) from the same programs in TensorFlow.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import interdist as idist

PEL = np.array([1.0, 2.0, 3.0, 4.0], np.float32)
Y = np.array([0, 2, 1])
LOGITS = np.array([[1.0, 2.0, 3.0], [0.5, 0.1, -1.0], [2.0, 2.0, 2.0]], np.float32)
SW = np.array([1.0, 0.0, 2.0])


def assert_close(got: object, want: object, rtol: float = 2e-6) -> None:
    np.testing.assert_allclose(np.asarray(got, np.float64), np.asarray(want, np.float64), rtol=rtol, atol=1e-6)


# -- compute_average_loss / scale_regularization_loss ------------------------------------------------------


def test_compute_average_loss_outside_a_strategy() -> None:
    assert_close(idist.nn.compute_average_loss(PEL), 2.5)
    assert_close(idist.nn.compute_average_loss(PEL, global_batch_size=8), 1.25)
    assert_close(idist.nn.compute_average_loss(PEL, sample_weight=np.array([1.0, 0.0, 2.0, 1.0], np.float32)), 2.75)
    assert_close(idist.nn.compute_average_loss(PEL, sample_weight=0.5), 1.25)
    assert_close(idist.nn.compute_average_loss(np.ones((2, 3), np.float32)), 3.0)
    assert_close(idist.nn.compute_average_loss(PEL, global_batch_size=0), 0.0)  # TF 2.21: no NaN, no error
    r = idist.nn.compute_average_loss(np.array([1, 2]))
    assert np.asarray(r).dtype == np.float64 and float(r) == 1.5  # TF 2.21 averages integer losses in float64


def test_compute_average_loss_errors() -> None:
    with pytest.raises(ValueError, match="at least rank 1"):
        idist.nn.compute_average_loss(np.float32(3.0))
    with pytest.raises(TypeError, match="global_batch_size must be an integer"):
        idist.nn.compute_average_loss(PEL, global_batch_size=2.5)


def test_scale_regularization_loss_outside_a_strategy() -> None:
    assert_close(idist.nn.scale_regularization_loss(np.array([1.0, 2.0], np.float32)), 3.0)


def test_cross_replica_context_is_refused(mirrored2: idist.MirroredStrategy) -> None:
    with mirrored2.scope():
        with pytest.raises(RuntimeError, match="`compute_average_loss` in cross replica context"):
            idist.nn.compute_average_loss(PEL)
        with pytest.raises(RuntimeError, match="`scale_regularization_loss` in cross replica context"):
            idist.nn.scale_regularization_loss(np.float32(3.0))
        assert_close(idist.nn.compute_average_loss(PEL, global_batch_size=8), 1.25)  # given, no strategy needed


def test_in_replica_context_the_batch_is_global(mirrored2: idist.MirroredStrategy) -> None:
    s = mirrored2

    def fn() -> tuple:
        return (
            idist.nn.compute_average_loss(PEL),
            idist.nn.scale_regularization_loss(np.float32(3.0)),
            idist.nn.compute_average_loss(np.zeros((0,), np.float32)),
            idist.losses.SparseCategoricalCrossentropy(from_logits=True)(Y, LOGITS),
            idist.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="sum")(Y, LOGITS, sample_weight=SW),
            idist.losses.MeanSquaredError()(np.ones((3, 2)), LOGITS[:, :2]),
            idist.regularizers.L2(0.1)(np.array([1.0, 2.0], np.float32)),
        )

    for rep in s.experimental_local_results(s.run(fn)):
        avg, reg, empty, scce, scce_sum, mse, l2 = (np.asarray(x) for x in rep)
        assert_close(avg, 1.25)
        assert_close(reg, 1.5)
        assert_close(empty, 0.0)
        assert_close(scce, 0.94076973)  # Keras 3 divides a mean reduction by the replicas in replica context
        assert_close(scce_sum, 4.604830741882324)  # ... but not a sum
        assert_close(mse, 0.33833334)
        assert_close(l2, 0.5)


# -- losses ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("reduction", "plain", "weighted"),
    [
        ("sum_over_batch_size", 1.8815394639968872, 1.5349435806274414),
        ("sum", 5.644618511199951, 4.604830741882324),
        (
            None,
            [2.4076058864593506, 2.1384005546569824, 1.0986123085021973],
            [2.4076058864593506, 0.0, 2.1972246170043945],
        ),
        (
            "none",
            [2.4076058864593506, 2.1384005546569824, 1.0986123085021973],
            [2.4076058864593506, 0.0, 2.1972246170043945],
        ),
        ("mean", 1.8815394639968872, 1.5349435806274414),
        ("mean_with_sample_weight", 1.8815394639968872, 1.5349435806274414),
    ],
)
def test_sparse_categorical_crossentropy_reductions(reduction: str | None, plain: object, weighted: object) -> None:
    loss = idist.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=reduction)
    assert_close(loss(Y, LOGITS), plain)
    assert_close(loss(Y, LOGITS, sample_weight=SW), weighted)


def test_other_losses() -> None:
    assert_close(idist.losses.SparseCategoricalCrossentropy()(Y, idist.nn.softmax(LOGITS)), 1.8815394639968872)
    assert_close(idist.losses.SparseCategoricalCrossentropy(from_logits=True)(Y[:, None], LOGITS), 1.8815395)
    assert_close(
        idist.losses.SparseCategoricalCrossentropy(from_logits=True)(Y, LOGITS, sample_weight=SW[:, None]), 1.5349436
    )
    probs = np.array([[0.0, 1.0], [0.5, 0.5]], np.float32)
    assert_close(idist.losses.SparseCategoricalCrossentropy()(np.array([0, 1]), probs), 8.405622)  # clipped at 1e-7
    assert_close(idist.losses.MeanSquaredError()(np.ones((3, 2)), LOGITS[:, :2]), 0.6766666769981384)
    assert_close(idist.losses.MeanSquaredError(reduction=None)(np.ones((3, 2)), LOGITS[:, :2]), [0.5, 0.53, 1.0])
    assert_close(idist.losses.CategoricalCrossentropy(from_logits=True)(np.eye(3)[Y], LOGITS), 1.8815394639968872)
    assert_close(
        idist.losses.BinaryCrossentropy(from_logits=True)(np.array([[1.0], [0.0], [1.0]]), LOGITS[:, :1]), 0.4714222
    )
    assert_close(
        idist.nn.sparse_softmax_cross_entropy_with_logits(Y, LOGITS),
        [2.4076058864593506, 2.1384005546569824, 1.0986123],
    )
    with pytest.raises(ValueError, match="Invalid value for argument `reduction`"):
        idist.losses.MeanSquaredError(reduction="auto")


def test_regularizers() -> None:
    assert_close(idist.regularizers.L2(0.01)(np.array([[1.0, 2.0], [3.0, 4.0]], np.float32)), 0.29999998)
    assert_close(idist.regularizers.L1(0.01)(np.array([[1.0, -2.0], [3.0, 4.0]], np.float32)), 0.099999994)
    assert idist.regularizers.L2().get_config() == {"l2": 0.01}


def test_a_loss_is_differentiable() -> None:
    w = idist.Variable(LOGITS)
    with idist.GradientTape() as t:
        loss = idist.losses.SparseCategoricalCrossentropy(from_logits=True)(Y, w)
    g = t.gradient(loss, w)
    expected = (idist.nn.softmax(LOGITS) - np.eye(3)[Y]) / 3  # d(mean xent)/d logits
    assert_close(g, expected, rtol=1e-5)


# Recorded by recorder/nn_tf.py: the gradients of weighted sums of the cross-entropies over LOGITS.
XENT_WEIGHTS = np.array([1.0, 2.0, 3.0], np.float32)
SOFT_LABELS = np.array([[0.5, 0.25, 0.75], [0.0, 0.0, 0.0], [1.0, 2.0, 0.0]], np.float32)  # rows sum to 1.5, 0, 3
TF_SPARSE_XENT_GRAD = [
    [-0.9099694490432739, 0.2447284758090973, 0.6652409434318542],
    [1.0562727451324463, 0.7080408334732056, -1.7643136978149414],
    [1.0, -1.9999998807907104, 1.0],
]
TF_XENT = {  # axis: (loss, gradient of the logits, gradient of the labels)
    -1: (
        [1.8614088296890259, 0.0, 3.295836925506592],
        [[-0.40996941924095154, -0.00527152419090271, -0.08475905656814575],
         [1.0562727451324463, 0.7080408334732056, 0.23568633198738098], [-1.9999998807907104, -5.0, 1.0]],
        [[2.4076058864593506, 1.4076058864593506, 0.40760594606399536],
         [1.276801347732544, 2.076801300048828, 4.276801109313965],
         [3.295836925506592, 3.295836925506592, 3.295836925506592]],
    ),
    0: (
        [1.1965532302856445, 1.721851110458374, 0.24492202699184418],
        [[-0.2687761187553406, 0.43041926622390747, -0.08580261468887329],
         [0.14024437963962555, 0.13916152715682983, 0.03963866084814072],
         [-0.37146830558776855, -3.0695807933807373, 0.79616379737854]],
        [[1.4643688201904297, 1.530534267425537, 0.9796881079673767],
         [1.9643688201904297, 5.330533981323242, 12.97968864440918],
         [0.4643687903881073, 1.530534267425537, 3.9796879291534424]],
    ),
}  # fmt: skip


def test_sparse_cross_entropy_gradient_as_tf() -> None:
    w = idist.Variable(LOGITS)
    with idist.GradientTape() as t:
        s = np.sum(idist.nn.sparse_softmax_cross_entropy_with_logits(Y, w) * XENT_WEIGHTS)
    assert_close(t.gradient(s, w), TF_SPARSE_XENT_GRAD)


@pytest.mark.parametrize("axis", [-1, 0])
def test_cross_entropy_gradients_as_tf(axis: int) -> None:
    """TF's kernel: softmax - labels for the logits whatever the labels sum to (the formula's derivative would be
    softmax * sum(labels) - labels: rows 0 and 2 sum to 1.5 and 3), and -log_softmax for the labels."""
    w, labels = idist.Variable(LOGITS), idist.Variable(SOFT_LABELS)
    with idist.GradientTape(persistent=True) as t:
        loss = idist.nn.softmax_cross_entropy_with_logits(labels, w, axis=axis)
        s = np.sum(loss * XENT_WEIGHTS)
    want_loss, want_logits, want_labels = TF_XENT[axis]
    assert_close(loss, want_loss)
    assert_close(t.gradient(s, w), want_logits)
    assert_close(t.gradient(s, labels), want_labels)
    assert not np.signbit(np.asarray(loss)).any()  # all-zero labels: +0.0, as TF


def test_cross_entropy_of_a_label_with_all_the_probability_is_plus_zero() -> None:
    logits = np.array([[0.0, -200.0]], np.float32)  # softmax: [1, 0] in float32
    assert not np.signbit(idist.nn.sparse_softmax_cross_entropy_with_logits(np.array([0]), logits))[0]
    assert float(idist.nn.softmax_cross_entropy_with_logits(np.array([[1.0, 0.0]]), logits)[0]) == 0.0


@pytest.mark.parametrize("shape", [(5, 4), (2, 3, 4)])
@pytest.mark.parametrize(("activation", "use_bias"), [("relu", True), ("relu", False), (None, True), ("linear", True)])
def test_dense_gradients_are_those_of_its_operations(
    shape: tuple[int, ...], activation: str | None, use_bias: bool
) -> None:
    """Dense records one operation on a tape; its gradients have the bits of the matmul, bias add and relu
    recorded one by one (the kernel, the bias and the inputs)."""
    rng = np.random.default_rng(7)
    layer = idist.layers.Dense(3, activation=activation, use_bias=use_bias)
    x = idist.Variable(rng.normal(size=shape).astype(np.float32))
    layer(np.asarray(x))
    for v in layer.trainable_variables:
        v.assign(rng.normal(size=v.shape).astype(np.float32))
    c = rng.normal(size=(*shape[:-1], 3)).astype(np.float32)
    watched = [x, *layer.trainable_variables]
    with idist.GradientTape(persistent=True) as t:
        fused = np.sum(layer(x) * c)
        y = x @ layer.kernel
        if use_bias:
            y = y + layer.bias
        composed = np.sum((idist.nn.relu(y) if activation == "relu" else y) * c)
    assert np.asarray(fused) == np.asarray(composed)
    for got, want in zip(t.gradient(fused, watched), t.gradient(composed, watched), strict=True):
        assert got.shape == want.shape and got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)


# -- conv2d / max_pool2d -----------------------------------------------------------------------------------

CASES = json.loads((Path(__file__).parent / "data" / "conv_pool_tf.json").read_text())


@pytest.mark.parametrize("case", CASES["conv"], ids=lambda c: f"{c['strides']}-{c['padding']}")
def test_conv2d_as_tf(case: dict) -> None:
    x = idist.Tensor(np.array(CASES["x"], np.float32))
    f = idist.Variable(np.array(CASES["f"], np.float32))
    with idist.GradientTape() as t:
        t.watch(x)
        y = idist.nn.conv2d(x, f, case["strides"], case["padding"])
        loss = np.sum(np.sin(y))
    gx, gf = t.gradient(loss, [x, f])
    assert_close(y, case["y"], rtol=1e-5)
    assert_close(gx, case["gx"], rtol=1e-4)
    assert_close(gf, case["gf"], rtol=1e-4)


@pytest.mark.parametrize("case", CASES["pool"], ids=lambda c: f"{c['k']}-{c['s']}-{c['padding']}")
def test_max_pool2d_as_tf(case: dict) -> None:
    x = idist.Tensor(np.maximum(np.array(CASES["x"], np.float32), 0))  # ties at 0, as after a relu
    with idist.GradientTape() as t:
        t.watch(x)
        y = idist.nn.max_pool2d(x, case["k"], case["s"], case["padding"])
        loss = np.sum(np.sin(y) + y)
    assert_close(y, case["y"])
    assert_close(t.gradient(loss, x), case["gx"], rtol=1e-5)


def test_conv2d_bad_shapes() -> None:
    with pytest.raises(ValueError, match="4-D"):
        idist.nn.conv2d(np.zeros((4, 4, 1), np.float32), np.zeros((2, 2, 1, 1), np.float32))
    with pytest.raises(ValueError, match="filters must be"):
        idist.nn.conv2d(np.zeros((1, 4, 4, 2), np.float32), np.zeros((2, 2, 1, 1), np.float32))
    with pytest.raises(ValueError, match="padding"):
        idist.nn.conv2d(np.zeros((1, 4, 4, 1), np.float32), np.zeros((2, 2, 1, 1), np.float32), padding="FULL")


def test_max_pool_ties_go_to_the_first_maximum() -> None:
    """TF's MaxPoolGrad: a window's gradient goes to its first maximum in row-major order, also when the
    maximum is positive and repeated (the tiled path for Keras' default pooling and the general path)."""
    window = np.array([[0.5, 2.0], [2.0, 2.0]], np.float32)
    x = idist.Tensor(np.tile(window, (2, 3))[None, :, :, None])  # (1, 4, 6, 1): six equal windows
    for k, s in [(2, 2), (2, (2, 2)), ((2, 2), 2)]:
        with idist.GradientTape() as t:
            t.watch(x)
            y = np.sum(idist.nn.max_pool2d(x, k, s))
        g = t.gradient(y, x)[0, :, :, 0]
        np.testing.assert_array_equal(g, np.tile(np.array([[0.0, 1.0], [0.0, 0.0]], np.float32), (2, 3)))
    general = idist.Tensor(np.array(window)[None, :, :, None])
    with idist.GradientTape() as t:
        t.watch(general)
        y = np.sum(idist.nn.max_pool2d(general, 2, 1, padding="SAME"))  # overlapping windows: the general path
    np.testing.assert_array_equal(t.gradient(y, general)[0, :, :, 0], [[0.0, 2.0], [1.0, 1.0]])  # as TF 2.21
