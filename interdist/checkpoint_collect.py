"""What a checkpoint saves of the objects given to it: their variables, and their optimizers' slots.

A ``Checkpoint``'s objects are variables, nests of them, objects with a ``variables`` list (layers,
models), objects whose attributes hold variables, and optimizers (their ``iterations`` and their slots for
the checkpoint's variables). Split from ``checkpoint.py``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from interdist.checkpoint_restore import _SlotRef
from interdist.values.variables import Variable


def collect(objects: dict[str, Any], unbuilt: list[tuple[str, Any]]) -> tuple[dict[str, Any], list[tuple[str, Any]]]:
    """The variables of a checkpoint's ``objects`` by name, and the optimizers (with their names), whose slots
    are saved too; each model not built yet is appended to ``unbuilt`` with its name."""
    out: dict[str, Any] = {}
    optimizers: list[tuple[str, Any]] = []
    inside: set[int] = set()  # the objects being visited (a layer that refers back to its model)

    def visit(prefix: str, obj: Any, lenient: bool = False) -> None:
        if isinstance(obj, Variable):
            if prefix in out:
                raise ValueError(
                    f"two variables of this Checkpoint would both be saved as {prefix!r} "
                    "(a name with '/' and a nested object spell the same path): rename one"
                )
            out[prefix] = obj
        elif _is_optimizer(obj):
            if all(o is not obj for _, o in optimizers):
                optimizers.append((prefix, obj))
                visit(f"{prefix}/iterations", obj.iterations)
        elif isinstance(obj, (list, tuple)):
            for i, o in enumerate(obj):
                visit(f"{prefix}/{i}", o, lenient)
        elif isinstance(obj, dict):
            for k, o in obj.items():
                visit(f"{prefix}/{k}", o, lenient)
        elif id(obj) in inside:
            return
        elif getattr(obj, "built", True) is False and hasattr(obj, "_restore_when_built"):
            unbuilt.append((prefix, obj))  # TF defers its restore until it makes its variables
        elif hasattr(obj, "variables") or hasattr(obj, "trainable_variables"):
            inside.add(id(obj))
            listed = obj.variables if hasattr(obj, "variables") else obj.trainable_variables
            for i, o in enumerate(listed):
                visit(f"{prefix}/{i}", o)
            inside.discard(id(obj))
        elif _holds_variables(obj, set()):
            inside.add(id(obj))  # an object whose attributes are variables (or hold them)
            for attr, o in _public_attributes(obj):
                if _holds_variables(o, set()):
                    visit(f"{prefix}/{attr}", o, lenient=True)
            inside.discard(id(obj))
        elif not lenient:
            raise TypeError(
                f"Checkpoint cannot save {prefix!r} of type {type(obj).__name__}: give variables, "
                "lists/dicts of them, optimizers, or objects with a .variables list (or Variable attributes)"
            )

    for name, obj in objects.items():
        visit(name, obj)
    return out, optimizers


def saved_entries(variables: dict[str, Any], optimizers: list[tuple[str, Any]]) -> dict[str, Any]:
    """What ``Checkpoint.write`` saves of ``collect``'s variables and optimizers: the variables, and the slots
    of each optimizer for each of them (named ``{variable}/.OPTIMIZER_SLOT/{optimizer}/{slot}``, as TF names
    them)."""
    entries = dict(variables)
    counters = {id(opt.iterations) for _, opt in optimizers}
    targets: dict[int, tuple[str, Any]] = {}
    for name, var in variables.items():
        if id(var) not in counters:
            targets.setdefault(id(var), (name, var))
    for prefix, opt in optimizers:
        found = opt._checkpoint_read_slots([var for _, var in targets.values()])
        for (vname, var), slots in zip(targets.values(), found, strict=True):
            for slot, value in sorted(slots.items()):
                name = _slot_entry(vname, prefix, slot)
                if name in entries:
                    raise ValueError(f"two values of this Checkpoint would both be saved as {name!r}: rename one")
                entries[name] = _SlotRef(opt, var, slot, vname, prefix, np.asarray(value))
    return entries


def _is_optimizer(obj: Any) -> bool:
    """An ``interdist.optimizers`` optimizer (or anything keeping slots the same way)."""
    return hasattr(obj, "_checkpoint_read_slots") and isinstance(getattr(obj, "iterations", None), Variable)


def _public_attributes(obj: Any) -> list[tuple[str, Any]]:
    try:
        attributes = vars(obj)
    except TypeError:
        return []
    return [(k, v) for k, v in attributes.items() if isinstance(k, str) and not k.startswith("_")]


def _holds_variables(obj: Any, seen: set[int], depth: int = 0) -> bool:
    """Whether ``obj`` is, lists or (through its public attributes) holds a variable or an optimizer."""
    if isinstance(obj, Variable) or _is_optimizer(obj):
        return True
    if depth > 8 or id(obj) in seen or isinstance(obj, (str, bytes, int, float, complex, np.ndarray, np.generic)):
        return False
    seen.add(id(obj))
    if isinstance(obj, (list, tuple)):
        return any(_holds_variables(o, seen, depth + 1) for o in obj)
    if isinstance(obj, dict):
        return any(_holds_variables(o, seen, depth + 1) for o in obj.values())
    if hasattr(obj, "variables") or hasattr(obj, "trainable_variables"):
        return True
    return any(_holds_variables(o, seen, depth + 1) for _, o in _public_attributes(obj))


def _slot_entry(variable: str, optimizer: str, slot: str) -> str:
    return f"{variable}/.OPTIMIZER_SLOT/{optimizer}/{slot}"


def _fire_injected_faults(variables: Any) -> None:
    """``idist.debug.inject(..., at="checkpoint_save")``: the armed fault fires now, in the middle of a
    save (one attribute read per strategy when nothing is armed)."""
    seen: set[int] = set()
    for var in variables:
        strategy = getattr(var, "_strategy", None)
        if strategy is None or id(strategy) in seen:
            continue
        seen.add(id(strategy))
        hook = getattr(strategy, "_checkpoint_fault", None)
        if hook is not None:
            strategy._checkpoint_fault = None  # once
            hook()


def _cross_replica_value(var: Any) -> np.ndarray:
    if var.synchronization.name == "ON_READ" and var.aggregation.name == "NONE":
        return np.asarray(var.values[0]) if hasattr(var, "values") else np.asarray(var)
    return np.asarray(var.read_value())
