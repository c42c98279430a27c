"""Keras' weight regularizers: a layer's ``losses`` are these penalties of its current weights, read
on the ``GradientTape`` (so ``tape.gradient`` sees them), as Keras 3 computes them on each access.

Examples
--------
>>> import interdist as idist, numpy as np
>>> layer = idist.layers.Dense(1, kernel_initializer="ones", kernel_regularizer=idist.regularizers.L2(0.5))
>>> layer.build((None, 2))
>>> layer.losses  # 0.5 * (1 + 1)
[np.float32(1.0)]
"""

from __future__ import annotations

from typing import Any

import numpy as np

from interdist import autodiff

__all__ = ["L1", "L1L2", "L2", "Regularizer", "get"]


def _read(x: Any) -> Any:
    if autodiff.is_traced(x):
        return x
    if isinstance(x, autodiff.Differentiable):
        return autodiff.read(x)
    return np.asarray(x)


class Regularizer:
    """Base class: ``regularizer(weights)`` is a scalar penalty.

    Examples
    --------
    >>> import interdist as idist, numpy as np
    >>> class MaxAbs(idist.regularizers.Regularizer):
    ...     def __call__(self, x):
    ...         return np.max(np.abs(x))
    >>> MaxAbs()(np.array([1.0, -2.0], np.float32))
    np.float32(2.0)
    """

    def __call__(self, x: Any) -> Any:
        raise NotImplementedError  # pragma: no cover - abstract


class L1L2(Regularizer):
    """``l1 * sum(|x|) + l2 * sum(x ** 2)``.

    Examples
    --------
    >>> import interdist as idist, numpy as np
    >>> idist.regularizers.L1L2(l1=0.1, l2=0.1)(np.array([1.0, -2.0], np.float32))  # 0.1 * 3 + 0.1 * 5
    np.float32(0.8)
    """

    def __init__(self, l1: float = 0.0, l2: float = 0.0) -> None:
        self.l1, self.l2 = float(l1), float(l2)

    def __call__(self, x: Any) -> Any:
        w = _read(x)
        dtype = np.asarray(w).dtype.type
        total = dtype(0)
        if self.l1:
            total = total + dtype(self.l1) * np.sum(np.abs(w))
        if self.l2:
            total = total + dtype(self.l2) * np.sum(np.square(w))
        return total

    def get_config(self) -> dict[str, float]:
        return {"l1": self.l1, "l2": self.l2}


class L1(L1L2):
    """``l1 * sum(|x|)`` (Keras' default l1=0.01).

    Examples
    --------
    >>> import interdist as idist, numpy as np
    >>> idist.regularizers.L1(0.1)(np.array([1.0, -2.0], np.float32))
    np.float32(0.3)
    """

    def __init__(self, l1: float = 0.01) -> None:
        super().__init__(l1=l1)

    def get_config(self) -> dict[str, float]:
        return {"l1": self.l1}


class L2(L1L2):
    """``l2 * sum(x ** 2)`` (Keras' default l2=0.01).

    Examples
    --------
    >>> import interdist as idist, numpy as np
    >>> idist.regularizers.L2(0.1)(np.array([1.0, -2.0], np.float32))
    np.float32(0.5)
    """

    def __init__(self, l2: float = 0.01) -> None:
        super().__init__(l2=l2)

    def get_config(self) -> dict[str, float]:
        return {"l2": self.l2}


def get(identifier: Any) -> Any:
    """A regularizer from ``None``, a Keras name (``"l2"``), an instance or a callable.

    Examples
    --------
    >>> import interdist as idist, numpy as np
    >>> idist.regularizers.get("l2").get_config(), idist.regularizers.get(None)
    ({'l2': 0.01}, None)
    """
    if identifier is None or callable(identifier):
        return identifier
    names = {"l1": L1, "l2": L2, "l1_l2": lambda: L1L2(0.01, 0.01)}
    if isinstance(identifier, str) and identifier.lower() in names:
        return names[identifier.lower()]()
    raise ValueError(f"Could not interpret regularizer identifier: {identifier!r}")
