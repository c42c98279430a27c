"""Collective timings over time: latency, bytes and bus bandwidth per op.

Bus bandwidth uses NCCL's convention (an all-reduce moves 2(n-1)/n of its bytes
per link) so different ops and world sizes compare against the link's speed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from bokeh.layouts import column
from bokeh.models.formatters import NumeralTickFormatter
from bokeh.models.sources import ColumnDataSource
from bokeh.models.tools import HoverTool
from bokeh.palettes import Category10_10
from bokeh.plotting import figure

from interdist.dashboard.components._base import (
    TIME_WINDOWS,
    Appended,
    Following,
    View,
    elapsed,
    in_window,
    numbers,
)
from interdist.dashboard.model import DashboardModel, TimingPoint
from interdist.dashboard.units import fmt_bytes, fmt_duration, fmt_rate

COLUMNS = [
    "time",
    "op",
    "step",
    "replica",
    "latency_ms",
    "nbytes",
    "bus_gbps",
    "bus",
    "latency_text",
    "bytes_text",
    "bus_text",
    "color",
]
SHOWN = 1000


def op_color(op: str, known: list[str]) -> str:
    """A stable colour per op name, in the order the ops first appeared."""
    if op not in known:
        known.append(op)
    return Category10_10[known.index(op) % 10]


def _unit(top_gbps: float) -> tuple[str, float]:
    """The bandwidth unit for values up to ``top_gbps`` GB/s, and the factor from GB/s to it."""
    return ("GB/s", 1.0) if top_gbps >= 1 else ("MB/s", 1e3) if top_gbps >= 1e-3 else ("KB/s", 1e6)


class Timings(View):
    """Three stacked plots sharing the time axis; one point per replica per collective."""

    name = "timings"
    title = "interdist: collective timings"
    following: Following

    def __init__(self, **kwargs: Any) -> None:
        super().__init__()
        self.source = ColumnDataSource(
            {c: [] for c in COLUMNS}, name=f"interdist-{self.name}"
        )  # found by tests in the browser
        self._ops: list[str] = []
        self._rows: Appended[TimingPoint] = Appended(self.source, SHOWN)
        self._unit = _unit(0.0)
        height = kwargs.pop("height", 170)
        hover = [
            ("op", "@op (step @step, replica @replica)"),
            ("latency", "@latency_text"),
            ("bytes", "@bytes_text"),
            ("bus bandwidth", "@bus_text"),
        ]
        self.following = following = Following(self.name, TIME_WINDOWS, "30 s", self.lock)
        figs: list[Any] = []
        for field, label in [("latency_ms", "latency (ms)"), ("nbytes", "bytes"), ("bus", "bus bandwidth (GB/s)")]:
            fig = figure(
                x_range=following.x_range,  # one time axis for the three
                y_range=following.y_range(f"{self.name}-{field}", self._fit(field), zero=True),
                height=height,
                sizing_mode="stretch_width",
                tools="xpan,xwheel_zoom,reset",
                y_axis_label=label,
            )
            fig.scatter(x="time", y=field, color="color", source=self.source, size=5, legend_field="op")
            # plain numbers ("0.002", never "2.000e-3"); bytes as "136.5 KB"
            fig.yaxis.formatter = NumeralTickFormatter(format="0.0 b" if field == "nbytes" else "0.[000]")
            fig.add_tools(HoverTool(tooltips=hover))
            fig.add_layout(fig.legend[0], "right")  # outside the plot, so no point is hidden
            figs.append(fig)
        figs[-1].xaxis.axis_label = "seconds since first event"
        self.bus_unit = "GB/s"
        following.attach(*figs)
        self.figures = figs
        self.root = column(following.controls, *figs, sizing_mode="stretch_width", **kwargs)

    def _fit(self, field: str) -> Callable[[float, float], tuple[float, float] | None]:
        return lambda x0, x1: in_window(self.source.data["time"], self.source.data[field], x0, x1)

    def _update(self, model: DashboardModel) -> None:
        t0 = model.t0 or 0.0
        new = self._rows.new_items(model.timings, (t0, self.replica, self._unit))
        if new is None:  # all points again: the unit from all of them
            shown = [p for p in model.timings if self.shows_replica(p.replica)][-SHOWN:]
            self._unit = _unit(max((p.bus_gbps for p in shown), default=0.0))
        elif any(_unit(p.bus_gbps)[1] < self._unit[1] for p in new):
            self._unit = _unit(max(p.bus_gbps for p in new))  # a bigger unit: every point is sent again
        unit, scale = self._unit

        def columns(points: list[TimingPoint]) -> dict[str, Any]:
            return {
                "time": numbers([p.time - t0 for p in points]),
                "op": [p.op for p in points],
                "step": numbers([p.step for p in points]),
                "replica": numbers([p.replica for p in points]),
                "latency_ms": numbers([p.latency_s * 1e3 for p in points]),
                "nbytes": numbers([p.nbytes for p in points]),
                "bus_gbps": numbers([p.bus_gbps for p in points]),
                # the bandwidth axis in the unit that suits the numbers (MB/s on a laptop, GB/s on NVLink)
                "bus": numbers([p.bus_gbps * scale for p in points]),
                "latency_text": [fmt_duration(p.latency_s) for p in points],
                "bytes_text": [fmt_bytes(p.nbytes) for p in points],
                "bus_text": [fmt_rate(p.bus_gbps * 1e9) for p in points],
                "color": [op_color(p.op, self._ops) for p in points],
            }

        self._rows.send(model.timings, (t0, self.replica, self._unit), columns, lambda p: self.shows_replica(p.replica))
        self.following.show_rows(self.source.data["time"], self.source.data["time"], elapsed(model))
        label = f"bus bandwidth ({unit})"
        if self.figures[-1].yaxis[0].axis_label != label:
            self.figures[-1].yaxis[0].axis_label = label
