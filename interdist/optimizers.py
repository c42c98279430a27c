"""Optimizers whose ``apply_gradients`` works in replica context (steps 2-4 of the seed).

In replica context ``apply_gradients`` does ``merge_call`` → ``batch_reduce_to(SUM)``
→ ``extended.update``, as Keras optimizers do under a ``tf.distribute`` strategy.
Gradients are summed across replicas: scale the loss by the global batch size.
Slot state (momentum, Adam's moments) is kept by each replica next to its copy of
the variable, and stays equal across replicas because every update is the same.
"""

from __future__ import annotations

import uuid
from typing import Any

import numpy as np

from interdist import _context, _gpu
from interdist.reduce_op import ReduceOp
from interdist.values.variables import Variable, VariableAggregation


class Optimizer:
    """Base class: subclasses implement ``_apply_dense(var, grad, slots, step)``."""

    def __init__(self, learning_rate: float = 0.01, name: str | None = None) -> None:
        if not learning_rate >= 0:
            raise ValueError(f"learning_rate must be >= 0, but got {learning_rate!r}")
        self.learning_rate = float(learning_rate)
        self.name = name or type(self).__name__
        self._id = uuid.uuid4().hex
        self._local_slots: dict[Any, dict[str, Any]] = {}

        # How many times apply_gradients ran (once per call, not per replica), as Keras counts.
        self.iterations = Variable(
            np.int64(0), name="iteration", trainable=False, aggregation=VariableAggregation.ONLY_FIRST_REPLICA
        )

    def apply_gradients(self, grads_and_vars: Any) -> None:
        """Apply gradients: in replica context they are summed across replicas first."""
        pairs = [(g, v) for g, v in grads_and_vars if g is not None]
        if not pairs:
            raise ValueError("No gradients provided for any variable.")
        ctx = _context.get_replica_context()
        strategy = _context.get_strategy()
        if ctx is not None and not _context.is_default(strategy):
            central = getattr(strategy.extended, "_apply_gradients_in_replica_context", None)
            if central is not None and central(self, pairs):
                return  # central storage: gradients summed onto the variables' holder (replica/view.py)
            ctx.merge_call(self._distributed_apply, args=(pairs,))
            return
        if ctx is None:
            # Keras calls get_replica_context().merge_call(...): inside a strategy's scope, in
            # cross-replica context, the replica context is None (checked with TF 2.21).
            raise AttributeError(
                "'NoneType' object has no attribute 'merge_call' (apply_gradients was called in "
                "cross-replica context inside strategy.scope(); call it inside strategy.run)"
            )
        # In the notebook: the strategy the variables belong to, scope entered or not.
        owner = getattr(pairs[0][1], "_strategy", None)
        if owner is not None and _context.is_default(strategy):
            with owner.scope():
                self._distributed_apply(owner, pairs, from_notebook=True)
        else:
            self._distributed_apply(strategy, pairs, from_notebook=True)

    def _distributed_apply(self, strategy: Any, pairs: list[tuple[Any, Any]], from_notebook: bool = False) -> None:
        reduced = strategy.extended.batch_reduce_to(ReduceOp.SUM, [(g, v) for g, v in pairs])
        for (_, var), grad in zip(pairs, reduced, strict=True):  # one reduced value per pair
            strategy.extended.update(var, self._update_one, args=(grad, from_notebook), group=False)
        self.iterations.assign_add(np.int64(1))

    def _slots(self, var: Any) -> dict[str, Any]:
        strategy = _context.get_strategy()
        replica = getattr(strategy, "_replica", None)
        if replica is not None and not _context.is_default(strategy):
            store = replica.store.setdefault(f"optimizer:{self._id}", {})
            slots: dict[str, Any] = store.setdefault(var.var_id, {})
            return slots
        return self._local_slots.setdefault(id(var), {})

    _has_slots = False  # optimizers with per-variable state (momentum, moments)

    def _update_one(self, var: Any, grad: Any, from_notebook: bool = False) -> Any:
        if not getattr(var, "_applies_updates", True):
            return var  # central storage: only the replica holding the variable updates it (and keeps slots)
        slots = self._slots(var)
        replicas = getattr(_context.get_strategy(), "num_replicas_in_sync", 1)
        if from_notebook and self._has_slots and "iterations" not in slots and replicas > 1:
            # As Keras under a multi-replica strategy: slot variables are made on the first apply,
            # which must happen in replica context (inside strategy.run), not in the notebook.
            raise RuntimeError(
                f"{type(self).__name__} must create its slot variables for {var.meta['name']!r} "
                "in replica context: call apply_gradients inside strategy.run first"
            )
        slots["iterations"] = slots.get("iterations", 0) + 1
        dtype = getattr(var, "dtype", None)
        g = _gpu.asarray(grad, dtype=np.dtype(dtype) if dtype is not None else np.asarray(var).dtype)
        return self._apply_dense(var, g, slots, slots["iterations"])

    def _apply_dense(self, var: Any, grad: np.ndarray, slots: dict[str, Any], step: int) -> Any:
        raise NotImplementedError  # pragma: no cover - abstract

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_local_slots"] = {}  # notebook-side slots never travel to replicas
        return state

    def __interdist_fingerprint__(self) -> Any:
        """What this optimizer pickles to (``fn_pickle``'s cache of replica functions): its settings by value
        and its variables by reference. None when it holds anything else (a schedule, an array): a step
        naming it is then pickled at every call, as any step capturing something mutable."""
        parts: list[Any] = []
        for key, value in sorted(self.__getstate__().items()):
            if key == "_local_slots":
                continue  # never pickled with contents
            if value is None or type(value) in (bool, int, float, str):
                parts.append((key, type(value).__name__, value))
                continue
            stable = getattr(type(value), "__interdist_fingerprint__", None)
            found = stable(value) if stable is not None else None
            if found is None:
                return None
            parts.append((key, found))
        return ("optimizer", type(self).__module__, type(self).__qualname__, tuple(parts))


