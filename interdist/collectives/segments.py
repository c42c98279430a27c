"""Named POSIX shared-memory segments whose lifetime interdist manages (not the resource tracker).

Shared by the shared-memory transport (``shared_memory.py``: large packets) and the lanes
(``lanes.py``: small ones). Names carry the creator's pid (``PREFIX``), so that segments left by a
process killed before it handed one over are removed by the next transport made on the host
(``sweep_stale``).
"""

from __future__ import annotations

import os
import secrets
from multiprocessing import resource_tracker, shared_memory

try:  # POSIX: unlink a segment by name without the resource tracker (_untracked)
    import _posixshmem
except ImportError:  # Windows has no named POSIX segments: the fast path is off there (shm_available)
    _posixshmem = None


def shm_available() -> bool:
    """Named POSIX shared memory, which the same-host fast path needs."""
    return _posixshmem is not None


PREFIX = "idist-"


def _untracked(shm: shared_memory.SharedMemory) -> shared_memory.SharedMemory:
    """Take a segment off the resource tracker: its lifetime is managed here.

    Python 3.11 registers a segment on create and on open, and the worker processes
    of one host share one tracker (a set of names), so a second registration and
    two unregistrations would collide. Crashes are covered by ``sweep_stale``.
    """
    try:
        resource_tracker.unregister(shm._name, "shared_memory")  # type: ignore[attr-defined]
    except Exception:  # noqa: BLE001, S110 - no tracker running: nothing to undo
        pass
    return shm


def _unlink(shm: shared_memory.SharedMemory) -> None:
    if _posixshmem is None:
        return  # never reached: no segment is made where shm_available() is False
    try:
        _posixshmem.shm_unlink(shm._name)  # type: ignore[attr-defined]
    except FileNotFoundError:  # already gone (the other side removed it)
        pass


def create_pair_segment(kind: str, size: int) -> shared_memory.SharedMemory | None:
    """A new segment of ``size`` bytes for one peer to map (a lane, a ring), named after this process; ``None``
    when none can be made here."""
    try:
        shm = shared_memory.SharedMemory(
            name=f"{PREFIX}{os.getpid()}-{kind}-{secrets.token_hex(6)}", create=True, size=size
        )
    except (OSError, ValueError):
        return None
    return _untracked(shm)


def attach_pair_segment(name: str, size: int) -> shared_memory.SharedMemory | None:
    """Map the segment ``name`` its maker named to this process, and unlink the name (its only other user
    mapped it: the memory stays while mapped); ``None`` when it cannot be mapped from here or is smaller than
    ``size``."""
    try:
        shm = _untracked(shared_memory.SharedMemory(name=name))
    except (OSError, ValueError):
        return None
    _unlink(shm)
    if shm.size < size:
        _close(shm)
        return None
    return shm


def sweep_stale() -> None:
    """Remove segments left by processes of this host that died between creating and handing one over."""
    try:
        names = os.listdir("/dev/shm")
    except OSError:
        return
    for n in names:
        if not n.startswith(PREFIX):
            continue
        try:
            pid = int(n[len(PREFIX) :].split("-")[0])
            os.kill(pid, 0)
        except ProcessLookupError:
            try:
                os.unlink(os.path.join("/dev/shm", n))
            except OSError:
                pass
        except (ValueError, PermissionError, OSError):
            continue


def _close(shm: shared_memory.SharedMemory) -> None:
    try:
        shm.close()
    except BufferError:
        # A view is still alive (an exception's traceback holding arrays read from the
        # segment): drop our reference; the mapping goes when the last view does.
        shm._mmap = None  # type: ignore[attr-defined]
        shm.close()
