"""Checkpoints of a strategy's variables, in a portable directory format.

Layout of a checkpoint directory (documented in README.md)::

    ckpt-000001/
      index.json        {"format": "interdist-checkpoint/1", "variables": {name: {file, dtype, shape,
                         synchronization, aggregation}}, "num_replicas": n}
      <name>.npy        the variable's value as a cross-replica read gives it (sync-on-read
                        variables aggregated: SUM summed, MEAN averaged)

The directory is written under a temporary name and renamed when complete, so a
checkpoint interrupted by a failure (a replica raising, a worker dying) is absent,
never half written. Restoring assigns each value in cross-replica context, so the
seed's rule applies: a SUM sync-on-read variable is divided by the number of
replicas of the strategy restored into (which may differ from the one saved from).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from interdist.values.variables import Variable

FORMAT = "interdist-checkpoint/1"


def _file_name(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name) + ".npy"


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
            for name, var in self._variables().items():
                value = _cross_replica_value(var)  # raises before anything is renamed into place
                fname = _file_name(name)
                np.save(tmp / fname, value, allow_pickle=False)
                index["variables"][name] = {
                    "file": fname,
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
        index = json.loads((root / "index.json").read_text())
        if index.get("format") != FORMAT:
            raise ValueError(f"{root} is not an interdist checkpoint (format {index.get('format')!r})")
        variables = self._variables()
        missing = sorted(set(variables) - set(index["variables"]))
        if missing:
            raise ValueError(f"the checkpoint at {root} has no value for {missing}")
        values = {}
        for name, var in variables.items():
            entry = index["variables"][name]
            value = np.load(root / entry["file"], allow_pickle=False)
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
