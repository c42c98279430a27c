"""Keras 3's losses (as TF 2.21 ships them) for NumPy arrays, differentiable on a ``GradientTape``.

``loss(y_true, y_pred, sample_weight=None)`` computes the per-example losses and reduces them as
``reduction`` says: ``"sum_over_batch_size"`` (the default; also ``"mean"``) divides the weighted sum
by the number of elements, ``"mean_with_sample_weight"`` by the sum of the weights as passed, ``"sum"``
sums, ``None``/``"none"`` keeps one loss per example (``(N, 1)`` weights make it ``(N, 1)``, as Keras
expands the losses to the weights' rank). A scalar or an empty ``(0,)`` result is returned as it is, for
every reduction. As Keras 3 (``scale_loss_for_distribution``, checked with TF 2.21), a mean reduction is
also divided by ``num_replicas_in_sync`` whenever the current strategy (``idist.get_strategy()``) has
more than one replica: inside ``strategy.run``, and in cross-replica context inside ``strategy.scope()``
too, so that summing the replicas' gradients averages over the global batch. The custom-training
tutorial's way stays the clearer one: ``reduction=None`` and ``idist.nn.compute_average_loss``.

Examples
--------
>>> import numpy as np, interdist as idist
>>> y_true, y_pred = np.array([[0.0, 1.0], [1.0, 1.0]]), np.array([[1.0, 1.0], [1.0, 3.0]])
>>> idist.losses.MeanSquaredError()(y_true, y_pred), idist.losses.MeanSquaredError(reduction=None)(y_true, y_pred)
(np.float32(1.25), array([0.5, 2. ], dtype=float32))
>>> with idist.MirroredStrategy(["CPU:0", "CPU:1"]) as s:  # 2 replicas: also / num_replicas_in_sync
...     out = s.run(lambda: idist.losses.MeanSquaredError()(y_true, y_pred))
...     with s.scope():
...         in_scope = idist.losses.MeanSquaredError()(y_true, y_pred)
...     [float(x) for x in s.experimental_local_results(out)], float(in_scope)
([0.625, 0.625], 0.625)
"""

from __future__ import annotations

from typing import Any

import numpy as np

from interdist import _context, autodiff, nn
from interdist.metrics.functions import _squeeze_or_expand_to_same_rank

__all__ = [
    "BinaryCrossentropy",
    "CategoricalCrossentropy",
    "Huber",
    "Loss",
    "MeanAbsoluteError",
    "MeanSquaredError",
    "SparseCategoricalCrossentropy",
    "binary_crossentropy",
    "categorical_crossentropy",
    "huber",
    "mean_absolute_error",
    "mean_squared_error",
    "sparse_categorical_crossentropy",
]

REDUCTIONS = ("sum_over_batch_size", "sum", None, "none", "mean", "mean_with_sample_weight")
EPSILON = 1e-7  # Keras' backend.epsilon(): probabilities are clipped to [EPSILON, 1 - EPSILON]


def _pred(y_pred: Any) -> Any:
    """``y_pred`` as float32 (Keras' compute dtype), recorded on a tape when it was."""
    if autodiff.is_traced(y_pred):
        return y_pred
    if isinstance(y_pred, autodiff.Differentiable):
        return autodiff.read(y_pred)
    return np.asarray(y_pred, np.float32)


def _clip_probs(p: Any) -> Any:
    return np.clip(p, np.float32(EPSILON), np.float32(1 - EPSILON))


def _same_rank(y_true: Any, y_pred: Any) -> tuple[Any, Any]:
    """``y_true`` and ``y_pred`` as Keras' loss classes pass them on: a trailing 1 added or dropped where the
    ranks differ by one (labels ``(N,)`` against predictions ``(N, 1)`` are compared element by element)."""
    return _squeeze_or_expand_to_same_rank(np.asarray(y_true), _pred(y_pred))


