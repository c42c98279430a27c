"""Logged scalars: a line per replica for each number the replica functions log
(``idist.debug.log_scalar("loss", x)``), over the training steps (a ``run`` call is one step,
``run_steps(n)`` n of them)."""

from __future__ import annotations

from typing import Any

from bokeh.models import ColumnDataSource, HoverTool
from bokeh.palettes import Category10_10
from bokeh.plotting import figure

from interdist.dashboard.components._base import View, set_data
from interdist.dashboard.model import DashboardModel

COLUMNS = ["xs", "ys", "name", "replica", "label", "color", "dash", "last"]
DASHES = ["solid", "dashed", "dotted", "dotdash", "dashdot"]
# The newest points of each line: the browser gets at most this many per line at each redraw.
SHOWN = 1000


class Scalars(View):
    """Lines of logged scalars: colour by replica, dash by name."""

    name = "scalars"
    title = "interdist: logged scalars"

    def __init__(self, **kwargs: Any) -> None:
        super().__init__()
        self.source = ColumnDataSource({c: [] for c in COLUMNS}, name=f"interdist-{self.name}")
        self.root = figure(
            title="logged scalars (idist.debug.log_scalar), a line per replica",
            x_axis_label="training step",
            height=kwargs.pop("height", 280),
            sizing_mode="stretch_width",
            tools="pan,wheel_zoom,reset",
            **kwargs,
        )
        self.root.multi_line(
            xs="xs",
            ys="ys",
            line_color="color",
            line_dash="dash",
            line_width=2,
            source=self.source,
            legend_field="label",
        )
        self.root.add_tools(HoverTool(tooltips=[("", "@label"), ("last", "@last")]))
        self.root.legend.location = "top_right"

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
