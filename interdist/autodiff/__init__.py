"""``GradientTape``: TF's tape over the user's NumPy code, recorded by autograd.

Inside ``with idist.GradientTape() as tape:`` every read of a trainable variable (an operator, a
ufunc, a NumPy function, ``v.value()``) gives an autograd box instead of an array, so the user's
NumPy code (``x @ w + b``, ``np.exp``, ``np.mean``...) is recorded as it runs; ``tape.gradient(loss,
variables)`` walks the record backwards. The choice of autograd and its figures: docs/autodiff.md.

How the pieces fit:

- a variable class takes :class:`Differentiable` among its bases and asks :func:`recording` at the top
  of ``__array_ufunc__``/``value()``; NumPy functions reach ``Differentiable.__array_function__``;
- a read inside a recording tape is :func:`read`: a new box on each tape that watches the variable,
  all of one variable's boxes sharing one root node (its gradient collects there);
- boxes are :class:`Traced` (autograd's ``ArrayBox`` registered for NumPy arrays, with NumPy's function
  protocol added, so ``np.mean(box)`` is autograd's ``mean``), and ``np.asarray(box)`` is the value,
  detached, as TF's ``.numpy()``;
- every node a tape creates is a ``boxes`` ``TapeNode`` (autograd's ``VJPNode``, knowing its tape), and one
  created while the tape is not recording (``stop_recording()``, after ``__exit__``) has no parents:
  gradients do not flow through it, as TF records nothing there; autograd's non-differentiable functions
  (comparisons, ``argmax``, ``floor``...) give plain arrays, unrecorded, as TF's carry no gradient;
- ``gradients`` puts TF's gradient rules over autograd's where they differ (``prod`` at zeros, ``clip`` at
  its bounds, ``sqrt``/``reciprocal`` under a zero incoming gradient, ``sign``, ties of ``maximum``...).

Core layer: NumPy and, imported at the first tape, autograd (a pure-Python package, ~35 ms, ~9 MB).
A GPU replica's copies are CuPy arrays, which autograd cannot differentiate: reading one on a tape
raises ``NotImplementedError`` saying so (docs/autodiff.md).

Examples
--------
>>> import numpy as np, interdist as idist
>>> w = idist.Variable(np.float32(2.0))
>>> with idist.autodiff.GradientTape() as tape:
...     loss = np.mean((w * np.array([1.0, 2.0], np.float32) - 1.0) ** 2)
>>> float(loss), float(tape.gradient(loss, w))
(5.0, 7.0)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from interdist.autodiff import boxes
from interdist.autodiff.boxes import Differentiable, stop_gradient
from interdist.autodiff.boxes import _autograd as _autograd
from interdist.autodiff.boxes import apply_ufunc as apply_ufunc
from interdist.autodiff.boxes import detach as detach
from interdist.autodiff.boxes import is_traced as is_traced
from interdist.autodiff.boxes import read as read
from interdist.autodiff.boxes import recording as recording
from interdist.autodiff.tape import GradientTape, UnconnectedGradients, value_and_grad

__all__ = ["Differentiable", "GradientTape", "Traced", "UnconnectedGradients", "stop_gradient", "value_and_grad"]

if TYPE_CHECKING:
    from interdist.autodiff.boxes import Traced
else:

    def __getattr__(name: str) -> Any:
        # ``Traced`` is read where the first tape leaves it: ``boxes._autograd`` replaces the class there by
        # autograd's box (so ``isinstance(y, idist.autodiff.Traced)`` holds for what a tape records).
        if name == "Traced":
            return boxes.Traced
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
