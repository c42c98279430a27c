"""Replica values: one row per replica per variable, with a divergence marker.

Divergence (mirrored copies whose checksums differ) is the thing a user of
``MirroredStrategy`` most needs to see, so diverged rows are red and say since
which step.
"""

from __future__ import annotations

from typing import Any

from bokeh.layouts import column
from bokeh.models.sources import ColumnDataSource
from bokeh.models.widgets import DataTable, Div, NumberFormatter, StringFormatter, TableColumn

from interdist.dashboard.components._base import View, fit_height, set_data
from interdist.dashboard.model import DashboardModel
from interdist.dashboard.placement_layout import differing_copies
from interdist.dashboard.units import fmt_values, short_devices

COLUMNS = [
    "var_id",
    "variable",
    "replica",
    "shape",
    "dtype",
    "device",
    "where",
    "values",
    "values_color",
    "norm",
    "checksum",
    "step",
    "status",
    "color",
]


class ReplicaValues(View):
    """Table of every variable's copy on every replica."""

    name = "replica-values"
    title = "interdist: replica values"

    def __init__(self, **kwargs: Any) -> None:
        super().__init__()
        self.source = ColumnDataSource(
            {c: [] for c in COLUMNS}, name=f"interdist-{self.name}"
        )  # found by tests in the browser
        text = StringFormatter(text_color="color")  # red for diverged rows, from the "color" column
        num = NumberFormatter(format="0.000000", text_color="color")
        # a copy whose values differ from the other copies' (at the same step) is red in this column
        values = StringFormatter(text_color="values_color", font_style="bold")
        cols = [
            TableColumn(field="variable", title="variable", formatter=text, width=110),
            TableColumn(field="replica", title="replica", width=55),
            TableColumn(field="where", title="device", width=90),  # the part of the device string that differs
            TableColumn(field="values", title="values", formatter=values, width=240),
            TableColumn(field="shape", title="shape", width=60),
            TableColumn(field="dtype", title="dtype", width=60),
            TableColumn(field="norm", title="norm", formatter=num, width=90),
            TableColumn(field="checksum", title="checksum", formatter=num, width=90),
            TableColumn(field="step", title="run", width=100),
            TableColumn(field="status", title="status", formatter=text, width=170),
        ]
        self.summary = Div(text="no variables yet")
        self.table = DataTable(
            source=self.source,
            columns=cols,
            index_position=None,
            sizing_mode="stretch_width",
            height=kwargs.pop("height", 300),
        )
        self.root = column(self.summary, self.table, sizing_mode="stretch_width", **kwargs)

    def _update(self, model: DashboardModel) -> None:
        data: dict[str, list[Any]] = {c: [] for c in COLUMNS}
        short = short_devices(c.device for c in model.copies.values())
        differs = differing_copies(model)
        for (var_id, replica), c in sorted(model.copies.items()):
            info = model.variables.get(var_id)
            name = info.name if info is not None else f"var {var_id}"
            if not self.shows_replica(replica) or (self.variable is not None and name != self.variable):
                continue
            kind, status = model.variable_status(var_id)
            color = {"diverged": "red", "repaired": "#0f766e"}.get(kind, "black")
            row = {
                "var_id": var_id,
                "variable": name,
                "replica": replica,
                "shape": str(tuple(info.shape)) if info is not None else "?",
                "dtype": info.dtype if info is not None else "?",
                "device": c.device,
                "where": short.get(c.device, c.device),
                # a larger variable's events carry its block means (a 1/16 of it each), not its elements
                "values": fmt_values(c.values) if c.values else (f"≈ {fmt_values(c.sketch)}" if c.sketch else ""),
                "values_color": "red" if (var_id, replica) in differs else "black",
                "norm": c.norm,
                "checksum": c.checksum,
                "step": model.run_label(c.step),
                "status": status,
                "color": color,
            }
            for k in COLUMNS:
                data[k].append(row[k])
        set_data(self.source, data)
        fit_height(self.table, len(data["variable"]))
        n_div = len(model.diverged_since)
        self.summary.text = f"<b>{len(model.variables)}</b> variable(s) on <b>{len(model.replicas)}</b> replica(s)" + (
            f" &mdash; <span style='color:red'><b>{n_div} diverged</b></span>" if n_div else " &mdash; copies agree"
        )
