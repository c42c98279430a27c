"""``idist.losses`` and ``idist.metrics`` where they diverged from Keras 3 (TF 2.21), found by a probe.

Crossentropy from probabilities (Keras clips before it renormalises), the reductions with sample weights,
empty and scalar losses, the division by ``num_replicas_in_sync`` in a strategy's scope, ``Huber``,
``BinaryCrossentropy(label_smoothing=, axis=)``, ``CategoricalCrossentropy(axis=)``, labels of one rank
less than the predictions, and metrics updated in cross-replica context. Every expected number was
recorded from TensorFlow 2.21 (Keras 3) by ``TF_PROGRAM`` at the end of this module (run with a
TensorFlow install, not by pytest); each test names the lines of its output it asserts (``# TF: name``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import interdist as idist

L, M = idist.losses, idist.metrics
YT = np.array([[0.0, 1.0], [1.0, 1.0]], np.float32)
YP = np.array([[1.0, 1.0], [1.0, 3.0]], np.float32)
P = np.array([[0.2, 1.3, 0.2], [0.0, 0.6, 0.4]], np.float32)  # probabilities that do not sum to 1, and a 0
BT = np.array([[0.0, 1.0, 1.0], [1.0, 0.0, 1.0]], np.float32)
BP = np.array([[0.0, 1.0, 0.3], [1.2, 0.5, 0.9]], np.float32)
CT = np.eye(2, dtype=np.float32)[[[0, 1, 1], [1, 0, 0]]].transpose(0, 2, 1)  # (2, 2, 3): classes on axis 1
CP = np.array([[[0.3, 0.6, 0.5], [0.7, 0.4, 0.5]], [[0.1, 0.8, 0.2], [0.9, 0.2, 0.8]]], np.float32)
HT = np.array([[0.0, 1.0], [0.0, 0.0]], np.float32)
HP = np.array([[0.6, 0.4], [2.4, -1.6]], np.float32)
EMPTY = np.zeros((0, 2), np.float32)


def assert_close(got: Any, want: Any, rtol: float = 2e-6) -> None:
    got = np.asarray(got)
    assert got.shape == np.shape(want), (got.shape, np.shape(want))
    np.testing.assert_allclose(got.astype(np.float64), np.asarray(want, np.float64), rtol=rtol, atol=1e-7)


# -- crossentropy from probabilities -----------------------------------------------------------------------


def test_crossentropies_from_probabilities() -> None:
    # TF: scce_probs, cce_probs, bce_probs. Sparse: clip, log, then renormalise (log-softmax); categorical:
    # renormalise, then clip; binary: clip.
    assert_close(
        L.SparseCategoricalCrossentropy(reduction=None)(np.array([1, 0]), P), [0.3364723026752472, 16.11809539794922]
    )
    assert_close(L.sparse_categorical_crossentropy(np.array([1, 0]), P), [0.3364723026752472, 16.11809539794922])
    assert_close(L.SparseCategoricalCrossentropy()(np.array([1]), P[:1]), 0.3364723026752472)
    onehot = np.eye(3, dtype=np.float32)[[1, 0]]
    assert_close(L.CategoricalCrossentropy(reduction=None)(onehot, P), [0.2682640552520752, 16.11809539794922])
    assert_close(L.BinaryCrossentropy(reduction=None)(BT, BP), [0.4013243615627289, 0.2661692798137665])


def test_gradients_from_probabilities() -> None:
    # TF: scce_grad, bce_smooth_loss, bce_smooth_grad, huber_loss, huber_grad (GradientTape on a tf.Variable)
    p = idist.Variable(P)
    with idist.GradientTape() as t:
        loss = L.SparseCategoricalCrossentropy()(np.array([1, 0]), p)
    assert_close(
        t.gradient(loss, p),
        [[0.3571428656578064, 0.0, 0.3571428656578064], [0.0, 0.4999999701976776, 0.4999999403953552]],
        rtol=1e-5,
    )
    b = idist.Variable(np.array([[0.1, 0.9, 0.3], [0.6, 0.5, 0.9]], np.float32))
    with idist.GradientTape() as t:
        loss = L.BinaryCrossentropy(label_smoothing=0.2)(BT, b)
    assert_close(loss, 0.5565018653869629)
    want = [
        [1.4901161193847656e-08, -1.043081283569336e-07, -0.4761904776096344],
        [-0.2083333432674408, 0.2666666805744171, -1.043081283569336e-07],
    ]
    np.testing.assert_allclose(np.asarray(t.gradient(loss, b)), want, rtol=1e-5, atol=1e-6)
    h = idist.Variable(HP)
    with idist.GradientTape() as t:
        loss = L.Huber(delta=0.5)(HT, h)
    assert_close(loss, 0.5249999761581421)
    assert_close(t.gradient(loss, h), [[0.125, -0.125], [0.125, -0.125]])


# -- the arguments that were missing -----------------------------------------------------------------------


def test_binary_crossentropy_label_smoothing_and_axis() -> None:
    # TF: bce_smooth, bce_smooth_logits, bce_axis0, bce_config
    assert_close(
        L.BinaryCrossentropy(label_smoothing=0.2, reduction=None)(BT, BP), [1.4417635202407837, 0.8708227276802063]
    )
    assert_close(L.binary_crossentropy(BT, BP, label_smoothing=0.2), [1.4417635202407837, 0.8708227276802063])
    logits = L.BinaryCrossentropy(from_logits=True, label_smoothing=0.2, reduction=None)(BT, BP)
    assert_close(logits, [0.56358802318573, 0.5795044302940369])
    axis0 = L.BinaryCrossentropy(axis=0, reduction=None)(BT, np.clip(BP, 0, 1))
    assert_close(axis0, [1.1920928955078125e-07, 0.3465736508369446, 0.6546666622161865], rtol=1e-5)
    assert L.BinaryCrossentropy(label_smoothing=0.2).get_config() == {
        "name": "binary_crossentropy",
        "reduction": "sum_over_batch_size",
        "from_logits": False,
        "label_smoothing": 0.2,
        "axis": -1,
    }


def test_categorical_crossentropy_axis() -> None:
    # TF: cce_axis1, cce_axis1_logits_smooth, cce_axis1_mean, cce_config
    want = [
        [1.2039728164672852, 0.9162907600402832, 0.6931471824645996],
        [0.10536054521799088, 0.2231435477733612, 1.6094379425048828],
    ]
    assert_close(L.CategoricalCrossentropy(axis=1, reduction=None)(CT, CP), want)
    smooth = L.CategoricalCrossentropy(axis=1, from_logits=True, label_smoothing=0.3, reduction=None)(CT, CP)
    want = [
        [0.7817137241363525, 0.6983250379562378, 0.6238324642181396],
        [0.41399064660072327, 0.453739196062088, 0.8737391829490662],
    ]
    assert_close(smooth, want)
    assert_close(L.CategoricalCrossentropy(axis=1)(CT, CP), 0.7918921113014221)
    assert L.CategoricalCrossentropy(axis=1).get_config() == {
        "name": "categorical_crossentropy",
        "reduction": "sum_over_batch_size",
        "from_logits": False,
        "label_smoothing": 0.0,
        "axis": 1,
    }


def test_huber() -> None:
    # TF: huber, huber_none, huber_delta, huber_fn, huber_config
    assert_close(L.Huber()(HT, HP), 0.8400000333786011)
    assert_close(L.Huber(reduction=None)(HT, HP), [0.18000000715255737, 1.5])
    assert_close(L.Huber(delta=0.5, reduction=None)(HT, HP), [0.17500001192092896, 0.875])
    assert_close(L.huber(HT, HP, delta=2.0), [0.18000000715255737, 2.0400002002716064])
    assert L.Huber(delta=0.5).get_config() == {"name": "huber_loss", "reduction": "sum_over_batch_size"}


def test_labels_one_rank_below_the_predictions() -> None:
    # TF: mse_rank, mae_rank, bce_rank, huber_rank, mse_rank_rev. Labels (N,) against predictions (N, 1)
    # are compared element by element (Keras adds the trailing 1), not broadcast to (N, N).
    y1, p1 = np.array([1.0, 0.0, 1.0], np.float32), np.array([[0.8], [0.3], [0.4]], np.float32)
    assert_close(
        L.MeanSquaredError(reduction=None)(y1, p1), [0.03999999538064003, 0.09000000357627869, 0.36000001430511475]
    )
    assert_close(
        L.MeanAbsoluteError(reduction=None)(y1, p1), [0.19999998807907104, 0.30000001192092896, 0.6000000238418579]
    )
    assert_close(
        L.BinaryCrossentropy(reduction=None)(y1, p1), [0.2231435328722, 0.3566749691963196, 0.9162907004356384]
    )
    assert_close(L.Huber(reduction=None)(y1, p1 * 3), [0.9000000953674316, 0.4050000309944153, 0.02000000886619091])
    assert_close(
        L.MeanSquaredError(reduction=None)(p1, y1), [0.03999999538064003, 0.09000000357627869, 0.36000001430511475]
    )


# -- reductions ----------------------------------------------------------------------------------------------

WEIGHTS = [
    # TF: mwsw_<name>, none_<name>, sobs_<name>
    ("scalar", 2.0, 2.5, [1.0, 4.0], 2.5),
    ("n", np.array([1.0, 2.0], np.float32), 1.5, [0.5, 4.0], 2.25),
    ("n1", np.array([[1.0], [2.0]], np.float32), 1.5, [[0.5], [4.0]], 2.25),
    ("n1zero", np.array([[1.0], [0.0]], np.float32), 0.5, [[0.5], [0.0]], 0.25),
]


@pytest.mark.parametrize(("name", "weights", "mwsw", "none", "sobs"), WEIGHTS, ids=[w[0] for w in WEIGHTS])
def test_reductions_with_sample_weights(name: str, weights: Any, mwsw: float, none: Any, sobs: float) -> None:
    # mean_with_sample_weight divides by the sum of the weights as passed; "none" keeps (N, 1) weights' rank
    assert_close(L.MeanSquaredError(reduction="mean_with_sample_weight")(YT, YP, sample_weight=weights), mwsw)
    assert_close(L.MeanSquaredError(reduction="none")(YT, YP, sample_weight=weights), none)
    assert_close(L.MeanSquaredError()(YT, YP, sample_weight=weights), sobs)


def test_elementwise_weights_with_mean_with_sample_weight() -> None:
    # TF: mwsw_elementwise
    loss = L.MeanSquaredError(reduction="mean_with_sample_weight")
    weights = np.array([[1.0, 2.0], [3.0, 0.0]], np.float32)
    assert_close(loss(YT[:, :, None], YP[:, :, None], sample_weight=weights), 0.1666666716337204)


@pytest.mark.parametrize("reduction", ["sum_over_batch_size", "sum", "mean_with_sample_weight", None])
def test_an_empty_batch_gives_an_empty_loss(reduction: str | None) -> None:
    # TF: empty_sum_over_batch_size, empty_sum, empty_mean_with_sample_weight, empty_None, empty_weighted
    out = L.MeanSquaredError(reduction=reduction)(EMPTY, EMPTY)
    assert np.asarray(out).shape == (0,) and np.asarray(out).dtype == np.float32
    assert np.asarray(L.MeanSquaredError()(EMPTY, EMPTY, sample_weight=np.zeros((0,), np.float32))).shape == (0,)


def test_a_scalar_loss_is_not_reduced() -> None:
    # TF: scalar_loss_default (labels and predictions of shape (2,): one loss, returned as it is)
    assert_close(L.MeanSquaredError()(np.array([0.0, 1.0], np.float32), np.array([1.0, 1.0], np.float32)), 0.5)


# -- the division by num_replicas_in_sync -------------------------------------------------------------------


def test_a_mean_loss_is_divided_by_the_replicas_in_the_scope_and_in_run(mirrored2: idist.MirroredStrategy) -> None:
    # TF: outside, mirrored_scope, mirrored_scope_sum, mirrored_scope_mwsw, mirrored_scope_scalar_loss,
    # mirrored_scope_empty, mirrored_run
    s = mirrored2
    assert_close(L.MeanSquaredError()(YT, YP), 1.25)
    with s.scope():
        assert_close(L.MeanSquaredError()(YT, YP), 0.625)
        assert_close(L.MeanSquaredError(reduction="sum")(YT, YP), 2.5)
        weights = np.array([1.0, 3.0], np.float32)
        assert_close(L.MeanSquaredError(reduction="mean_with_sample_weight")(YT, YP, sample_weight=weights), 0.8125)
        scalar = L.MeanSquaredError()(np.array([0.0, 1.0], np.float32), np.array([1.0, 1.0], np.float32))
        assert_close(scalar, 0.5)
        assert np.asarray(L.MeanSquaredError()(EMPTY, EMPTY)).shape == (0,)
    out = s.run(lambda: L.MeanSquaredError()(YT, YP))
    assert [float(np.asarray(x)) for x in s.experimental_local_results(out)] == [0.625, 0.625]


def test_one_device_strategy_does_not_divide() -> None:
    # TF: one_device_scope, one_device_run
    s = idist.OneDeviceStrategy("CPU:0")
    try:
        with s.scope():
            assert_close(L.MeanSquaredError()(YT, YP), 1.25)
        assert float(np.asarray(s.run(lambda: L.MeanSquaredError()(YT, YP)))) == 1.25
    finally:
        s.close()


# -- metrics in cross-replica context -----------------------------------------------------------------------


def test_metrics_updated_in_cross_replica_context(mirrored2: idist.MirroredStrategy) -> None:
    # TF: mean_outside_scope, mean_in_scope, mean_weighted, sum_outside, acc_outside, mean_after_run,
    # mean_call_outside, mean_reset
    s = mirrored2
    with s.scope():
        m, total, acc = M.Mean(), M.Sum(), M.SparseCategoricalAccuracy()
    m.update_state([1.0, 3.0])  # outside the scope
    assert_close(m.result(), 2.0)
    with s.scope():
        m.update_state([5.0])
        assert_close(m.result(), 3.0)
    m.update_state([2.0, 4.0], sample_weight=[1.0, 3.0])
    assert_close(m.result(), 3.2857143878936768)
    total.update_state([1.0, 2.0, 3.0])
    assert_close(total.result(), 6.0)
    acc.update_state([1, 0, 2], [[0.1, 0.9, 0.0], [0.2, 0.7, 0.1], [0.0, 0.1, 0.9]])
    assert_close(acc.result(), 0.6666666865348816)
    s.run(lambda: m.update_state([10.0]))  # in replica context: each replica adds to its own copy
    assert_close(m.result(), 4.777777671813965)
    assert_close(m([0.0]), 4.300000190734863)
    m.reset_state()
    assert_close(m.result(), 0.0)


TF_PROGRAM = r"""
import os
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
import numpy as np, tensorflow as tf
cpus = tf.config.list_physical_devices("CPU")
tf.config.set_logical_device_configuration(cpus[0], [tf.config.LogicalDeviceConfiguration()] * 2)
L, M = tf.keras.losses, tf.keras.metrics
def show(name, v):
    a = np.asarray(v)
    print(name, a.shape, repr(a.tolist()))
