"""Checkpoints of a strategy's variables, in a portable directory format.

Layout of a checkpoint directory (documented in README.md)::

    ckpt-1/
      index.json        {"format": "interdist-checkpoint/2", "variables": {name: {file, dtype, shape,
                         sha256, synchronization, aggregation[, slot], digest}}, "num_replicas": n[,
                         "save_counter": n], "index_sha256": ...}
      v000000.npy ...   each variable's value as a cross-replica read gives it (sync-on-read
                        variables aggregated: SUM summed, MEAN averaged)
    checkpoint.json     which checkpoint of the directory is the latest (``latest_checkpoint``), and
                        a ``CheckpointManager``'s list

Checkpoints are named as TF names them: ``Checkpoint.save(prefix)`` writes ``{prefix}-1``,
``{prefix}-2``... (directories an older version named ``{prefix}-000001`` are read as well).
An optimizer given to a ``Checkpoint`` is saved with its ``iterations`` and, for each variable of the
checkpoint it keeps slots for, each slot (Adam's ``momentum`` and ``velocity``...) as an entry
``{variable}/.OPTIMIZER_SLOT/{optimizer}/{slot}`` (its index entry says whose slot it is), so that a
restored optimizer goes on exactly as the saved one would have.

Files are numbered, and names live only in the index: two names that would make the same file
name (``x/y`` and ``x_y``) can never overwrite each other. Restore reads only plain file names
inside the checkpoint directory (never ``../elsewhere.npy``) and checks each array against the
index (its SHA-256, dtype and shape) before assigning anything.

Integrity (format 2): every entry has the SHA-256 of its file's bytes and a ``digest``, the SHA-256 of
its name and all its other fields (so two entries' files, shapes... swapped, or whole entries swapped,
no longer match); ``index_sha256`` is the SHA-256 of the canonical JSON of the rest of the index (an
entry or a field added, removed or changed). Restore refuses, with a ``ValueError`` and before anything
is assigned, any index that does not match, and any entry without a ``sha256``. These are checksums:
they catch edits, mix-ups and corruption, not forgery (whoever can edit index.json can recompute them).
A format-1 checkpoint (an older interdist's: no digests) still restores, its arrays checked against
their ``sha256``; one with an entry without ``sha256`` is refused unless ``restore(path,
allow_unverified=True)`` accepts it as it is.

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
import errno
import hashlib
import json
import os
import re
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from interdist.checkpoint_restore import _not_applied, _RestorePlan, _SlotRef
from interdist.replica.ps_liveness import host_key
from interdist.values.variables import Variable

FORMAT = "interdist-checkpoint/2"
#: An older interdist's format: no entry digests nor index checksum, and an entry's sha256 optional.
FORMAT_1 = "interdist-checkpoint/1"


#: A temporary file or directory of a save older than this is removed even when its writer cannot be
#: told gone (another host's, or named before pids were): no save takes a day.
STALE_AFTER = 24 * 3600.0
# ``.{name}.tmp-{pid}-{host tag}-{mkdtemp's 8 characters}``; before pids: ``.{name}.tmp-{8 characters}``.
_TEMPORARY = re.compile(r"\.tmp-(?:(\d+)-([0-9a-f]{12})-)?[A-Za-z0-9_]{8}$")


def _host_tag() -> str:
    """Where a pid means something: this host, its boot and its pid namespace."""
    return host_key()[:12]


def _temporary_prefix(name: str) -> str:
    return f".{name}.tmp-{os.getpid()}-{_host_tag()}-"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # PermissionError: someone else's process, alive
        return True
    return True


def remove_stale_temporaries(directory: str | os.PathLike[str]) -> list[str]:
    """Remove the temporary files and directories of saves into ``directory`` whose writer is gone
    (its pid on this host no longer runs) or that are older than ``STALE_AFTER``; their paths."""
    root = Path(directory)
    try:
        children = list(root.iterdir())
    except OSError:
        return []
    removed = []
    now = time.time()
    for child in children:
        match = _TEMPORARY.search(child.name)
        if not child.name.startswith(".") or match is None:
            continue
        pid, tag = match.group(1), match.group(2)
        try:
            stale = (
                not _alive(int(pid))
                if pid is not None and tag == _host_tag()
                else now - child.lstat().st_mtime > STALE_AFTER
            )
            if not stale:
                continue
            if child.is_dir() and not child.is_symlink():
                shutil.rmtree(child)
            else:
                child.unlink()
        except OSError:
            continue  # removed meanwhile, or not ours to remove
        removed.append(str(child))
    return removed


def _file_name(index: int) -> str:
    return f"v{index:06d}.npy"


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _canonical_sha256(obj: Any) -> str:
    """The SHA-256 of ``obj``'s canonical JSON (sorted keys, no spaces, ASCII): the same bytes for the
    same contents, whatever the file's layout."""
    text = json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(text.encode("ascii")).hexdigest()


