"""Collective timeline: per replica, each collective as a bar split into wait and transfer.

Wait (grey) is time spent for the slowest peer to arrive; transfer (colour) is
moving and combining data. A long grey bar on one replica and none on another
names the straggler.
"""

from __future__ import annotations

from typing import Any

from bokeh.layouts import column
from bokeh.models.sources import ColumnDataSource
from bokeh.models.tickers import SingleIntervalTicker
from bokeh.models.tools import HoverTool
from bokeh.plotting import figure

from interdist.dashboard.components._base import TIME_WINDOWS, Appended, Following, View, elapsed, numbers
from interdist.dashboard.model import DashboardModel, TimelineEntry
from interdist.dashboard.units import fmt_bytes, fmt_duration

COLUMNS = [
    "replica",
    "op",
    "step",
    "seq",
    "start",
    "mid",
    "end",
    "wait_ms",
    "transfer_ms",
    "wait_text",
    "transfer_text",
    "nbytes",
    "bytes",
    "algorithm",
    "backend",
]
# The newest collectives only: a plot of thousands of bars is unreadable and slow to send.
SHOWN = 300


class Timeline(View):
    """Horizontal bars on a time axis (seconds since the first event), one row per replica."""

    name = "timeline"
    title = "interdist: collective timeline"
    following: Following

    def __init__(self, **kwargs: Any) -> None:
        super().__init__()
        self.source = ColumnDataSource(
            {c: [] for c in COLUMNS}, name=f"interdist-{self.name}"
        )  # found by tests in the browser
        self._rows: Appended[TimelineEntry] = Appended(self.source, SHOWN)
        self._lanes: tuple[float, float] | None = None  # the replicas' rows: the y range
        self.following = following = Following(self.name, TIME_WINDOWS, "30 s", self.lock)
        fig = figure(
            x_range=following.x_range,
            y_range=following.y_range(self.name, lambda x0, x1: self._lanes),
            title="collectives per replica: wait (grey) vs transfer (blue)",
            x_axis_label="seconds since first event",
            y_axis_label="replica",
            tools="xpan,xwheel_zoom,reset",
            height=kwargs.pop("height", 260),
            sizing_mode="stretch_width",
            **kwargs,
        )
        fig.hbar(
            y="replica", left="start", right="mid", height=0.6, source=self.source, color="#bbbbbb", legend_label="wait"
        )
        fig.hbar(
            y="replica",
            left="mid",
            right="end",
            height=0.6,
            source=self.source,
            color="#1f77b4",
            legend_label="transfer",
        )
        fig.yaxis.ticker = SingleIntervalTicker(interval=1)
        fig.add_layout(fig.legend[0], "right")  # outside the plot: inside, it hides the first bars
        fig.add_tools(
            HoverTool(
                tooltips=[
                    ("op", "@op #@seq (step @step)"),
                    ("wait", "@wait_text"),
                    ("transfer", "@transfer_text"),
                    ("bytes", "@bytes"),
                    ("algorithm", "@algorithm / @backend"),
                ]
            )
        )
        following.attach(fig)
        self.figure = fig
        self.root = column(following.controls, fig, sizing_mode="stretch_width")

    def _update(self, model: DashboardModel) -> None:
        t0 = model.t0 or 0.0

        def columns(rows: list[TimelineEntry]) -> dict[str, Any]:
            return {
                "replica": numbers([e.replica for e in rows]),
                "op": [e.op for e in rows],
                "step": numbers([e.step for e in rows]),
                "seq": numbers([e.seq for e in rows]),
                "start": numbers([e.start - t0 for e in rows]),
                "mid": numbers([e.start - t0 + e.wait_s for e in rows]),
                # the bar ends where the replica left, which also covers the bookkeeping around the transfer
                "end": numbers([max(e.end - t0, e.start - t0 + e.wait_s + e.transfer_s) for e in rows]),
                "wait_ms": numbers([e.wait_s * 1e3 for e in rows]),
                "transfer_ms": numbers([e.transfer_s * 1e3 for e in rows]),
                "wait_text": [fmt_duration(e.wait_s) for e in rows],
                "transfer_text": [fmt_duration(e.transfer_s) for e in rows],
                "nbytes": numbers([e.nbytes for e in rows]),
                "bytes": [fmt_bytes(e.nbytes) for e in rows],
                "algorithm": [e.algorithm for e in rows],
                "backend": [e.backend for e in rows],
            }

        self._rows.send(model.timeline, (t0, self.replica), columns, lambda e: self.shows_replica(e.replica))
        # every replica's row, also one with no bar in the window (its absence is the news)
        replicas = [r for r in model.replicas if self.shows_replica(r)]
        self._lanes = (min(replicas) - 0.5, max(replicas) + 0.5) if replicas else None
        self.following.show_rows(self.source.data["start"], self.source.data["end"], elapsed(model))
