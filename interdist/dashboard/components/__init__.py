"""One Bokeh view per file; each has a ``source``, a ``root`` and ``update(model)``."""

from __future__ import annotations

from interdist.dashboard.components._base import View
from interdist.dashboard.components.placement import Placement
from interdist.dashboard.components.progress import Progress
from interdist.dashboard.components.replica_values import ReplicaValues
from interdist.dashboard.components.timeline import Timeline
from interdist.dashboard.components.timings import Timings
from interdist.dashboard.components.watchdog import Watchdog

# The order the inline dashboard stacks them in, and the names of the Dask pages.
VIEWS: dict[str, type[View]] = {
    cls.name: cls for cls in (Progress, ReplicaValues, Placement, Timeline, Timings, Watchdog)
}

__all__ = ["VIEWS", "Placement", "Progress", "ReplicaValues", "Timeline", "Timings", "View", "Watchdog"]