def sparse_categorical_crossentropy(y_true: Any, y_pred: Any, from_logits: bool = False, axis: int = -1) -> Any:
    """Per example, the crossentropy of integer labels against class scores (logits or probabilities).

    Examples
    --------
    >>> import numpy as np, interdist as idist
    >>> probs = np.array([[0.25, 0.75], [0.5, 0.5]], np.float32)
    >>> idist.losses.sparse_categorical_crossentropy(np.array([1, 0]), probs).round(4)  # -log(.75), -log(.5)
    array([0.2877, 0.6931], dtype=float32)
    """
    labels = np.asarray(y_true)
    pred = _pred(y_pred)
    if labels.ndim == np.ndim(pred) and labels.shape[-1:] == (1,):
        labels = labels[..., 0]  # labels (N, 1) against predictions (N, C), as Keras squeezes them
    labels = labels.astype(np.int64)
    if not from_logits:  # as Keras: clip, take the log, then log-softmax (renormalised after the clip)
        pred = np.log(_clip_probs(pred))
    return nn.sparse_softmax_cross_entropy_with_logits(labels, pred)


def categorical_crossentropy(
    y_true: Any, y_pred: Any, from_logits: bool = False, label_smoothing: float = 0.0, axis: int = -1
) -> Any:
    """Per example, the crossentropy of one-hot (or probability) labels against class scores.

    Examples
    --------
    >>> import numpy as np, interdist as idist
    >>> probs = np.array([[0.25, 0.75], [0.5, 0.5]], np.float32)
    >>> idist.losses.categorical_crossentropy(np.array([[0.0, 1.0], [1.0, 0.0]]), probs).round(4)
    array([0.2877, 0.6931], dtype=float32)
    """
    pred = _pred(y_pred)
    labels = np.asarray(y_true, np.float32)
    if label_smoothing:
        classes = labels.shape[-1]  # Keras' num_classes, whatever the axis
        labels = labels * np.float32(1 - label_smoothing) + np.float32(label_smoothing / classes)
    if from_logits:
        return nn.softmax_cross_entropy_with_logits(labels, pred, axis=axis)
    probs = _clip_probs(pred / np.sum(pred, axis=axis, keepdims=True))
    return -np.sum(labels * np.log(probs), axis=axis)


def binary_crossentropy(
    y_true: Any, y_pred: Any, from_logits: bool = False, label_smoothing: float = 0.0, axis: int = -1
) -> Any:
    """Per example, the binary crossentropy averaged over ``axis``; labels smoothed towards 0.5.

    Examples
    --------
    >>> import numpy as np, interdist as idist
    >>> idist.losses.binary_crossentropy(np.array([[1.0], [0.0]]), np.array([[0.5], [0.5]], np.float32)).round(4)
    array([0.6931, 0.6931], dtype=float32)
    """
    pred = _pred(y_pred)
    z = np.asarray(y_true, np.float32)
    if label_smoothing:
        z = z * np.float32(1 - label_smoothing) + np.float32(0.5 * label_smoothing)
    if from_logits:
        per = nn.relu(pred) - pred * z + np.log1p(np.exp(-np.abs(pred)))
    else:
        p = _clip_probs(pred)
        per = -(z * np.log(p) + (1 - z) * np.log(1 - p))
    return np.mean(per, axis=axis)


def mean_squared_error(y_true: Any, y_pred: Any) -> Any:
    """Per example, the mean of the squared errors over the last axis.

    Examples
    --------
    >>> import numpy as np, interdist as idist
    >>> idist.losses.mean_squared_error(np.array([[0.0, 1.0], [1.0, 1.0]]), np.array([[1.0, 1.0], [1.0, 3.0]]))
    array([0.5, 2. ], dtype=float32)
    """
    y_true, y_pred = _same_rank(y_true, y_pred)
    return np.mean(np.square(y_pred - np.asarray(y_true, np.float32)), axis=-1)


def mean_absolute_error(y_true: Any, y_pred: Any) -> Any:
    """Per example, the mean of the absolute errors over the last axis.

    Examples
    --------
    >>> import numpy as np, interdist as idist
    >>> idist.losses.mean_absolute_error(np.array([[0.0, 1.0], [1.0, 1.0]]), np.array([[1.0, 1.0], [1.0, 3.0]]))
    array([0.5, 1. ], dtype=float32)
    """
    y_true, y_pred = _same_rank(y_true, y_pred)
    return np.mean(np.abs(y_pred - np.asarray(y_true, np.float32)), axis=-1)


