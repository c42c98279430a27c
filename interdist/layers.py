"""The Keras layers TF's distribution tutorials use, over interdist variables and NumPy arrays.

``Dense``, ``Conv2D``, ``MaxPooling2D``, ``Flatten``, ``Dropout`` and ``Sequential`` hold their weights in
``idist.Variable``s: made inside ``strategy.scope()`` they are mirrored (or central, or sharded on the
parameter servers) as any variable, and a replica function calls the model on its batch. The forward
pass is plain NumPy, so a ``GradientTape`` records it (``interdist.autodiff``).

A layer is built (its variables made) when it learns its input shape: at once for a ``Sequential``
that starts with ``Input(shape=...)``, at ``model.build(input_shape)``, or at its first call. Build it
in the notebook, inside the strategy's scope: a layer first called inside ``strategy.run`` would make
its variables on one replica only, so that raises a ``RuntimeError`` saying so.

Weights are in Keras' order (``get_weights``/``set_weights``), and their names are Keras 3's paths
(``sequential/dense/kernel``), so a TF model's weights load as they are.

Examples
--------
>>> import interdist as idist, numpy as np
>>> with idist.MirroredStrategy(["CPU:0", "CPU:1"]) as s:
...     with s.scope():  # built here: its variables are mirrored
...         model = idist.layers.Sequential([idist.layers.Input(shape=(3,)), idist.layers.Dense(1, "relu")])
...     out = s.run(model, args=(np.ones((2, 3), np.float32),))
...     type(model.weights[0]).__name__, [np.shape(x) for x in s.experimental_local_results(out)]
('MirroredVariable', [(2, 1), (2, 1)])
"""

from __future__ import annotations

import inspect
import itertools
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

from interdist import _context, autodiff, initializers, nn, regularizers
from interdist.values.variables import Variable

__all__ = ["Conv2D", "Dense", "Dropout", "Flatten", "Input", "Layer", "MaxPooling2D", "Sequential", "clear_session"]

_COUNTERS: defaultdict[str, itertools.count[int]] = defaultdict(itertools.count)


def _unique(base: str) -> str:
    n = next(_COUNTERS[base])
    return base if n == 0 else f"{base}_{n}"


def clear_session() -> None:
    """Start layer names afresh (``keras.backend.clear_session``): the next Dense is "dense" again.

    Examples
    --------
    >>> import interdist as idist, numpy as np
    >>> idist.layers.clear_session()
    >>> idist.layers.Dense(1).name, idist.layers.Dense(1).name
    ('dense', 'dense_1')
    >>> idist.layers.clear_session()
    >>> idist.layers.Dense(1).name
    'dense'
    """
    _COUNTERS.clear()


def _snake(name: str) -> str:
    out = ""
    for i, c in enumerate(name):
        if c.isupper() and i and (not name[i - 1].isupper() or (i + 1 < len(name) and name[i + 1].islower())):
            out += "_"
        out += c.lower()
    return out.replace("2_d", "2d")


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


class Input:
    """The shape of a model's inputs, without the batch axis (``keras.Input``).

    As a ``Sequential``'s first entry it builds the model at once.

    Examples
    --------
    >>> import interdist as idist, numpy as np
    >>> idist.layers.Input(shape=(3,)).shape
    (None, 3)
    >>> model = idist.layers.Sequential([idist.layers.Input(shape=(3,)), idist.layers.Dense(4)])
    >>> model.built, model.count_params()
    (True, 16)
    """

    def __init__(self, shape: Sequence[int | None], name: str | None = None) -> None:
        self.shape = (None, *tuple(shape))
        self.name = name


