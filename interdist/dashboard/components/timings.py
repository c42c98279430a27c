"""Collective timings over time: latency, bytes and bus bandwidth per op.

Bus bandwidth uses NCCL's convention (an all-reduce moves 2(n-1)/n of its bytes
per link) so different ops and world sizes compare against the link's speed.
"""

from __future__ import annotations

from typing import Any

from bokeh.layouts import column
from bokeh.models.sources import ColumnDataSource
from bokeh.models.tools import HoverTool
from bokeh.palettes import Category10_10
from bokeh.plotting import figure

from interdist.dashboard.components._base import View, set_data
from interdist.dashboard.model import DashboardModel

COLUMNS = ["time", "op", "step", "replica", "latency_ms", "nbytes", "bus_gbps", "color"]
SHOWN = 1000


def op_color(op: str, known: list[str]) -> str:
    """A stable colour per op name, in the order the ops first appeared."""
    if op not in known:
        known.append(op)
    return Category10_10[known.index(op) % 10]


class Timings(View):
    """Three stacked plots sharing the time axis; one point per replica per collective."""

    name = "timings"
    title = "interdist: collective timings"

    def __init__(self, **kwargs: Any) -> None:
        super().__init__()
        self.source = ColumnDataSource(
            {c: [] for c in COLUMNS}, name=f"interdist-{self.name}"
        )  # found by tests in the browser
        self._ops: list[str] = []
        height = kwargs.pop("height", 170)
        hover = [
            ("op", "@op (step @step, replica @replica)"),
            ("latency", "@latency_ms{0.000} ms"),
            ("bytes", "@nbytes"),
            ("bus bandwidth", "@bus_gbps{0.000} GB/s"),
        ]
        figs: list[Any] = []
        for field, label in [("latency_ms", "latency (ms)"), ("nbytes", "bytes"), ("bus_gbps", "bus bandwidth (GB/s)")]:
            # Share the first plot's time axis (an x_range of None would make Bokeh try pandas).
            shared: dict[str, Any] = {"x_range": figs[0].x_range} if figs else {}
            fig = figure(
                height=height, sizing_mode="stretch_width", tools="xpan,xwheel_zoom,reset", y_axis_label=label, **shared
            )
            fig.scatter(x="time", y=field, color="color", source=self.source, size=5, legend_field="op")
            fig.add_tools(HoverTool(tooltips=hover))
            fig.add_layout(fig.legend[0], "right")  # outside the plot, so no point is hidden
            figs.append(fig)
        figs[-1].xaxis.axis_label = "seconds since first event"
        self.figures = figs
        self.root = column(*figs, sizing_mode="stretch_width", **kwargs)

    def _update(self, model: DashboardModel) -> None:
        t0 = model.t0 or 0.0
        points = [p for p in model.timings if self.shows_replica(p.replica)][-SHOWN:]
        data: dict[str, list[Any]] = {
            "time": [p.time - t0 for p in points],
            "op": [p.op for p in points],
            "step": [p.step for p in points],
            "replica": [p.replica for p in points],
            "latency_ms": [p.latency_s * 1e3 for p in points],
            "nbytes": [p.nbytes for p in points],
            "bus_gbps": [p.bus_gbps for p in points],
            "color": [op_color(p.op, self._ops) for p in points],
        }
        set_data(self.source, data)
