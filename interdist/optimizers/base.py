"""``Optimizer``: the machinery every optimizer shares, from ``apply_gradients`` to its slots and checkpoints.

In replica context ``apply_gradients`` does ``merge_call`` → ``batch_reduce_to(SUM)`` → ``extended.update``
(of mirrored variables and NumPy gradients: the same all-reduce and updates without the merge_call's
exchange, ``ReplicaExtendedView._apply_mirrored_in_replica_context``); each variable's update is the
subclass's ``_apply_dense(var, grad, slots, step)``, its slots read and written through ``_LocalSlots``
(a dict: a replica's store, or the optimizer's own) or ``_PSSlots`` (on the ps tasks, through the running
step). Where the slots are kept: ``slots``. Part of ``interdist.optimizers``, which re-exports its public
names.
"""

from __future__ import annotations

import pickle
import uuid
from collections.abc import Callable
from typing import Any

import numpy as np

from interdist import _context, _gpu
from interdist._convert import apply_op
from interdist.optimizers.slots import (
    _by_strategy,
    _ensure_ps_slots,
    _host_slots,
    _ps_slot_handle,
    _read_ps_slots,
    _read_slots_program,
    _step_of,
    _store_key,
    _system_values,
    _write_ps_slots,
    _write_slots_program,
)
from interdist.reduce_op import ReduceOp
from interdist.values.ps_variable import PSVariable, ShardView
from interdist.values.variables import Variable, VariableAggregation


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
                return  # central storage: gradients summed onto the variables' holder (replica/extended_view.py)
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

    def _merges_plainly(self) -> bool:
        """Whether ``apply_gradients``' merge is ``Optimizer``'s own (no subclass overrides ``_distributed_apply``):
        then inside ``run`` the extended view may do it without a ``merge_call`` (replica/extended_view.py)."""
        return type(self)._distributed_apply is Optimizer._distributed_apply

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

    def _update_from_parts(self, var: Any, parts: list[Any]) -> bool:
        """``_update_one(var, parts[0] + parts[1] + ...)`` (every replica's gradient, in rank order) without the
        sum ever made whole, where the subclass can (``_apply_parts``); False: nothing was done."""
        return self._update_fused(var, parts, "_apply_parts")

    def _update_from_chunks(self, var: Any, pieces: list[Any]) -> bool:
        """``_update_one(var, <the sum>)`` where the sum comes as consecutive 1-D ``pieces`` of the flat array
        (the owners' chunks of a split reduce-broadcast, read where they lie), where the subclass can
        (``_apply_chunks``); False: nothing was done."""
        return self._update_fused(var, pieces, "_apply_chunks")

    def _update_fused(self, var: Any, arrays: list[Any], hook: str) -> bool:
        """The update of ``var`` by the subclass's ``hook`` (``_apply_parts``, ``_apply_chunks``) from ``arrays``,
        its slots' step counted where it did it; False: nothing was done (no such hook, or it declined)."""
        if getattr(type(self), hook) is getattr(Optimizer, hook):
            return False  # no fused kernel: _update_one does it all (slots looked up once)
        if not getattr(var, "_applies_updates", True) or isinstance(var, PSVariable):
            return False
        slots = self._slots(var)
        step = slots.get("iterations", 0) + 1
        if not getattr(self, hook)(var, arrays, _LocalSlots(slots, self._slot_specs()), step):
            return False
        slots["iterations"] = step
        return True

    def _apply_chunks(self, var: Any, pieces: list[Any], slots: Any, step: int) -> bool:
        """``_apply_dense`` of the sum given as consecutive flat ``pieces``, in place, or False (nothing done):
        then the sum is made whole and ``_apply_dense`` runs. Optimizers with a fused kernel override this."""
        return False

    def _ring_update(self, var: Any, grad: Any) -> Any | None:
        """``_update_one(var, <the sum of every replica's grad>)`` as a two replicas' ring all-reduce can make it,
        the update written as the sum comes into a new copy swapped in once the batch went through
        (``ring.RingUpdate``), where the subclass can (``_ring_target``); None: the sum is made and
        ``_update_one`` runs."""
        if type(self)._ring_target is Optimizer._ring_target:
            return None
        if not getattr(var, "_applies_updates", True) or isinstance(var, PSVariable):
            return None
        slots = self._slots(var)
        step = slots.get("iterations", 0) + 1

        def done() -> None:
            slots["iterations"] = step

        return self._ring_target(var, grad, done)

    def _ring_target(self, var: Any, grad: Any, done: Callable[[], None]) -> Any | None:
        """``_ring_update``'s ``RingUpdate`` of ``var`` for a summed ``grad``'s ``_apply_dense``, ``done()`` to be
        called by its commit; None where the subclass has none (the default)."""
        return None

    def _apply_parts(self, var: Any, parts: list[Any], slots: Any, step: int) -> bool:
        """``_apply_dense`` of the sum of ``parts``, fused with the sum, or False (nothing done): then the
        sum is made and ``_apply_dense`` runs. Optimizers with a fused kernel override this."""
        return False

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