class Layer:
    """Base class: subclasses give ``build(input_shape)`` (making weights with ``add_weight``) and
    ``call(inputs)``; ``__call__`` builds on the first call.

    Examples
    --------
    >>> import interdist as idist, numpy as np
    >>> class Scale(idist.layers.Layer):
    ...     def build(self, input_shape):
    ...         self.w = self.add_weight("w", (), initializer="ones")
    ...     def call(self, inputs):
    ...         return inputs * self.w
    >>> layer = Scale(name="scale")
    >>> layer(np.array([1.0, 2.0], np.float32)), [v.name for v in layer.weights]
    (array([1., 2.], dtype=float32), ['scale/w:0'])
    """

    def __init__(self, name: str | None = None, trainable: bool = True, dtype: Any = "float32") -> None:
        self.name = name or _unique(_snake(type(self).__name__))
        self.trainable = trainable
        self.dtype = np.dtype(dtype)
        self.built = False
        self._weights: list[Variable] = []
        self._regularized: list[tuple[Variable, Any]] = []
        self._path = self.name
        self._batch_input_shape: tuple[Any, ...] | None = None  # input_shape=..., for a Sequential's first layer
        self._pending_weights: list[np.ndarray] | None = None  # a checkpoint restored before the build

    # -- weights ----------------------------------------------------------------------------------------
    def add_weight(
        self,
        name: str,
        shape: Sequence[int],
        initializer: Any = "glorot_uniform",
        trainable: bool = True,
        regularizer: Any = None,
    ) -> Variable:
        """A new variable of this layer (distributed when made inside a strategy's scope)."""
        value = initializers.get(initializer)(tuple(shape), self.dtype)
        var = Variable(
            np.asarray(value, self.dtype), name=f"{self._path}/{name}", trainable=trainable and self.trainable
        )
        self._weights.append(var)
        reg = regularizers.get(regularizer)
        if reg is not None:
            self._regularized.append((var, reg))
        return var

    def _sublayers(self) -> list[Layer]:
        return []

    @property
    def weights(self) -> list[Variable]:
        out = list(self._weights)
        for layer in self._sublayers():
            out.extend(layer.weights)
        return out

    variables = weights

    @property
    def trainable_weights(self) -> list[Variable]:
        return [v for v in self.weights if v.trainable]

    trainable_variables = trainable_weights

    @property
    def non_trainable_weights(self) -> list[Variable]:
        return [v for v in self.weights if not v.trainable]

    non_trainable_variables = non_trainable_weights

    @property
    def losses(self) -> list[Any]:
        """The regularization penalties of the current weights (recorded on a tape when one watches them)."""
        out = [reg(var) for var, reg in self._regularized]
        for layer in self._sublayers():
            out.extend(layer.losses)
        return out

    def get_weights(self) -> list[np.ndarray]:
        """The weights' values, in Keras' order."""
        return [np.array(v.numpy() if hasattr(v, "numpy") else v, copy=True) for v in self.weights]

    def set_weights(self, weights: Iterable[Any]) -> None:
        """Assign every weight, in Keras' order (e.g. a TF model's ``get_weights()``)."""
        values = list(weights)
        mine = self.weights
        if len(values) != len(mine):
            raise ValueError(
                f"Layer {self.name!r} expected {len(mine)} weights, but received {len(values)} input weights."
            )
        for var, value in zip(mine, values, strict=True):
            a = np.asarray(value)
            if tuple(a.shape) != tuple(var.shape):
                raise ValueError(
                    f"Layer {self.name!r} weight shape {tuple(var.shape)} is not compatible with provided weight "
                    f"shape {a.shape}."
                )
            var.assign(a.astype(var.dtype))

    def count_params(self) -> int:
        return int(sum(int(np.prod(v.shape)) for v in self.weights))

    # -- calls ------------------------------------------------------------------------------------------
    def build(self, input_shape: Any) -> None:
        self.built = True

    def compute_output_shape(self, input_shape: Any) -> tuple[Any, ...]:
        return tuple(input_shape)

    def _build_checked(self, input_shape: Any) -> None:
        if _context.get_replica_context() is not None and not _context.is_default(_context.get_strategy()):
            raise RuntimeError(
                f"Layer {self.name!r} is not built, and a layer first called inside strategy.run would make its "
                "variables on one replica only: build the model in the notebook, inside strategy.scope() "
                "(start a Sequential with idist.layers.Input(shape=...), or call model.build(input_shape))"
            )
        self.build(tuple(input_shape))
        self.built = True
        self._apply_pending()

    def _restore_when_built(self, weights: list[np.ndarray]) -> None:
        """A checkpoint's weights for this layer, not built yet: assigned when it is (as TF defers a restore)."""
        self._pending_weights = list(weights)

    def _apply_pending(self) -> None:
        if self._pending_weights is not None:
            weights, self._pending_weights = self._pending_weights, None
            self.set_weights(weights)

    def __call__(self, inputs: Any, training: bool | None = None) -> Any:
        if not self.built:
            self._build_checked(np.shape(inputs))
        call: Any = self.call
        if "training" in inspect.signature(call).parameters:
            return call(inputs, training=training)
        return call(inputs)

    def call(self, inputs: Any) -> Any:
        return inputs

    def __repr__(self) -> str:
        return f"<{type(self).__name__} name={self.name}, built={self.built}>"


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
        return self._finish(_inputs(inputs) @ self.kernel)


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
        self.kernel_size = nn._pair(kernel_size, "kernel_size")
        self.strides = nn._pair(strides, "strides")
        self.padding = nn._padding(padding)

    def build(self, input_shape: Any) -> None:
        if len(input_shape) != 4:
            raise ValueError(f"Conv2D expects inputs of rank 4 (batch, height, width, channels), got {input_shape}")
        self._make_weights((*self.kernel_size, int(input_shape[-1]), self.filters), self.filters)

    def compute_output_shape(self, input_shape: Any) -> tuple[Any, ...]:
        n, h, w, _ = input_shape
        oh = nn._pads(h, self.kernel_size[0], self.strides[0], self.padding)[0]
        ow = nn._pads(w, self.kernel_size[1], self.strides[1], self.padding)[0]
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
        self.pool_size = nn._pair(pool_size, "pool_size")
        self.strides = nn._pair(strides, "strides") if strides is not None else self.pool_size
        self.padding = nn._padding(padding)

    def compute_output_shape(self, input_shape: Any) -> tuple[Any, ...]:
        n, h, w, c = input_shape
        oh = nn._pads(h, self.pool_size[0], self.strides[0], self.padding)[0]
        ow = nn._pads(w, self.pool_size[1], self.strides[1], self.padding)[0]
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


