"""The overview: the status strip, the watchdog and the collective timeline in one column.

What to keep in view while a notebook runs, on one page narrow enough for a panel docked
beside the notebook (``strategy.dashboard(docked=True)`` opens it there in JupyterLab): who
is doing what (the chips, the summary, the failures), what is stuck, and where the time
goes between the replicas. It draws nothing itself: it holds one of each of those views and
redraws them. It is a Dask page (``/individual-interdist-overview``, see ``pages.PAGE_VIEWS``)
but not one of the inline dashboard's ``VIEWS``, which shows the same three views already.
"""

from __future__ import annotations

from typing import Any

from bokeh.layouts import column
from bokeh.models.widgets import Div

from interdist.dashboard.components._base import View
from interdist.dashboard.components.status import ReplicaStatusStrip
from interdist.dashboard.components.timeline import Timeline
from interdist.dashboard.components.watchdog import Watchdog
from interdist.dashboard.model import DashboardModel


class Overview(View):
    """Status strip, watchdog and timeline; ``source`` is the status strip's (one row per chip)."""

    name = "overview"
    title = "interdist: overview"

    def __init__(self, threshold_s: float = 5.0, **kwargs: Any) -> None:
        super().__init__()
        self.status = ReplicaStatusStrip(threshold_s=threshold_s)
        self.watchdog = Watchdog(threshold_s=threshold_s, height=120)
        self.watchdog.failures.visible = False  # the status strip lists the failures already
        self.timeline = Timeline(height=220)
        self.parts: list[View] = [self.status, self.watchdog, self.timeline]
        self.source = self.status.source
        self.root = column(
            self.status.root,
            Div(text="<b>stuck collectives</b>"),
            self.watchdog.root,
            self.timeline.root,
            sizing_mode="stretch_width",
            **kwargs,
        )

    def update(self, model: DashboardModel, force: bool = False) -> bool:
        """Redraw each part that is due (each keeps its own clock and skips what did not change)."""
        changed = False
        for part in self.parts:
            part.replica, part.variable = self.replica, self.variable
            changed = part.update(model, force) or changed
        return changed

    def _update(self, model: DashboardModel) -> None:
        self.update(model, force=True)
