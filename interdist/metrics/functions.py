"""The per-sample functions of Keras 3's metrics (``keras.metrics.accuracy``...), and the helpers they share.

Computed in the predictions' dtype (Python numbers are float32, as ``tf.convert_to_tensor`` makes them);
crossentropy from probabilities clips them to ``[EPSILON, 1 - EPSILON]``. Part of ``interdist.metrics``,
which re-exports its public names.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from interdist._convert import as_array
from interdist._gpu import any_cupy, same_place, xp_of

#: Keras' ``backend.epsilon()``: crossentropy from probabilities clips them to [EPSILON, 1 - EPSILON].
EPSILON = 1e-7


def _tensor(x: Any) -> Any:
    """``x`` as ``ops.convert_to_tensor`` makes it: Python numbers int32/float32, arrays keep their dtype."""
    return as_array(x)


def _tensors(y_true: Any, y_pred: Any, cast: bool = False) -> list[Any]:
    """``y_pred`` as a tensor, and ``y_true`` too: in ``y_pred``'s dtype with ``cast`` (Python numbers directly)."""
    y_pred = _tensor(y_pred)
    y_true = as_array(y_true, y_pred.dtype) if cast else _tensor(y_true)
    arrays = [y_true, y_pred]
    return list(same_place(arrays)) if any_cupy(arrays) else arrays


def _float(x: Any) -> Any:
    """Integer or boolean predictions, as floatx (float32), where a float is needed."""
    return x if x.dtype.kind in "fc" else x.astype(np.float32)


def _squeeze_or_expand_to_same_rank(x1: Any, x2: Any, expand_rank_1: bool = True) -> tuple[Any, Any]:
    """Keras' ``squeeze_or_expand_to_same_rank``: when the ranks differ by one and the longer one ends in 1."""
    xp = xp_of(x1, x2)
    r1, r2 = x1.ndim, x2.ndim
    if r1 == r2:
        return x1, x2
    if r1 == r2 + 1 and x1.shape[-1] == 1:
        if r2 == 1 and expand_rank_1:
            x2 = xp.expand_dims(x2, -1)
        else:
            x1 = xp.squeeze(x1, -1)
    if r2 == r1 + 1 and x2.shape[-1] == 1:
        if r1 == 1 and expand_rank_1:
            x1 = xp.expand_dims(x1, -1)
        else:
            x2 = xp.squeeze(x2, -1)
    return x1, x2


def _apply_mask(sample_weight: Any, mask: Any, dtype: Any) -> Any:
    """Keras' ``apply_mask`` with ``reduction="sum"``: masked-out entries weigh 0."""
    if mask is None:
        return sample_weight
    float_mask = mask.astype(dtype)
    if sample_weight is None:
        return float_mask
    float_mask, sample_weight = _squeeze_or_expand_to_same_rank(float_mask, sample_weight.astype(dtype))
    return sample_weight * float_mask


def _reduce_to_samplewise_values(
    values: Any, sample_weight: Any, reduce_fn: Callable[..., Any], dtype: Any, mask: Any = None
) -> tuple[Any, Any]:
    """Keras' ``reduce_to_samplewise_values``: one value per sample, weighted."""
    values = values.astype(dtype)
    xp = xp_of(values)
    if sample_weight is not None:
        sample_weight = xp.asarray(_tensor(sample_weight)).astype(dtype)
        sample_weight = _apply_mask(sample_weight, mask, dtype)
        values, sample_weight = _squeeze_or_expand_to_same_rank(values, sample_weight)
        weight_ndim, values_ndim = sample_weight.ndim, values.ndim
        if values_ndim > weight_ndim:
            values = reduce_fn(values, axis=tuple(range(weight_ndim, values_ndim)))
        sample_weight = xp.broadcast_to(sample_weight, values.shape)
        values = values * sample_weight
        if weight_ndim > 1:
            sample_weight = reduce_fn(sample_weight, axis=tuple(range(1, weight_ndim)))
    if values.ndim > 1:
        values = reduce_fn(values, axis=tuple(range(1, values.ndim)))
    return values, sample_weight


# -- the per-sample functions (keras.metrics.accuracy, ...) -------------------------------------------------
def accuracy(y_true: Any, y_pred: Any) -> Any:
    """1.0 where the prediction equals the label (``keras.metrics.Accuracy``'s function).

    Examples
    --------
    >>> import interdist as idist
    >>> idist.metrics.accuracy([1, 2, 3], [1, 0, 3])
    array([1., 0., 1.], dtype=float32)
    """
    y_true, y_pred = _tensors(y_true, y_pred, cast=True)
    y_true, y_pred = _squeeze_or_expand_to_same_rank(y_true, y_pred)
    return xp_of(y_pred).equal(y_true, y_pred).astype(np.float32)


