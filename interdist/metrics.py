"""Keras 3's metrics (``tf.keras.metrics`` in TF 2.21), built on sync-on-read variables.

Each metric keeps its state in ``SUM`` sync-on-read variables: ``update_state`` in replica
context changes only the replica's own copies (no communication); ``result()`` in the
notebook reads the copies summed across replicas, so it is the metric of all the data
the replicas saw, as in TF. Inside ``strategy.run``, ``result()`` (and ``metric(...)``)
gives the replica's own value.

The numerics follow Keras with the TensorFlow backend: values are computed in the
predictions' dtype (Python numbers are float32, as ``tf.convert_to_tensor`` makes them),
then accumulated in the metric's dtype (float32 unless told); crossentropy from
probabilities clips them to ``[1e-7, 1 - 1e-7]``.

>>> m = SparseCategoricalAccuracy()
>>> m([[2], [1]], [[0.1, 0.6, 0.3], [0.05, 0.95, 0.0]])
<interdist.Tensor: shape=(), dtype=float32, numpy=0.5>
>>> f"{m.result():.3f}", m.result().numpy()
('0.500', np.float32(0.5))
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from interdist import _context
from interdist._convert import as_array
from interdist._gpu import any_cupy, same_place, to_host, xp_of
from interdist.values.tensor import Tensor
from interdist.values.variables import Variable, VariableAggregation, VariableSynchronization

#: Keras' ``backend.epsilon()``: crossentropy from probabilities clips them to [EPSILON, 1 - EPSILON].
EPSILON = 1e-7

_AGGREGATIONS = {
    "sum": VariableAggregation.SUM,
    "mean": VariableAggregation.MEAN,
    "only_first_replica": VariableAggregation.ONLY_FIRST_REPLICA,
    "none": VariableAggregation.NONE,
}


class _Result(Tensor):
    """What ``result()`` returns: a ``Tensor`` that also formats like TF's (``f"{acc:.3f}"``), and whose
    ``numpy()`` is a NumPy scalar for a scalar, as ``EagerTensor.numpy()``."""

    def numpy(self) -> Any:
        a = np.array(self._get())
        return a[()] if a.ndim == 0 else a

    def __format__(self, format_spec: str) -> str:
        return format(self.numpy(), format_spec)


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


# -- the metrics ------------------------------------------------------------------------------------------
def _initial(initializer: Any, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    if initializer is None or (isinstance(initializer, str) and initializer.lower() == "zeros"):
        return np.zeros(shape, dtype)
    if isinstance(initializer, str) and initializer.lower() == "ones":
        return np.ones(shape, dtype)
    if callable(initializer):
        return np.asarray(initializer(shape, dtype=dtype), dtype)
    return np.full(shape, initializer, dtype)


class Metric:
    """Base class (``keras.metrics.Metric``): create metrics inside ``strategy.scope()`` to make them distributed.

    A subclass makes its state with ``add_variable`` (or ``add_weight``) and implements
    ``update_state`` and ``result``.

    Examples
    --------
    A metric that counts the values it saw, on every replica:

    >>> import interdist as idist, numpy as np
    >>> class Count(idist.metrics.Metric):
    ...     def __init__(self, name=None):
    ...         super().__init__(name=name)
    ...         self.count = self.add_variable((), "zeros", name="count")  # sync-on-read, SUM
    ...     def update_state(self, values):
    ...         self.count.assign_add(np.float32(np.size(values)))
    ...     def result(self):
    ...         return self.count.read_value()
    >>> with idist.MirroredStrategy(["CPU:0", "CPU:1"]) as s:
    ...     with s.scope():
    ...         seen = Count()
    ...     _ = s.run(lambda: seen.update_state(np.ones(idist.get_replica_context().replica_id_in_sync_group + 1)))
    ...     seen, float(seen.result())  # 1 value on replica 0, 2 on replica 1
    (<Count name=count>, 3.0)
    """

    def __init__(self, dtype: Any = None, name: str | None = None) -> None:
        self.name = name or _snake(type(self).__name__)
        self.dtype = np.dtype(dtype or np.float32)
        self._variables: list[Any] = []

    @property
    def variables(self) -> list[Any]:
        return list(self._variables)

    def add_variable(
        self,
        shape: Any,
        initializer: Any,
        dtype: Any = None,
        aggregation: str = "sum",
        name: str | None = None,
    ) -> Any:
        """A state variable, sync-on-read (a replica updates its copy; a read aggregates as ``aggregation``)."""
        if not hasattr(self, "_variables"):
            raise RuntimeError("You forgot to call `super().__init__()` in the `__init__()` method. Go add it!")
        shape = (shape,) if isinstance(shape, int) else tuple(shape)
        value = _initial(initializer, shape, np.dtype(dtype or self.dtype))
        variable = Variable(
            value,
            name=f"{self.name}/{name or 'variable'}",
            trainable=False,
            synchronization=VariableSynchronization.ON_READ,
            aggregation=_AGGREGATIONS[str(aggregation).lower()],
        )
        self._variables.append(variable)
        return variable

    def add_weight(self, shape: Any = (), initializer: Any = None, dtype: Any = None, name: str | None = None) -> Any:
        return self.add_variable(shape=shape, initializer=initializer, dtype=dtype, name=name)

    def update_state(self, *args: Any, **kwargs: Any) -> None:
        """Accumulate statistics for the metric."""
        raise NotImplementedError

    def result(self) -> Any:
        """The metric's current value."""
        raise NotImplementedError

    def reset_state(self) -> None:
        """Set every state variable back to zero (cross-replica: every replica's copy)."""
        for v in self.variables:
            v.assign(np.zeros(v.shape, v.dtype))

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """``update_state(*args, **kwargs)``, then ``result()``."""
        self.update_state(*args, **kwargs)
        return self.result()

    def get_config(self) -> dict[str, Any]:
        return {"name": self.name, "dtype": self.dtype.name}

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> Any:
        return cls(**config)

    def _as_result(self, value: Any) -> _Result:
        """A result as TF gives it: on the host in the notebook, on the replica's device inside ``run``."""
        if _context.current().replica_context is not None and self._variables:
            return _Result(value, str(self._variables[0].device))
        return _Result(value)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} name={self.name}>"


def _snake(name: str) -> str:
    return "".join(f"_{c.lower()}" if c.isupper() and i else c.lower() for i, c in enumerate(name))


def _read(variable: Any) -> Any:
    return np.asarray(to_host(variable.read_value()))  # a GPU replica's copy is a CuPy array


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
        self.total.assign_add(xp_of(values).sum(values).astype(self.dtype))

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
        self.total.assign_add(xp.sum(values).astype(self.dtype))
        if sample_weight is not None:
            num_samples = xp.sum(sample_weight)
        elif values.ndim >= 1:
            num_samples = values.shape[0]
        else:
            num_samples = 1
        self.count.assign_add(xp.asarray(num_samples).astype(self.dtype))

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


__all__ = [
    "Accuracy",
    "BinaryAccuracy",
    "CategoricalAccuracy",
    "CategoricalCrossentropy",
    "Mean",
    "MeanMetricWrapper",
    "MeanSquaredError",
    "Metric",
    "SparseCategoricalAccuracy",
    "SparseCategoricalCrossentropy",
    "Sum",
    "accuracy",
    "binary_accuracy",
    "categorical_accuracy",
    "categorical_crossentropy",
    "mean_squared_error",
    "sparse_categorical_accuracy",
    "sparse_categorical_crossentropy",
]
