"""``Checkpoint.restore``, all or nothing: read what a restore will replace, assign it (a strategy's
variables and slots in one program on its workers), and on any failure put back what was there.

The error keeps its class (``WorkerLostError`` stays one) and says "not applied", or, when putting
back could not complete either, which variables hold what (docs/reliability.md, "All or nothing").
Split from ``checkpoint.py``, which reads, checks and writes checkpoints; this module changes replicas, with the
programs in ``_programs.py``.
"""

from __future__ import annotations

import contextlib
import pickle
import re
from typing import Any

import numpy as np

from interdist.checkpoint_restore._programs import RESTORE_POINT as RESTORE_POINT  # (this module's API too)
from interdist.checkpoint_restore._programs import _put_back_program, _restore_program, _snapshot_program
from interdist.optimizers.slots import _store_key, _system_values
from interdist.strategy.variables import VariablesMixin
from interdist.values.variables import VariableAggregation, VariableSynchronization


class _SlotRef:
    """One optimizer slot of one variable (Adam's ``momentum`` of ``model/0``...), as the save and
    restore loops see a variable: it has the variable's shape and dtype, and is kept by the optimizer
    where the variable is (``interdist/optimizers/slots.py``)."""

    synchronization = VariableSynchronization.ON_WRITE
    aggregation = VariableAggregation.NONE

    def __init__(self, optimizer: Any, var: Any, slot: str, variable: str, prefix: str, value: Any = None) -> None:
        self.optimizer, self.var, self.slot = optimizer, var, slot
        self.variable, self.prefix = variable, prefix  # the names of the variable and the optimizer
        self.value = value
        self.step = 0  # the restored iterations of the optimizer (the slots' update count)
        self._strategy = getattr(var, "_strategy", None)

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.var.shape)

    @property
    def dtype(self) -> np.dtype[Any]:
        dtype: np.dtype[Any] = np.dtype(self.var.dtype)
        return dtype

    def read_value(self) -> Any:
        return self.value

    def assign(self, value: Any) -> None:
        self.optimizer._checkpoint_write_slots([(self.var, {self.slot: np.asarray(value)})], self.step)

    def describe(self) -> dict[str, str]:
        return {"variable": self.variable, "optimizer": self.prefix, "name": self.slot}


# -- restore: all or nothing ------------------------------------------------------------------------------
#: A fault armed with ``idist.debug.inject(strategy, replica, fault, at="checkpoint_restore")`` fires in the
#: next ``Checkpoint.restore``'s program on that replica (arm it right before the restore: a ``run`` in between
#: drops it, not reached), just before assignment number ``strategy._restore_fault_at`` (from 0, over the
#: strategy's variables then its slots; 1 unless set: after the first assignment, as ``checkpoint_save``).


def _replica_strategy(var: Any) -> Any:
    """The strategy whose replicas hold ``var`` and run programs (Mirrored, MultiWorker, OneDevice, central
    storage...), or None: a notebook variable, a parameter server's."""
    strategy = getattr(var, "_strategy", None)
    if strategy is None or getattr(var, "_var_id", None) is None or hasattr(strategy, "_ps_tasks"):
        return None
    return strategy if hasattr(strategy, "_system") and getattr(strategy, "_group", None) is not None else None


def _assigned_in_program(strategy: Any, var: Any) -> bool:
    """Whether a notebook ``var.assign`` of ``strategy`` is ``programs.assign_variable`` on every replica, so
    that the restore's one program may do it (central storage assigns its own way: one by one)."""
    return getattr(type(strategy), "_assign_variable", None) is VariablesMixin._assign_variable


class _Batch:
    """What a restore sets on the replicas of one strategy, in one program: its variables (those assigned
    the notebook's way, ``others``, one by one after it), then its optimizer slots; and what was there."""

    def __init__(self, strategy: Any) -> None:
        self.strategy = strategy
        self.assigns: list[tuple[Any, np.ndarray]] = []
        self.others: list[_Single] = []
        self.slots: list[tuple[Any, int, Any, dict[str, np.ndarray]]] = []  # (optimizer, step, variable, values)
        self.before: list[dict[str, Any]] = []  # by rank: {"copies": {var_id: array}, "slots": {key: {var_id: ..}}}
        self.state = "pending"  # "running" (failed in the middle), "applied"

    def names(self) -> list[str]:
        return (
            [v._name for v, _ in self.assigns]
            + [f"{v._name} ({'/'.join(sorted(values))} slots)" for _, _, v, values in self.slots]
            + [n for single in self.others for n in single.names()]
        )

    def take(self) -> None:
        var_ids = [v._var_id for v, _ in self.assigns]
        keys: dict[str, list[int]] = {}
        for opt, _, var, _ in self.slots:
            keys.setdefault(_store_key(opt._id), []).append(var._var_id)
        same = _assigned_in_program(self.strategy, None)  # mirrored slots: replica 0's are every replica's
        self.before = [pickle.loads(b) for b in _system_values(self.strategy, _snapshot_program, var_ids, keys, same)]
        for single in self.others:
            single.take()

    def commit(self) -> None:
        assigns = [(v._var_id, value) for v, value in self.assigns]
        slots = [(_store_key(opt._id), var._var_id, values, step) for opt, step, var, values in self.slots]
        fault_at = getattr(self.strategy, "_restore_fault_at", 1)
        self.state = "running"
        if assigns or slots:
            self.strategy._system(_restore_program, assigns, slots, fault_at)
        for single in self.others:
            single.commit()
        self.state = "applied"

    def put_back(self) -> list[str]:
        """Put back what was there (on every replica: a lost one has been restarted by then); what failed."""
        failures: list[str] = []
        if self.before and (self.assigns or self.slots):
            first = self.before[0]
            per_rank = []
            for snap in self.before:
                copies = {vid: snap["copies"].get(vid, first["copies"].get(vid)) for vid in first["copies"]}
                slots = {
                    key: {vid: snap["slots"].get(key, {}).get(vid, entry) for vid, entry in entries.items()}
                    for key, entries in first["slots"].items()
                }
                per_rank.append((copies, slots))
            try:
                _retrying(lambda: self.strategy._system(_put_back_program, per_rank=per_rank))
            except BaseException as e:  # noqa: BLE001 - reported, with what each variable holds
                failures.append(f"{', '.join(self.names())} could not be put back ({type(e).__name__}: {e})")
        for single in self.others:
            failures += single.put_back()
        return failures


