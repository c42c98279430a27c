"""Where a replica's incoming collective messages wait for it.

Messages are keyed by (step, seq, src). A receiver blocks with a timeout; an
abort for a step (a peer failed, a worker left, the notebook was interrupted) wakes
every waiter of that step at once (measured: <1 ms), so no replica ever waits for a
peer that will not come. A waiter whose peers' messages are already on their way
gets them first (``ABORT_GRACE``), and a replica that reaches a collective of an
aborted step sends nothing (``Replica.collective``): an update that follows a
collective is then applied by every replica of the step or by none.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from interdist.errors import CollectiveAbortedError, CollectiveTimeoutError

Tag = tuple[int, int]  # (step, seq)

#: How long a collective of an aborted step still waits for messages already on their way (seconds).
ABORT_GRACE = 0.25


class Mailbox:
    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._messages: dict[tuple[int, int, int], Any] = {}
        self._aborted: dict[int, str] = {}
        # Called (outside the lock) with each message dropped unread: a step moved on, a take
        # timed out or was aborted half-way. The shared-memory transport frees the sender's
        # segment there, so an abandoned message never pins or leaks one.
        self.on_drop: Callable[[Any], None] | None = None

    def put(self, step: int, seq: int, src: int, payload: Any) -> None:
        with self._cond:
            self._messages[(step, seq, src)] = payload
            self._cond.notify_all()

    def abort(self, step: int, reason: str) -> None:
        with self._cond:
            self._aborted.setdefault(step, reason)
            self._cond.notify_all()

    def aborted(self, step: int) -> str | None:
        with self._cond:
            return self._aborted.get(step)

    def any_aborted(self) -> bool:
        """Whether some step not yet begun past was aborted (a wait outside ``take`` ends on it)."""
        return bool(self._aborted)

    def begin_step(self, step: int) -> None:
        """Forget what belongs to steps before ``step`` (later steps may already have messages)."""
        if not self._messages and not self._aborted:
            return  # the common case between steps without collectives (a fused loop's): no lock
        with self._cond:
            dropped = [self._messages.pop(k) for k in [k for k in self._messages if k[0] < step]]
            for s in [s for s in self._aborted if s < step]:
                del self._aborted[s]
        self._drop(dropped)

    def drain(self) -> None:
        """Drop every message (the group is closing)."""
        with self._cond:
            dropped = list(self._messages.values())
            self._messages.clear()
        self._drop(dropped)

    def _drop(self, messages: list[Any]) -> None:
        if self.on_drop is None:
            return
        for m in messages:
            try:
                self.on_drop(m)
            except Exception:  # noqa: BLE001, S110 - cleanup of an abandoned message must not fail a step
                pass

    def take(self, step: int, seq: int, srcs: list[int], timeout: float, what: str) -> dict[int, Any]:
        """Wait until a message from every rank in ``srcs`` has arrived for (step, seq)."""
        out: dict[int, Any] = {}
        try:
            return self._take(step, seq, srcs, timeout, what, out)
        except BaseException:
            self._drop(list(out.values()))
            raise

    def _take(
        self, step: int, seq: int, srcs: list[int], timeout: float, what: str, out: dict[int, Any]
    ) -> dict[int, Any]:
        deadline = time.monotonic() + timeout
        grace_end: float | None = None
        with self._cond:
            while True:
                for src in srcs:
                    if src not in out and (step, seq, src) in self._messages:
                        out[src] = self._messages.pop((step, seq, src))
                if len(out) == len(srcs):
                    return out
                reason = self._aborted.get(step)
                if reason is not None:
                    # Messages already on their way still complete the collective: a peer that had
                    # sent its part completes it too, so both apply what follows (or neither does).
                    now = time.monotonic()
                    grace_end = now + ABORT_GRACE if grace_end is None else grace_end
                    if now >= grace_end:
                        raise CollectiveAbortedError(f"{what} was aborted: {reason}")
                    self._cond.wait(grace_end - now)
                    continue
                left = deadline - time.monotonic()
                if left <= 0:
                    missing = sorted(set(srcs) - set(out))
                    raise CollectiveTimeoutError(
                        f"{what} timed out after {timeout:g} s waiting for replica(s) {missing} "
                        f"(arrived: {sorted(out)}); see interdist.config.set_collective_timeout"
                    )
                self._cond.wait(min(left, 0.5))