def _entry_digest(name: str, entry: dict[str, Any]) -> str:
    """An entry's ``digest``: its name and all its fields but this one (file, sha256, dtype, shape...)."""
    return _canonical_sha256(["interdist-checkpoint-entry", name, {k: v for k, v in entry.items() if k != "digest"}])


def _index_digest(index: dict[str, Any]) -> str:
    """The index's ``index_sha256``: everything in it but this field."""
    return _canonical_sha256({k: v for k, v in index.items() if k != "index_sha256"})


def _check_index(root: Path, index: dict[str, Any], saved: dict[str, Any], allow_unverified: bool) -> None:
    """Refuse (``ValueError``) an index that is not as written: an entry naming a file outside the
    checkpoint, without ``sha256`` (format 2; format 1 unless ``allow_unverified``), or not matching its
    ``digest``, or an index not matching its ``index_sha256`` (both required in format 2, checked in
    format 1 when present)."""
    current = index.get("format") == FORMAT
    unverified = []
    for name, entry in saved.items():
        if not isinstance(entry, dict):
            raise ValueError(f"the checkpoint at {root} has an entry {name!r} that is not a table in its index.json")
        _entry_file(root, name, entry)
        if not isinstance(entry.get("sha256"), str):
            if current:
                raise ValueError(
                    f"checkpoint entry {name!r} of {root} has no sha256 in index.json, so its value cannot be "
                    f"verified: refused (every entry of a {FORMAT!r} checkpoint has one; its index was edited)"
                )
            unverified.append(name)
        if (current or "digest" in entry) and entry.get("digest") != _entry_digest(name, entry):
            raise ValueError(
                f"checkpoint entry {name!r} of {root} does not match its digest in index.json: its fields were "
                "edited, deleted or swapped with another entry's"
            )
    if (current or "index_sha256" in index) and index.get("index_sha256") != _index_digest(index):
        raise ValueError(
            f"the index.json of the checkpoint at {root} does not match its index_sha256: it was edited "
            "(an entry or a field added, removed or changed)"
        )
    if unverified and not allow_unverified:
        raise ValueError(
            f"the checkpoint at {root} (format {FORMAT_1!r}, an older interdist's) has no sha256 for "
            f"{sorted(unverified)}, so their values cannot be verified: refused. To accept it as it is, "
            "restore(path, allow_unverified=True) (and save it again to checksum it)"
        )


