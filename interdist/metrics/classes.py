"""The metrics: ``Sum``, ``Mean``, ``MeanMetricWrapper`` and the accuracies, crossentropies and errors on it.

Each accumulates in the metric's dtype (float32 unless told) what its per-sample function (``functions``)
gives. Part of ``interdist.metrics``, which re-exports its public names.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from interdist._gpu import xp_of
from interdist.metrics.base import Metric, _assign_add, _read, _snake
from interdist.metrics.functions import (
    _reduce_to_samplewise_values,
    _sparse_categorical_crossentropy,
    _tensor,
    accuracy,
    binary_accuracy,
    categorical_accuracy,
    categorical_crossentropy,
    mean_squared_error,
    sparse_categorical_accuracy,
    sparse_categorical_crossentropy,
)


class Sum(Metric):
    """The (weighted) sum of all values seen, on all replicas.

    >>> m = Sum()
    >>> m.update_state([1, 3, 5, 7], sample_weight=[1, 1, 0, 0]); float(m.result())
    4.0
    """

    def __init__(self, name: str = "sum", dtype: Any = None) -> None:
        super().__init__(name=name, dtype=dtype)
        self.total = self.add_variable(shape=(), initializer="zeros", name="total")

    def update_state(self, values: Any, sample_weight: Any = None) -> None:
        v = _tensor(values)
        values, _ = _reduce_to_samplewise_values(v, sample_weight, xp_of(v).sum, self.dtype)
        _assign_add(self.total, xp_of(values).sum(values).astype(self.dtype))

    def result(self) -> Any:
        return self._as_result(_read(self.total).astype(self.dtype))


class Mean(Metric):
    """The (weighted) mean of all values seen, on all replicas: total / count.

    A batch of shape ``(N, ...)`` counts as ``N`` samples, each the mean of its values.

    >>> m = Mean()
    >>> m.update_state([1.0, 2.0, 6.0]); float(m.result())
    3.0
    >>> m.reset_state(); m.update_state([1, 3, 5, 7], sample_weight=[1, 1, 0, 0]); float(m.result())
    2.0
    """

    def __init__(self, name: str = "mean", dtype: Any = None) -> None:
        super().__init__(name=name, dtype=dtype)
        self.total = self.add_variable(shape=(), initializer="zeros", name="total")
        self.count = self.add_variable(shape=(), initializer="zeros", name="count")

    def update_state(self, values: Any, sample_weight: Any = None) -> None:
        self._update(_tensor(values), sample_weight)

    def _update(self, values: Any, sample_weight: Any, mask: Any = None) -> None:
        # Keras applies a mask to the weights only: without weights, masked-out values count (as 0).
        xp = xp_of(values)
        values, sample_weight = _reduce_to_samplewise_values(values, sample_weight, xp.mean, self.dtype, mask)
        _assign_add(self.total, xp.sum(values).astype(self.dtype))
        if sample_weight is not None:
            num_samples = xp.sum(sample_weight)
        elif values.ndim >= 1:
            num_samples = values.shape[0]
        else:
            num_samples = 1
        _assign_add(self.count, xp.asarray(num_samples).astype(self.dtype))

    def result(self) -> Any:
        total, count = _read(self.total), _read(self.count)
        with np.errstate(divide="ignore", invalid="ignore"):
            value = np.where(count == 0, 0, total / np.where(count == 0, 1, count))
        return self._as_result(np.asarray(value, self.dtype))


class MeanMetricWrapper(Mean):
    """The mean of ``fn(y_true, y_pred, **kwargs)``, a function of one value per sample.

    >>> m = MeanMetricWrapper(fn=lambda t, p: (np.asarray(t) - np.asarray(p)) ** 2)
    >>> float(m([1.0, 2.0], [1.0, 4.0]))
    2.0
    """

    def __init__(self, fn: Callable[..., Any], name: str | None = None, dtype: Any = None, **kwargs: Any) -> None:
        super().__init__(name=name or _snake(type(self).__name__), dtype=dtype)
        self._fn = fn
        self._fn_kwargs = kwargs

    def update_state(self, y_true: Any, y_pred: Any, sample_weight: Any = None) -> None:  # type: ignore[override]
        self._update(_tensor(self._fn(y_true, y_pred, **self._fn_kwargs)), sample_weight)


class Accuracy(MeanMetricWrapper):
    """How often predictions equal labels.

    >>> m = Accuracy()
    >>> float(m([[1], [2], [3], [4]], [[0], [2], [3], [4]]))
    0.75
    """

    def __init__(self, name: str = "accuracy", dtype: Any = None) -> None:
        super().__init__(fn=accuracy, name=name, dtype=dtype)


class BinaryAccuracy(MeanMetricWrapper):
    """How often ``y_pred > threshold`` matches the binary labels.

    >>> m = BinaryAccuracy()
    >>> float(m([[1], [1], [0], [0]], [[0.98], [1], [0], [0.6]], sample_weight=[1, 0, 0, 1]))
    0.5
    """

    def __init__(self, name: str = "binary_accuracy", dtype: Any = None, threshold: float = 0.5) -> None:
        super().__init__(fn=binary_accuracy, name=name, dtype=dtype, threshold=threshold)
        self.threshold = threshold

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "threshold": self.threshold}


class CategoricalAccuracy(MeanMetricWrapper):
    """How often the argmax of the predictions matches the one-hot labels.

    >>> m = CategoricalAccuracy()
    >>> round(float(m([[0, 0, 1], [0, 1, 0]], [[0.1, 0.9, 0.8], [0.05, 0.95, 0]], sample_weight=[0.7, 0.3])), 6)
    0.3
    """

    def __init__(self, name: str = "categorical_accuracy", dtype: Any = None) -> None:
        super().__init__(fn=categorical_accuracy, name=name, dtype=dtype)


class SparseCategoricalAccuracy(MeanMetricWrapper):
    """How often the argmax of the predictions matches the integer labels.

    >>> m = SparseCategoricalAccuracy()
    >>> float(m([2, 1], [[0.1, 0.6, 0.3], [0.05, 0.95, 0.0]]))
    0.5
    """

    def __init__(self, name: str = "sparse_categorical_accuracy", dtype: Any = None) -> None:
        super().__init__(fn=sparse_categorical_accuracy, name=name, dtype=dtype)


class CategoricalCrossentropy(MeanMetricWrapper):
    """The mean crossentropy between one-hot labels and predictions.

    >>> m = CategoricalCrossentropy()
    >>> print(f"{m([[0, 1, 0], [0, 0, 1]], [[0.05, 0.95, 0], [0.1, 0.8, 0.1]]):.4f}")
    1.1769
    """

    def __init__(
        self,
        name: str = "categorical_crossentropy",
        dtype: Any = None,
        from_logits: bool = False,
        label_smoothing: float = 0,
        axis: int = -1,
    ) -> None:
        super().__init__(
            fn=categorical_crossentropy,
            name=name,
            dtype=dtype,
            from_logits=from_logits,
            label_smoothing=label_smoothing,
            axis=axis,
        )
        self.from_logits = from_logits
        self.label_smoothing = label_smoothing
        self.axis = axis

    def get_config(self) -> dict[str, Any]:
        extra = {"from_logits": self.from_logits, "label_smoothing": self.label_smoothing, "axis": self.axis}
        return {**super().get_config(), **extra}


class SparseCategoricalCrossentropy(MeanMetricWrapper):
    """The mean crossentropy between integer labels and predictions.

    >>> m = SparseCategoricalCrossentropy()
    >>> print(f"{m([1, 2], [[0.05, 0.95, 0], [0.1, 0.8, 0.1]]):.4f}")
    1.1769
    """

    def __init__(
        self,
        name: str = "sparse_categorical_crossentropy",
        dtype: Any = None,
        from_logits: bool = False,
        ignore_class: int | None = None,
        axis: int = -1,
    ) -> None:
        super().__init__(
            fn=sparse_categorical_crossentropy,
            name=name,
            dtype=dtype,
            from_logits=from_logits,
            ignore_class=ignore_class,
            axis=axis,
        )
        self.from_logits = from_logits
        self.ignore_class = ignore_class
        self.axis = axis

    def update_state(self, y_true: Any, y_pred: Any, sample_weight: Any = None) -> None:  # type: ignore[override]
        values, mask = _sparse_categorical_crossentropy(y_true, y_pred, **self._fn_kwargs)
        self._update(values, sample_weight, mask)

    def get_config(self) -> dict[str, Any]:
        extra = {"from_logits": self.from_logits, "ignore_class": self.ignore_class, "axis": self.axis}
        return {**super().get_config(), **extra}


class MeanSquaredError(MeanMetricWrapper):
    """The mean of ``mean(square(y_true - y_pred), axis=-1)``.

    >>> m = MeanSquaredError()
    >>> float(m([[0, 1], [0, 0]], [[1, 1], [0, 0]]))
    0.25
    """

    def __init__(self, name: str = "mean_squared_error", dtype: Any = None) -> None:
        super().__init__(fn=mean_squared_error, name=name, dtype=dtype)
