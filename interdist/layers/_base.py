"""The base of the layers: ``Layer`` (weights, building, calls), ``Input`` and the layers' names."""

from __future__ import annotations

import inspect
import itertools
import weakref
from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from interdist import _context, initializers, regularizers
from interdist.values.variables import Variable

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
        if _takes_training(self, call):
            return call(inputs, training=training)
        return call(inputs)

    def call(self, inputs: Any) -> Any:
        return inputs

    def __repr__(self) -> str:
        return f"<{type(self).__name__} name={self.name}, built={self.built}>"


#: Whether a layer class's ``call`` takes ``training``, by the function: ``inspect.signature`` took 20-60 us a layer
#: at every call of a model (a replica step calls each of its layers).
_takes_training_by_function: weakref.WeakKeyDictionary[Any, bool] = weakref.WeakKeyDictionary()


def _takes_training(layer: Layer, call: Any) -> bool:
    """``"training" in inspect.signature(call).parameters``, looked up once per class's ``call`` (not for a ``call``
    set on the instance itself)."""
    fn = getattr(call, "__func__", None)
    if fn is None or "call" in vars(layer):
        return "training" in inspect.signature(call).parameters
    known = _takes_training_by_function.get(fn)
    if known is None:
        known = _takes_training_by_function[fn] = "training" in inspect.signature(call).parameters
    return known