yt = np.array([[0.0, 1.0], [1.0, 1.0]], np.float32); yp = np.array([[1.0, 1.0], [1.0, 3.0]], np.float32)
# crossentropies from probabilities
p = np.array([[0.2, 1.3, 0.2], [0.0, 0.6, 0.4]], np.float32)
show("scce_probs", L.SparseCategoricalCrossentropy(reduction=None)(np.array([1, 0]), p))
show("cce_probs", L.CategoricalCrossentropy(reduction=None)(np.eye(3, dtype=np.float32)[[1, 0]], p))
bt = np.array([[0.0, 1.0, 1.0], [1.0, 0.0, 1.0]], np.float32)
bp = np.array([[0.0, 1.0, 0.3], [1.2, 0.5, 0.9]], np.float32)
show("bce_probs", L.BinaryCrossentropy(reduction=None)(bt, bp))
show("bce_smooth", L.BinaryCrossentropy(label_smoothing=0.2, reduction=None)(bt, bp))
show("bce_smooth_logits", L.BinaryCrossentropy(from_logits=True, label_smoothing=0.2, reduction=None)(bt, bp))
show("bce_axis0", L.BinaryCrossentropy(axis=0, reduction=None)(bt, np.clip(bp, 0, 1)))
ct = np.eye(2, dtype=np.float32)[[[0, 1, 1], [1, 0, 0]]].transpose(0, 2, 1)  # (2, 2, 3): classes on axis 1
cp = np.array([[[0.3, 0.6, 0.5], [0.7, 0.4, 0.5]], [[0.1, 0.8, 0.2], [0.9, 0.2, 0.8]]], np.float32)
show("cce_axis1", L.CategoricalCrossentropy(axis=1, reduction=None)(ct, cp))
cce = L.CategoricalCrossentropy(axis=1, from_logits=True, label_smoothing=0.3, reduction=None)
show("cce_axis1_logits_smooth", cce(ct, cp))
show("cce_axis1_mean", L.CategoricalCrossentropy(axis=1)(ct, cp))
ht = np.array([[0.0, 1.0], [0.0, 0.0]], np.float32); hp = np.array([[0.6, 0.4], [2.4, -1.6]], np.float32)
show("huber", L.Huber()(ht, hp))
show("huber_none", L.Huber(reduction=None)(ht, hp))
show("huber_delta", L.Huber(delta=0.5, reduction=None)(ht, hp))
show("huber_fn", L.huber(ht, hp, delta=2.0))
print("huber_config", L.Huber(delta=0.5).get_config())
print("bce_config", L.BinaryCrossentropy(label_smoothing=0.2).get_config())
print("cce_config", L.CategoricalCrossentropy(axis=1).get_config())
# reductions
for w, nm in ((2.0, "scalar"), (np.array([1.0, 2.0], np.float32), "n"), (np.array([[1.0], [2.0]], np.float32), "n1"),
              (np.array([[1.0], [0.0]], np.float32), "n1zero")):
    show("mwsw_" + nm, L.MeanSquaredError(reduction="mean_with_sample_weight")(yt, yp, sample_weight=w))
    show("none_" + nm, L.MeanSquaredError(reduction="none")(yt, yp, sample_weight=w))
    show("sobs_" + nm, L.MeanSquaredError()(yt, yp, sample_weight=w))
