"""The Keras 3 metrics of TF's tutorials, on one device: numbers recorded from TensorFlow 2.21 (Keras 3.15).

Each expected value is ``float(metric(...).numpy())`` as TF printed it; NumPy's float32 arithmetic
matches it to float32 rounding (rtol 1e-6).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import interdist as idist

M = idist.metrics
P = np.array([[0.1, 0.6, 0.3], [0.05, 0.95, 0.0], [0.7, 0.2, 0.1], [0.2, 0.3, 0.5]], np.float32)
L = np.array([2, 1, 0, 0])
OH = np.eye(3, dtype=np.float32)[L]
W = [0.7, 0.3, 1.0, 2.0]
LOGITS = np.array([[1.0, 2.0, 3.0], [-1.0, 5.0, 0.5], [10.0, 0.0, -3.0], [0.0, 0.0, 0.0]], np.float32)
SEQ_P = np.stack([P[:2], P[2:]])
SEQ_L = np.array([[0, 1], [2, 2]])

# (id, metric factory, args, kwargs, TF's result)
CASES: list[tuple[str, Callable[[], Any], tuple[Any, ...], dict[str, Any], float]] = [
    ("sca_labels_n", M.SparseCategoricalAccuracy, (L, P), {}, 0.5),
    ("sca_labels_n1", M.SparseCategoricalAccuracy, (L[:, None], P), {}, 0.5),
    ("sca_weighted", M.SparseCategoricalAccuracy, (L, P), {"sample_weight": W}, 0.32499998807907104),
    (
        "sca_weighted_n1",
        M.SparseCategoricalAccuracy,
        (L[:, None], P),
        {"sample_weight": [[w] for w in W]},
        0.32499998807907104,
    ),
    ("sca_float_labels", M.SparseCategoricalAccuracy, (L.astype(np.float32), P), {}, 0.5),
    ("sca_tie_is_first_max", M.SparseCategoricalAccuracy, ([0, 1], [[0.5, 0.5, 0.0], [0.4, 0.4, 0.2]]), {}, 0.5),
    ("sca_sequence", M.SparseCategoricalAccuracy, (SEQ_L, SEQ_P), {}, 0.5),
    (
        "sca_sequence_weighted",
        M.SparseCategoricalAccuracy,
        (SEQ_L, SEQ_P),
        {"sample_weight": np.array([1.0, 3.0])},
        0.5,
    ),
    ("ca", M.CategoricalAccuracy, (OH, P), {}, 0.5),
    ("ca_weighted", M.CategoricalAccuracy, (OH, P), {"sample_weight": W}, 0.32499998807907104),
    (
        "ca_keras_doc",
        M.CategoricalAccuracy,
        ([[0, 0, 1], [0, 1, 0]], [[0.1, 0.9, 0.8], [0.05, 0.95, 0]]),
        {"sample_weight": [0.7, 0.3]},
        0.30000001192092896,
    ),
    ("ca_sequence", M.CategoricalAccuracy, (np.eye(3)[SEQ_L], SEQ_P), {}, 0.5),
    ("acc", M.Accuracy, ([[1], [2], [3], [4]], [[0], [2], [3], [4]]), {}, 0.75),
    ("acc_weighted", M.Accuracy, ([[1], [2], [3], [4]], [[0], [2], [3], [4]]), {"sample_weight": [1, 1, 0, 0]}, 0.5),
    ("acc_n_vs_n1", M.Accuracy, ([1, 2, 3, 4], [[0], [2], [3], [4]]), {}, 0.75),
    ("acc_2d", M.Accuracy, ([[1, 2], [3, 4]], [[1, 0], [3, 4]]), {}, 0.75),
    ("acc_2d_weighted", M.Accuracy, ([[1, 2], [3, 4]], [[1, 0], [3, 4]]), {"sample_weight": [1.0, 3.0]}, 0.875),
    ("acc_float32_differs", M.Accuracy, ([0.5, 1.0], [0.5, 1.0000001]), {}, 0.5),
    # y_true is converted in y_pred's dtype: Python floats straight to float64 here, so 0.1 == 0.1
    ("acc_list_vs_float64", M.Accuracy, ([0.1, 0.2], np.array([0.1, 0.2])), {}, 1.0),
    ("acc_float64_vs_float32", M.Accuracy, (np.array([0.1, 0.2]), np.array([0.1, 0.2], np.float32)), {}, 1.0),
    ("acc_bool", M.Accuracy, (np.array([True, False]), np.array([True, True])), {}, 0.5),
    ("ba", M.BinaryAccuracy, ([[1], [1], [0], [0]], [[0.98], [1], [0], [0.6]]), {}, 0.75),
    (
        "ba_weighted",
        M.BinaryAccuracy,
        ([[1], [1], [0], [0]], [[0.98], [1], [0], [0.6]]),
        {"sample_weight": [1, 0, 0, 1]},
        0.5,
    ),
    ("ba_n_vs_n1", M.BinaryAccuracy, ([1, 1, 0, 0], [[0.98], [0.5], [0], [0.6]]), {}, 0.5),
    ("ba_threshold_0.7", lambda: M.BinaryAccuracy(threshold=0.7), ([1, 1, 0, 0], [0.98, 0.5, 0, 0.6]), {}, 0.75),
    ("ba_at_threshold_is_0", M.BinaryAccuracy, ([1, 0], [0.5, 0.5]), {}, 0.5),
    ("ba_2d", M.BinaryAccuracy, ([[1, 0], [0, 0]], [[0.9, 0.7], [0.2, 0.1]]), {}, 0.75),
    (
        "ba_2d_weighted",
        M.BinaryAccuracy,
        ([[1, 0], [0, 0]], [[0.9, 0.7], [0.2, 0.1]]),
        {"sample_weight": [2.0, 1.0]},
        0.6666666865348816,
    ),
    ("ba_int_predictions", M.BinaryAccuracy, ([1, 0], [1, 0]), {}, 1.0),
    ("ba_bool_labels", M.BinaryAccuracy, (np.array([True, False]), np.array([0.9, 0.1], np.float32)), {}, 1.0),
    ("scce", M.SparseCategoricalCrossentropy, (L, P), {}, 0.805344820022583),
    ("scce_labels_n1", M.SparseCategoricalCrossentropy, (L[:, None], P), {}, 0.805344820022583),
    ("scce_weighted", M.SparseCategoricalCrossentropy, (L, P), {"sample_weight": W}, 1.1084299087524414),
    (
        "scce_weighted_n1",
        M.SparseCategoricalCrossentropy,
        (L[:, None], P),
        {"sample_weight": np.array([[w] for w in W])},
        1.1084299087524414,
    ),
    ("scce_logits", lambda: M.SparseCategoricalCrossentropy(from_logits=True), (L, LOGITS), {}, 0.37994053959846497),
    # clipped to [1e-7, 1 - 1e-7], then renormalized by the softmax of the logs
    (
        "scce_clipped",
        M.SparseCategoricalCrossentropy,
        (np.array([0, 1]), np.array([[2.0, 1.0, 1.0], [0.0, 0.0, 0.0]], np.float32)),
        {},
        1.0986123085021973,
    ),
    (
        "scce_keras_doc",
        M.SparseCategoricalCrossentropy,
        ([1, 2], [[0.05, 0.95, 0], [0.1, 0.8, 0.1]]),
        {},
        1.1769392490386963,
    ),
    (
        "scce_float64",
        M.SparseCategoricalCrossentropy,
        (np.array([1, 2]), np.array([[0.05, 0.95, 0], [0.1, 0.8, 0.1]])),
        {},
        1.1769392490386963,
    ),
    ("scce_sequence", M.SparseCategoricalCrossentropy, (SEQ_L, SEQ_P), {}, 1.3374027013778687),
    # ignored labels: 0 loss, still counted without weights; weight 0 with weights
    (
        "scce_ignore",
        lambda: M.SparseCategoricalCrossentropy(ignore_class=-1),
        (np.array([2, 1, -1, 0]), P),
        {},
        0.7161760330200195,
    ),
    (
        "scce_ignore_n1",
        lambda: M.SparseCategoricalCrossentropy(ignore_class=-1),
        (np.array([[2], [1], [-1], [0]]), P),
        {},
        0.7161760330200195,
    ),
    (
        "scce_ignore_weighted",
        lambda: M.SparseCategoricalCrossentropy(ignore_class=-1),
        (np.array([2, 1, -1, 0]), P),
        {"sample_weight": np.array([1.0, 2.0, 3.0, 4.0], np.float32)},
        1.106330156326294,
    ),
    ("cce", M.CategoricalCrossentropy, (OH, P), {}, 0.8053447604179382),
    ("cce_weighted", M.CategoricalCrossentropy, (OH, P), {"sample_weight": W}, 1.1084299087524414),
    ("cce_label_smoothing", lambda: M.CategoricalCrossentropy(label_smoothing=0.1), (OH, P), {}, 0.9827916622161865),
    ("cce_logits", lambda: M.CategoricalCrossentropy(from_logits=True), (OH, LOGITS), {}, 0.37994053959846497),
    (
        "cce_logits_smoothing",
        lambda: M.CategoricalCrossentropy(from_logits=True, label_smoothing=0.2),
        (OH, LOGITS),
        {},
        0.9882738590240479,
    ),
    # renormalized to sum 1, then clipped
    (
        "cce_renormalized",
        M.CategoricalCrossentropy,
        ([[1, 0, 0], [0, 1, 0]], [[2.0, 1.0, 1.0], [0.0, 1.0, 0.0]]),
        {},
        0.3465736508369446,
    ),
    (
        "cce_keras_doc",
        M.CategoricalCrossentropy,
        ([[0, 1, 0], [0, 0, 1]], [[0.05, 0.95, 0], [0.1, 0.8, 0.1]]),
        {},
        1.1769392490386963,
    ),
    (
        "cce_float64",
        M.CategoricalCrossentropy,
        (np.array([[0, 1, 0], [0, 0, 1]]), np.array([[0.05, 0.95, 0], [0.1, 0.8, 0.1]])),
        {},
        1.1769392490386963,
    ),
    ("cce_axis0", lambda: M.CategoricalCrossentropy(axis=0), (OH, P), {}, 1.3104795217514038),
    ("mse", M.MeanSquaredError, ([[0, 1], [0, 0]], [[1, 1], [0, 0]]), {}, 0.25),
    ("mse_weighted", M.MeanSquaredError, ([[0, 1], [0, 0]], [[1, 1], [0, 0]]), {"sample_weight": [1.0, 0.0]}, 0.5),
    ("mse_1d", M.MeanSquaredError, ([0.0, 1.0, 2.0], [0.5, 1.0, 4.0]), {}, 1.4166666269302368),
    ("mse_n1_vs_n", M.MeanSquaredError, ([[0.0], [1.0], [2.0]], [0.5, 1.0, 4.0]), {}, 1.4166666269302368),
    (
        "mse_3d_weighted",
        M.MeanSquaredError,
        (np.arange(12.0).reshape(2, 3, 2), np.zeros((2, 3, 2))),
        {"sample_weight": [1.0, 2.0]},
        53.16666793823242,
    ),
    # Python floats are float32, NumPy arrays keep float64: two different roundings
    ("mse_lists_float32", M.MeanSquaredError, ([0.1, 0.2], [0.3, 0.7]), {}, 0.14500001072883606),
    ("mse_float64", M.MeanSquaredError, (np.array([0.1, 0.2]), np.array([0.3, 0.7])), {}, 0.14499999582767487),
    ("mean_samplewise_weighted", M.Mean, ([[1.0, 2.0], [3.0, 10.0]],), {"sample_weight": [1.0, 0.0]}, 1.5),
    (
        "mean_elementwise_weights",
        M.Mean,
        ([[1.0, 2.0], [3.0, 10.0]],),
        {"sample_weight": [[1.0, 0.0], [1.0, 1.0]]},
        4.666666507720947,
    ),
    ("mean_broadcast_weights", M.Mean, ([[1.0, 2.0], [3.0, 4.0]],), {"sample_weight": [[1.0, 0.0]]}, 2.0),
    ("mean_scalar_weight", M.Mean, ([1.0, 2.0, 3.0],), {"sample_weight": 2.0}, 2.0),
    ("mean_weights_n1", M.Mean, ([1.0, 2.0, 3.0],), {"sample_weight": [[1.0], [0.0], [1.0]]}, 2.0),
    ("mean_values_n1", M.Mean, ([[1.0], [2.0], [3.0]],), {"sample_weight": [1.0, 0.0, 1.0]}, 2.0),
    ("mean_ints", M.Mean, ([1, 2, 4],), {}, 2.3333332538604736),
    ("mean_float64", M.Mean, (np.array([0.1, 0.2, 0.4]),), {}, 0.23333334922790527),
    ("mean_scalar", M.Mean, (5.0,), {}, 5.0),
    ("mean_all_weights_zero", M.Mean, (np.array([1.0, 2.0]),), {"sample_weight": np.array([0.0, 0.0])}, 0.0),
    ("mean_empty_batch", M.Mean, (np.zeros((0,), np.float32),), {}, 0.0),
    ("sum_weighted", M.Sum, ([[1.0, 2.0], [3.0, 10.0]],), {"sample_weight": [2.0, 0.0]}, 6.0),
    ("sum_scalar_weight", M.Sum, ([1.0, 2.0, 3.0],), {"sample_weight": 2.0}, 12.0),
    ("sum_ints", M.Sum, ([1, 2, 3],), {}, 6.0),
]


@pytest.mark.parametrize(("factory", "args", "kwargs", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_matches_keras(
    factory: Callable[[], Any], args: tuple[Any, ...], kwargs: dict[str, Any], expected: float
) -> None:
    m = factory()
    got = m(*args, **kwargs)
    assert isinstance(got, idist.Tensor)
    assert got.dtype == np.float32 and got.shape == ()
    np.testing.assert_allclose(got.numpy(), np.float32(expected), rtol=1e-6)
    np.testing.assert_allclose(m.result().numpy(), np.float32(expected), rtol=1e-6)


def test_call_updates_then_returns_the_result_so_far() -> None:
    m = M.SparseCategoricalAccuracy()
    assert m.update_state(L, P) is None  # TF: update_state returns None in eager mode
    got = m([1], [[0.0, 1.0, 0.0]])
    np.testing.assert_allclose(got.numpy(), np.float32(0.6000000238418579), rtol=1e-6)  # (2 + 1) / (4 + 1)
    assert [float(v) for v in m.variables] == [3.0, 5.0]
    assert [v.name for v in m.variables] == [
        "sparse_categorical_accuracy/total:0",
        "sparse_categorical_accuracy/count:0",
    ]
    m.reset_state()
    assert float(m.result()) == 0.0 and [float(v) for v in m.variables] == [0.0, 0.0]
    assert float(M.Mean().result()) == 0.0  # nothing seen: divide_no_nan


def test_result_is_a_float32_scalar_tensor_like_tf() -> None:
    r = M.Mean()([1.0, 2.0, 6.0])
    # TF: <tf.Tensor: shape=(), dtype=float32, numpy=3.0>, "{:.3f}" -> "3.000", numpy() -> np.float32(3.0)
    assert repr(r) == "<interdist.Tensor: shape=(), dtype=float32, numpy=3.0>"
    assert f"{r:.3f}" == "3.000" and format(r, ".1f") == "3.0" and f"{r}" == "3.0"
    assert type(r.numpy()) is np.float32 and r.numpy() == 3.0
    assert float(r) == 3.0 and np.asarray(r).dtype == np.float32
    assert r.device == "/job:localhost/replica:0/task:0/device:CPU:0"
    assert M.Mean(dtype="float64")([1.0, 2.0]).dtype == np.float64  # TF: dtype=float64, numpy=1.5


def test_reset_states_is_gone_as_in_keras_3() -> None:
    m = M.Mean()
    with pytest.raises(AttributeError, match="reset_states"):
        m.reset_states()  # type: ignore[attr-defined]


def test_names_config_and_repr_as_keras() -> None:
    names = [
        M.Accuracy(),
        M.SparseCategoricalAccuracy(),
        M.SparseCategoricalCrossentropy(),
        M.MeanSquaredError(),
        M.BinaryAccuracy(),
        M.CategoricalCrossentropy(),
        M.CategoricalAccuracy(),
        M.Sum(),
        M.Mean(),
    ]
    assert [m.name for m in names] == [
        "accuracy",
        "sparse_categorical_accuracy",
        "sparse_categorical_crossentropy",
        "mean_squared_error",
        "binary_accuracy",
        "categorical_crossentropy",
        "categorical_accuracy",
        "sum",
        "mean",
    ]
    assert repr(M.Accuracy()) == "<Accuracy name=accuracy>"
    assert M.SparseCategoricalCrossentropy().get_config() == {
        "name": "sparse_categorical_crossentropy",
        "dtype": "float32",
        "from_logits": False,
        "ignore_class": None,
        "axis": -1,
    }
    assert M.CategoricalCrossentropy().get_config() == {
        "name": "categorical_crossentropy",
        "dtype": "float32",
        "from_logits": False,
        "label_smoothing": 0,
        "axis": -1,
    }
    assert M.BinaryAccuracy().get_config() == {"name": "binary_accuracy", "dtype": "float32", "threshold": 0.5}
    assert M.Mean().get_config() == {"name": "mean", "dtype": "float32"}
    assert M.BinaryAccuracy.from_config(M.BinaryAccuracy(threshold=0.7).get_config()).threshold == 0.7


def test_shape_errors_as_keras() -> None:
    with pytest.raises(
        ValueError,
        match=r"must have the same shape up until the last dimension: "
        r"target.shape=\(3,\), output.shape=\(4, 3\)",
    ):
        M.SparseCategoricalCrossentropy()(np.array([0, 1, 2]), P)
    with pytest.raises(ValueError, match=r"Only axis=-1 is currently supported. Received: axis=0"):
        M.SparseCategoricalCrossentropy(axis=0)(L, P)
    with pytest.raises(ValueError):  # TF: InvalidArgumentError, Incompatible shapes: [3] vs. [4]
        M.SparseCategoricalAccuracy()(np.array([0, 1, 2]), P)
    with pytest.raises(ValueError):  # TF: InvalidArgumentError (Mean over axis -1 of a scalar)
        M.MeanSquaredError()(1.0, 3.0)
    with pytest.raises(ValueError, match="outside the valid range of \\[0, 3\\)"):  # TF CPU: InvalidArgumentError
        M.SparseCategoricalCrossentropy()(np.array([0, 3, 1, 1]), P)


def test_custom_metric_with_add_weight() -> None:
    class TruePositives(M.Metric):
        def __init__(self, name: str = "true_positives", **kwargs: Any) -> None:
            super().__init__(name=name, **kwargs)
            self.tp = self.add_weight(shape=(), initializer="zeros", name="tp")

        def update_state(self, y_true: Any, y_pred: Any, sample_weight: Any = None) -> None:
            hits = np.logical_and(np.asarray(y_true, bool), np.asarray(y_pred, bool)).astype(self.dtype)
            self.tp.assign_add(np.sum(hits))

        def result(self) -> Any:
            return self.tp  # as Keras' example: the variable itself

    m = TruePositives()
    assert float(m([1, 1, 0, 1], [1, 0, 0, 1])) == 2.0
    assert [v.name for v in m.variables] == ["true_positives/tp:0"]
    m.reset_state()
    assert float(m.result()) == 0.0
