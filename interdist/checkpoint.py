"""Checkpoints of a strategy's variables, in a portable directory format.

Layout of a checkpoint directory (documented in README.md)::

    ckpt-000001/
      index.json        {"format": "interdist-checkpoint/1", "variables": {name: {file, dtype, shape,
                         sha256, synchronization, aggregation}}, "num_replicas": n}
      v000000.npy ...   each variable's value as a cross-replica read gives it (sync-on-read
                        variables aggregated: SUM summed, MEAN averaged)

Files are numbered, and names live only in the index: two names that would make the same file
name (``x/y`` and ``x_y``) can never overwrite each other. Restore reads only plain file names
inside the checkpoint directory (never ``../elsewhere.npy``) and checks each array against the
index (its SHA-256, dtype and shape) before assigning anything.

The directory is written under a temporary name and renamed when complete, so a
checkpoint interrupted by a failure (a replica raising, a worker dying) is absent,
never half written. Restoring assigns each value in cross-replica context, so the
seed's rule applies: a SUM sync-on-read variable is divided by the number of
replicas of the strategy restored into (which may differ from the one saved from).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from interdist.values.variables import Variable

FORMAT = "interdist-checkpoint/1"


def _file_name(index: int) -> str:
    return f"v{index:06d}.npy"


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _entry_file(root: Path, name: str, entry: Any) -> Path:
    """The array file of index entry ``name``: a plain file name inside ``root``, nothing else."""
    fname = entry.get("file") if isinstance(entry, dict) else None
    if not isinstance(fname, str) or not fname or fname != Path(fname).name or fname in (".", "..") or "\\" in fname:
        raise ValueError(f"the checkpoint at {root} names file {fname!r} for {name!r}: not a file of the checkpoint")
    return root / fname


class Checkpoint:
    """Groups variables (and objects holding them) under names, like ``tf.train.Checkpoint``.

    >>> import interdist as idist, numpy as np, tempfile
    >>> v = idist.Variable(np.float32(2.0))
    >>> ck = idist.Checkpoint(v=v)
    >>> path = ck.save(tempfile.mkdtemp() + "/ckpt")
    >>> _ = v.assign(0.0); ck.restore(path); float(v)
    2.0
    """

    def __init__(self, **objects: Any) -> None:
        if not objects:
            raise ValueError("Checkpoint needs at least one named variable or object, e.g. Checkpoint(w=w)")
        self._objects = objects
        self._counter = 0

    def _variables(self) -> dict[str, Any]:

        out: dict[str, Any] = {}

        def visit(prefix: str, obj: Any) -> None:
            if isinstance(obj, Variable):
                out[prefix] = obj
            elif isinstance(obj, (list, tuple)):
                for i, o in enumerate(obj):
                    visit(f"{prefix}/{i}", o)
            elif isinstance(obj, dict):
                for k, o in obj.items():
                    visit(f"{prefix}/{k}", o)
            elif hasattr(obj, "variables"):
                for i, o in enumerate(obj.variables):
                    visit(f"{prefix}/{i}", o)
            else:
                raise TypeError(
                    f"Checkpoint cannot save {prefix!r} of type {type(obj).__name__}: "
                    "give variables, lists/dicts of them, or objects with a .variables list"
                )

        for name, obj in self._objects.items():
            visit(name, obj)
        return out

    def save(self, prefix: str | os.PathLike[str]) -> str:
        """Write ``{prefix}-{n}`` (a directory) atomically; return its path."""
        self._counter += 1
        target = Path(f"{os.fspath(prefix)}-{self._counter:06d}")
        return self.write(target)

    def write(self, path: str | os.PathLike[str]) -> str:
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-", dir=target.parent))
        try:
            index: dict[str, Any] = {"format": FORMAT, "variables": {}}
            for i, (name, var) in enumerate(self._variables().items()):
                value = _cross_replica_value(var)  # raises before anything is renamed into place
                fname = _file_name(i)
                np.save(tmp / fname, value, allow_pickle=False)
                index["variables"][name] = {
                    "file": fname,
                    "sha256": _sha256(tmp / fname),
                    "dtype": value.dtype.str,
                    "shape": list(value.shape),
                    "synchronization": var.synchronization.name,
                    "aggregation": var.aggregation.name,
                }
                strategy = getattr(var, "_strategy", None)
                index["num_replicas"] = getattr(strategy, "num_replicas_in_sync", 1)
            (tmp / "index.json").write_text(json.dumps(index, indent=1, sort_keys=True))
            if target.exists():
                shutil.rmtree(target)
            os.replace(tmp, target)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        return str(target)

    def restore(self, path: str | os.PathLike[str]) -> None:
        """Assign every saved value to the variable of the same name (all checked before any is assigned)."""
        root = Path(path)
        try:
            index = json.loads((root / "index.json").read_text())
        except (OSError, ValueError) as e:
            raise ValueError(f"{root} is not a readable interdist checkpoint: {type(e).__name__}: {e}") from None
        if not isinstance(index, dict) or index.get("format") != FORMAT:
            found = index.get("format") if isinstance(index, dict) else type(index).__name__
            raise ValueError(f"{root} is not an interdist checkpoint (format {found!r})")
        saved = index.get("variables")
        if not isinstance(saved, dict):
            raise ValueError(f"the checkpoint at {root} has no variables table in its index.json")
        variables = self._variables()
        missing = sorted(set(variables) - set(saved))
        if missing:
            raise ValueError(f"the checkpoint at {root} has no value for {missing}")
        values = {}
        for name, var in variables.items():
            entry = saved[name]
            file = _entry_file(root, name, entry)
            digest = entry.get("sha256")
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
            if value.shape != tuple(var.shape) or value.dtype != var.dtype:
                raise ValueError(
                    f"checkpoint value {name!r} has shape {value.shape} and dtype {value.dtype}, but "
                    f"the variable has shape {tuple(var.shape)} and dtype {var.dtype}"
                )
            values[name] = value
        for name, var in variables.items():
            var.assign(values[name])


def _cross_replica_value(var: Any) -> np.ndarray:
    if var.synchronization.name == "ON_READ" and var.aggregation.name == "NONE":
        return np.asarray(var.values[0]) if hasattr(var, "values") else np.asarray(var)
    return np.asarray(var.read_value())