def binary_accuracy(y_true: Any, y_pred: Any, threshold: float = 0.5) -> Any:
    """1.0 where ``y_pred > threshold`` equals the binary label.

    Examples
    --------
    >>> import interdist as idist
    >>> idist.metrics.binary_accuracy([1, 0, 0], [0.7, 0.6, 0.2])
    array([1., 0., 1.], dtype=float32)
    """
    y_true, y_pred = _tensors(y_true, y_pred)
    y_true, y_pred = _squeeze_or_expand_to_same_rank(y_true, y_pred)
    y_pred = (y_pred > np.float32(threshold)).astype(y_true.dtype)
    return xp_of(y_pred).equal(y_true, y_pred).astype(np.float32)


def categorical_accuracy(y_true: Any, y_pred: Any) -> Any:
    """1.0 where the argmax of the predictions is the argmax of the one-hot labels.

    Examples
    --------
    >>> import interdist as idist
    >>> idist.metrics.categorical_accuracy([[0, 1], [1, 0]], [[0.2, 0.8], [0.3, 0.7]])
    array([1., 0.], dtype=float32)
    """
    y_true, y_pred = _tensors(y_true, y_pred)
    xp = xp_of(y_true, y_pred)
    y_true = xp.argmax(y_true, axis=-1).astype(y_pred.dtype)
    original_shape = y_true.shape
    reshape_matches = y_true.ndim == y_pred.ndim
    if reshape_matches:
        y_true = xp.squeeze(y_true, -1)
    y_pred = xp.argmax(y_pred, axis=-1).astype(y_true.dtype)
    matches = xp.equal(y_true, y_pred).astype(np.float32)
    return matches.reshape(original_shape) if reshape_matches else matches


def sparse_categorical_accuracy(y_true: Any, y_pred: Any) -> Any:
    """1.0 where the argmax of the predictions is the integer label (labels ``(N,)`` or ``(N, 1)``).

    Examples
    --------
    >>> import interdist as idist
    >>> idist.metrics.sparse_categorical_accuracy([1, 0], [[0.2, 0.8], [0.3, 0.7]])
    array([1., 0.], dtype=float32)
    """
    y_true, y_pred = _tensors(y_true, y_pred, cast=True)
    xp = xp_of(y_true, y_pred)
    original_shape = y_true.shape
    reshape_matches = y_true.ndim == y_pred.ndim and y_true.shape[-1] == 1
    if reshape_matches:
        y_true = xp.squeeze(y_true, -1)
    y_pred = xp.argmax(y_pred, axis=-1).astype(y_true.dtype)
    matches = xp.equal(y_true, y_pred).astype(np.float32)
    if reshape_matches:
        matches = matches.reshape(original_shape)
    if matches.ndim > 1 and matches.shape[-1] == 1:
        matches = xp.squeeze(matches, -1)
    return matches


def mean_squared_error(y_true: Any, y_pred: Any) -> Any:
    """``mean(square(y_true - y_pred), axis=-1)``.

    Examples
    --------
    >>> import interdist as idist
    >>> idist.metrics.mean_squared_error([[0.0, 1.0], [1.0, 1.0]], [[1.0, 1.0], [1.0, 3.0]])
    array([0.5, 2. ], dtype=float32)
    """
    y_true, y_pred = _tensors(y_true, y_pred, cast=True)
    y_true, y_pred = _squeeze_or_expand_to_same_rank(y_true, y_pred)
    return xp_of(y_pred).mean(xp_of(y_pred).square(y_true - y_pred), axis=-1)


def _log_softmax(logits: Any, axis: int) -> Any:
    xp = xp_of(logits)
    shifted = logits - xp.max(logits, axis=axis, keepdims=True)
    return shifted - xp.log(xp.sum(xp.exp(shifted), axis=axis, keepdims=True))


