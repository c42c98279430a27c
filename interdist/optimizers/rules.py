"""The optimizers: ``SGD``, ``Adam``, ``RMSprop`` and ``Adagrad``, each Keras 3's ``update_step``.

Operation for operation in the variable's dtype (the same ``assign``/``assign_add``/``assign_sub`` of the
same values), so that their results equal TF 2.21's eager ones, for float16, float32 and float64 variables.
The hyperparameters come into the variable's dtype as Keras 3 on TF brings them there: what it passes
to ``ops.cast`` (the learning rate, a float32 variable; SGD's momentum; Adam's betas in their powers;
Adagrad's initial accumulator) through float32 (``_cast``); a Python float it uses as an operand
(epsilon, RMSprop's rho and momentum, ``1 - beta``) straight into the dtype (``_operand``). Part of
``interdist.optimizers``, which re-exports its public names.
"""

from __future__ import annotations

import ctypes
import functools
from typing import Any

import numpy as np

from interdist import _gpu
from interdist.optimizers.base import Optimizer
from interdist.replica.fused_update import assign_sub_scaled, ring_swap, sub_scaled_chunks, sum_assign_sub_scaled


class SGD(Optimizer):
    """Gradient descent with optional momentum, Keras 3's rule: ``m = m*momentum - g*lr``; ``v += m``
    (nesterov: ``v += m*momentum - g*lr``, with the new ``m``); without momentum ``v -= g*lr``.

    Examples
    --------
    >>> import interdist as idist, numpy as np
    >>> w = idist.Variable(np.float32(1.0))
    >>> opt = idist.optimizers.SGD(learning_rate=0.1, momentum=0.9)
    >>> for _ in range(2):
    ...     opt.apply_gradients([(np.float32(0.5), w)])  # m: -0.05, then -0.095
    >>> round(float(w.numpy()), 4)
    0.855
    """

    def __init__(
        self, learning_rate: float = 0.01, momentum: float = 0.0, nesterov: bool = False, name: str | None = None
    ) -> None:
        super().__init__(learning_rate, name)
        if not 0 <= momentum <= 1:
            raise ValueError(f"`momentum` must be between [0, 1], but got {momentum!r}")
        self.momentum = float(momentum)
        self.nesterov = nesterov
        self._has_slots = self.momentum != 0

    def _slot_specs(self) -> dict[str, float]:
        return {"momentum": 0.0} if self.momentum != 0 else {}

    def _apply_parts(self, var: Any, parts: list[Any], slots: Any, step: int) -> bool:
        # v -= (g0 + g1 + ...) * lr, tile by tile: the sum's bits, never written whole (fused_update.py)
        return self.momentum == 0 and sum_assign_sub_scaled(var, parts, _cast(self.learning_rate, parts[0].dtype.type))

    def _apply_chunks(self, var: Any, pieces: list[Any], slots: Any, step: int) -> bool:
        # v -= g * lr, a chunk of g at a time where the owners' chunks lie (fused_update.py)
        return self.momentum == 0 and sub_scaled_chunks(var, pieces, _cast(self.learning_rate, pieces[0].dtype.type))

    def _ring_target(self, var: Any, grad: Any, done: Any) -> Any | None:
        # v - (g0 + g1) * lr written into a new copy as the ring sums (fused_update.ring_swap)
        return None if self.momentum != 0 else ring_swap(var, grad, _cast(self.learning_rate, grad.dtype.type), done)

    def _apply_dense(self, var: Any, grad: Any, slots: Any, step: int) -> Any:
        t = grad.dtype.type
        lr = _cast(self.learning_rate, t)
        if self.momentum == 0:
            done = assign_sub_scaled(var, grad, lr)  # in one pass over memory where it can (the same bits)
            return done if done is not None else var.assign_sub(grad * lr)
        momentum = _cast(self.momentum, t)  # ops.cast: through float32
        m = slots.read("momentum", grad)
        slots.assign("momentum", m * momentum - grad * lr)
        m = slots.read("momentum", grad)
        if self.nesterov:
            return var.assign_add(m * momentum - grad * lr)
        return var.assign_add(m)


