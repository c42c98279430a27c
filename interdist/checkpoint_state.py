"""A checkpoint directory's list (``checkpoint.json``) and its lock.

The list says which checkpoint of the directory is the latest (``latest_checkpoint``) and, for a
``CheckpointManager``, which it keeps; it is replaced atomically. Each save into a directory holds an
exclusive ``fcntl.flock`` on the directory itself while it numbers, writes, lists and deletes (where a
directory cannot be locked, e.g. some NFS mounts, a ``.checkpoint.lock`` file in it is locked instead).
Split from ``checkpoint.py``.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from interdist.checkpoint_format import _disk_error, _temporary_prefix

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