def _entry_file(root: Path, name: str, entry: Any) -> Path:
    """The array file of index entry ``name``: a plain file name inside ``root``, nothing else."""
    fname = entry.get("file") if isinstance(entry, dict) else None
    if not isinstance(fname, str) or not fname or fname != Path(fname).name or fname in (".", "..") or "\\" in fname:
        raise ValueError(f"the checkpoint at {root} names file {fname!r} for {name!r}: not a file of the checkpoint")
    return root / fname


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
        """The variables by name, and the optimizers (with their names), whose slots are saved too."""
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
                self._unbuilt.append((prefix, obj))  # TF defers its restore until it makes its variables
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

        self._unbuilt: list[tuple[str, Any]] = []
        for name, obj in self._objects.items():
            visit(name, obj)
        return out, optimizers

    def _entries(self) -> dict[str, Any]:
        """What ``write`` saves: the variables, and the slots of each optimizer for each of them
        (named ``{variable}/.OPTIMIZER_SLOT/{optimizer}/{slot}``, as TF names them)."""
        variables, optimizers = self._collect()
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
        self._loaded_counter = index.get("save_counter") if isinstance(index.get("save_counter"), int) else None
        variables, optimizers = self._collect()
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
        for prefix, layer in self._unbuilt:  # an unbuilt model: its saved weights, in order, kept for its build
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


class _Deferred:
    """A saved weight of a model not built yet: read and checked now, assigned when the model is built."""

    def __init__(self, name: str) -> None:
        self.name = name


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


class _NoBar:
    """What ``progress=False`` gets: a bar that does nothing (and imports nothing)."""

    def update(self, n: int = 1) -> None:
        pass

    def close(self) -> None:
        pass


def _progress_bar(progress: bool, total: int, desc: str) -> Any:
    """A ``tqdm.auto`` bar of ``total`` ticks when ``progress``, else one that does nothing."""
    if not progress:
        return _NoBar()
    from tqdm.auto import tqdm  # only here: progress=False costs no import

    return tqdm(total=total, desc=desc, unit="var")


def _cross_replica_value(var: Any) -> np.ndarray:
    if var.synchronization.name == "ON_READ" and var.aggregation.name == "NONE":
        return np.asarray(var.values[0]) if hasattr(var, "values") else np.asarray(var)
    return np.asarray(var.read_value())


STATE_FILE = "checkpoint.json"
STATE_FORMAT = "interdist-checkpoint-state/1"
#: Locked instead of the directory where a directory cannot be locked (some NFS mounts); left in place.
LOCK_FILE = ".checkpoint.lock"


