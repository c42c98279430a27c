"""Optimizers whose ``apply_gradients`` works in replica context (steps 2-4 of the seed).

In replica context ``apply_gradients`` does ``merge_call`` → ``batch_reduce_to(SUM)``
→ ``extended.update``, as Keras optimizers do under a ``tf.distribute`` strategy.
Gradients are summed across replicas: scale the loss by the global batch size.

Each optimizer's update is Keras 3's ``update_step``, operation for operation in the variable's
dtype (the same ``assign``/``assign_add``/``assign_sub`` of the same float32 values), so that its
results equal TF 2.21's eager ones.

Where the slots (momentum, Adam's moments, RMSprop's velocity, Adagrad's accumulators) live:

* on a Mirrored, MultiWorkerMirrored or OneDevice strategy, each replica keeps them next to its copy
  of the variable (``replica.store``), and they stay equal across replicas because every update is
  the same; on a CentralStorage strategy, only the replica holding the variable keeps them;
* on a ParameterServerStrategy, on the ps tasks, sharded as their variable: a scheduled step reads
  them with its variables and sends its slot updates with its variable updates (one message per ps
  task, applied once), so every worker's step updates the same slots, as TF's do. A slot is made on
  the ps by the first step that needs it; ``optimizer.build(var_list)`` in the notebook makes them
  before any step runs (do so when several workers start at once: two first steps both finding a
  slot missing would both make it, and the later one would reset the other's first update);
* outside any strategy, in the optimizer itself.

``interdist.Checkpoint(optimizer=opt, model=...)`` saves and restores them (with ``iterations``).

Examples
--------
>>> import interdist as idist, numpy as np
>>> with idist.MirroredStrategy(["CPU:0", "CPU:1"]) as s:
...     with s.scope():
...         w = idist.Variable(np.float32(1.0))
...         opt = idist.optimizers.SGD(learning_rate=0.1)
...     def step():
...         with idist.GradientTape() as tape:
...             loss = w * np.float32(idist.get_replica_context().replica_id_in_sync_group + 1)
...         opt.apply_gradients([(tape.gradient(loss, w), w)])  # gradients 1 and 2, summed: 3
...     _ = s.run(step)
...     w.numpy(), int(opt.iterations.numpy())
(array(0.7, dtype=float32), 1)
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import pickle
import uuid
from typing import Any

import cloudpickle
import numpy as np

from interdist import _context, _gpu
from interdist._convert import apply_op
from interdist.errors import TaskFrozenError, UnavailableError
from interdist.reduce_op import ReduceOp
from interdist.replica import ps_step
from interdist.values.ps_variable import PSVariable, ShardView
from interdist.values.variables import Variable, VariableAggregation

#: The slot shards of ParameterServerStrategy variables that this process knows exist on their ps
#: tasks, as (store, slot id): a step reads those without first asking whether they are there.
_KNOWN_PS_SLOTS: set[tuple[str, int]] = set()


def _shards_joined(pairs: list[tuple[Any, Any]]) -> list[tuple[Any, Any]]:
    """Gradients of a sharded variable's shards (TF's ``model.trainable_variables`` lists the shards) as one
    gradient of the variable: every update rule is element-wise, so updating the whole equals updating
    each shard."""
    if not any(isinstance(v, ShardView) for _, v in pairs):
        return pairs
    shards: dict[int, dict[int, Any]] = {}
    for g, v in pairs:
        if isinstance(v, ShardView):
            shards.setdefault(id(v._var), {})[v._index] = g
    out: list[tuple[Any, Any]] = []
    for g, v in pairs:
        if not isinstance(v, ShardView):
            out.append((g, v))
            continue
        got = shards.pop(id(v._var), None)
        if got is None:
            continue  # joined at its first shard
        n = len(v._var.variables)
        if sorted(got) != list(range(n)):
            raise NotImplementedError(
                f"apply_gradients to {len(got)} of the {n} shards of {v._var._name!r}: interdist applies a sharded "
                "variable's gradients all together; give every shard a gradient (zeros where it has none)"
            )
        out.append((np.concatenate([np.asarray(got[i]) for i in range(n)], axis=0), v._var))
    return out


class Optimizer:
    """Base class: subclasses implement ``_slot_specs()`` and ``_apply_dense(var, grad, slots, step)``.

    ``apply_gradients(grads_and_vars)`` applies one step; in replica context the gradients are summed
    across the replicas first. ``iterations`` counts the steps.

    Examples
    --------
    A sign-of-gradient optimizer, with no slots:

    >>> import interdist as idist, numpy as np
    >>> class SignSGD(idist.optimizers.Optimizer):
    ...     def _apply_dense(self, var, grad, slots, step):
    ...         return var.assign_sub(np.sign(grad) * grad.dtype.type(self.learning_rate))
    >>> w = idist.Variable(np.float32(1.0))
    >>> opt = SignSGD(learning_rate=0.25)
    >>> opt.apply_gradients([(np.float32(-3.0), w)])
    >>> float(w.numpy()), int(opt.iterations.numpy())
    (1.25, 1)
    """

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
        pairs = _shards_joined([(g, v) for g, v in grads_and_vars if g is not None])
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
        on_ps = [v for _, v in pairs if isinstance(v, PSVariable)] if self._slot_specs() else []
        ctx = _context.current_ps_step()
        if on_ps and ctx is not None and ctx.store == on_ps[0]._store:
            # Every slot the step needs read (or made) in one round trip per ps task.
            _ensure_ps_slots(ctx, [(h, init) for v in on_ps for h, init in self._ps_slots(v)])
        for (_, var), grad in zip(pairs, reduced, strict=True):  # one reduced value per pair
            strategy.extended.update(var, self._update_one, args=(grad, from_notebook), group=False)
        self.iterations.assign_add(np.int64(1))

    def _slots(self, var: Any) -> dict[str, Any]:
        strategy = _context.get_strategy()
        replica = getattr(strategy, "_replica", None)
        if replica is not None and not _context.is_default(strategy):
            store = replica.store.setdefault(_store_key(self._id), {})
            slots: dict[str, Any] = store.setdefault(var.var_id, {})
            return slots
        return self._local_slots.setdefault(id(var), {})

    _has_slots = False  # optimizers with per-variable state (momentum, moments)

    def _slot_specs(self) -> dict[str, float]:
        """The slots this optimizer keeps per variable (Keras' names), and their initial values."""
        return {}

    def _update_one(self, var: Any, grad: Any, from_notebook: bool = False) -> Any:
        if not getattr(var, "_applies_updates", True):
            return var  # central storage: only the replica holding the variable updates it (and keeps slots)
        dtype = getattr(var, "dtype", None)
        if isinstance(var, PSVariable):
            g = np.asarray(grad, dtype=np.dtype(dtype))
            # Keras' step: iterations + 1, iterations read on the ps with the step's other variables.
            step = int(np.asarray(self.iterations.read_value())) + 1
            return self._apply_dense(var, g, _PSSlots(self, var), step)
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
        g = _gpu.asarray(grad, dtype=np.dtype(dtype) if dtype is not None else np.asarray(var).dtype)
        return self._apply_dense(var, g, _LocalSlots(slots, self._slot_specs()), slots["iterations"])

    def _apply_dense(self, var: Any, grad: Any, slots: Any, step: int) -> Any:
        raise NotImplementedError  # pragma: no cover - abstract

    # -- slots on the parameter servers ------------------------------------------------------------
    def _ps_slots(self, var: PSVariable, strategy: Any = None) -> list[tuple[PSVariable, float]]:
        """Handles to ``var``'s slots on its ps tasks (bound to ``strategy`` in the notebook), with
        their initial values."""
        return [(_ps_slot_handle(var, self._id, name, strategy), init) for name, init in self._slot_specs().items()]

    # -- build and checkpoints ---------------------------------------------------------------------
    def build(self, var_list: Any) -> None:
        """Make the slots of ``var_list`` now, as Keras' ``optimizer.build`` (slots that exist are kept).

        Slots are otherwise made by the first ``apply_gradients`` of each variable. Under a
        ParameterServerStrategy, build before scheduling steps on several workers at once."""
        specs = self._slot_specs()
        if not specs:
            return
        step = int(np.asarray(self.iterations.read_value()))
        items = [
            (v, {n: np.full(tuple(v.shape), init, np.dtype(v.dtype)) for n, init in specs.items()}) for v in var_list
        ]
        self._write_slots(items, step, only_missing=True)

    def _checkpoint_read_slots(self, variables: list[Any]) -> list[dict[str, np.ndarray]]:
        """The slots of each of ``variables`` that exist (NumPy copies), for ``interdist.Checkpoint``."""
        out: list[dict[str, np.ndarray]] = [{} for _ in variables]
        if not self._slot_specs():
            return out
        for strategy, indices in _by_strategy(variables).items():
            vs = [variables[i] for i in indices]
            if strategy is None:
                found = [_host_slots(self._local_slots.get(id(v), {})) for v in vs]
            elif isinstance(vs[0], PSVariable):
                found = [_read_ps_slots(strategy, self._ps_slots(v, strategy)) for v in vs]
            else:
                ids = [v._var_id for v in vs]
                merged: dict[int, dict[str, np.ndarray]] = {}
                for blob in _system_values(strategy, _read_slots_program, _store_key(self._id), ids):
                    for var_id, slots in pickle.loads(blob).items():
                        merged.setdefault(var_id, slots)
                found = [merged.get(i, {}) for i in ids]
            for i, slots in zip(indices, found, strict=True):
                out[i] = slots
        return out

    def _checkpoint_write_slots(self, items: list[tuple[Any, dict[str, np.ndarray]]], step: int) -> None:
        """Set the slots of each variable to the given values (a restore: what was there is replaced);
        the update count of each variable is set to ``step`` (the restored ``iterations``)."""
        self._write_slots(items, step, only_missing=False)

    def _write_slots(self, items: list[tuple[Any, dict[str, np.ndarray]]], step: int, only_missing: bool) -> None:
        variables = [v for v, _ in items]
        for strategy, indices in _by_strategy(variables).items():
            part = [items[i] for i in indices]
            if strategy is None:
                for v, slots in part:
                    if only_missing and id(v) in self._local_slots:
                        continue
                    new: dict[str, Any] = {k: np.array(a, copy=True) for k, a in slots.items()}
                    new["iterations"] = step
                    self._local_slots[id(v)] = new
            elif isinstance(part[0][0], PSVariable):
                for v, slots in part:
                    handles = {h._name.rsplit("/", 1)[1]: h for h, _ in self._ps_slots(v, strategy)}
                    _write_ps_slots(strategy, [(handles[k], a) for k, a in slots.items() if k in handles], only_missing)
            else:
                payload = {v._var_id: {k: np.asarray(a) for k, a in slots.items()} for v, slots in part}
                _system_values(strategy, _write_slots_program, _store_key(self._id), payload, step, only_missing)

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


class _LocalSlots:
    """A variable's slots kept in a dict (a replica's store, or the optimizer's own)."""

    def __init__(self, slots: dict[str, Any], specs: dict[str, float]) -> None:
        self._slots, self._specs = slots, specs

    def read(self, name: str, like: Any) -> Any:
        """The slot's value (made from its initial value, shaped as ``like``, the first time)."""
        value = self._slots.get(name)
        if value is None:
            xp = _gpu.xp_of(like)
            value = self._slots[name] = xp.full(like.shape, self._specs[name], dtype=like.dtype)
        return value

    def _apply(self, name: str, op: str, value: Any) -> None:
        current = self.read(name, value)
        # In place when the slot is this optimizer's own array (a restored one is copied first).
        self._slots[name] = apply_op(op, current, _gpu.asarray(value, dtype=current.dtype), in_place=True)

    def assign(self, name: str, value: Any) -> None:
        current = self.read(name, value)
        self._slots[name] = _gpu.asarray(value, dtype=current.dtype)

    def assign_add(self, name: str, value: Any) -> None:
        self._apply(name, "assign_add", value)

    def assign_sub(self, name: str, value: Any) -> None:
        self._apply(name, "assign_sub", value)


class _PSSlots:
    """A ParameterServerStrategy variable's slots, read and updated through the running step."""

    def __init__(self, optimizer: Optimizer, var: PSVariable) -> None:
        self._optimizer, self._var = optimizer, var
        self._handles: dict[str, tuple[PSVariable, float]] | None = None

    def _handle(self, name: str) -> PSVariable:
        if self._handles is None:
            self._handles = {h._name.rsplit("/", 1)[1]: (h, i) for h, i in self._optimizer._ps_slots(self._var)}
        h, init = self._handles[name]
        _ensure_ps_slots(_step_of(self._var), [(h, init)])
        return h

    def read(self, name: str, like: Any) -> Any:
        h = self._handle(name)
        return _step_of(self._var).read(h)

    def assign(self, name: str, value: Any) -> None:
        self._handle(name).assign(value)

    def assign_add(self, name: str, value: Any) -> None:
        self._handle(name).assign_add(value)

    def assign_sub(self, name: str, value: Any) -> None:
        self._handle(name).assign_sub(value)


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

    def _apply_dense(self, var: Any, grad: Any, slots: Any, step: int) -> Any:
        t = grad.dtype.type
        lr = t(self.learning_rate)
        if self.momentum == 0:
            return var.assign_sub(grad * lr)
        momentum = t(self.momentum)
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
        beta_1_power = _power(t(self.beta_1), step)
        beta_2_power = _power(t(self.beta_2), step)
        alpha = t(self.learning_rate) * np.sqrt(t(1) - beta_2_power) / (t(1) - beta_1_power)
        m = slots.read("momentum", grad)
        slots.assign_add("momentum", (grad - m) * t(1 - self.beta_1))
        v = slots.read("velocity", grad)
        slots.assign_add("velocity", (grad * grad - v) * t(1 - self.beta_2))
        m, v = slots.read("momentum", grad), slots.read("velocity", grad)
        return var.assign_sub((m * alpha) / (xp.sqrt(v) + t(self.epsilon)))


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
        lr, rho, rest = t(self.learning_rate), t(self.rho), t(1 - self.rho)
        velocity = slots.read("velocity", grad)
        slots.assign("velocity", rho * velocity + rest * (grad * grad))
        velocity = slots.read("velocity", grad)
        if self.centered:
            average = slots.read("average_gradient", grad)
            slots.assign("average_gradient", rho * average + rest * grad)
            average = slots.read("average_gradient", grad)
            denominator = velocity - average * average + t(self.epsilon)
        else:
            denominator = velocity + t(self.epsilon)
        increment = (lr * grad) / xp.sqrt(denominator)
        if self.momentum > 0:
            m = slots.read("momentum", grad)
            slots.assign("momentum", t(self.momentum) * m + increment)
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
        return {"accumulator": self.initial_accumulator_value}

    def _apply_dense(self, var: Any, grad: Any, slots: Any, step: int) -> Any:
        t = grad.dtype.type
        xp = _gpu.xp_of(grad)
        slots.assign_add("accumulator", grad * grad)
        accumulator = slots.read("accumulator", grad)
        return var.assign_sub((t(self.learning_rate) * grad) / xp.sqrt(accumulator + t(self.epsilon)))


def _power(base: np.floating[Any], step: int) -> Any:
    """``base ** step`` in ``base``'s dtype, as TF's scalar ``pow`` on CPU computes it: for float32,
    the C library's ``powf`` (TF calls it; NumPy's float32 power differs from it by an ulp at times,
    e.g. 0.9**4), else the power in double precision rounded to the dtype."""
    t = type(base)
    if t is np.float32:
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


# -- helpers: where slots are kept ---------------------------------------------------------------------


def _store_key(optimizer_id: str) -> str:
    """The key of an optimizer's slots in a replica's store."""
    return f"optimizer:{optimizer_id}"


def _by_strategy(variables: list[Any]) -> dict[Any, list[int]]:
    """The indices of ``variables`` by the strategy holding them (None: kept in the notebook)."""
    out: dict[Any, list[int]] = {}
    for i, v in enumerate(variables):
        strategy = getattr(v, "_strategy", None)
        if strategy is not None and not isinstance(v, PSVariable) and not hasattr(strategy, "_system"):
            strategy = None
        out.setdefault(strategy, []).append(i)
    return out


def _system_values(strategy: Any, program: Any, *args: Any) -> list[Any]:
    """``program`` run on every replica of ``strategy``; each replica's (inline) result, released there."""
    metas = strategy._system(program, *args)
    release = strategy._group.finalizer()
    out = []
    for rank, meta in enumerate(metas):
        if meta is None:
            continue
        out.append(meta.value if meta.has_value else strategy._group.fetch(rank, meta.key))
        release(rank, meta.key)
    return out


def _host_slots(slots: dict[str, Any]) -> dict[str, np.ndarray]:
    """NumPy copies of a variable's slots (its update count left out)."""
    return {k: _gpu.host_copy(a) for k, a in slots.items() if k != "iterations"}


def _keeps_slots(replica: Any, var_id: int) -> bool:
    """Whether this replica answers for the slots of ``var_id``: the holder of a central variable,
    replica 0 for the others (their copies, and slots, are the same on every replica)."""
    rv = replica.variables.get(var_id)
    applies = getattr(rv, "_applies_updates", None) if rv is not None else None
    return bool(applies) if applies is not None else replica.rank == 0


def _read_slots_program(replica: Any, key: str, var_ids: list[int]) -> bytes:
    """(On each replica) the slots of ``var_ids`` this replica answers for, pickled."""
    store = replica.store.get(key, {})
    out = {
        var_id: _host_slots(store[var_id]) for var_id in var_ids if var_id in store and _keeps_slots(replica, var_id)
    }
    return pickle.dumps(out, protocol=5)


def _write_slots_program(
    replica: Any, key: str, items: dict[int, dict[str, np.ndarray]], step: int, only_missing: bool
) -> None:
    """(On each replica) set the slots of the variables this replica updates (a central variable's
    holder, every replica for the others)."""
    store = replica.store.setdefault(key, {})
    for var_id, slots in items.items():
        rv = replica.variables.get(var_id)
        if rv is None or getattr(rv, "_applies_updates", True) is False:
            continue
        if only_missing and var_id in store:
            continue
        new: dict[str, Any] = {k: _gpu.place(a, replica.device) for k, a in slots.items()}
        new["iterations"] = step
        store[var_id] = new


def _step_of(var: PSVariable) -> Any:
    ctx = _context.current_ps_step()
    if ctx is None or ctx.store != var._store:
        raise RuntimeError(
            f"apply_gradients on {var._name!r}, a variable of a ParameterServerStrategy, must run in a step: "
            "a function given to ClusterCoordinator.schedule (calling strategy.run), or strategy.run in the notebook"
        )
    return ctx


def _ps_slot_handle(var: PSVariable, optimizer_id: str, name: str, strategy: Any = None) -> PSVariable:
    """A handle to slot ``name`` of ``var``: sharded as ``var``, each shard on its shard's ps task.

    Its id is negative (variables' ids are positive) and the same in every process (a hash of the
    optimizer, the variable and the slot), so every worker finds the same slot."""
    digest = hashlib.blake2b(f"{optimizer_id}/{var._var_id}/{name}".encode(), digest_size=8).digest()
    slot_id = -(int.from_bytes(digest, "big") % (1 << 50) + 1)
    shards = [(slot_id * 1024 + k, s.address, s.device, s.start, s.stop) for k, s in enumerate(var._shards)]
    desc = {
        "store": var._store,
        "var_id": slot_id,
        "name": f"{var._name}/{name}",
        "shape": tuple(var.shape),
        "dtype": var.dtype.str,
        "trainable": False,
        "synchronization": "ON_WRITE",
        "aggregation": "NONE",
        "shards": shards,
    }
    return PSVariable(desc, strategy)


def _probe_ps_slots(conn: Any, store: str, handles: list[PSVariable]) -> dict[int, np.ndarray | None]:
    """Each slot's value on its ps tasks, or None where it was not made yet: which shards each ps task
    holds (one call per task; asking to read a missing shard would log an error there), then one read
    per task of those that exist."""
    tasks = {s.address: ps_step.ps_task(s.device) for h in handles for s in h._shards}
    addresses = list(tasks)
    stats = conn.call_many([(a, "interdist_ps_stats", {"store": store}) for a in addresses], tasks)
    held = {a: set(st.get("shards", ())) for a, st in zip(addresses, stats, strict=True)}
    there = [h for h in handles if all(s.shard_id in held[s.address] for s in h._shards)]
    values, _ = ps_step.read_shards(conn, store, there) if there else ({}, {})
    return {h._var_id: values.get(h._var_id) for h in handles}


def _create_ps_slots(
    conn: Any, store: str, items: list[tuple[PSVariable, np.ndarray]], if_absent: bool = False
) -> list[Any]:
    """Place each slot's value on its ps tasks (made, or replaced; with ``if_absent``, only where none is
    yet: two workers' first steps may both find a slot missing, and the second must not reset the
    first's update). The ps tasks' answers, "OK" or "EXISTS", one per shard."""
    calls = []
    for h, value in items:
        whole = len(h._shards) == 1
        for s in h._shards:
            part = value if whole else np.ascontiguousarray(value[s.start : s.stop])
            payload = {"store": store, "shard_id": s.shard_id, "value": cloudpickle.dumps(part), "if_absent": if_absent}
            calls.append((s.address, "interdist_ps_create", payload))
        _KNOWN_PS_SLOTS.add((store, h._var_id))
    tasks = {s.address: ps_step.ps_task(s.device) for h, _ in items for s in h._shards}
    return list(conn.call_many(calls, tasks))


def _ensure_ps_slots(ctx: Any, items: list[tuple[PSVariable, float]]) -> None:
    """Read the slots a step needs (with the step's context, as its variables), making on their ps
    tasks those that do not exist yet."""
    todo = [(h, init) for h, init in items if h._var_id not in ctx.values]
    if not todo:
        return
    known = [h for h, _ in todo if (ctx.store, h._var_id) in _KNOWN_PS_SLOTS]
    if known:
        try:
            values, _ = ps_step.read_shards(ctx.conn, ctx.store, known)
        except TaskFrozenError:
            raise
        except UnavailableError:  # its ps task was replaced (ParameterServerStrategy.recover): look again
            for h in known:
                _KNOWN_PS_SLOTS.discard((ctx.store, h._var_id))
        else:
            for h in known:
                ctx.register(h)
                ctx.values[h._var_id] = values[h._var_id]
    rest = [(h, init) for h, init in todo if h._var_id not in ctx.values]
    if not rest:
        return
    found = _probe_ps_slots(ctx.conn, ctx.store, [h for h, _ in rest])
    missing = []
    for h, init in rest:
        value = found[h._var_id]
        if value is None:
            value = np.full(h.shape, init, h.dtype)
            missing.append((h, value))
        else:
            _KNOWN_PS_SLOTS.add((ctx.store, h._var_id))
        ctx.register(h)
        ctx.values[h._var_id] = value
    if missing and "EXISTS" in _create_ps_slots(ctx.conn, ctx.store, missing, if_absent=True):
        # another worker's step made them first (and may have updated them since): read what is there
        values, _ = ps_step.read_shards(ctx.conn, ctx.store, [h for h, _ in missing])
        for h, _ in missing:
            ctx.values[h._var_id] = values[h._var_id]


def _read_ps_slots(strategy: Any, handles: list[tuple[PSVariable, float]]) -> dict[str, np.ndarray]:
    """(In the notebook) the slots of one variable that exist on the ps tasks, by name."""
    found = _probe_ps_slots(strategy._conn, strategy._store, [h for h, _ in handles])
    return {h._name.rsplit("/", 1)[1]: v for h, _ in handles if (v := found[h._var_id]) is not None}


def _write_ps_slots(strategy: Any, items: list[tuple[PSVariable, np.ndarray]], only_missing: bool) -> None:
    """(In the notebook) place slot values on the ps tasks; ``only_missing``: keep those that exist."""
    if only_missing and items:
        found = _probe_ps_slots(strategy._conn, strategy._store, [h for h, _ in items])
        for h, _ in items:
            if found[h._var_id] is not None:
                _KNOWN_PS_SLOTS.add((strategy._store, h._var_id))
        items = [(h, v) for h, v in items if found[h._var_id] is None]
    if items:
        _create_ps_slots(
            strategy._conn, strategy._store, [(h, np.asarray(v, dtype=h.dtype).reshape(h.shape)) for h, v in items]
        )