w2 = np.array([[1.0, 2.0], [3.0, 0.0]], np.float32)
show("mwsw_elementwise", L.MeanSquaredError(reduction="mean_with_sample_weight")(yt[:, :, None], yp[:, :, None], w2))
e = np.zeros((0, 2), np.float32)
for red in ("sum_over_batch_size", "sum", "mean_with_sample_weight", None):
    show(f"empty_{red}", L.MeanSquaredError(reduction=red)(e, e))
show("empty_weighted", L.MeanSquaredError()(e, e, sample_weight=np.zeros((0,), np.float32)))
show("scalar_loss_default", L.MeanSquaredError()(np.array([0.0, 1.0], np.float32), np.array([1.0, 1.0], np.float32)))
# distribution scaling
ms = tf.distribute.MirroredStrategy(["CPU:0", "CPU:1"])
show("outside", L.MeanSquaredError()(yt, yp))
with ms.scope():
    show("mirrored_scope", L.MeanSquaredError()(yt, yp))
    show("mirrored_scope_sum", L.MeanSquaredError(reduction="sum")(yt, yp))
    w13 = np.array([1.0, 3.0], np.float32)
    show("mirrored_scope_mwsw", L.MeanSquaredError(reduction="mean_with_sample_weight")(yt, yp, sample_weight=w13))
    y2, p2 = np.array([0.0, 1.0], np.float32), np.array([1.0, 1.0], np.float32)
    show("mirrored_scope_scalar_loss", L.MeanSquaredError()(y2, p2))
    show("mirrored_scope_empty", L.MeanSquaredError()(e, e))
