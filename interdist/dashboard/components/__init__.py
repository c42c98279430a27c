"""One Bokeh view per file; each has a ``source``, a ``root`` and ``update(model)``."""

from __future__ import annotations

from ._base import View
from .placement import Placement
from .progress import Progress
from .replica_values import ReplicaValues
from .timeline import Timeline
from .timings import Timings
from .watchdog import Watchdog

# The order the inline dashboard stacks them in, and the names of the Dask pages.
VIEWS: dict[str, type[View]] = {cls.name: cls for cls in
                                (Progress, ReplicaValues, Placement, Timeline, Timings, Watchdog)}

__all__ = ["VIEWS", "Placement", "Progress", "ReplicaValues", "Timeline", "Timings", "View", "Watchdog"]