class SGD(Optimizer):
    """Gradient descent with optional momentum (Keras' rule: ``m = momentum*m - lr*g; v += m``)."""

    def __init__(
        self, learning_rate: float = 0.01, momentum: float = 0.0, nesterov: bool = False, name: str | None = None
    ) -> None:
        super().__init__(learning_rate, name)
        if not 0 <= momentum <= 1:
            raise ValueError(f"`momentum` must be between [0, 1], but got {momentum!r}")
        self.momentum = float(momentum)
        self.nesterov = nesterov
        self._has_slots = self.momentum != 0

    def _apply_dense(self, var: Any, grad: np.ndarray, slots: dict[str, Any], step: int) -> Any:
        xp = _gpu.xp_of(grad)  # NumPy, or CuPy for a GPU replica's gradients
        lr = xp.asarray(self.learning_rate, dtype=grad.dtype)
        if self.momentum == 0:
            return var.assign_sub(lr * grad)
        m = slots.get("momentum")
        if m is None:
            m = xp.zeros_like(grad)
        elif xp is np and not (type(m) is np.ndarray and m.base is None and m.flags.writeable):
            m = xp.array(m, dtype=grad.dtype)  # a restored slot: this optimizer's own copy from now on
        # In place, with the bits of Keras' m = momentum * m - lr * g (the same float32 operations).
        m *= m.dtype.type(self.momentum)
        m -= lr * grad
        slots["momentum"] = m
        if self.nesterov:
            return var.assign_add(xp.asarray(self.momentum * m - lr * grad, dtype=grad.dtype))
        return var.assign_add(m)


class Adam(Optimizer):
    """Adam (Kingma & Ba), Keras' formulation with bias-corrected learning rate."""

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

    def _apply_dense(self, var: Any, grad: np.ndarray, slots: dict[str, Any], step: int) -> Any:
        dt = grad.dtype
        xp = _gpu.xp_of(grad)
        m = slots.get("m", xp.zeros_like(grad))
        v = slots.get("v", xp.zeros_like(grad))
        m = xp.asarray(m + (grad - m) * (1 - self.beta_1), dtype=dt)
        v = xp.asarray(v + (grad * grad - v) * (1 - self.beta_2), dtype=dt)
        slots["m"], slots["v"] = m, v
        lr = self.learning_rate * np.sqrt(1 - self.beta_2**step) / (1 - self.beta_1**step)
        return var.assign_sub(xp.asarray(lr * m / (xp.sqrt(v) + self.epsilon), dtype=dt))
