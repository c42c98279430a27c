"""What every dashboard view shares: a ``source``, a ``root``, ``update(model)`` and two filters.

The shape is Dask's dashboard components' (``distributed/dashboard/components``),
so a view works the same inline (through ``jupyter_bokeh``) and as a Dask page.
"""

from __future__ import annotations

import itertools
from typing import Any

from bokeh.models.layouts import LayoutDOM
from bokeh.models.sources import ColumnDataSource
from bokeh.models.widgets import DataTable

from interdist.dashboard.model import DashboardModel
from interdist.dashboard.units import fmt_bytes

__all__ = ["View", "fit_height", "fmt_bytes", "set_data"]


class View:
    """Base of the views: skips redraws when neither the model nor a filter changed."""

    name = "view"
    title = "interdist"
    source: ColumnDataSource
    root: LayoutDOM

    def __init__(self) -> None:
        # Filters set by the inline dashboard's selectors; None shows everything.
        self.replica: int | None = None
        self.variable: str | None = None
        self._seen: tuple[Any, ...] | None = None

    def update(self, model: DashboardModel, force: bool = False) -> bool:
        """Redraw from ``model``; False when nothing changed since the last call."""
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


def set_data(source: ColumnDataSource, data: dict[str, list[Any]]) -> bool:
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
