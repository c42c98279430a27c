"""The built-in layers: ``Dense``, ``Conv2D``, ``MaxPooling2D``, ``Flatten`` and ``Dropout``."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from interdist import autodiff, initializers, nn
from interdist.layers._base import Layer
from interdist.nn._kernels import _padding, _pads, _pair, _primitives
from interdist.values.variables import Variable

_ACTIVATIONS: dict[str, Callable[[Any], Any]] = {
    "relu": nn.relu,
    "softmax": nn.softmax,
    "sigmoid": nn.sigmoid,
    "tanh": np.tanh,
    "linear": lambda x: x,
}


def _activation(identifier: Any) -> Callable[[Any], Any] | None:
    if identifier is None:
        return None
    if isinstance(identifier, str):
        if identifier not in _ACTIVATIONS:
            raise ValueError(f"Could not interpret activation function identifier: {identifier!r}")
        return _ACTIVATIONS[identifier]
    if callable(identifier):
        return identifier  # type: ignore[no-any-return]
    raise ValueError(f"Could not interpret activation function identifier: {identifier!r}")


def _inputs(x: Any) -> Any:
    """A layer's input as its operations take it: recorded values as they are, anything else as float32."""
    if autodiff.is_traced(x):
        return x
    if isinstance(x, autodiff.Differentiable):
        return autodiff.read(x)
    a = np.asarray(x)
    return a if a.dtype == np.float32 else a.astype(np.float32)


class _Affine(Layer):
    """What Dense and Conv2D share: a kernel, an optional bias, an activation, Keras' initializer and
    regularizer arguments, and ``input_shape=`` for a Sequential's first layer."""

    def __init__(
        self,
        activation: Any,
        use_bias: bool,
        initializers_and_regularizers: tuple[Any, Any, Any, Any],
        name: str | None,
        input_shape: Sequence[int] | None,
    ) -> None:
        super().__init__(name)
        self.activation = _activation(activation)
        self.use_bias = use_bias
        self._init = initializers_and_regularizers
        self.kernel: Variable | None = None
        self.bias: Variable | None = None
        if input_shape is not None:  # as Keras 3: the first layer of a Sequential gives the model's input shape
            self._batch_input_shape = (None, *input_shape)

    def _make_weights(self, kernel_shape: tuple[int, ...], units: int) -> None:
        ki, bi, kr, br = self._init
        self.kernel = self.add_weight("kernel", kernel_shape, ki, regularizer=kr)
        if self.use_bias:
            self.bias = self.add_weight("bias", (units,), bi, regularizer=br)
        self.built = True

    def _finish(self, y: Any) -> Any:
        if self.bias is not None:
            y = y + self.bias
        return self.activation(y) if self.activation is not None else y


class Dense(_Affine):
    """``activation(inputs @ kernel + bias)``; kernel (input_dim, units).

    Examples
    --------
    >>> import interdist as idist, numpy as np
    >>> layer = idist.layers.Dense(2, activation="relu", kernel_initializer="ones")
    >>> layer(np.array([[1.0, -3.0]], np.float32)), [w.shape for w in layer.weights]
    (array([[0., 0.]], dtype=float32), [(2, 2), (2,)])
    """

    def __init__(
        self,
        units: int,
        activation: Any = None,
        use_bias: bool = True,
        kernel_initializer: Any = "glorot_uniform",
        bias_initializer: Any = "zeros",
        kernel_regularizer: Any = None,
        bias_regularizer: Any = None,
        name: str | None = None,
        input_shape: Sequence[int] | None = None,
    ) -> None:
        if not isinstance(units, (int, np.integer)) or units <= 0:
            raise ValueError(
                f"Received an invalid value for `units`, expected a positive integer. Received: units={units}"
            )
        init = (kernel_initializer, bias_initializer, kernel_regularizer, bias_regularizer)
        super().__init__(activation, use_bias, init, name, input_shape)
        self.units = int(units)

    def build(self, input_shape: Any) -> None:
        self._make_weights((int(input_shape[-1]), self.units), self.units)

    def compute_output_shape(self, input_shape: Any) -> tuple[Any, ...]:
        return (*tuple(input_shape)[:-1], self.units)

    def call(self, inputs: Any) -> Any:
        x = _inputs(inputs)
        if np.ndim(x) < 2 or (self.activation is not None and self.activation is not nn.relu):
            return self._finish(x @ self.kernel)
        # One operation on a tape, not three (matmul, bias, relu): a small model's layers cost the tape more in
        # bookkeeping than in arithmetic (docs/performance.md, "The twenty-first run"). The same values and gradients.
        bias = None if self.bias is None else nn._operand(self.bias)
        return _primitives().dense(x, nn._operand(self.kernel), bias, self.activation is nn.relu)


