"""A replica's events on their way out: each goes with its step's reply and to the sink (the worker's batch for the
scheduler's ``interdist`` topic), collectives as rows of ``collectives`` records (``events.COLLECTIVES``).

A collective's two events are one row, the commonest case (``events.DONE_ROW``): ``Replica.collective`` keeps its
ENTERED row open (``_open``, one attribute written, no lock) and writes the DONE row when it returns. A flush while
it waits (the worker's every 250 ms, another event, the reply) sends the open row on its own (``SENT``), so that a
replica waiting in a collective is seen waiting there; its EXITED row follows when it returns. Two rows written
each time, each through the lock and a merge into one, cost 1.7 us of the replica's Python per collective in
process, and a 4 KB all-reduce of 2 replicas on 2 cores 48 us against 41 with the rows only appended
(docs/performance.md, "The seventeenth run").
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from interdist import events

#: ``_open`` once a flush sent the open collective's ENTERED row (the collective then ends with an EXITED row).
SENT: tuple[Any, ...] = ("sent",)


class EventRows:
    """``Replica``'s events: ``emit``, and the rows of its collectives (written by ``Replica.collective``)."""

    group_id: str
    rank: int
    step: int
    step_events: list[dict[str, Any]]
    before_emit: Callable[[], None] | None
    _sink: Callable[[dict[str, Any]], None]
    _emit_lock: threading.Lock
    _rows: list[tuple[Any, ...]]  # this step's collective rows not sent yet
    _rows_step: int  # the step they belong to
    _open: tuple[Any, ...] | None  # the ENTERED row of the collective in progress, until a row holds it (or SENT)

    def emit(self, event: events.Event) -> None:
        """Record an event: it travels back with this step's reply, and to the sink (Dask's event log)."""
        self.emit_msg(event.to_msg())

    def emit_msg(self, msg: dict[str, Any]) -> None:
        """``emit`` of an event already in its wire form (``Event.to_msg()``)."""
        self._before_event()
        with self._emit_lock:
            if self._rows or self._unsent():
                self._flush_rows()  # the collectives before this event go first
            self.step_events.append(msg)
            self._sink(msg)

    def _unsent(self) -> bool:
        """Whether a collective is in progress whose ENTERED row has not been sent."""
        entered = self._open
        return entered is not None and entered is not SENT

    def _row(self, row: tuple[Any, ...]) -> None:
        """Add a collective's row to this step's record (``_emit_lock`` held); a record holds one step's rows, and
        ``events.MAX_ROWS`` at most."""
        rows = self._rows
        if rows and (self._rows_step != self.step or len(rows) >= events.MAX_ROWS):
            self._flush_rows()
            rows = self._rows
        if not rows:
            self._rows_step = self.step
        rows.append(row)

    def _before_event(self) -> None:
        """A fused loop's steps so far go first, to keep the events in order (``before_emit``, fused.py); called
        before ``_emit_lock`` is taken, since the hook emits."""
        hook = self.before_emit
        if hook is not None:
            self.before_emit = None
            hook()

    def _flush_rows(self) -> None:
        """The rows so far as a record, to the reply and the sink (``_emit_lock`` held), the open collective's
        ENTERED row last (which makes it ``SENT``)."""
        rows, self._rows, entered = self._rows, [], self._open
        if entered is not None and entered is not SENT:
            if rows and self._rows_step != self.step:  # rows of an earlier step: a record of their own
                self._send(rows)
                rows = []
            rows.append(entered)
            self._open, self._rows_step = SENT, self.step
        if rows:
            self._send(rows)

    def _send(self, rows: list[tuple[Any, ...]]) -> None:
        msg = events.collectives_msg(self.group_id, self._rows_step, self.rank, rows)
        self.step_events.append(msg)
        self._sink(msg)

    def flush_events(self) -> None:
        """Send the rows kept so far (the worker's event loop, before its batch: a replica waiting in one is seen)."""
        if self._rows or self._unsent():
            with self._emit_lock:
                if self._rows or self._unsent():
                    self._flush_rows()
