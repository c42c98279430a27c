"""One Bokeh view per file; each has a ``source``, a ``root`` and ``update(model)``."""

from __future__ import annotations

from interdist.dashboard.components._base import View
from interdist.dashboard.components.overview import Overview
from interdist.dashboard.components.placement import Placement
from interdist.dashboard.components.placement_diagram import PlacementDiagram
from interdist.dashboard.components.progress import Progress
from interdist.dashboard.components.replica_values import ReplicaValues
from interdist.dashboard.components.scalars import Scalars
from interdist.dashboard.components.status import ReplicaStatusStrip
from interdist.dashboard.components.timeline import Timeline
from interdist.dashboard.components.timings import Timings
from interdist.dashboard.components.value_heatmap import ValueHeatmap
from interdist.dashboard.components.watchdog import Watchdog

# The inline dashboard's views in its order (the status strip on top, the others in tabs), each also a Dask
# page. Pages that only compose these (``Overview``) are not listed: the inline dashboard shows their parts
# already; ``dashboard.pages.PAGE_VIEWS`` adds them.
VIEWS: dict[str, type[View]] = {
    cls.name: cls
    for cls in (
        ReplicaStatusStrip,
        Progress,
        ReplicaValues,
        ValueHeatmap,
        Scalars,
        PlacementDiagram,
        Placement,
        Timeline,
        Timings,
        Watchdog,
    )
}

__all__ = [
    "VIEWS",
    "Overview",
    "Placement",
    "PlacementDiagram",
    "Progress",
    "ReplicaStatusStrip",
    "ReplicaValues",
    "Scalars",
    "Timeline",
    "Timings",
    "ValueHeatmap",
    "View",
    "Watchdog",
]