class _Single:
    """One variable assigned as the notebook assigns it (``var.assign``); what it held before."""

    def __init__(self, var: Any, value: np.ndarray) -> None:
        self.var, self.value = var, value
        self.before: Any = None
        self.per_copy = False
        self.state = "pending"

    def names(self) -> list[str]:
        return [str(getattr(self.var, "_name", getattr(self.var, "name", "?")))]

    def take(self) -> None:
        var = self.var
        strategy = getattr(var, "_strategy", None)
        if (
            getattr(getattr(var, "synchronization", None), "name", "") == "ON_READ"
            and hasattr(var, "values")
            and hasattr(strategy, "_assign_copy")
        ):  # each replica's own copy, put back as it was
            self.per_copy = True
            self.before = [np.array(np.asarray(c), copy=True) for c in var.values]
        else:
            self.before = np.array(np.asarray(var.read_value()), copy=True)

    def commit(self) -> None:
        self.state = "running"
        self.var.assign(self.value)
        self.state = "applied"

    def put_back(self) -> list[str]:
        if self.state == "pending":
            return []
        try:
            if self.per_copy:
                for r, copy in enumerate(self.before):
                    _retrying(lambda r=r, copy=copy: self.var._strategy._assign_copy(self.var, r, "assign", copy))
            else:
                _retrying(lambda: self.var.assign(self.before))
        except BaseException as e:  # noqa: BLE001 - reported
            return [f"{self.names()[0]} could not be put back ({type(e).__name__}: {e})"]
        return []


class _SlotGroup:
    """Slots of variables not held by a replica strategy (the notebook's, a parameter server's), assigned
    through their optimizer; what they held before."""

    def __init__(self, optimizer: Any, step: int) -> None:
        self.optimizer, self.step = optimizer, step
        self.items: list[tuple[Any, dict[str, np.ndarray]]] = []
        self.before: list[dict[str, np.ndarray]] = []
        self.count = 0
        self.state = "pending"

    def names(self) -> list[str]:
        return [f"{getattr(v, '_name', getattr(v, 'name', '?'))} ({'/'.join(sorted(s))} slots)" for v, s in self.items]

    def take(self) -> None:
        self.before = self.optimizer._checkpoint_read_slots([v for v, _ in self.items])
        self.count = int(np.asarray(self.optimizer.iterations.read_value()))

    def commit(self) -> None:
        self.state = "running"
        self.optimizer._checkpoint_write_slots(self.items, self.step)
        self.state = "applied"

    def put_back(self) -> list[str]:
        if self.state == "pending":
            return []
        failures = []
        had = [(v, old) for (v, _), old in zip(self.items, self.before, strict=True) if old]
        try:
            if had:
                _retrying(lambda: self.optimizer._checkpoint_write_slots(had, self.count))
        except BaseException as e:  # noqa: BLE001 - reported
            failures.append(f"{', '.join(self.names())} could not be put back ({type(e).__name__}: {e})")
        for (v, _), old in zip(self.items, self.before, strict=True):
            if not old:
                if getattr(v, "_strategy", None) is None:
                    self.optimizer._local_slots.pop(id(v), None)
                else:
                    failures.append(
                        f"the slots of {getattr(v, '_name', '?')} did not exist before and were left as restored"
                    )
        return failures