class Adam(Optimizer):
    """Adam (Kingma & Ba), Keras 3's rule: ``alpha = lr * sqrt(1 - beta_2^t) / (1 - beta_1^t)``,
    ``m += (g - m) * (1 - beta_1)``, ``v += (g^2 - v) * (1 - beta_2)``, ``var -= m*alpha / (sqrt(v) + eps)``.

    Examples
    --------
    >>> import interdist as idist, numpy as np
    >>> w = idist.Variable(np.float32(1.0))
    >>> opt = idist.optimizers.Adam(learning_rate=0.1)
    >>> for _ in range(2):
    ...     opt.apply_gradients([(np.float32(0.5), w)])  # a steady gradient: about lr per step
    >>> round(float(w.numpy()), 4)
    0.8
    """

    def __init__(
        self,
        learning_rate: float = 0.001,
        beta_1: float = 0.9,
        beta_2: float = 0.999,
        epsilon: float = 1e-7,
        name: str | None = None,
    ) -> None:
        super().__init__(learning_rate, name)
        self.beta_1, self.beta_2, self.epsilon = float(beta_1), float(beta_2), float(epsilon)
        self._has_slots = True

    def _slot_specs(self) -> dict[str, float]:
        return {"momentum": 0.0, "velocity": 0.0}

    def _apply_dense(self, var: Any, grad: Any, slots: Any, step: int) -> Any:
        t = grad.dtype.type
        xp = _gpu.xp_of(grad)
        beta_1_power = _power(_cast(self.beta_1, t), step)  # ops.cast(beta, dtype): through float32
        beta_2_power = _power(_cast(self.beta_2, t), step)
        alpha = _cast(self.learning_rate, t) * np.sqrt(t(1) - beta_2_power) / (t(1) - beta_1_power)
        m = slots.read("momentum", grad)
        slots.assign_add("momentum", (grad - m) * _operand(1 - self.beta_1, t))
        v = slots.read("velocity", grad)
        slots.assign_add("velocity", (grad * grad - v) * _operand(1 - self.beta_2, t))
        m, v = slots.read("momentum", grad), slots.read("velocity", grad)
        return var.assign_sub((m * alpha) / (xp.sqrt(v) + _operand(self.epsilon, t)))


class RMSprop(Optimizer):
    """RMSprop, Keras 3's rule: ``velocity = rho*velocity + (1 - rho)*g^2``; centered: also
    ``average_gradient = rho*average_gradient + (1 - rho)*g`` and the denominator
    ``velocity - average_gradient^2 + eps`` (else ``velocity + eps``); ``increment = lr*g / sqrt(denominator)``;
    with momentum ``m = momentum*m + increment; var -= m``, else ``var -= increment``.

    Examples
    --------
    >>> import interdist as idist, numpy as np
    >>> w = idist.Variable(np.float32(1.0))
    >>> opt = idist.optimizers.RMSprop(learning_rate=0.1)
    >>> opt.apply_gradients([(np.float32(0.5), w)])  # velocity 0.1 * 0.25: a step of 0.1 * 0.5 / sqrt(0.025)
    >>> round(float(w.numpy()), 4)
    0.6838
    """

    def __init__(
        self,
        learning_rate: float = 0.001,
        rho: float = 0.9,
        momentum: float = 0.0,
        epsilon: float = 1e-7,
        centered: bool = False,
        name: str | None = None,
    ) -> None:
        super().__init__(learning_rate, name)
        self.rho, self.momentum, self.epsilon = float(rho), float(momentum), float(epsilon)
        self.centered = bool(centered)
        self._has_slots = True

    def _slot_specs(self) -> dict[str, float]:
        specs = {"velocity": 0.0}
        if self.momentum > 0:
            specs["momentum"] = 0.0
        if self.centered:
            specs["average_gradient"] = 0.0
        return specs

    def _apply_dense(self, var: Any, grad: Any, slots: Any, step: int) -> Any:
        t = grad.dtype.type
        xp = _gpu.xp_of(grad)
        lr, rho, rest = _cast(self.learning_rate, t), _operand(self.rho, t), _operand(1 - self.rho, t)
        velocity = slots.read("velocity", grad)
        slots.assign("velocity", rho * velocity + rest * (grad * grad))
        velocity = slots.read("velocity", grad)
        if self.centered:
            average = slots.read("average_gradient", grad)
            slots.assign("average_gradient", rho * average + rest * grad)
            average = slots.read("average_gradient", grad)
            denominator = velocity - average * average + _operand(self.epsilon, t)
        else:
            denominator = velocity + _operand(self.epsilon, t)
        increment = (lr * grad) / xp.sqrt(denominator)
        if self.momentum > 0:
            m = slots.read("momentum", grad)
            slots.assign("momentum", _operand(self.momentum, t) * m + increment)
            return var.assign_sub(slots.read("momentum", grad))
        return var.assign_sub(increment)