@contextlib.contextmanager
def _locked(directory: Path) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``directory`` (made if need be): writers of one directory (processes,
    or managers of one process: each lock is its own open file) take turns. The directory itself is
    locked, so nothing is added to it and a writer killed while holding the lock leaves nothing behind.
    Without ``fcntl`` (Windows) there is no lock: one writer per directory there."""
    directory.mkdir(parents=True, exist_ok=True)
    try:
        import fcntl  # POSIX only: ``import interdist`` must not need it
    except ImportError:
        yield
        return
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
    except OSError:  # a directory that cannot be flocked: a lock file in it
        os.close(fd)
        fd = os.open(directory / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
        except BaseException:
            os.close(fd)
            raise
    try:
        yield
    finally:
        os.close(fd)  # releases the lock


def _number(checkpoint_name: str, path: str) -> int | None:
    """``n`` of a path ``.../{checkpoint_name}-{n}``, else None."""
    name = Path(path).name
    tail = name[len(checkpoint_name) + 1 :]
    return int(tail) if name.startswith(checkpoint_name + "-") and tail.isdigit() else None


def _state(directory: Path) -> dict[str, Any] | None:
    """The state file of ``directory`` (None without one); ValueError when it is not one of ours."""
    state_path = directory / STATE_FILE
    if not state_path.is_file():
        return None
    try:
        state = json.loads(state_path.read_text())
    except (OSError, ValueError) as e:
        raise ValueError(f"{state_path} is not a readable checkpoint list: {type(e).__name__}: {e}") from None
    if not isinstance(state, dict) or state.get("format") != STATE_FORMAT:
        raise ValueError(f"{state_path} is not an interdist checkpoint list (no format {STATE_FORMAT!r})")
    return state


def _write_state_file(directory: Path, state: dict[str, Any]) -> None:
    """Replace the state file atomically (a crash leaves the old one or the new one; a failed write, e.g. a
    full disk, leaves the old one and no temporary file)."""
    fd, tmp = tempfile.mkstemp(prefix=_temporary_prefix(STATE_FILE), dir=directory)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(state, f, indent=1)
            f.flush()
            os.fsync(f.fileno())  # the list names checkpoints already on disk: it reaches the disk after them
        os.replace(tmp, directory / STATE_FILE)
    except OSError as e:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise _disk_error(e, f"writing the checkpoint list {directory / STATE_FILE}") from e


def _disk_error(e: OSError, doing: str) -> OSError:
    """An OSError that says what failed; a full disk as ENOSPC (NumPy reports a short write as a bare
    "60000 requested and 11232 written")."""
    if e.errno == errno.ENOSPC or (e.errno is None and "requested and" in str(e) and "written" in str(e)):
        return OSError(errno.ENOSPC, f"No space left on device while {doing} (nothing was saved): {e}")
    if e.errno is None:
        return OSError(f"{e} while {doing} (nothing was saved)")
    return OSError(e.errno, f"{e.strerror or e} while {doing} (nothing was saved)")


def _record_latest(directory: Path, name: str) -> None:
    """``Checkpoint.save``: ``name`` is now the latest checkpoint of ``directory`` (a manager's list, if
    the state file has one, is kept). A state file that is not ours is left alone."""
    with _locked(directory):  # a manager of the directory may be updating its list
        try:
            state = _state(directory)
        except ValueError:
            return
        state = state if state is not None else {"format": STATE_FORMAT}
        state["latest"] = name
        _write_state_file(directory, state)


def _read_state(directory: Path, checkpoint_name: str) -> tuple[list[tuple[str, float]], list[str], float]:
    """The checkpoints a manager keeps in ``directory`` (path, time saved; the oldest first: in the order
    saved), those preserved for ever, and when one was last preserved. Only checkpoints still on disk
    count; without a state file, the directory's ``{checkpoint_name}-{n}`` checkpoints are adopted, in
    number order."""
    state = _state(directory)
    found: list[tuple[str, float]] = []
    preserved: list[str] = []
    last_preserved = 0.0
    if state is not None and "checkpoints" in state:  # a manager's list (Checkpoint.save records only the latest)
        for item in state.get("checkpoints", []):
            name = item.get("name") if isinstance(item, dict) else None
            if isinstance(name, str) and _number(checkpoint_name, name) is not None and Path(name).name == name:
                found.append((str(directory / name), float(item.get("time", 0.0))))
        preserved = [str(directory / n) for n in state.get("preserved", []) if isinstance(n, str) and Path(n).name == n]
        last_preserved = float(state.get("last_preserved", 0.0))
    elif directory.is_dir():
        found = sorted(
            (
                (str(child), child.stat().st_mtime)
                for child in directory.iterdir()
                if _number(checkpoint_name, child.name) is not None
            ),
            key=lambda pt: _number(checkpoint_name, pt[0]) or 0,
        )
    kept = [(p, t) for p, t in found if (Path(p) / "index.json").is_file()]
    return kept, preserved, last_preserved


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


def latest_checkpoint(directory: str | os.PathLike[str], checkpoint_name: str = "ckpt") -> str | None:
    """The path of the latest checkpoint saved in ``directory``, or None, as ``tf.train.latest_checkpoint``.

    The latest is the one recorded by the last ``Checkpoint.save`` or ``CheckpointManager.save`` into
    ``directory`` (None when it was deleted since, as TF). A directory saved into by an older version,
    without that record: the newest ``{checkpoint_name}-{n}`` of its manager's list, or of the directory.
    """
    root = Path(directory)
    state = _state(root)
    if state is not None and "latest" in state:
        name = state["latest"]
        if not isinstance(name, str) or not name or Path(name).name != name or name in (".", ".."):
            return None  # never a path outside the directory
        return str(root / name) if (root / name / "index.json").is_file() else None
    kept, _, _ = _read_state(root, checkpoint_name)
    return kept[-1][0] if kept else None
