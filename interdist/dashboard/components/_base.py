"""What every dashboard view shares: a ``source``, a ``root``, ``update(model)`` and two filters; and
what the views with a time (or step) axis share: ``Following``, an x range that follows new data
(``_following.py``, re-exported here).

The shape is Dask's dashboard components' (``distributed/dashboard/components``),
so a view works the same inline (through ``jupyter_bokeh``) and as a Dask page.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Hashable, Sequence
from typing import Any, Generic, TypeVar

import numpy as np
from bokeh.models.layouts import LayoutDOM
from bokeh.models.sources import ColumnDataSource
from bokeh.models.widgets import DataTable

from interdist.dashboard.components._following import (
    FOLLOW_JS,
    STEP_WINDOWS,
    TIME_WINDOWS,
    Following,
    elapsed,
    in_window,
)
from interdist.dashboard.model import DashboardModel
from interdist.dashboard.units import fmt_bytes

__all__ = [
    "FOLLOW_JS",
    "STEP_WINDOWS",
    "TIME_WINDOWS",
    "Appended",
    "Following",
    "View",
    "elapsed",
    "fit_height",
    "fmt_bytes",
    "in_window",
    "numbers",
    "set_data",
]

_T = TypeVar("_T")


class View:
    """Base of the views: skips redraws when neither the model nor a filter changed."""

    name = "view"
    title = "interdist"
    source: ColumnDataSource
    root: LayoutDOM
    following: Following | None = None  # the x range of a time (or step) axis that follows new data

    def __init__(self) -> None:
        # Filters set by the inline dashboard's selectors; None shows everything.
        self.replica: int | None = None
        self.variable: str | None = None
        self._seen: tuple[Any, ...] | None = None
        # Held while a redraw or a widget callback changes the view's document: inline, the pump thread
        # redraws while the kernel's thread runs the callbacks, and jupyter_bokeh sends each change as
        # several comm messages, which two threads at once interleave (the view then took no more
        # patches; measured in JupyterLab).
        self.lock = threading.RLock()

    def update(self, model: DashboardModel, force: bool = False) -> bool:
        """Redraw from ``model``; False when nothing changed since the last call."""
        with self.lock:
            key = (id(model), model.version, self.replica, self.variable, self._clock_key(model))
            if key == self._seen and not force:
                return False
            self._seen = key
            self._update(model)
            return True

    def _clock_key(self, model: DashboardModel) -> Any:
        """Extra state that makes a redraw due without a new event (the watchdog's clock)."""
        return None

    def _update(self, model: DashboardModel) -> None:
        raise NotImplementedError

    def shows_replica(self, replica: int) -> bool:
        return self.replica is None or self.replica == replica


def set_data(source: ColumnDataSource, data: dict[str, Any]) -> bool:
    """Replace the source's columns, but only when they differ: every assignment goes to the browser.

    Then nudge each DataTable that shows ``source`` so that it repaints. Since Bokeh 3.9
    a table repaints when its ``CDSView`` changes, and that view changes only when the
    set of rows does (``CDSView.indices_map`` became an array compared by value, where it
    was a fresh ``Map`` each time): new values in as many rows stayed unpainted, so the
    values, placement and watchdog tables froze after their first draw. Setting the
    view's ``tags`` (which nothing reads) makes the view change, and the table calls
    ``updateGrid`` as it did before 3.9 (keeping its scroll position). Harmless on
    earlier versions. Returns whether the data was replaced.
    """
    old = source.data
    if set(old) == set(data) and all(list(old[k]) == list(v) for k, v in data.items()):
        return False
    source.data = data
    doc = source.document
    if doc is not None:
        for table in doc.select({"type": DataTable}):
            if isinstance(table, DataTable) and table.source is source:
                table.view.tags = [next(_repaints)]
    return True


_repaints = itertools.count(1)


def fit_height(table: DataTable, rows: int, most: int = 12) -> None:
    """Size a table to its rows (up to ``most``, then it scrolls): no blank gap under a few rows."""
    height = 30 + 26 * max(1, min(rows, most))
    if table.height != height:
        table.height = height


class Appended(Generic[_T]):
    """A source that shows the last ``shown`` rows of an append-only sequence of the model (a deque).

    A redraw sends only the rows appended since the last one (``ColumnDataSource.stream``, with
    ``rollover``), and all rows only when ``basis`` changed (a filter, the time origin, a unit) or
    the last row sent has left the sequence. Replacing the whole ``data`` each time sent, five
    times a second, 1,000 points of 13 columns per view, and serializing them took the notebook
    more CPU than the training loop it watched (benchmarks/bench_dashboard.py).
    """

    def __init__(self, source: ColumnDataSource, shown: int) -> None:
        self.source = source
        self.shown = shown
        self._last: Any = None  # the newest item sent (compared by identity)
        self._basis: Hashable = None

    def new_items(self, items: Sequence[_T], basis: Hashable) -> list[_T] | None:
        """The items appended since the last ``send``, oldest first; None when all must be sent again."""
        if basis != self._basis or self._last is None:
            return None
        new: list[_T] = []
        for item in reversed(items):
            if item is self._last:
                new.reverse()
                return new
            new.append(item)
            if len(new) > self.shown:
                return None  # more than the view shows: send them all at once
        return None  # the last row sent fell out of the model's window

    def send(
        self,
        items: Sequence[_T],
        basis: Hashable,
        columns: Callable[[list[_T]], dict[str, Any]],
        keep: Callable[[_T], bool] = lambda item: True,
    ) -> None:
        """Show the last ``shown`` kept items: only the new ones sent when ``basis`` is unchanged."""
        new = self.new_items(items, basis)
        if new is None:
            set_data(self.source, columns([x for x in items if keep(x)][-self.shown :]))
        else:
            rows = [x for x in new if keep(x)]
            if rows:
                new_data: dict[str, Any] = dict(columns(rows))
                self.source.stream(new_data, rollover=self.shown)
        self._basis = basis
        self._last = items[-1] if len(items) else None


def numbers(values: Any) -> np.ndarray[Any, Any]:
    """A numeric column as a NumPy array: Bokeh sends it as one binary buffer, where a list of
    floats is encoded and JSON-dumped number by number (most of a redraw's cost)."""
    return np.asarray(values if isinstance(values, list) else list(values))
