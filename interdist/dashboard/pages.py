"""The views as pages of the Dask dashboard: ``/individual-interdist-<view>``.

Pages must be in ``distributed.dashboard.scheduler.applications`` before a
scheduler starts its HTTP server (it reads the dict once), so the embedded
cluster registers them just before ``LocalCluster(...)`` and ``--preload
interdist.dashboard`` does it on import. The "individual-" prefix is what makes
the Dask dashboard's "More" menu and dask-labextension list them.

Events come from the scheduler's "interdist" topic through a scheduler plugin;
the pages and the plugin share the scheduler's event loop, so no locking.

One page per view of ``components.VIEWS``, and ``/individual-interdist-overview``
(``components.overview.Overview``: the status strip, the watchdog and the timeline in one
column), the page ``strategy.dashboard(docked=True)`` docks beside a notebook in JupyterLab.
Being fed by the scheduler, a page stays live while the notebook's cells run, whatever the
notebook shows or scrolls to, and survives a page reload (it holds no widget state).
"""

from __future__ import annotations

import functools
import logging
from typing import TYPE_CHECKING, Any

from distributed.diagnostics.plugin import SchedulerPlugin

from interdist import events
from interdist.dashboard.model import DashboardModel, ModelHub

if TYPE_CHECKING:
    from interdist.dashboard.components import View

logger = logging.getLogger("interdist")

PLUGIN_NAME = "interdist-dashboard"
PREFIX = "/individual-interdist-"
#: The page ``strategy.dashboard(docked=True)`` docks (``PREFIX + OVERVIEW``).
OVERVIEW = "overview"
# Bokeh pushes each change to the browser; 4 redraws a second look live and cost little.
INTERVAL_MS = 250


class EventsPlugin(SchedulerPlugin):
    """Feeds one model per replica group from the scheduler's "interdist" topic."""

    name = PLUGIN_NAME
    idempotent = True

    def __init__(self) -> None:
        self.hub = ModelHub()
        self.scheduler: Any = None

    async def start(self, scheduler: Any) -> None:
        self.scheduler = scheduler

    def log_event(self, topic: str, msg: Any) -> None:
        if topic != events.TOPIC or not isinstance(msg, dict):
            return
        worker = msg.get("worker")
        for m in events.unpack_batch(msg):
            try:
                for event in events.expand(m):
                    self.hub.feed(event, worker)
            except Exception:
                logger.debug("interdist dashboard: skipped event %r", m, exc_info=True)

    def model(self) -> DashboardModel:
        return self.hub.current()


def ensure_plugin(scheduler: Any) -> EventsPlugin:
    """The scheduler's events plugin, added (and caught up on the logged events) on first use."""
    plugin = scheduler.plugins.get(PLUGIN_NAME)
    if isinstance(plugin, EventsPlugin):
        return plugin
    plugin = EventsPlugin()
    plugin.scheduler = scheduler
    # Catch up first: the topic keeps the last batches, so a page opened after
    # training started still shows the run from (nearly) its beginning.
    for _, msg in scheduler.get_events(events.TOPIC):
        plugin.log_event(events.TOPIC, msg)
    scheduler.add_plugin(plugin, name=PLUGIN_NAME)
    return plugin


def page_views() -> dict[str, type[View]]:
    """The view of each page, by name: every inline view, then the pages that compose them."""
    from interdist.dashboard.components import VIEWS, Overview

    return {**VIEWS, Overview.name: Overview}


def _page(view_name: str, scheduler: Any, extra: dict[str, Any], doc: Any) -> None:
    from distributed.dashboard.components.scheduler import BOKEH_THEME

    plugin = ensure_plugin(scheduler)
    view = page_views()[view_name]()
    view.update(plugin.model())

    def tick() -> None:
        try:
            view.update(plugin.model())
        except Exception:
            logger.exception("interdist dashboard: could not update %s", view_name)

    doc.add_periodic_callback(tick, INTERVAL_MS)
    doc.add_root(view.root)
    doc.title = view.title
    doc.theme = BOKEH_THEME


def page_names() -> list[str]:
    return [PREFIX + name for name in page_views()]


def register_pages() -> None:
    """Add the interdist pages to the Dask dashboard's applications (idempotent)."""
    from distributed.dashboard.scheduler import applications

    for route in page_names():
        if route not in applications:
            applications[route] = functools.partial(_page, route[len(PREFIX) :])


def dask_setup(scheduler: Any) -> None:
    """``dask scheduler --preload interdist.dashboard``: collect events from the start."""
    ensure_plugin(scheduler)