class _RestorePlan:
    """A restore's assignments: each replica strategy's in one program (``_Batch``), then the rest one by
    one; what each replaces, read first (``take``), and put back if any assignment fails."""

    def __init__(self, values: dict[str, tuple[Any, np.ndarray]]) -> None:
        self.batches: dict[int, _Batch] = {}
        self.singles: list[_Single] = []
        self.slot_groups: dict[int, _SlotGroup] = {}
        self.cause: BaseException | None = None  # what made the commit fail

        def batch(strategy: Any) -> _Batch:
            return self.batches.setdefault(id(strategy), _Batch(strategy))

        for var, value in values.values():
            if isinstance(var, _SlotRef):  # slots: in their strategy's program, else one call per optimizer
                strategy = _replica_strategy(var.var)
                if strategy is not None:
                    found = [s for s in batch(strategy).slots if s[0] is var.optimizer and s[2] is var.var]
                    if found:
                        found[0][3][var.slot] = value
                    else:
                        batch(strategy).slots.append((var.optimizer, var.step, var.var, {var.slot: value}))
                    continue
                group = self.slot_groups.setdefault(id(var.optimizer), _SlotGroup(var.optimizer, var.step))
                mine = [s for v, s in group.items if v is var.var]
                if mine:
                    mine[0][var.slot] = value
                else:
                    group.items.append((var.var, {var.slot: value}))
                continue
            strategy = _replica_strategy(var)
            if strategy is None:
                self.singles.append(_Single(var, value))
            elif _assigned_in_program(strategy, var):
                batch(strategy).assigns.append((var, value))
            else:
                batch(strategy).others.append(_Single(var, value))

    def parts(self) -> list[Any]:
        return [*self.batches.values(), *self.singles, *self.slot_groups.values()]

    def take(self) -> None:
        for part in self.parts():
            part.take()

    def commit(self) -> None:
        for part in self.parts():
            part.commit()

    def put_back(self) -> list[str]:
        failures: list[str] = []
        for part in self.parts():
            if part.state != "pending":
                mine = part.put_back()
                if not mine:
                    part.state = "put back"
                failures += mine
        return failures

    def holdings(self) -> str:
        """After a failed put-back: which variables hold the checkpoint's values, which their own, which part."""
        said: dict[str, list[str]] = {"applied": [], "running": [], "pending": [], "put back": []}
        for part in self.parts():
            said[part.state] += part.names()
        out = []
        if said["applied"]:
            out.append(f"checkpoint values on every replica (not put back): {', '.join(said['applied'])}")
        for part in self.parts():
            if part.state == "running" and isinstance(part, _Batch):
                names = part.names()
                said_done = [n for n in _notes(self.cause) if "had assigned" in n]
                counts = [int(m.group(1)) for m in (re.search(r"had assigned (\d+) of", n) for n in said_done) if m]
                partial = (
                    f"; the replica that failed holds the checkpoint's values for the first {counts[0]} "
                    f"({', '.join(names[: counts[0]]) or 'none'}) and its previous values for the rest"
                    if counts
                    else "; the replica that failed holds part of them (a lost one gets a survivor's copy at the "
                    "next call; a frozen one assigns the rest when it resumes)"
                )
                out.append(
                    f"being assigned when it failed, not put back: {', '.join(names)} (the replicas that finished "
                    f"the restore's program hold the checkpoint's values{partial})"
                )
            elif part.state == "running":
                out.append(f"being assigned when it failed, not put back (either value): {', '.join(part.names())}")
        if said["pending"] or said["put back"]:
            out.append(f"previous values: {', '.join(said['put back'] + said['pending'])}")
        return "; ".join(out)


def _notes(exc: BaseException | None) -> list[str]:
    return [str(n) for n in getattr(exc, "__notes__", None) or ()]


def _retrying(call: Any) -> Any:
    """``call()``, once more if it fails (the first call after a lost replica restarts it and copies the
    survivors' values there; a DivergedCopiesError of that check is repaired by the call itself)."""
    try:
        return call()
    except Exception:  # noqa: BLE001 - tried again; the second failure is the one reported
        return call()


def _not_applied(exc: BaseException, path: str, plan: _RestorePlan, failures: list[str]) -> BaseException:
    """The error a failed restore raises: of ``exc``'s class, saying plainly what the variables hold."""
    why = f"{type(exc).__name__}: {exc}"
    if not failures:
        message = (
            f"Checkpoint.restore({path!r}) not applied: nothing of checkpoint {path} was restored; the variables "
            f"hold their previous values (on every replica: what the restore had assigned was put back). "
            f"It failed because {why}"
        )
    else:
        message = (
            f"Checkpoint.restore({path!r}) failed and its rollback could not complete: the variables hold a MIX "
            f"of checkpoint {path} and their previous values. {plan.holdings()}. Not put back: "
            f"{'; '.join(failures)}. Restore the checkpoint again once the strategy is usable (its first call "
            f"reports the mirrored variables whose copies differ; restoring again makes them one). It failed "
            f"because {why}"
        )
    return _same_class(exc, message)


def _same_class(exc: BaseException, message: str) -> BaseException:
    """A new exception of ``exc``'s class with ``message`` (its tags copied), so that the caller's ``except``
    clauses still catch it; ``exc`` itself, with ``message`` as a note, when its class cannot be made so."""
    try:
        new = type(exc)(message)
        for key, value in getattr(exc, "__dict__", {}).items():
            if key not in ("__notes__",):
                setattr(new, key, value)
    except Exception:  # noqa: BLE001 - a class with other required arguments: the original, with a note
        with contextlib.suppress(Exception):
            exc.add_note(message)
        return exc
    return new
