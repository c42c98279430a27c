"""Placement: hosts, then workers, then devices, then the replicas and variables on each.

Parameter devices (central storage) are listed apart: their variables have one
copy for the whole group, and the worker that holds it is not where the other
replicas compute.
"""

from __future__ import annotations

from typing import Any

from bokeh.layouts import column
from bokeh.models.sources import ColumnDataSource
from bokeh.models.widgets import DataTable, Div, TableColumn

from interdist.dashboard.components._base import View, fit_height, set_data
from interdist.dashboard.model import DashboardModel
from interdist.dashboard.placement_layout import host_of
from interdist.dashboard.units import short_devices

COLUMNS = ["host", "worker", "device", "where", "replica", "variables"]


class Placement(View):
    """Two tables: the replicas' devices, and the parameter devices."""

    name = "placement"
    title = "interdist: placement"

    def __init__(self, **kwargs: Any) -> None:
        super().__init__()
        self.source = ColumnDataSource(
            {c: [] for c in COLUMNS}, name=f"interdist-{self.name}"
        )  # found by tests in the browser
        self.param_source = ColumnDataSource({c: [] for c in COLUMNS})
        cols = [
            TableColumn(field="host", title="host", width=110),
            TableColumn(field="worker", title="worker", width=190),
            TableColumn(field="where", title="device", width=110),  # the part that differs (CPU:1)
            TableColumn(field="replica", title="replica", width=60),
            TableColumn(field="variables", title="variables"),
            TableColumn(field="device", title="full device name", width=330),
        ]
        height = kwargs.pop("height", 200)
        self.table = DataTable(
            source=self.source, columns=cols, index_position=None, sizing_mode="stretch_width", height=height
        )
        self.param_table = DataTable(
            source=self.param_source,
            columns=cols,
            index_position=None,
            sizing_mode="stretch_width",
            height=max(80, height // 2),
        )
        # Shown only when some variable has one copy for the group (central storage): not under Mirrored.
        self.param_title = Div(text="<b>Parameter devices</b> (one copy per variable for the group)", visible=False)
        self.param_table.visible = False
        self.root = column(
            Div(text="<b>Replicas</b> (host &rarr; worker &rarr; device)"),
            self.table,
            self.param_title,
            self.param_table,
            sizing_mode="stretch_width",
            **kwargs,
        )

    def _update(self, model: DashboardModel) -> None:
        central: dict[tuple[int, str], list[str]] = {}  # (holding replica, device) -> names
        per_replica: dict[int, list[str]] = {r: [] for r in model.replicas}
        for (var_id, replica), c in sorted(model.copies.items()):
            info = model.variables.get(var_id)
            name = info.name if info is not None else f"var {var_id}"
            if model.copies_of(var_id) == 1 and model.world_size > 1:
                central.setdefault((replica, c.device), []).append(name)
            else:
                per_replica.setdefault(replica, []).append(name)
        short = short_devices([*(model.devices_of(r) for r in per_replica), *(d for _, d in central)])
        rows = []
        for r in sorted(per_replica):
            if not self.shows_replica(r):
                continue
            worker = model.workers.get(r, "")
            rows.append(
                {
                    "host": host_of(worker),
                    "worker": worker,
                    "device": model.devices_of(r),
                    "where": short.get(model.devices_of(r), ""),
                    "replica": str(r),
                    "variables": ", ".join(self._names(per_replica[r])),
                }
            )
        # hosts first, then each host's workers in replica order (one worker per replica)
        rows.sort(key=lambda row: (row["host"], int(row["replica"])))
        params = []
        for (r, device), names in sorted(central.items()):
            worker = model.workers.get(r, "")
            params.append(
                {
                    "host": host_of(worker),
                    "worker": worker,
                    "device": device,
                    "where": short.get(device, device),
                    "replica": f"held by {r}",
                    "variables": ", ".join(self._names(names)),
                }
            )
        set_data(self.source, {c: [row[c] for row in rows] for c in COLUMNS})
        set_data(self.param_source, {c: [row[c] for row in params] for c in COLUMNS})
        fit_height(self.table, len(rows))
        fit_height(self.param_table, len(params))
        if self.param_table.visible != bool(params):
            self.param_table.visible = self.param_title.visible = bool(params)

    def _names(self, names: list[str]) -> list[str]:
        return [n for n in names if self.variable is None or n == self.variable]