class Conv2D(_Affine):
    """A 2-D convolution over NHWC inputs; kernel (kh, kw, in_channels, filters).

    Examples
    --------
    >>> import interdist as idist, numpy as np
    >>> layer = idist.layers.Conv2D(1, 2, kernel_initializer="ones")  # one 2x2 filter
    >>> layer(np.arange(16, dtype=np.float32).reshape(1, 4, 4, 1))[0, :, :, 0]
    array([[10., 14., 18.],
           [26., 30., 34.],
           [42., 46., 50.]], dtype=float32)
    """

    def __init__(
        self,
        filters: int,
        kernel_size: int | Sequence[int],
        strides: int | Sequence[int] = (1, 1),
        padding: str = "valid",
        activation: Any = None,
        use_bias: bool = True,
        kernel_initializer: Any = "glorot_uniform",
        bias_initializer: Any = "zeros",
        kernel_regularizer: Any = None,
        bias_regularizer: Any = None,
        name: str | None = None,
        input_shape: Sequence[int] | None = None,
    ) -> None:
        init = (kernel_initializer, bias_initializer, kernel_regularizer, bias_regularizer)
        super().__init__(activation, use_bias, init, name, input_shape)
        self.filters = int(filters)
        self.kernel_size = _pair(kernel_size, "kernel_size")
        self.strides = _pair(strides, "strides")
        self.padding = _padding(padding)

    def build(self, input_shape: Any) -> None:
        if len(input_shape) != 4:
            raise ValueError(f"Conv2D expects inputs of rank 4 (batch, height, width, channels), got {input_shape}")
        self._make_weights((*self.kernel_size, int(input_shape[-1]), self.filters), self.filters)

    def compute_output_shape(self, input_shape: Any) -> tuple[Any, ...]:
        n, h, w, _ = input_shape
        oh = _pads(h, self.kernel_size[0], self.strides[0], self.padding)[0]
        ow = _pads(w, self.kernel_size[1], self.strides[1], self.padding)[0]
        return (n, oh, ow, self.filters)

    def call(self, inputs: Any) -> Any:
        return self._finish(nn.conv2d(_inputs(inputs), self.kernel, self.strides, self.padding))


class MaxPooling2D(Layer):
    """Max pooling over NHWC inputs (Keras' defaults: 2x2 windows, strides = pool size, valid padding).

    Examples
    --------
    >>> import interdist as idist, numpy as np
    >>> idist.layers.MaxPooling2D()(np.arange(16, dtype=np.float32).reshape(1, 4, 4, 1))[0, :, :, 0]
    array([[ 5.,  7.],
           [13., 15.]], dtype=float32)
    """

    def __init__(
        self,
        pool_size: int | Sequence[int] = (2, 2),
        strides: int | Sequence[int] | None = None,
        padding: str = "valid",
        name: str | None = None,
    ) -> None:
        super().__init__(name)
        self.pool_size = _pair(pool_size, "pool_size")
        self.strides = _pair(strides, "strides") if strides is not None else self.pool_size
        self.padding = _padding(padding)

    def compute_output_shape(self, input_shape: Any) -> tuple[Any, ...]:
        n, h, w, c = input_shape
        oh = _pads(h, self.pool_size[0], self.strides[0], self.padding)[0]
        ow = _pads(w, self.pool_size[1], self.strides[1], self.padding)[0]
        return (n, oh, ow, c)

    def call(self, inputs: Any) -> Any:
        return nn.max_pool2d(_inputs(inputs), self.pool_size, self.strides, self.padding)


class Flatten(Layer):
    """Every axis but the batch axis in one.

    Examples
    --------
    >>> import interdist as idist, numpy as np
    >>> idist.layers.Flatten()(np.ones((2, 3, 4))).shape
    (2, 12)
    """

    def compute_output_shape(self, input_shape: Any) -> tuple[Any, ...]:
        rest = input_shape[1:]
        return (input_shape[0], None if None in rest else int(np.prod(rest)))

    def call(self, inputs: Any) -> Any:
        x = _inputs(inputs)
        return np.reshape(x, (np.shape(x)[0], -1))


class Dropout(Layer):
    """Zero a ``rate`` fraction of the inputs in training (scaling the rest by ``1/(1-rate)``), NumPy's draws.

    Examples
    --------
    >>> import interdist as idist, numpy as np
    >>> layer = idist.layers.Dropout(0.5, seed=0)
    >>> layer(np.ones((1, 4), np.float32))  # not training: unchanged
    array([[1., 1., 1., 1.]], dtype=float32)
    >>> sorted(set(layer(np.ones((1, 100), np.float32), training=True).ravel().tolist()))
    [0.0, 2.0]
    """

    def __init__(self, rate: float, seed: int | None = None, name: str | None = None) -> None:
        super().__init__(name)
        if not 0 <= rate <= 1:
            raise ValueError(
                f"Invalid value received for argument `rate`. Expected a float value between 0 and 1. "
                f"Received: rate={rate}"
            )
        self.rate = float(rate)
        self._rng = np.random.default_rng(seed) if seed is not None else initializers.global_generator()

    def call(self, inputs: Any, training: bool | None = None) -> Any:
        x = _inputs(inputs)
        if not training or self.rate == 0:
            return x
        keep = self._rng.random(np.shape(x)) >= self.rate
        return x * (keep / np.float32(1 - self.rate)).astype(np.float32)
