"""Where an optimizer's slots are kept, and the programs that read and write them there.

On a replica's store (``_store_key``) for Mirrored, MultiWorkerMirrored, OneDevice and CentralStorage
strategies (``_read_slots_program``, ``_write_slots_program``, run on every replica); on the ps tasks for a
ParameterServerStrategy, sharded as their variable (``_ps_slot_handle``; made by the first step that needs
them, ``_ensure_ps_slots``). Part of ``interdist.optimizers``, which re-exports its public names.
"""

from __future__ import annotations

import hashlib
import pickle
from typing import Any

import cloudpickle
import numpy as np

from interdist import _context, _gpu
from interdist.errors import TaskFrozenError, UnavailableError
from interdist.replica import ps_step
from interdist.values.ps_variable import PSVariable

#: The slot shards of ParameterServerStrategy variables that this process knows exist on their ps
#: tasks, as (store, slot id): a step reads those without first asking whether they are there.
_KNOWN_PS_SLOTS: set[tuple[str, int]] = set()


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