def huber(y_true: Any, y_pred: Any, delta: float = 1.0) -> Any:
    """Per example, the mean over the last axis of ``0.5 * e**2`` where ``|e| <= delta``, else
    ``delta * |e| - 0.5 * delta**2``.

    Examples
    --------
    >>> import numpy as np, interdist as idist
    >>> idist.losses.huber(np.array([[0.0, 1.0], [0.0, 0.0]]), np.array([[0.6, 0.4], [2.4, -1.6]]))
    array([0.18, 1.5 ], dtype=float32)
    """
    y_true, y_pred = _same_rank(y_true, y_pred)
    error = y_pred - np.asarray(y_true, np.float32)
    abs_error, d, half = np.abs(error), np.float32(delta), np.float32(0.5)
    return np.mean(np.where(abs_error <= d, half * np.square(error), d * abs_error - half * np.square(d)), axis=-1)


class Loss:
    """Base class: subclasses give ``call(y_true, y_pred)``, the per-example losses.

    Calling a loss computes them, weighs them by ``sample_weight`` and reduces them as ``reduction``
    says (see the module).

    Examples
    --------
    >>> import numpy as np, interdist as idist
    >>> class AbsoluteError(idist.losses.Loss):
    ...     def call(self, y_true, y_pred):
    ...         return np.abs(np.asarray(y_pred, np.float32) - np.asarray(y_true, np.float32))
    >>> loss = AbsoluteError(reduction="sum")
    >>> loss.name, loss(np.array([0.0, 1.0]), np.array([1.0, 3.0]), sample_weight=[1.0, 0.5])
    ('absolute_error', np.float32(2.0))
    """

    def __init__(self, reduction: str | None = "sum_over_batch_size", name: str | None = None) -> None:
        if reduction not in REDUCTIONS:
            raise ValueError(
                "Invalid value for argument `reduction`. Expected one of {'none', 'mean', 'sum_over_batch_size', "
                f"'mean_with_sample_weight', 'sum', None}}. Received: reduction={reduction!r}"
            )
        self.reduction = reduction
        self.name = name or _snake(type(self).__name__)

    def call(self, y_true: Any, y_pred: Any) -> Any:
        raise NotImplementedError  # pragma: no cover - abstract

    def __call__(self, y_true: Any, y_pred: Any, sample_weight: Any = None) -> Any:
        losses = self.call(y_true, y_pred)
        weights = None
        if sample_weight is not None:  # Keras' reduce_weighted_values
            weights = np.asarray(sample_weight, np.float32)
            losses, weights = _squeeze_or_expand_to_same_rank(losses, weights)
            losses = losses * weights
        return _reduce(losses, weights, self.reduction)

    def get_config(self) -> dict[str, Any]:
        return {"name": self.name, "reduction": self.reduction}


def _reduce(losses: Any, weights: Any, reduction: str | None) -> Any:
    """Keras 3's ``reduce_values``: a scalar or ``(0,)`` loss, and ``"none"``, are returned as they are."""
    shape = tuple(np.shape(losses))
    if reduction in (None, "none") or shape in ((), (0,)):
        return losses
    total = np.sum(losses)
    if reduction == "sum":
        return total
    if reduction == "mean_with_sample_weight" and weights is not None:
        count = np.float32(np.sum(weights))  # the weights as passed (after the rank fix), not broadcast
    else:
        count = np.float32(np.prod(shape))
    mean = total / count if count else total * np.float32(0)  # Keras: divide_no_nan
    replicas = int(getattr(_context.get_strategy(), "num_replicas_in_sync", 1))
    if replicas > 1:  # Keras 3's scale_loss_for_distribution: in a replica or in the strategy's scope
        mean = mean * np.float32(1.0 / replicas)
    return mean


def _snake(name: str) -> str:
    out = "".join("_" + c.lower() if c.isupper() else c for c in name).lstrip("_")
    return out


class SparseCategoricalCrossentropy(Loss):
    """Crossentropy of integer class labels against logits (``from_logits=True``) or probabilities.

    Examples
    --------
    >>> import numpy as np, interdist as idist
    >>> loss = idist.losses.SparseCategoricalCrossentropy(from_logits=True)
    >>> loss(np.array([1, 0]), np.zeros((2, 2), np.float32)).round(4)  # uniform over 2 classes: log(2)
    np.float32(0.6931)
    """

    def __init__(
        self, from_logits: bool = False, reduction: str | None = "sum_over_batch_size", name: str | None = None
    ) -> None:
        super().__init__(reduction, name or "sparse_categorical_crossentropy")
        self.from_logits = from_logits

    def call(self, y_true: Any, y_pred: Any) -> Any:
        return sparse_categorical_crossentropy(*_same_rank(y_true, y_pred), from_logits=self.from_logits)