def categorical_crossentropy(
    y_true: Any, y_pred: Any, from_logits: bool = False, label_smoothing: float = 0.0, axis: int = -1
) -> Any:
    """``-sum(y_true * log(y_pred), axis)``; probabilities are renormalized then clipped, logits log-softmaxed.

    Examples
    --------
    >>> import interdist as idist
    >>> idist.metrics.categorical_crossentropy([[0.0, 1.0], [1.0, 0.0]], [[0.25, 0.75], [0.5, 0.5]]).round(4)
    array([0.2877, 0.6931], dtype=float32)
    """
    if isinstance(axis, bool):
        raise ValueError(f"`axis` must be of type `int`. Received: axis={axis} of type {type(axis)}")
    y_true, y_pred = _tensors(y_true, y_pred)
    y_pred = _float(y_pred)
    xp = xp_of(y_true, y_pred)
    y_true = y_true.astype(y_pred.dtype)
    if label_smoothing:
        num_classes = y_pred.dtype.type(y_true.shape[-1])
        y_true = y_true * (1.0 - label_smoothing) + (label_smoothing / num_classes)
    if y_true.ndim < 1:
        raise ValueError(
            "Arguments `target` and `output` must be at least rank 1. "
            f"Received: target.shape={y_true.shape}, output.shape={y_pred.shape}"
        )
    if y_true.ndim != y_pred.ndim or y_true.shape != y_pred.shape:
        what = "rank (ndim)" if y_true.ndim != y_pred.ndim else "shape"
        raise ValueError(
            f"Arguments `target` and `output` must have the same {what}. "
            f"Received: target.shape={y_true.shape}, output.shape={y_pred.shape}"
        )
    if from_logits:
        return -xp.sum(y_true * _log_softmax(y_pred, axis), axis=axis)
    output = y_pred / xp.sum(y_pred, axis=axis, keepdims=True)
    output = xp.clip(output, EPSILON, 1.0 - EPSILON)
    return -xp.sum(y_true * xp.log(output), axis=axis)


def _sparse_categorical_crossentropy(
    y_true: Any, y_pred: Any, from_logits: bool = False, ignore_class: int | None = None, axis: int = -1
) -> tuple[Any, Any]:
    """Per-sample losses, and the mask of the labels that count (None without ``ignore_class``)."""
    y_true, y_pred = _tensors(y_true, y_pred)
    y_pred = _float(y_pred)
    xp = xp_of(y_true, y_pred)
    if y_true.ndim == y_pred.ndim and y_true.shape[axis] == 1:
        y_true = xp.squeeze(y_true, axis)
    valid_mask = None
    if ignore_class is not None:
        class_axis = axis % y_pred.ndim
        res_shape = tuple(d for i, d in enumerate(y_pred.shape) if i != class_axis)
        valid_mask = xp.not_equal(y_true, y_pred.dtype.type(ignore_class))
        y_true = xp.where(valid_mask, y_true, 0)
        y_pred = xp.where(xp.expand_dims(valid_mask, axis), y_pred, y_pred.dtype.type(0))
    if axis not in (-1, y_pred.ndim - 1):
        raise ValueError(f"Only axis=-1 is currently supported. Received: axis={axis}")
    target = y_true.astype(np.int64)
    if target.ndim == y_pred.ndim and target.shape[-1] == 1:
        target = xp.squeeze(target, -1)
    if y_pred.ndim < 1:
        raise ValueError(f"Argument `output` must be at least rank 1. Received: output.shape={y_pred.shape}")
    if target.ndim != y_pred.ndim - 1:
        raise ValueError(
            "Argument `output` must have rank (ndim) `target.ndim - 1`. "
            f"Received: target.shape={target.shape}, output.shape={y_pred.shape}"
        )
    if target.shape != y_pred.shape[:-1]:
        raise ValueError(
            "Arguments `target` and `output` must have the same shape up until the last dimension: "
            f"target.shape={target.shape}, output.shape={y_pred.shape}"
        )
    num_classes = y_pred.shape[-1]
    if target.size and (int(target.min()) < 0 or int(target.max()) >= num_classes):
        bad = int(target.min()) if int(target.min()) < 0 else int(target.max())
        raise ValueError(f"Received a label value of {bad} which is outside the valid range of [0, {num_classes}).")
    logits = y_pred if from_logits else xp.log(xp.clip(y_pred, EPSILON, 1.0 - EPSILON))
    log_probs = _log_softmax(logits, -1)
    res = -xp.take_along_axis(log_probs, target[..., None], axis=-1)[..., 0]
    if valid_mask is not None:
        valid_mask = valid_mask.reshape(res_shape)
        res = xp.where(valid_mask, res, res.dtype.type(0))
    return res, valid_mask


def sparse_categorical_crossentropy(
    y_true: Any, y_pred: Any, from_logits: bool = False, ignore_class: int | None = None, axis: int = -1
) -> Any:
    """``-log(y_pred[y_true])`` per sample; probabilities are clipped to [1e-7, 1 - 1e-7] (then renormalized).

    Examples
    --------
    >>> import interdist as idist
    >>> idist.metrics.sparse_categorical_crossentropy([1, 0], [[0.25, 0.75], [0.5, 0.5]]).round(4)
    array([0.2877, 0.6931], dtype=float32)
    """
    return _sparse_categorical_crossentropy(y_true, y_pred, from_logits, ignore_class, axis)[0]
