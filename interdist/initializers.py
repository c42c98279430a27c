"""Keras' weight initializers, drawn with NumPy (``idist.layers`` use them; any callable
``(shape, dtype) -> array`` works too).

The draws are NumPy's, not TF's: the same ``seed`` gives the same weights in interdist every time, but
not TF's numbers. To start from TF's weights, ``model.set_weights(tf_model.get_weights())``.

Examples
--------
>>> import interdist as idist, numpy as np
>>> layer = idist.layers.Dense(2, kernel_initializer="ones", bias_initializer=idist.initializers.Constant(0.5))
>>> layer(np.array([[1.0, 2.0]], np.float32))
array([[3.5, 3.5]], dtype=float32)
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

__all__ = [
    "Constant",
    "GlorotNormal",
    "GlorotUniform",
    "HeNormal",
    "HeUniform",
    "Initializer",
    "Ones",
    "RandomNormal",
    "RandomUniform",
    "Zeros",
    "get",
]


_GLOBAL = [np.random.default_rng()]  # what an unseeded initializer draws from (``idist.random.set_seed``)


def set_global_seed(seed: int | None) -> None:
    """Draw unseeded initializers (and Dropout masks) from a generator seeded with ``seed`` from now on."""
    _GLOBAL[0] = np.random.default_rng(seed)


def global_generator() -> np.random.Generator:
    """A new generator for one unseeded draw, taken from the global one (so a seed fixes every draw)."""
    return np.random.default_rng(_GLOBAL[0].integers(2**63))


def _fans(shape: tuple[int, ...]) -> tuple[float, float]:
    """Keras' fan-in and fan-out: a dense kernel (in, out); a convolution (*kernel, in, out)."""
    if len(shape) < 1:
        return 1.0, 1.0
    if len(shape) == 1:
        return float(shape[0]), float(shape[0])
    receptive = math.prod(shape[:-2])
    return float(shape[-2] * receptive), float(shape[-1] * receptive)


class Initializer:
    """Base class: ``initializer(shape, dtype)`` gives a new array.

    A subclass implements ``__call__``; with a ``seed`` it draws the same values every call, without
    one from the generator ``idist.random.set_seed`` seeds.

    Examples
    --------
    >>> import interdist as idist, numpy as np
    >>> class Arange(idist.initializers.Initializer):
    ...     def __call__(self, shape, dtype=np.float32):
    ...         return np.arange(np.prod(shape), dtype=dtype).reshape(shape)
    >>> Arange()((2, 2))
    array([[0., 1.],
           [2., 3.]], dtype=float32)
    """

    def __init__(self, seed: int | None = None) -> None:
        self.seed = seed

    def _rng(self) -> np.random.Generator:
        return np.random.default_rng(self.seed) if self.seed is not None else global_generator()

    def __call__(self, shape: Any, dtype: Any = np.float32) -> np.ndarray:
        raise NotImplementedError  # pragma: no cover - abstract


class Zeros(Initializer):
    """Zeros of the shape and dtype asked for.

    Examples
    --------
    >>> import interdist as idist, numpy as np
    >>> idist.initializers.Zeros()((2,), np.int32)
    array([0, 0], dtype=int32)
    """

    def __call__(self, shape: Any, dtype: Any = np.float32) -> np.ndarray:
        return np.zeros(tuple(shape), dtype)


class Ones(Initializer):
    """Ones of the shape and dtype asked for.

    Examples
    --------
    >>> import interdist as idist, numpy as np
    >>> idist.initializers.Ones()((2,))
    array([1., 1.], dtype=float32)
    """

    def __call__(self, shape: Any, dtype: Any = np.float32) -> np.ndarray:
        return np.ones(tuple(shape), dtype)


class Constant(Initializer):
    """``value`` everywhere, in the shape and dtype asked for.

    Examples
    --------
    >>> import interdist as idist, numpy as np
    >>> idist.initializers.Constant(0.5)((2,))
    array([0.5, 0.5], dtype=float32)
    """

    def __init__(self, value: float = 0.0) -> None:
        super().__init__()
        self.value = value

    def __call__(self, shape: Any, dtype: Any = np.float32) -> np.ndarray:
        return np.full(tuple(shape), self.value, dtype)


class RandomNormal(Initializer):
    """Normal draws of mean ``mean`` and standard deviation ``stddev`` (Keras' defaults 0 and 0.05).

    Examples
    --------
    >>> import interdist as idist, numpy as np
    >>> w = idist.initializers.RandomNormal(stddev=1.0, seed=0)((1000,))
    >>> w.dtype, bool(abs(w.mean()) < 0.1), bool(0.9 < w.std() < 1.1)
    (dtype('float32'), True, True)
    >>> bool((w == idist.initializers.RandomNormal(stddev=1.0, seed=0)((1000,))).all())  # a seed repeats
    True
    """

    def __init__(self, mean: float = 0.0, stddev: float = 0.05, seed: int | None = None) -> None:
        super().__init__(seed)
        self.mean, self.stddev = mean, stddev

    def __call__(self, shape: Any, dtype: Any = np.float32) -> np.ndarray:
        return self._rng().normal(self.mean, self.stddev, tuple(shape)).astype(dtype)