class Adagrad(Optimizer):
    """Adagrad, Keras 3's rule: ``accumulator += g^2``; ``var -= lr*g / sqrt(accumulator + eps)``, the
    accumulators starting at ``initial_accumulator_value``.

    Examples
    --------
    >>> import interdist as idist, numpy as np
    >>> w = idist.Variable(np.float32(1.0))
    >>> opt = idist.optimizers.Adagrad(learning_rate=0.1, initial_accumulator_value=0.0)
    >>> opt.apply_gradients([(np.float32(0.5), w)])  # 0.1 * 0.5 / sqrt(0.25)
    >>> round(float(w.numpy()), 4)
    0.9
    """

    def __init__(
        self,
        learning_rate: float = 0.001,
        initial_accumulator_value: float = 0.1,
        epsilon: float = 1e-7,
        name: str | None = None,
    ) -> None:
        super().__init__(learning_rate, name)
        self.initial_accumulator_value, self.epsilon = float(initial_accumulator_value), float(epsilon)
        self._has_slots = True

    def _slot_specs(self) -> dict[str, float]:
        # Keras' initializers.Constant: ops.cast(value, dtype), through float32 (as for float32 variables)
        return {"accumulator": float(np.float32(self.initial_accumulator_value))}

    def _apply_dense(self, var: Any, grad: Any, slots: Any, step: int) -> Any:
        t = grad.dtype.type
        xp = _gpu.xp_of(grad)
        slots.assign_add("accumulator", grad * grad)
        accumulator = slots.read("accumulator", grad)
        lr, epsilon = _cast(self.learning_rate, t), _operand(self.epsilon, t)
        return var.assign_sub((lr * grad) / xp.sqrt(accumulator + epsilon))


def _cast(value: float, t: Any) -> Any:
    """``ops.cast(value, dtype)`` of a Python float (or of the learning rate, a float32 variable), as Keras 3 on
    TF computes it: ``tf.cast`` makes the value a float32 tensor first, then casts that to the dtype. So a
    float64 variable's update uses the float32-rounded value (e.g. 0.1 is 0.10000000149011612 there), a
    float16 one the float32 value rounded to half (checked with TF 2.21)."""
    return t(np.float32(value))


def _operand(value: float, t: Any) -> Any:
    """A Python float as Keras 3 on TF uses it as an operand of a tensor of the dtype (``ops.add(x, eps)``,
    ``ops.multiply(rho, x)``, ``x + eps``): converted to the dtype directly, so exactly for float64; a
    float16 tensor's, through float32 (TF converts a Python float to half by way of float: checked with TF
    2.21, 1 + 2**-11 + 2**-40 becomes 1.0 there, where NumPy's direct rounding makes it 1.001)."""
    return t(value) if np.dtype(t).itemsize > 4 else t(np.float32(value))


def _power(base: np.floating[Any], step: int) -> Any:
    """``base ** step`` in ``base``'s dtype, as TF's scalar ``pow`` on CPU computes it: for float32 (and
    float16, which Eigen computes in float), the C library's ``powf`` (TF calls it; NumPy's float32 power
    differs from it by an ulp at times, e.g. 0.9**4), else the power in double precision (C's ``pow``, as
    TF's float64 ``pow``) rounded to the dtype."""
    t = type(base)
    if t is np.float32 or t is np.float16:
        powf = _c_powf()
        if powf is not None:
            return t(powf(float(base), float(step)))
    return t(float(base) ** step)


@functools.cache
def _c_powf() -> Any:
    try:
        powf = ctypes.CDLL(None).powf  # the C library this process uses (libm's powf on Linux and macOS)
    except (OSError, AttributeError, TypeError):
        return None  # pragma: no cover - Windows: the double power, rounded (within an ulp of it)
    powf.restype = ctypes.c_float
    powf.argtypes = [ctypes.c_float, ctypes.c_float]
    return powf