out = ms.run(lambda: L.MeanSquaredError()(yt, yp))
show("mirrored_run", [np.asarray(x) for x in ms.experimental_local_results(out)])
od = tf.distribute.OneDeviceStrategy("CPU:0")
with od.scope():
    show("one_device_scope", L.MeanSquaredError()(yt, yp))
show("one_device_run", od.run(lambda: L.MeanSquaredError()(yt, yp)))
# metrics updated in cross-replica context
with ms.scope():
    m, s_, acc = M.Mean(), M.Sum(), M.SparseCategoricalAccuracy()
m.update_state([1.0, 3.0]); show("mean_outside_scope", m.result())
with ms.scope():
    m.update_state([5.0]); show("mean_in_scope", m.result())
m.update_state([2.0, 4.0], sample_weight=[1.0, 3.0]); show("mean_weighted", m.result())
s_.update_state([1.0, 2.0, 3.0]); show("sum_outside", s_.result())
acc.update_state([1, 0, 2], [[0.1, 0.9, 0.0], [0.2, 0.7, 0.1], [0.0, 0.1, 0.9]]); show("acc_outside", acc.result())
ms.run(lambda: m.update_state([10.0])); show("mean_after_run", m.result())
show("mean_call_outside", m([0.0]))
m.reset_state(); show("mean_reset", m.result())
y1 = np.array([1.0, 0.0, 1.0], np.float32); p1 = np.array([[0.8], [0.3], [0.4]], np.float32)
show("mse_rank", L.MeanSquaredError(reduction=None)(y1, p1))
show("mae_rank", L.MeanAbsoluteError(reduction=None)(y1, p1))
show("bce_rank", L.BinaryCrossentropy(reduction=None)(y1, p1))
show("huber_rank", L.Huber(reduction=None)(y1, p1 * 3))
show("mse_rank_rev", L.MeanSquaredError(reduction=None)(p1, y1))
p = tf.Variable(np.array([[0.2, 1.3, 0.2], [0.0, 0.6, 0.4]], np.float32))
with tf.GradientTape() as t:
    l = L.SparseCategoricalCrossentropy()(np.array([1, 0]), p)
show("scce_grad", t.gradient(l, p))
bt = np.array([[0.0, 1.0, 1.0], [1.0, 0.0, 1.0]], np.float32)
b = tf.Variable(np.array([[0.1, 0.9, 0.3], [0.6, 0.5, 0.9]], np.float32))
with tf.GradientTape() as t:
    l = L.BinaryCrossentropy(label_smoothing=0.2)(bt, b)
show("bce_smooth_loss", l); show("bce_smooth_grad", t.gradient(l, b))
h = tf.Variable(np.array([[0.6, 0.4], [2.4, -1.6]], np.float32))
with tf.GradientTape() as t:
    l = L.Huber(delta=0.5)(np.array([[0.0, 1.0], [0.0, 0.0]], np.float32), h)
show("huber_loss", l); show("huber_grad", t.gradient(l, h))
"""