class Sequential(Layer):
    """Layers called one after the other (``keras.Sequential``).

    Examples
    --------
    >>> import interdist as idist, numpy as np
    >>> model = idist.layers.Sequential(
    ...     [idist.layers.Input(shape=(3,)), idist.layers.Dense(4, activation="relu"), idist.layers.Dense(1)]
    ... )
    >>> model.count_params(), model(np.ones((2, 3), np.float32)).shape
    (21, (2, 1))
    """

    def __init__(self, layers: Iterable[Any] | None = None, name: str | None = None) -> None:
        super().__init__(name or _unique("sequential"))
        self.layers: list[Layer] = []
        self._input_shape: tuple[Any, ...] | None = None
        for layer in layers or ():
            self.add(layer)

    def add(self, layer: Any) -> None:
        if isinstance(layer, Input):
            if self.layers:
                raise ValueError("An Input must be the first layer of a Sequential model")
            self._input_shape = layer.shape
            return
        if not isinstance(layer, Layer):
            raise TypeError(f"Sequential takes idist.layers.Layer instances, got {type(layer).__name__}")
        if not self.layers and self._input_shape is None and layer._batch_input_shape is not None:
            self._input_shape = layer._batch_input_shape
        if layer.built:
            raise ValueError(f"Layer {layer.name!r} is already built: a Sequential builds its layers itself")
        self.layers.append(layer)
        if self._input_shape is not None:
            self._build_checked(self._input_shape)

    def _sublayers(self) -> list[Layer]:
        return self.layers

    def build(self, input_shape: Any) -> None:
        shape = tuple(input_shape)
        for layer in self.layers:
            if not layer.built:
                layer._path = f"{self.name}/{layer.name}"
                layer.build(shape)
                layer.built = True
            shape = layer.compute_output_shape(shape)
        self.built = True
        self._apply_pending()

    def compute_output_shape(self, input_shape: Any) -> tuple[Any, ...]:
        shape = tuple(input_shape)
        for layer in self.layers:
            shape = layer.compute_output_shape(shape)
        return shape

    def __call__(self, inputs: Any, training: bool | None = None) -> Any:
        if not self.built or not all(layer.built for layer in self.layers):
            self._build_checked(np.shape(inputs))
        x = inputs
        for layer in self.layers:
            x = layer(x, training=training)
        return x

    def summary(self) -> str:
        """One line per layer: name, type, parameters (returned and printed)."""
        lines = [f'Model: "{self.name}"']
        lines += [f"  {layer.name:<20} {type(layer).__name__:<14} {layer.count_params():>10,}" for layer in self.layers]
        lines.append(f"  Total params: {self.count_params():,}")
        text = "\n".join(lines)
        print(text)
        return text
