"""Logged scalars: a line per replica for each number the replica functions log
(``idist.debug.log_scalar("loss", x)``), over the training steps (a ``run`` call is one step,
``run_steps(n)`` n of them)."""

from __future__ import annotations

from typing import Any

from bokeh.layouts import column
from bokeh.models import ColumnDataSource, HoverTool
from bokeh.palettes import Category10_10
from bokeh.plotting import figure

from interdist.dashboard.components._base import STEP_WINDOWS, Following, View, in_window, numbers, set_data
from interdist.dashboard.model import DashboardModel

COLUMNS = ["xs", "ys", "name", "replica", "label", "color", "dash", "last"]
DASHES = ["solid", "dashed", "dotted", "dotdash", "dashdot"]
# The newest points of each line: the browser gets at most this many per line at each redraw.
SHOWN = 1000


class Scalars(View):
    """Lines of logged scalars: colour by replica, dash by name."""

    name = "scalars"
    title = "interdist: logged scalars"
    following: Following

    def __init__(self, **kwargs: Any) -> None:
        super().__init__()
        self.source = ColumnDataSource({c: [] for c in COLUMNS}, name=f"interdist-{self.name}")
        self._lines: list[tuple[Any, Any]] = []  # each line's steps and values, as arrays
        self.following = following = Following(self.name, STEP_WINDOWS, "200 steps", self.lock)
        # x only: the y range is fitted to the lines in the window at each redraw
        self.figure = fig = figure(
            x_range=following.x_range,
            y_range=following.y_range(self.name, self._fit),
            title="logged scalars (idist.debug.log_scalar), a line per replica",
            x_axis_label="training step",
            height=kwargs.pop("height", 280),
            sizing_mode="stretch_width",
            tools="xpan,xwheel_zoom,reset",
            **kwargs,
        )
        fig.multi_line(
            xs="xs",
            ys="ys",
            line_color="color",
            line_dash="dash",
            line_width=2,
            source=self.source,
            legend_field="label",
        )
        fig.add_tools(HoverTool(tooltips=[("", "@label"), ("last", "@last")]))
        fig.legend.location = "top_right"
        following.attach(fig)
        self.root = column(following.controls, fig, sizing_mode="stretch_width")

    def _fit(self, x0: float, x1: float) -> tuple[float, float] | None:
        seen = [b for xs, ys in self._lines if (b := in_window(xs, ys, x0, x1))]
        return (min(lo for lo, _ in seen), max(hi for _, hi in seen)) if seen else None

    def _update(self, model: DashboardModel) -> None:
        data: dict[str, list[Any]] = {c: [] for c in COLUMNS}
        for k, name in enumerate(sorted(model.scalars)):
            for r, points in sorted(model.scalars[name].items()):
                if not self.shows_replica(r):
                    continue
                pts = list(points)[-SHOWN:]
                row = (
                    [p[0] for p in pts],
                    [p[2] for p in pts],
                    name,
                    r,
                    f"{name} (replica {r})",
                    Category10_10[r % 10],
                    DASHES[k % len(DASHES)],
                    f"{pts[-1][2]:.6g}" if pts else "",
                )
                for c, v in zip(COLUMNS, row, strict=True):
                    data[c].append(v)
        set_data(self.source, data)
        # as arrays once: each window's y range is fitted to them (STEP_WINDOWS)
        self._lines = [(numbers(xs), numbers(ys)) for xs, ys in zip(data["xs"], data["ys"], strict=True)]
        firsts, lasts = [xs[0] for xs in data["xs"] if xs], [xs[-1] for xs in data["xs"] if xs]
        self.following.show(min(firsts, default=None), max(lasts, default=None))
