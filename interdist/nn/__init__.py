"""``tf.nn`` for NumPy arrays: the loss helpers made for distribution, and the ops a small CNN needs.

Every function takes NumPy arrays, variables or values recorded on a ``GradientTape`` and is
differentiable there: the composite ones are written with NumPy functions autograd knows, and
:func:`conv2d`, :func:`max_pool2d`, :func:`relu` and the two softmax cross-entropies are autograd
primitives with their gradients written here (as TF's kernels: ``relu``'s gradient at 0 is 0, a pooled
window's gradient goes to its first maximum, a cross-entropy's is ``softmax - labels`` whatever the labels
sum to). Layouts are TF's defaults: NHWC inputs, HWIO filters.

The semantics of :func:`compute_average_loss` and :func:`scale_regularization_loss` were checked
against TF 2.21 (tests/training/test_nn.py): in replica context the average is over the *global*
batch, ``per-replica batch x num_replicas_in_sync`` unless ``global_batch_size`` is given, so that
summing the replicas' gradients (what ``apply_gradients`` does) gives the gradient of the mean.

Examples
--------
>>> import numpy as np, interdist as idist
>>> with idist.MirroredStrategy(["CPU:0", "CPU:1"]) as s:
...     def step():  # each replica has 2 examples: the global batch is 4
...         return idist.nn.compute_average_loss(np.array([1.0, 3.0], np.float32))
...     [float(x) for x in s.experimental_local_results(s.run(step))]
[1.0, 1.0]
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from interdist import _context, autodiff
from interdist.nn._kernels import _padding, _pair, _primitives, _softmax_of

__all__ = [
    "compute_average_loss",
    "conv2d",
    "l2_loss",
    "log_softmax",
    "max_pool2d",
    "relu",
    "scale_regularization_loss",
    "sigmoid",
    "softmax",
    "softmax_cross_entropy_with_logits",
    "sparse_softmax_cross_entropy_with_logits",
]


def _value(x: Any) -> np.ndarray:
    """The plain array of ``x`` (a variable's value, a box's value)."""
    return np.asarray(x)


def _operand(x: Any) -> Any:
    """``x`` as an operation on the tape takes it: a recorded value stays one, a variable or tensor is read
    (recorded when a tape watches it), anything else becomes an array."""
    if autodiff.is_traced(x):
        return x
    if isinstance(x, autodiff.Differentiable):
        return autodiff.read(x)
    return np.asarray(x)


def _replicas_for(fn_name: str) -> int:
    """``num_replicas_in_sync`` for a loss helper, which TF lets run in replica context only."""
    strategy = _context.get_strategy()
    if _context.has_strategy() and _context.in_cross_replica_context():
        raise RuntimeError(
            f"You are calling `{fn_name}` in cross replica context, while it was expected to be called in "
            "replica context."
        )
    return int(getattr(strategy, "num_replicas_in_sync", 1))


def compute_average_loss(per_example_loss: Any, sample_weight: Any = None, global_batch_size: Any = None) -> Any:
    """The sum of ``per_example_loss`` (times ``sample_weight``) over the global batch size (``tf.nn``'s).

    >>> import numpy as np, interdist as idist
    >>> float(idist.nn.compute_average_loss(np.array([1.0, 2.0, 3.0, 4.0], np.float32), global_batch_size=8))
    1.25
    """
    loss = per_example_loss if autodiff.is_traced(per_example_loss) else np.asarray(per_example_loss)
    if np.ndim(loss) == 0:
        raise ValueError(
            "Invalid value passed for `per_example_loss`. Expected a tensor with at least rank 1. Received "
            f"per_example_loss={_value(loss)} with rank 0"
        )
    dtype = _value(loss).dtype
    if dtype.kind in "iub":
        dtype = np.dtype(np.float64)  # as TF 2.21: an integer loss is averaged in float64
        loss = loss.astype(dtype)
    if sample_weight is not None:
        loss = loss * np.asarray(sample_weight, dtype)
    if global_batch_size is None:
        global_batch_size = np.shape(loss)[0] * _replicas_for("compute_average_loss")
    elif (
        isinstance(global_batch_size, bool)
        or np.asarray(global_batch_size).dtype.kind not in "iu"
        or np.ndim(global_batch_size)
    ):
        raise TypeError(
            'global_batch_size must be an integer..  Expected "x" to be integer type.  Found: '
            f"{type(global_batch_size).__name__} {global_batch_size!r}"
        )
    total = np.sum(loss)
    if int(global_batch_size) == 0:
        return total * dtype.type(0)  # TF 2.21: an empty global batch averages to 0, not NaN
    return total / dtype.type(int(global_batch_size))


def scale_regularization_loss(regularization_loss: Any) -> Any:
    """The sum of ``regularization_loss`` divided by the number of replicas (``tf.nn``'s), so that the
    replicas' summed gradients count it once.

    Examples
    --------
    >>> import numpy as np, interdist as idist
    >>> idist.nn.scale_regularization_loss(np.array([1.0, 3.0], np.float32))  # one replica
    np.float32(4.0)
    >>> with idist.MirroredStrategy(["CPU:0", "CPU:1"]) as s:
    ...     out = s.run(lambda: idist.nn.scale_regularization_loss(np.float32(4.0)))
    ...     [float(x) for x in s.experimental_local_results(out)]
    [2.0, 2.0]
    """
    replicas = _replicas_for("scale_regularization_loss")
    loss = regularization_loss if autodiff.is_traced(regularization_loss) else np.asarray(regularization_loss)
    total = np.sum(loss)
    return total / _value(total).dtype.type(replicas)


def add_n(inputs: Any) -> Any:
    """The element-wise sum of a list of arrays (``tf.add_n``).

    Examples
    --------
    >>> import numpy as np, interdist as idist
    >>> idist.add_n([np.array([1, 2]), np.array([10, 20]), np.array([100, 200])])
    array([111, 222])
    """
    items = list(inputs)
    if not items:
        raise ValueError("inputs must be a list of at least one Tensor/IndexedSlices with the same dtype and shape.")
    return functools.reduce(lambda a, b: a + b, items)


# -- activations -------------------------------------------------------------------------------------


def relu(features: Any) -> Any:
    """``max(features, 0)``; its gradient is 0 where ``features <= 0`` (as TF).

    Examples
    --------
    >>> import numpy as np, interdist as idist
    >>> idist.nn.relu(np.array([-1.0, 0.0, 2.0], np.float32))
    array([0., 0., 2.], dtype=float32)
    """
    return _primitives().relu(_operand(features))


def sigmoid(x: Any) -> Any:
    """``1 / (1 + exp(-x))``.

    Examples
    --------
    >>> import numpy as np, interdist as idist
    >>> idist.nn.sigmoid(np.array([0.0], np.float32))
    array([0.5], dtype=float32)
    """
    return 1 / (1 + np.exp(-x))


def softmax(logits: Any, axis: int = -1) -> Any:
    """``exp(logits) / sum(exp(logits))`` along ``axis``, computed stably.

    Examples
    --------
    >>> import numpy as np, interdist as idist
    >>> idist.nn.softmax(np.log(np.array([1.0, 3.0], np.float32)))
    array([0.25, 0.75], dtype=float32)
    """
    return _softmax_of(logits, axis)  # (the maximum taken out as a plain value: not differentiated)


def log_softmax(logits: Any, axis: int = -1) -> Any:
    """``logits - log(sum(exp(logits)))`` along ``axis``, computed stably.

    Examples
    --------
    >>> import numpy as np, interdist as idist
    >>> np.exp(idist.nn.log_softmax(np.log(np.array([1.0, 3.0], np.float32))))
    array([0.25, 0.75], dtype=float32)
    """
    z = logits - autodiff.stop_gradient(np.max(_value(logits), axis=axis, keepdims=True))
    return z - np.log(np.sum(np.exp(z), axis=axis, keepdims=True))


def sparse_softmax_cross_entropy_with_logits(labels: Any, logits: Any) -> Any:
    """Per example, ``-log(softmax(logits)[label])`` (``tf.nn``'s, labels as class indices).

    Examples
    --------
    >>> import numpy as np, interdist as idist
    >>> logits = np.log(np.array([[1.0, 3.0], [1.0, 1.0]], np.float32))  # softmax: [.25, .75], [.5, .5]
    >>> np.exp(-idist.nn.sparse_softmax_cross_entropy_with_logits(np.array([1, 0]), logits))
    array([0.75, 0.5 ], dtype=float32)
    """
    labels = np.asarray(labels)
    if labels.dtype.kind not in "iu":
        labels = labels.astype(np.int64)
    if np.ndim(logits) != labels.ndim + 1:
        raise ValueError(
            f"`labels.shape.rank` must equal `logits.shape.rank - 1`. Received: labels.shape={labels.shape} "
            f"and logits.shape={np.shape(logits)}"
        )
    n = int(np.shape(logits)[-1])
    if labels.size and (labels.min() < 0 or labels.max() >= n):
        raise ValueError(f"Received a label value outside the valid range of [0, {n}): {labels.tolist()}")
    return _primitives().sparse_xent(_operand(logits), labels)  # one operation on a tape, as TF's kernel


def softmax_cross_entropy_with_logits(labels: Any, logits: Any, axis: int = -1) -> Any:
    """Per example, ``-sum(labels * log_softmax(logits))`` (labels as probabilities).

    Examples
    --------
    >>> import numpy as np, interdist as idist
    >>> logits = np.log(np.array([[1.0, 3.0]], np.float32))  # softmax: [.25, .75]
    >>> np.exp(-idist.nn.softmax_cross_entropy_with_logits(np.array([[0.0, 1.0]]), logits))
    array([0.75], dtype=float32)
    """
    logits = _operand(logits)
    dtype = _value(logits).dtype
    if isinstance(labels, autodiff.Differentiable):
        labels = _operand(labels)
    if not (autodiff.is_traced(labels) and _value(labels).dtype == dtype):  # (a recorded one keeps its gradient)
        labels = np.asarray(labels, dtype)
    # One operation on a tape, as TF's kernel, with TF's gradients: softmax - labels for the logits, whatever the
    # labels sum to, and -log_softmax(logits) for the labels.
    return _primitives().xent(labels, logits, axis)


def l2_loss(t: Any) -> Any:
    """``sum(t ** 2) / 2`` (``tf.nn.l2_loss``).

    Examples
    --------
    >>> import numpy as np, interdist as idist
    >>> idist.nn.l2_loss(np.array([1.0, 2.0], np.float32))
    np.float32(2.5)
    """
    return np.sum(t * t) / 2


# -- convolution and pooling (NHWC, HWIO; the kernels and their gradients are in _kernels.py) -------


def _nhwc(x: Any, what: str) -> Any:
    if np.ndim(x) != 4:
        raise ValueError(f"{what} must be 4-D (batch, height, width, channels), got shape {np.shape(x)}")
    return _operand(x)


def conv2d(input: Any, filters: Any, strides: Any = 1, padding: str = "VALID") -> Any:
    """A 2-D convolution (``tf.nn.conv2d``): ``input`` (N, H, W, C), ``filters`` (KH, KW, C, O).

    >>> import numpy as np, interdist as idist
    >>> x = np.arange(16, dtype=np.float32).reshape(1, 4, 4, 1)
    >>> idist.nn.conv2d(x, np.ones((2, 2, 1, 1), np.float32))[0, :, :, 0]
    array([[10., 14., 18.],
           [26., 30., 34.],
           [42., 46., 50.]], dtype=float32)
    """
    x = _nhwc(input, "input")
    f = _operand(filters)
    fshape = np.shape(f)
    if len(fshape) != 4 or fshape[2] != np.shape(x)[3]:
        raise ValueError(f"filters must be (height, width, {np.shape(x)[3]}, out_channels), got shape {fshape}")
    return _primitives().conv2d(x, f, _pair(strides, "strides"), _padding(padding))


def max_pool2d(input: Any, ksize: Any, strides: Any, padding: str = "VALID") -> Any:
    """Max pooling over (N, H, W, C) windows (``tf.nn.max_pool2d``).

    Examples
    --------
    >>> import numpy as np, interdist as idist
    >>> x = np.arange(16, dtype=np.float32).reshape(1, 4, 4, 1)
    >>> idist.nn.max_pool2d(x, ksize=2, strides=2)[0, :, :, 0]
    array([[ 5.,  7.],
           [13., 15.]], dtype=float32)
    """
    x = _nhwc(input, "input")
    return _primitives().max_pool(x, _pair(ksize, "ksize"), _pair(strides, "strides"), _padding(padding))
