"""Run progress: finished steps over time and steps per second."""

from __future__ import annotations

from typing import Any

from bokeh.layouts import column
from bokeh.models.sources import ColumnDataSource
from bokeh.models.widgets import Div
from bokeh.plotting import figure

from interdist.dashboard.components._base import TIME_WINDOWS, Appended, Following, View, elapsed, in_window, numbers
from interdist.dashboard.model import DashboardModel

COLUMNS = ["time", "step", "count"]
SHOWN = 2000


class Progress(View):
    """A status line (steps, steps/s, running function) and a plot of finished steps."""

    name = "progress"
    title = "interdist: progress"
    following: Following

    def __init__(self, **kwargs: Any) -> None:
        super().__init__()
        self.source = ColumnDataSource(
            {c: [] for c in COLUMNS}, name=f"interdist-{self.name}"
        )  # found by tests in the browser
        self._rows: Appended[tuple[float, int]] = Appended(self.source, SHOWN)
        self.status = Div(text="no steps yet")
        self.following = following = Following(self.name, TIME_WINDOWS, "30 s", self.lock)
        fit = lambda x0, x1: in_window(self.source.data["time"], self.source.data["count"], x0, x1)
        fig = figure(
            x_range=following.x_range,
            y_range=following.y_range(self.name, fit),
            height=kwargs.pop("height", 180),
            sizing_mode="stretch_width",
            tools="xpan,xwheel_zoom,reset",
            x_axis_label="seconds since first event",
            y_axis_label="steps finished",
        )
        fig.line(x="time", y="count", source=self.source)
        following.attach(fig)
        self.figure = fig
        self.root = column(self.status, following.controls, fig, sizing_mode="stretch_width", **kwargs)

    def _update(self, model: DashboardModel) -> None:
        t0 = model.t0 or 0.0
        total = model.steps_finished  # counted from the first step, also once the oldest left the window

        def columns(shown: list[tuple[float, int]]) -> dict[str, Any]:
            # ``shown`` is always the newest steps (no filter here): the last of them is the total
            return {
                "time": numbers([t - t0 for t, _ in shown]),
                "step": numbers([s for _, s in shown]),
                "count": numbers(range(total - len(shown) + 1, total + 1)),
            }

        self._rows.send(model.steps_done, t0, columns)
        self.following.show_rows(self.source.data["time"], self.source.data["time"], elapsed(model))
        running = (
            f", running {model.run_label(model.running_step)} ({model.last_fn})"
            if model.running_step is not None
            else ""
        )
        # the rate over the last steps (not since the dashboard opened, which counts the idle time between cells)
        own = model.failures
        self.status.text = (
            f"<b>{total}</b> step(s) finished on <b>{model.world_size}</b> replica(s), "
            f"<b>{model.steps_per_second():.1f}</b> steps/s{running}"
            + (f", <span style='color:red'>{len(own)} failure(s)</span>" if own else "")
        )
