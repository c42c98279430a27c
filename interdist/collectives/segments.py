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

import numpy as np

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


# -- the shared-memory transport's segments (shared_memory.py) ------------------------------------------
_HEADER = 64
_ALIGN = 64


def _header_words(readers: int) -> int:
    return 1 + 2 * readers


def _header_bytes(readers: int) -> int:
    return max(_HEADER, -(-8 * _header_words(readers) // _ALIGN) * _ALIGN)


class _Slot:
    """A segment this rank writes for one peer, or once for several (a broadcast to local peers).

    Header words: ``retired``, then per reader ``i``: ``busy`` (the token of the message it
    has not released yet, else 0) and ``opened`` (it mapped the segment). Each reader writes
    only its own words, so no two processes ever write the same word.
    """

    def __init__(self, capacity: int, readers: int = 1) -> None:
        self.readers = readers
        self.header_bytes = _header_bytes(readers)
        self.shm = _untracked(
            shared_memory.SharedMemory(
                name=f"{PREFIX}{os.getpid()}-{secrets.token_hex(6)}", create=True, size=self.header_bytes + capacity
            )
        )
        self.capacity = capacity
        self.header = np.ndarray((_header_words(readers),), np.int64, self.shm.buf)
        self.header[:] = 0

    @property
    def free(self) -> bool:
        return not self.header[1::2].any()

    def mark_busy(self, token: int) -> None:
        self.header[1::2] = token

    def retire(self) -> None:
        self.header[0] = 1  # the readers may unmap it now
        # A reader unlinks the name once every reader has mapped it; whatever is left (never
        # mapped, or two readers mapping at the same moment) is the sender's to remove.
        _unlink(self.shm)
        del self.header
        _close(self.shm)
