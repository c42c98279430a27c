"""What a restore runs on each replica: read what it will replace (``_snapshot_program``), assign everything
in one program (``_restore_program``), and, when it failed, put back what was there (``_put_back_program``).

Split from ``checkpoint_restore/__init__.py``, which plans the restore in the notebook and sends these.
"""

from __future__ import annotations

import contextlib
import pickle
from typing import Any

import numpy as np

from interdist import _context, _gpu
from interdist.optimizers.slots import _write_slots_program
from interdist.replica import faults

RESTORE_POINT = "checkpoint_restore"


def _host(a: Any) -> Any:
    return _gpu.host_copy(a) if hasattr(a, "shape") and hasattr(a, "dtype") else a


def _snapshot_program(replica: Any, var_ids: list[int], slot_keys: dict[str, list[int]], same: bool) -> bytes:
    """(On each replica) what a restore replaces, pickled: each variable's copy and the raw slots of each
    optimizer for ``slot_keys`` (their update count with them; None where there were none). Where the copies
    are equal on every replica (``same``: mirrored, never updated alone), only replica 0 sends them."""
    everything = replica.rank == 0 or not same
    copies = {}
    for var_id in var_ids:
        rv = replica.variables.get(var_id)
        if rv is not None and (everything or getattr(rv, "_sync_on_read", False) or var_id in replica.diverged):
            copies[var_id] = _host(rv.raw)
    slots: dict[str, dict[int, Any]] = {}
    for key, ids in slot_keys.items():
        store = replica.store.get(key, {})
        mine = slots[key] = {}
        for var_id in ids:
            if everything or var_id in replica.diverged:
                entry = store.get(var_id)
                mine[var_id] = None if entry is None else {k: _host(a) for k, a in entry.items()}
    return pickle.dumps({"copies": copies, "slots": slots}, protocol=5)


def _restore_program(
    replica: Any,
    assigns: list[tuple[int, np.ndarray]],
    slots: list[tuple[str, int, dict[str, np.ndarray], int]],
    fault_at: int,
) -> None:
    """(On each replica) the restore's assignments, all in this one program: each variable as a cross-replica
    assign from the notebook is (``programs.assign_variable``), then the optimizers' slots."""

    done = 0
    try:
        with _context.enter(replica.view, None):
            for var_id, value in assigns:
                if done == fault_at and replica.injected is not None:
                    faults.fire_point(replica, RESTORE_POINT)
                replica.variables[var_id]._update("assign", value)
                done += 1
        for key, var_id, values, step in slots:
            if done == fault_at and replica.injected is not None:
                faults.fire_point(replica, RESTORE_POINT)
            _write_slots_program(replica, key, {var_id: values}, step, False)
            done += 1
    except BaseException as e:
        # what this replica holds now, for the notebook's message if putting back fails too
        with contextlib.suppress(Exception):
            e.add_note(f"replica {replica.rank} had assigned {done} of the restore's {len(assigns) + len(slots)}")
        raise


def _put_back_program(replica: Any, copies: dict[int, Any], slots: dict[str, dict[int, dict[str, Any] | None]]) -> None:
    """(On each replica) a failed restore's rollback: each copy and each slot entry as it was before."""

    for var_id, value in copies.items():
        rv = replica.variables.get(var_id)
        if rv is not None and value is not None:
            rv._local("assign", value)
    for key, entries in slots.items():
        store = replica.store.setdefault(key, {})
        for var_id, entry in entries.items():
            if entry is None:
                store.pop(var_id, None)  # made by the restore: gone again
            else:
                store[var_id] = {
                    k: _gpu.place(a, replica.device) if isinstance(a, np.ndarray) else a for k, a in entry.items()
                }