class RandomUniform(Initializer):
    """Uniform draws in ``[minval, maxval)`` (Keras' defaults -0.05 and 0.05).

    Examples
    --------
    >>> import interdist as idist, numpy as np
    >>> w = idist.initializers.RandomUniform(minval=2.0, maxval=3.0, seed=0)((100,))
    >>> w.shape, bool(w.min() >= 2.0 and w.max() < 3.0)
    ((100,), True)
    """

    def __init__(self, minval: float = -0.05, maxval: float = 0.05, seed: int | None = None) -> None:
        super().__init__(seed)
        self.minval, self.maxval = minval, maxval

    def __call__(self, shape: Any, dtype: Any = np.float32) -> np.ndarray:
        return self._rng().uniform(self.minval, self.maxval, tuple(shape)).astype(dtype)


class GlorotUniform(Initializer):
    """Uniform in ``[-limit, limit]``, ``limit = sqrt(6 / (fan_in + fan_out))`` (Keras' default kernel).

    Examples
    --------
    >>> import interdist as idist, numpy as np
    >>> w = idist.initializers.GlorotUniform(seed=0)((3, 5))  # limit sqrt(6 / 8)
    >>> w.shape, w.dtype, bool(np.abs(w).max() <= np.sqrt(6 / 8))
    ((3, 5), dtype('float32'), True)
    """

    def __call__(self, shape: Any, dtype: Any = np.float32) -> np.ndarray:
        fan_in, fan_out = _fans(tuple(shape))
        limit = math.sqrt(6.0 / (fan_in + fan_out))
        return self._rng().uniform(-limit, limit, tuple(shape)).astype(dtype)


class GlorotNormal(Initializer):
    """Truncated normal with ``stddev = sqrt(2 / (fan_in + fan_out))``.

    Draws beyond two standard deviations of the underlying normal are drawn again, as Keras does.

    Examples
    --------
    >>> import interdist as idist, numpy as np
    >>> w = idist.initializers.GlorotNormal(seed=0)((200, 200))  # stddev sqrt(2 / 400)
    >>> bool(abs(w.std() - np.sqrt(2 / 400)) < 0.005), bool(np.abs(w).max() <= 2 * np.sqrt(2 / 400) / 0.8796)
    (True, True)
    """

    def __call__(self, shape: Any, dtype: Any = np.float32) -> np.ndarray:
        fan_in, fan_out = _fans(tuple(shape))
        return _truncated(self._rng(), math.sqrt(2.0 / (fan_in + fan_out)), tuple(shape)).astype(dtype)


class HeNormal(Initializer):
    """Truncated normal with ``stddev = sqrt(2 / fan_in)``.

    Examples
    --------
    >>> import interdist as idist, numpy as np
    >>> w = idist.initializers.HeNormal(seed=0)((200, 200))  # stddev sqrt(2 / 200) = 0.1
    >>> bool(abs(w.std() - 0.1) < 0.005)
    True
    """

    def __call__(self, shape: Any, dtype: Any = np.float32) -> np.ndarray:
        fan_in, _ = _fans(tuple(shape))
        return _truncated(self._rng(), math.sqrt(2.0 / fan_in), tuple(shape)).astype(dtype)


class HeUniform(Initializer):
    """Uniform in ``[-limit, limit]``, ``limit = sqrt(6 / fan_in)``.

    Examples
    --------
    >>> import interdist as idist, numpy as np
    >>> w = idist.initializers.HeUniform(seed=0)((6, 4))  # limit sqrt(6 / 6) = 1
    >>> w.shape, bool(np.abs(w).max() <= 1.0)
    ((6, 4), True)
    """

    def __call__(self, shape: Any, dtype: Any = np.float32) -> np.ndarray:
        fan_in, _ = _fans(tuple(shape))
        limit = math.sqrt(6.0 / fan_in)
        return self._rng().uniform(-limit, limit, tuple(shape)).astype(dtype)


def _truncated(rng: np.random.Generator, stddev: float, shape: tuple[int, ...]) -> np.ndarray:
    # Keras' truncated normal: draws beyond two standard deviations are drawn again; the 0.8796 factor
    # keeps the variance of the truncated distribution equal to stddev**2.
    scale = stddev / 0.87962566103423978
    out = rng.normal(0.0, scale, shape)
    bad = np.abs(out) > 2 * scale
    while bad.any():
        out[bad] = rng.normal(0.0, scale, int(bad.sum()))
        bad = np.abs(out) > 2 * scale
    return out


_NAMES = {
    "zeros": Zeros,
    "ones": Ones,
    "glorot_uniform": GlorotUniform,
    "glorot_normal": GlorotNormal,
    "he_normal": HeNormal,
    "he_uniform": HeUniform,
    "random_normal": RandomNormal,
    "random_uniform": RandomUniform,
}


def get(identifier: Any) -> Any:
    """An initializer from its Keras name (``"glorot_uniform"``), an instance, or any callable.

    Examples
    --------
    >>> import interdist as idist, numpy as np
    >>> type(idist.initializers.get("he_normal")).__name__
    'HeNormal'
    >>> idist.initializers.get("ones")((2,))
    array([1., 1.], dtype=float32)
    """
    if isinstance(identifier, str):
        cls = _NAMES.get(identifier.lower())
        if cls is None:
            raise ValueError(f"Could not interpret initializer identifier: {identifier!r}")
        return cls()
    if callable(identifier):
        return identifier
    raise ValueError(f"Could not interpret initializer identifier: {identifier!r}")