class _Crossentropy(Loss):
    """What Keras' ``CategoricalCrossentropy`` and ``BinaryCrossentropy`` share: their arguments, in Keras'
    order, and the labels brought to the predictions' rank before ``_fn``."""

    _fn: Any = None  # the per-example function: categorical_crossentropy or binary_crossentropy

    def __init__(
        self,
        from_logits: bool = False,
        label_smoothing: float = 0.0,
        axis: int = -1,
        reduction: str | None = "sum_over_batch_size",
        name: str | None = None,
    ) -> None:
        super().__init__(reduction, name or self._fn.__name__)
        self.from_logits = from_logits
        self.label_smoothing = label_smoothing
        self.axis = axis

    def call(self, y_true: Any, y_pred: Any) -> Any:
        y_true, y_pred = _same_rank(y_true, y_pred)
        return type(self)._fn(y_true, y_pred, self.from_logits, self.label_smoothing, self.axis)

    def get_config(self) -> dict[str, Any]:
        extra = {"from_logits": self.from_logits, "label_smoothing": self.label_smoothing, "axis": self.axis}
        return {**super().get_config(), **extra}


class CategoricalCrossentropy(_Crossentropy):
    """Crossentropy of one-hot labels against logits or probabilities (classes on ``axis``), with optional
    label smoothing.

    Examples
    --------
    >>> import numpy as np, interdist as idist
    >>> loss = idist.losses.CategoricalCrossentropy(from_logits=True)
    >>> loss(np.array([[0.0, 1.0]]), np.zeros((1, 2), np.float32)).round(4)  # log(2)
    np.float32(0.6931)
    """

    _fn = staticmethod(categorical_crossentropy)


class BinaryCrossentropy(_Crossentropy):
    """Binary crossentropy against logits or probabilities, averaged over ``axis``; ``label_smoothing``
    moves the labels towards 0.5.

    Examples
    --------
    >>> import numpy as np, interdist as idist
    >>> loss = idist.losses.BinaryCrossentropy(from_logits=True)
    >>> loss(np.array([[1.0]]), np.zeros((1, 1), np.float32)).round(4)  # sigmoid(0) = 0.5: log(2)
    np.float32(0.6931)
    """

    _fn = staticmethod(binary_crossentropy)


class Huber(Loss):
    """The Huber loss: quadratic for errors up to ``delta``, linear beyond; the mean over the last axis.

    Examples
    --------
    >>> import numpy as np, interdist as idist
    >>> idist.losses.Huber(delta=0.5)(np.array([[0.0, 1.0], [0.0, 0.0]]), np.array([[0.6, 0.4], [2.4, -1.6]]))
    np.float32(0.525)
    """

    def __init__(
        self, delta: float = 1.0, reduction: str | None = "sum_over_batch_size", name: str | None = "huber_loss"
    ) -> None:
        super().__init__(reduction, name or "huber_loss")
        self.delta = delta

    def call(self, y_true: Any, y_pred: Any) -> Any:
        return huber(y_true, y_pred, self.delta)


class MeanSquaredError(Loss):
    """The mean of squared errors over the last axis, per example.

    Examples
    --------
    >>> import numpy as np, interdist as idist
    >>> idist.losses.MeanSquaredError()(np.array([[0.0, 1.0], [1.0, 1.0]]), np.array([[1.0, 1.0], [1.0, 3.0]]))
    np.float32(1.25)
    """

    def call(self, y_true: Any, y_pred: Any) -> Any:
        return mean_squared_error(y_true, y_pred)


class MeanAbsoluteError(Loss):
    """The mean of absolute errors over the last axis, per example.

    Examples
    --------
    >>> import numpy as np, interdist as idist
    >>> loss = idist.losses.MeanAbsoluteError(reduction="sum")
    >>> loss(np.array([[0.0, 1.0], [1.0, 1.0]]), np.array([[1.0, 1.0], [1.0, 3.0]]))
    np.float32(1.5)
    """

    def call(self, y_true: Any, y_pred: Any) -> Any:
        return mean_absolute_error(y_true, y_pred)
