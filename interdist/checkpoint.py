"""Checkpoints of a strategy's variables, in a portable directory format.

The format (a checkpoint directory's layout, documented in README.md, and its integrity checks):
``checkpoint_format``. What a checkpoint saves of its objects: ``checkpoint_collect``; how it is read and
checked: ``checkpoint_read``; how a restore changes the replicas: ``checkpoint_restore``; a directory's
list of checkpoints and its lock: ``checkpoint_state``.

Checkpoints are named as TF names them: ``Checkpoint.save(prefix)`` writes ``{prefix}-1``,
``{prefix}-2``... (directories an older version named ``{prefix}-000001`` are read as well).
An optimizer given to a ``Checkpoint`` is saved with its ``iterations`` and, for each variable of the
checkpoint it keeps slots for, each slot (Adam's ``momentum`` and ``velocity``...) as an entry
``{variable}/.OPTIMIZER_SLOT/{optimizer}/{slot}`` (its index entry says whose slot it is), so that a
restored optimizer goes on exactly as the saved one would have.

The directory is written under a temporary name and renamed when complete, so a
checkpoint interrupted by a failure (a replica raising, a worker dying) is absent,
never half written. The temporary name carries the writer's pid and host
(``.ckpt-3.tmp-<pid>-<host>-<random>``): the next save into that directory, or a
``CheckpointManager`` opening it, removes those left by a process that is gone (a
notebook killed mid-save), and any left for over ``STALE_AFTER`` seconds.

Restoring assigns each value in cross-replica context, so the seed's rule applies:
a SUM sync-on-read variable is divided by the number of replicas of the strategy
restored into (which may differ from the one saved from).

Two writers (processes, or managers of one process) may share a ``CheckpointManager`` directory: each
save holds an exclusive ``fcntl.flock`` on the directory itself while it numbers, writes, lists and
deletes, so no two take one number and the list never names a deleted checkpoint. (Where a directory
cannot be locked, e.g. some NFS mounts, a ``.checkpoint.lock`` file in it is locked instead.)
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from interdist.checkpoint_collect import _cross_replica_value, _fire_injected_faults, collect, saved_entries
from interdist.checkpoint_format import FORMAT as FORMAT
from interdist.checkpoint_format import FORMAT_1 as FORMAT_1
from interdist.checkpoint_format import STALE_AFTER as STALE_AFTER
from interdist.checkpoint_format import (
    _disk_error,
    _entry_digest,
    _file_name,
    _index_digest,
    _progress_bar,
    _sha256,
    _temporary_prefix,
    remove_stale_temporaries,
)
from interdist.checkpoint_format import _host_tag as _host_tag
from interdist.checkpoint_read import load
from interdist.checkpoint_restore import _not_applied, _RestorePlan, _SlotRef
from interdist.checkpoint_state import LOCK_FILE as LOCK_FILE
from interdist.checkpoint_state import STATE_FILE as STATE_FILE
from interdist.checkpoint_state import (
    STATE_FORMAT,
    _locked,
    _number,
    _read_state,
    _record_latest,
    _write_state_file,
)
from interdist.checkpoint_state import latest_checkpoint as latest_checkpoint


class Checkpoint:
    """Groups variables (and objects holding them) under names, like ``tf.train.Checkpoint``.

    Each object may be a variable, a list/tuple/dict of them (nested), an object with a ``variables``
    (or ``trainable_variables``) list such as a layer or a model, an object whose attributes are
    variables (or hold them), or an optimizer: its ``iterations`` and its slots for this checkpoint's
    variables are saved, so that training resumed from a checkpoint goes on exactly as it would have.

    >>> import interdist as idist, numpy as np, tempfile
    >>> v = idist.Variable(np.float32(2.0))
    >>> ck = idist.Checkpoint(v=v)
    >>> path = ck.save(tempfile.mkdtemp() + "/ckpt")
    >>> path.rsplit("/", 1)[1]
    'ckpt-1'
    >>> _ = v.assign(0.0); ck.restore(path); float(v)
    2.0
    """

    def __init__(self, /, **objects: Any) -> None:  # positional-only: an object may be named "self"
        if not objects:
            raise ValueError("Checkpoint needs at least one named variable or object, e.g. Checkpoint(w=w)")
        self._objects = objects
        self._counter = 0
        self._loaded_counter: int | None = None

    def __repr__(self) -> str:
        return f"<interdist.Checkpoint of {', '.join(self._objects)}; save_counter={self._counter}>"

    @property
    def save_counter(self) -> int:
        """How many times ``save`` ran (restored from a checkpoint ``save`` wrote, as TF's)."""
        return self._counter

    def _variables(self) -> dict[str, Any]:
        """The variables of this checkpoint by name (an optimizer's ``iterations`` with them)."""
        return self._collect()[0]

    def _collect(self) -> tuple[dict[str, Any], list[tuple[str, Any]]]:
        """The variables by name, and the optimizers (with their names), whose slots are saved too; the models
        not built yet in ``_unbuilt`` (``checkpoint_collect.collect``)."""
        self._unbuilt: list[tuple[str, Any]] = []
        return collect(self._objects, self._unbuilt)

    def _entries(self) -> dict[str, Any]:
        """What ``write`` saves: the variables, and the slots of each optimizer for each of them
        (named ``{variable}/.OPTIMIZER_SLOT/{optimizer}/{slot}``, as TF names them)."""
        return saved_entries(*self._collect())

    def save(self, prefix: str | os.PathLike[str], progress: bool = False) -> str:
        """Write ``{prefix}-{n}`` (a directory; ``n`` is ``save_counter``, 1 at the first save) atomically,
        record it as the latest checkpoint of its directory (``latest_checkpoint``); return its path.

        ``progress=True`` shows a ``tqdm.auto`` bar in the cell, one tick per variable written.
        """
        target = Path(f"{os.fspath(prefix)}-{self._counter + 1}")
        path = self.write(target, progress=progress, save_counter=self._counter + 1)
        try:
            _record_latest(target.parent, target.name)  # tf.train.latest_checkpoint(directory) finds it
        except OSError:
            shutil.rmtree(target, ignore_errors=True)  # all or nothing: not kept if it cannot be recorded
            raise
        self._counter += 1  # a save that failed does not count: the next save takes its number
        return path

    def write(self, path: str | os.PathLike[str], progress: bool = False, save_counter: int | None = None) -> str:
        """Write the checkpoint to the directory ``path`` atomically (not recorded as the latest); its path."""
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        remove_stale_temporaries(target.parent)  # a save killed earlier (its writer gone) left its directory
        tmp = Path(tempfile.mkdtemp(prefix=_temporary_prefix(target.name), dir=target.parent))
        try:
            index: dict[str, Any] = {"format": FORMAT, "variables": {}}
            if save_counter is not None:
                index["save_counter"] = save_counter
            variables = self._entries()
            bar = _progress_bar(progress, len(variables), f"save {target.name}")
            for i, (name, var) in enumerate(variables.items()):
                value = _cross_replica_value(var)  # raises before anything is renamed into place
                fname = _file_name(i)
                np.save(tmp / fname, value, allow_pickle=False)
                entry: dict[str, Any] = {
                    "file": fname,
                    "sha256": _sha256(tmp / fname),
                    "dtype": value.dtype.str,
                    "shape": list(value.shape),
                    "synchronization": var.synchronization.name,
                    "aggregation": var.aggregation.name,
                }
                if isinstance(var, _SlotRef):
                    entry["slot"] = var.describe()
                entry["digest"] = _entry_digest(name, entry)  # binds the fields to the name and each other
                index["variables"][name] = entry
                strategy = getattr(var, "_strategy", None)
                index["num_replicas"] = getattr(strategy, "num_replicas_in_sync", 1)
                if i == 0:
                    _fire_injected_faults(variables.values())
                bar.update(1)
            bar.close()
            # The index last, and the whole directory renamed into place only once complete: a save
            # killed at any point (the notebook or a worker) leaves the previous checkpoints as they were.
            index["index_sha256"] = _index_digest(index)
            (tmp / "index.json").write_text(json.dumps(index, indent=1, sort_keys=True))
            if target.exists():
                shutil.rmtree(target)
            os.replace(tmp, target)
        except OSError as e:
            shutil.rmtree(tmp, ignore_errors=True)
            raise _disk_error(e, f"writing checkpoint {target}") from e
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        return str(target)

    def restore(self, path: str | os.PathLike[str], progress: bool = False, allow_unverified: bool = False) -> None:
        """Assign every saved value to the variable of the same name (all checked before any is assigned).

        ``progress=True`` shows a ``tqdm.auto`` bar in the cell, one tick per variable read and checked.

        Raises ``ValueError`` (nothing assigned) when the index was edited (an entry's fields or the
        index not matching their checksums, an entry without ``sha256``) or an array does not match it.
        ``allow_unverified=True`` accepts a format-1 checkpoint (an older interdist's) with entries
        without ``sha256``, as it is; it never relaxes a format-2 checkpoint's checks. The checksums
        catch edits, mix-ups and corruption, not forgery: whoever can write index.json can recompute them.

        All or nothing: the values the restore replaces (each replica's copy of each variable, the
        optimizers' slots and their update counts) are read first; then a strategy's variables and slots
        are assigned in one program on its replicas (one round trip). If that fails (a replica lost,
        frozen or raising, or any exception), what was there is put back on every replica that can be
        reached (a lost one once it is restarted) and the error, of its original class with the failure
        as its cause, says "not applied: nothing of checkpoint ... was restored; the variables hold their
        previous values"; or, when putting back failed too, which variables hold which values.
        """
        deferred: list[tuple[Any, list[np.ndarray]]] = []
        values = self._load(path, progress, allow_unverified, deferred)
        plan = _RestorePlan(values)
        plan.take()  # what every assignment replaces, read before anything changes (a failure here changes nothing)
        try:
            plan.commit()
        except BaseException as exc:  # any failure: put back what was there, then say so
            plan.cause = exc
            failures = plan.put_back()
            raise _not_applied(exc, str(path), plan, failures) from exc
        for layer, weights in deferred:  # an unbuilt model's weights: for its build, once everything else is restored
            layer._restore_when_built(weights)
        counter = self._loaded_counter
        if counter is not None:
            self._counter = counter

    def _load(
        self,
        path: str | os.PathLike[str],
        progress: bool = False,
        allow_unverified: bool = False,
        deferred_out: list[tuple[Any, list[np.ndarray]]] | None = None,
    ) -> dict[str, tuple[Any, np.ndarray]]:
        """Each variable's saved value, read and checked against the index and the variable (raises
        ``ValueError`` before anything is assigned). An unbuilt model's weights go to it for its build
        now, or, given ``deferred_out``, are appended there as (layer, weights) for the caller to hand on."""
        return load(self, path, progress, allow_unverified, deferred_out)


class CheckpointManager:
    """Keeps the last ``max_to_keep`` checkpoints of a ``Checkpoint`` in one directory, like
    ``tf.train.CheckpointManager``.

    Checkpoints are named ``{directory}/{checkpoint_name}-{n}``; ``n`` goes on from the highest
    number already in the directory, so a restarted notebook neither overwrites nor loses one. The
    list of checkpoints lives in ``checkpoint.json``, replaced atomically after each save, so a
    crash leaves either the old list or the new one.

    Several managers (in several processes) may save into one directory: each save locks the
    directory, reads the list as the others left it, takes the next free number, and keeps the last
    ``max_to_keep`` of them all. ``checkpoints`` and ``latest_checkpoint`` read the list afresh.

    >>> import interdist as idist, numpy as np, tempfile
    >>> v = idist.Variable(np.float32(0.0))
    >>> manager = idist.CheckpointManager(idist.Checkpoint(v=v), tempfile.mkdtemp(), max_to_keep=2)
    >>> for step in range(3):
    ...     _ = v.assign(float(step)); _ = manager.save()
    >>> [p.rsplit("/", 1)[1] for p in manager.checkpoints]
    ['ckpt-2', 'ckpt-3']
    >>> _ = v.assign(9.0); manager.restore_or_initialize() == manager.latest_checkpoint; float(v)
    True
    2.0
    """

    def __init__(
        self,
        checkpoint: Checkpoint,
        directory: str | os.PathLike[str],
        max_to_keep: int | None,
        keep_checkpoint_every_n_hours: float | None = None,
        checkpoint_name: str = "ckpt",
        init_fn: Any = None,
    ) -> None:
        if not isinstance(checkpoint, Checkpoint):
            raise TypeError(f"CheckpointManager needs an interdist.Checkpoint, got {type(checkpoint).__name__}")
        if max_to_keep is not None and (isinstance(max_to_keep, bool) or not isinstance(max_to_keep, int)):
            raise TypeError(f"max_to_keep must be a positive int or None, got {max_to_keep!r}")
        if max_to_keep is not None and max_to_keep <= 0:
            raise ValueError(f"Expected a positive integer or `None` for `max_to_keep`, got {max_to_keep}.")
        if not checkpoint_name or Path(checkpoint_name).name != checkpoint_name or checkpoint_name in (".", ".."):
            raise ValueError(f"checkpoint_name must be a plain file name, got {checkpoint_name!r}")
        if init_fn is not None and not callable(init_fn):
            raise TypeError(f"init_fn must be callable or None, got {type(init_fn).__name__}")
        self._checkpoint = checkpoint
        self._directory = Path(directory)
        self._max_to_keep = max_to_keep
        self._keep_seconds = None if keep_checkpoint_every_n_hours is None else keep_checkpoint_every_n_hours * 3600.0
        self._name = checkpoint_name
        self._init_fn = init_fn
        # (path, time saved); the oldest first. Only checkpoints that are still there count.
        self._kept: list[tuple[str, float]] = []
        self._preserved: list[str] = []
        self._last_preserved = 0.0
        remove_stale_temporaries(self._directory)  # what saves killed mid-way left (their writers gone)
        self._load_state()

    def _number(self, path: str) -> int | None:
        return _number(self._name, path)

    def _load_state(self) -> None:
        self._kept, self._preserved, self._last_preserved = _read_state(self._directory, self._name)

    def _refresh(self) -> list[tuple[str, float]]:
        """The list as the directory has it now (another writer may have saved or deleted since)."""
        try:
            self._load_state()
        except (OSError, ValueError):  # the state file became unreadable: ours, less what is gone
            self._kept = [(p, t) for p, t in self._kept if (Path(p) / "index.json").is_file()]
        return self._kept

    def _next_number(self) -> int:
        """One more than the highest number listed, preserved or present in the directory."""
        numbers = [self._number(p) or 0 for p, _ in self._kept] + [self._number(p) or 0 for p in self._preserved]
        with contextlib.suppress(OSError):
            numbers += [self._number(child.name) or 0 for child in self._directory.iterdir()]
        return max(numbers, default=0) + 1

    def _write_state(self) -> None:
        state = {
            "format": STATE_FORMAT,
            "checkpoints": [{"name": Path(p).name, "time": t} for p, t in self._kept],
            "preserved": [Path(p).name for p in self._preserved],
            "last_preserved": self._last_preserved,
            "latest": Path(self._kept[-1][0]).name if self._kept else None,
        }
        _write_state_file(self._directory, state)

    # -- public API --------------------------------------------------------------------------------
    @property
    def directory(self) -> str:
        return str(self._directory)

    @property
    def checkpoint(self) -> Checkpoint:
        return self._checkpoint

    @property
    def checkpoints(self) -> list[str]:
        """The managed checkpoints, the oldest first (those kept for ever by
        ``keep_checkpoint_every_n_hours`` are not in this list, as in TF)."""
        return [p for p, _ in self._refresh()]

    @property
    def latest_checkpoint(self) -> str | None:
        kept = self._refresh()
        return kept[-1][0] if kept else None

    def save(self, checkpoint_number: int | None = None) -> str:
        """Write a new checkpoint, then drop the oldest beyond ``max_to_keep``; return its path.

        The directory is locked from numbering to deleting: another manager's save into it (in this
        process or another) waits, then goes on from this one's list."""
        if checkpoint_number is not None and (
            isinstance(checkpoint_number, bool) or not isinstance(checkpoint_number, (int, np.integer))
        ):
            raise TypeError(f"checkpoint_number must be an int, got {checkpoint_number!r}")
        with _locked(self._directory):
            self._load_state()  # what other writers saved and deleted meanwhile
            number = self._next_number() if checkpoint_number is None else int(checkpoint_number)
            path = self._checkpoint.write(self._directory / f"{self._name}-{number}")
            now = time.time()
            self._kept = [(p, t) for p, t in self._kept if p != path] + [(path, now)]
            doomed: list[str] = []
            while self._max_to_keep is not None and len(self._kept) > self._max_to_keep:
                old, saved_at = self._kept.pop(0)
                if self._keep_seconds is not None and saved_at - self._last_preserved >= self._keep_seconds:
                    self._preserved.append(old)
                    self._last_preserved = saved_at
                else:
                    doomed.append(old)
            try:
                self._write_state()  # the list never names a checkpoint that is already gone
            except OSError:
                # all or nothing: a checkpoint the list cannot name is not kept (nor the old ones dropped)
                shutil.rmtree(path, ignore_errors=True)
                self._load_state()
                raise
            for old in doomed:
                shutil.rmtree(old, ignore_errors=True)
        return path

    def restore_or_initialize(self) -> str | None:
        """Restore the latest checkpoint and return its path; with none, call ``init_fn`` and return None."""
        latest = self.latest_checkpoint
        if latest is not None:
            self._checkpoint.restore(latest)
            return latest
        if self._init_fn is not None:
            self._init_fn()
        return None

    def __repr__(self) -> str:
        return (
            f"CheckpointManager(directory={self.directory!r}, max_to_keep={self._max_to_keep}, "
            f"checkpoints={len(self.checkpoints)}, latest={self.latest_checkpoint!r})"
        )
