"""Reading a checkpoint: every saved value read and checked (index, checksums, shapes) before any is assigned.

Split from ``checkpoint.py``; ``Checkpoint.restore`` then assigns the values (``checkpoint_restore``).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from interdist.checkpoint_format import FORMAT, FORMAT_1, _check_index, _entry_file, _progress_bar, _sha256
from interdist.checkpoint_restore import _SlotRef


class _Deferred:
    """A saved weight of a model not built yet: read and checked now, assigned when the model is built."""

    def __init__(self, name: str) -> None:
        self.name = name


def load(
    checkpoint: Any,
    path: str | os.PathLike[str],
    progress: bool = False,
    allow_unverified: bool = False,
    deferred_out: list[tuple[Any, list[np.ndarray]]] | None = None,
) -> dict[str, tuple[Any, np.ndarray]]:
    """Each variable of ``checkpoint`` (a ``Checkpoint``) with its saved value, read and checked against the
    index and the variable (raises ``ValueError`` before anything is assigned). An unbuilt model's weights go
    to it for its build now, or, given ``deferred_out``, are appended there as (layer, weights) for the
    caller to hand on."""
    root = Path(path)
    try:
        index = json.loads((root / "index.json").read_text())
    except (OSError, ValueError) as e:
        raise ValueError(f"{root} is not a readable interdist checkpoint: {type(e).__name__}: {e}") from None
    if not isinstance(index, dict) or index.get("format") not in (FORMAT, FORMAT_1):
        found = index.get("format") if isinstance(index, dict) else type(index).__name__
        raise ValueError(f"{root} is not an interdist checkpoint (format {found!r})")
    saved = index.get("variables")
    if not isinstance(saved, dict):
        raise ValueError(f"the checkpoint at {root} has no variables table in its index.json")
    _check_index(root, index, saved, allow_unverified)
    checkpoint._loaded_counter = index.get("save_counter") if isinstance(index.get("save_counter"), int) else None
    variables, optimizers = checkpoint._collect()
    missing = sorted(set(variables) - set(saved))
    by_prefix = dict(optimizers)
    for name, entry in saved.items():  # the slots saved for this checkpoint's variables and optimizers
        meta = entry.get("slot") if isinstance(entry, dict) else None
        if not isinstance(meta, dict) or name in variables:
            continue
        of, by, slot = meta.get("variable"), meta.get("optimizer"), meta.get("name")
        if not (isinstance(of, str) and isinstance(by, str) and isinstance(slot, str)):
            continue
        var, opt = variables.get(of), by_prefix.get(by)
        if var is not None and opt is not None:
            variables[name] = _SlotRef(opt, var, slot, of, by)
    if missing:
        raise ValueError(f"the checkpoint at {root} has no value for {missing}")
    deferred = []
    for prefix, layer in checkpoint._unbuilt:  # an unbuilt model: its saved weights, in order, kept for its build
        numbered = sorted(
            (int(n[len(prefix) + 1 :]), n)
            for n in saved
            if n.startswith(prefix + "/") and n[len(prefix) + 1 :].isdigit()
        )
        deferred.append((layer, [n for _, n in numbered]))
        for _, n in numbered:
            variables[n] = _Deferred(n)
    values: dict[str, tuple[Any, np.ndarray]] = {}
    bar = _progress_bar(progress, len(variables), f"restore {root.name}")
    for name, var in variables.items():
        entry = saved[name]
        file = _entry_file(root, name, entry)
        digest = entry.get("sha256")  # None only in a format-1 checkpoint restored with allow_unverified
        try:
            if digest is not None and _sha256(file) != digest:
                raise ValueError("its bytes do not match the checksum in index.json (truncated or corrupted)")
            value = np.load(file, allow_pickle=False)
        except (OSError, ValueError, EOFError) as e:
            raise ValueError(f"checkpoint value {name!r} ({file.name}) cannot be restored: {e}") from None
        if "dtype" in entry and (value.dtype.str != entry["dtype"] or list(value.shape) != entry.get("shape")):
            raise ValueError(
                f"checkpoint value {name!r} ({file.name}) holds shape {value.shape} and dtype {value.dtype}, "
                f"but index.json says shape {tuple(entry.get('shape') or ())} and dtype {entry['dtype']}"
            )
        if not isinstance(var, _Deferred) and (value.shape != tuple(var.shape) or value.dtype != var.dtype):
            raise ValueError(
                f"checkpoint value {name!r} has shape {value.shape} and dtype {value.dtype}, but "
                f"the variable has shape {tuple(var.shape)} and dtype {var.dtype}"
            )
        values[name] = (var, value)
        bar.update(1)
    bar.close()
    for layer, names in deferred:
        weights = [values.pop(n)[1] for n in names]
        if deferred_out is not None:
            deferred_out.append((layer, weights))
        else:
            layer._restore_when_built(weights)
    for ref, _ in values.values():
        if isinstance(ref, _SlotRef):  # a slot's update count: its optimizer's restored iterations
            counter = values.get(f"{ref.prefix}/iterations")
            ref.step = int(counter[1]) if counter is not None else 0
    return values
