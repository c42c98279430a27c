"""The format of a checkpoint directory: its layout, its file names, its integrity checks, its temporaries.

Layout of a checkpoint directory (documented in README.md)::

    ckpt-1/
      index.json        {"format": "interdist-checkpoint/2", "variables": {name: {file, dtype, shape,
                         sha256, synchronization, aggregation[, slot], digest}}, "num_replicas": n[,
                         "save_counter": n], "index_sha256": ...}
      v000000.npy ...   each variable's value as a cross-replica read gives it (sync-on-read
                        variables aggregated: SUM summed, MEAN averaged)
    checkpoint.json     which checkpoint of the directory is the latest (``latest_checkpoint``), and
                        a ``CheckpointManager``'s list

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

A save writes the directory under a temporary name and renames it when complete; the temporary name carries
the writer's pid and host (``.ckpt-3.tmp-<pid>-<host>-<random>``), so that ``remove_stale_temporaries``
can tell those left by a process that is gone. Split from ``checkpoint.py``.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import re
import shutil
import time
from pathlib import Path
from typing import Any

from interdist.replica.ps_liveness import host_key, pid_alive

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
                not pid_alive(int(pid))
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


def _disk_error(e: OSError, doing: str) -> OSError:
    """An OSError that says what failed; a full disk as ENOSPC (NumPy reports a short write as a bare
    "60000 requested and 11232 written")."""
    if e.errno == errno.ENOSPC or (e.errno is None and "requested and" in str(e) and "written" in str(e)):
        return OSError(errno.ENOSPC, f"No space left on device while {doing} (nothing was saved): {e}")
    if e.errno is None:
        return OSError(f"{e} while {doing} (nothing was saved)")
    return OSError(e.errno, f"{e.strerror or e} while {doing} (nothing was saved)")


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
