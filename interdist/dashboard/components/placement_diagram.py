"""Placement as a diagram: hosts, workers, devices, and each variable's copies (``placement_layout``).

The same picture as ``idist.debug.visualize_placement``'s SVG, live: boxes and chips are quads of
one source, their labels a text glyph; hovering a chip gives the variable's shape and dtype.
"""

from __future__ import annotations

from typing import Any

from bokeh.models import ColumnDataSource, HoverTool, Range1d
from bokeh.plotting import figure

from interdist.dashboard.components._base import View, set_data
from interdist.dashboard.model import DashboardModel
from interdist.dashboard.placement_layout import DIFFERS, from_model, layout

BOX_COLUMNS = ["left", "right", "top", "bottom", "kind", "label", "sub", "fill", "line", "width"]
TEXT_COLUMNS = ["x", "y", "text", "weight", "color"]


class PlacementDiagram(View):
    """Nested boxes: host > worker > device (replica, parameter device) > the variables' copies."""

    name = "placement-diagram"
    title = "interdist: placement diagram"

    def __init__(self, **kwargs: Any) -> None:
        super().__init__()
        self.source = ColumnDataSource({c: [] for c in BOX_COLUMNS}, name=f"interdist-{self.name}")
        self.text_source = ColumnDataSource({c: [] for c in TEXT_COLUMNS})
        self.x_range = Range1d(start=0, end=400)
        self.y_range = Range1d(start=200, end=0)  # y grows downwards, as the layout's does
        self.figure = fig = figure(
            x_range=self.x_range,
            y_range=self.y_range,
            width=400,
            height=200,
            sizing_mode="fixed",  # the picture's own size: in a stretching layout it was cut to a sliver
            tools="",
            toolbar_location=None,
            min_border=0,
            **kwargs,
        )
        fig.axis.visible = False
        fig.grid.visible = False
        fig.outline_line_color = None
        boxes = fig.quad(
            left="left",
            right="right",
            top="top",
            bottom="bottom",
            fill_color="fill",
            line_color="line",
            line_width="width",
            source=self.source,
        )
        fig.text(
            x="x",
            y="y",
            text="text",
            text_font_size="12px",
            text_font_style="weight",
            text_color="color",
            text_baseline="top",
            source=self.text_source,
        )
        fig.add_tools(HoverTool(renderers=[boxes], tooltips=[("", "@label"), ("", "@sub")], attachment="below"))
        self.root = fig

    def _update(self, model: DashboardModel) -> None:
        rects, width, height = layout(from_model(model, self.replica, self.variable))
        boxes: dict[str, list[Any]] = {c: [] for c in BOX_COLUMNS}
        texts: dict[str, list[Any]] = {c: [] for c in TEXT_COLUMNS}

        def text(x: float, y: float, t: str, weight: str = "normal", color: str = "#333333") -> None:
            for k, v in zip(TEXT_COLUMNS, (x, y, t, weight, color), strict=True):
                texts[k].append(v)

        for r in rects:
            line_w = 2.5 if r.line == DIFFERS else 1
            row = (r.x, r.x + r.w, r.y, r.y + r.h, r.kind, r.label, r.sub, r.fill, r.line, line_w)
            for k, v in zip(BOX_COLUMNS, row, strict=True):
                boxes[k].append(v)
            if r.kind == "copy":
                text(r.x + 6, r.y + 3, r.label, color=DIFFERS if r.line == DIFFERS else "#222222")
            elif r.kind in ("device", "parameter", "ps"):
                text(r.x + 6, r.y + 4, r.label, "bold")
                text(r.x + 6, r.y + 19, r.sub, color="#555555")
            else:
                text(r.x + 6, r.y + 4, r.label)
        if not rects:
            text(8, 8, "no replicas yet", color="#777777")
        set_data(self.source, boxes)
        set_data(self.text_source, texts)
        w, h = int(width), int(height)
        fig = self.figure
        if fig.width != w or fig.height != h:
            fig.width, fig.height = w, h
            self.x_range.end = w
            self.y_range.start = h
