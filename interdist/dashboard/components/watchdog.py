"""Watchdog: collectives that some replicas entered and have not left after a threshold.

The question after a hang is "who is everyone waiting for?": each row lists the
replicas that arrived (and for how long they have waited) and the ones missing.
The failures list (the status strip's, from the replica states) follows, since a failure is
the usual reason.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from bokeh.layouts import column
from bokeh.models.sources import ColumnDataSource
from bokeh.models.widgets import DataTable, Div, TableColumn

from interdist.dashboard.components._base import View, set_data
from interdist.dashboard.components.status import failures_list
from interdist.dashboard.model import DashboardModel

COLUMNS = ["op", "step", "seq", "arrived", "waiting_s", "missing"]


class Watchdog(View):
    """A status line and a table of stuck collectives."""

    name = "watchdog"
    title = "interdist: watchdog"

    def __init__(self, threshold_s: float = 5.0, clock: Callable[[], float] = time.time, **kwargs: Any) -> None:
        super().__init__()
        self.threshold_s = threshold_s
        self.clock = clock  # injectable so tests need not sleep
        self.source = ColumnDataSource(
            {c: [] for c in COLUMNS}, name=f"interdist-{self.name}"
        )  # found by tests in the browser
        self.status = Div(text="no collectives yet")
        cols = [
            TableColumn(field="op", title="collective", width=120),
            TableColumn(field="step", title="step", width=50),
            TableColumn(field="seq", title="#", width=40),
            TableColumn(field="arrived", title="arrived (waiting s)"),
            TableColumn(field="waiting_s", title="longest wait (s)", width=110),
            TableColumn(field="missing", title="missing replicas", width=130),
        ]
        self.table = DataTable(
            source=self.source,
            columns=cols,
            index_position=None,
            sizing_mode="stretch_width",
            height=kwargs.pop("height", 160),
        )
        self.failures = Div(text="")
        self.root = column(self.status, self.table, self.failures, sizing_mode="stretch_width", **kwargs)

    def _clock_key(self, model: DashboardModel) -> Any:
        # Waiting grows without new events: redraw every second while something is open.
        return int(self.clock()) if model.waiting() else None

    def _update(self, model: DashboardModel) -> None:
        stuck = [
            s
            for s in model.stuck(self.threshold_s, self.clock())
            if any(self.shows_replica(r) for r in list(s.arrived) + s.missing)
        ]
        set_data(
            self.source,
            {
                "op": [s.op for s in stuck],
                "step": [s.step for s in stuck],
                "seq": [s.seq for s in stuck],
                "arrived": [", ".join(f"{r} ({w:.1f})" for r, w in s.arrived.items()) for s in stuck],
                "waiting_s": [round(max(s.arrived.values()), 1) for s in stuck],
                "missing": [", ".join(str(r) for r in s.missing) or "(all arrived)" for s in stuck],
            },
        )
        if stuck:
            self.status.text = (
                f"<span style='color:red'><b>{len(stuck)} collective(s) stuck</b></span> "
                f"for more than {self.threshold_s:g} s"
            )
        elif model.timeline:
            self.status.text = (
                f"<span style='color:green'>OK</span>: {len(model.timeline)} collective exits, "
                f"{model.waiting()} open, none older than {self.threshold_s:g} s"
            )
        else:
            self.status.text = "no collectives yet"
        self.failures.text = failures_list(model, self.shows_replica)
