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

from interdist.metrics.base import Metric
from interdist.metrics.classes import (
    Accuracy,
    BinaryAccuracy,
    CategoricalAccuracy,
    CategoricalCrossentropy,
    Mean,
    MeanMetricWrapper,
    MeanSquaredError,
    SparseCategoricalAccuracy,
    SparseCategoricalCrossentropy,
    Sum,
)
from interdist.metrics.functions import EPSILON as EPSILON
from interdist.metrics.functions import (
    accuracy,
    binary_accuracy,
    categorical_accuracy,
    categorical_crossentropy,
    mean_squared_error,
    sparse_categorical_accuracy,
    sparse_categorical_crossentropy,
)

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
