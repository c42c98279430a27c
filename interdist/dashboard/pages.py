"""The views as pages of the Dask dashboard: ``/individual-interdist-<view>``.

Pages in ``distributed.dashboard.scheduler.applications`` when a scheduler starts
its HTTP server are served by it (it reads the dict once), so the embedded
cluster registers them just before ``LocalCluster(...)`` and ``--preload
interdist.dashboard`` does it on import. A scheduler already running (a user's own
``LocalCluster`` made before ``import interdist``, a ``dask scheduler``) gets them
when a strategy first uses it: ``PagesPlugin``, sent with ``register_plugin``, adds
a Bokeh application with the pages beside Dask's (:func:`add_pages`), and lists them
in the dashboard's "More" menu. The "individual-" prefix is what makes
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
    """Add the interdist pages to the Dask dashboard's applications (idempotent).

    A scheduler started after this serves them (``import interdist.dashboard`` calls it).

    >>> from distributed.dashboard.scheduler import applications
    >>> from interdist.dashboard import register_pages
    >>> register_pages()
    >>> "/individual-interdist-overview" in applications
    True
    """
    from distributed.dashboard.scheduler import applications

    for route in page_names():
        if route not in applications:
            applications[route] = functools.partial(_page, route[len(PREFIX) :])


def dask_setup(scheduler: Any) -> None:
    """``dask scheduler --preload interdist.dashboard``: collect events from the start.

    Dask calls it with the scheduler as it starts; here it is called on a running one:

    >>> from distributed import Client, LocalCluster
    >>> from interdist.dashboard import dask_setup
    >>> def setup(dask_scheduler):
    ...     dask_setup(dask_scheduler)
    ...     return "interdist-dashboard" in dask_scheduler.plugins
    >>> with LocalCluster(n_workers=0, dashboard_address="127.0.0.1:0") as cluster, Client(cluster) as client:
    ...     client.run_on_scheduler(setup)
    True
    """
    ensure_plugin(scheduler)
    add_pages(scheduler)  # a preload runs as the scheduler starts, after its HTTP server read the pages


PAGES_PLUGIN_NAME = "interdist-pages"


class PagesPlugin(SchedulerPlugin):
    """Adds the interdist pages to the dashboard of a scheduler that is running already (``add_pages``).

    A strategy sends it to the scheduler of every cluster it is given (``client.register_plugin``), so
    the pages are there however and whenever the cluster was made; on a scheduler that serves them
    already (started after ``import interdist``, an embedded cluster's) it does nothing.
    """

    name = PAGES_PLUGIN_NAME
    idempotent = True

    async def start(self, scheduler: Any) -> None:
        try:
            add_pages(scheduler)
        except Exception:  # the dashboard is an extra: the strategy goes on without its pages
            logger.warning("interdist dashboard: could not add the pages to %s", scheduler.address, exc_info=True)


def add_pages(scheduler: Any) -> list[str]:
    """Serve the interdist pages from ``scheduler``'s running dashboard; the routes added (none when it
    serves them already, or has no Bokeh dashboard). Runs on the scheduler's event loop."""
    register_pages()  # and every scheduler this process starts from now on reads them at its start
    http = getattr(scheduler, "http_application", None)
    dask_apps = [a for a in getattr(http, "applications", ()) if hasattr(a, "app_paths")]
    if http is None or not dask_apps:
        return []  # no dashboard (dashboard=False, or Bokeh is missing there)
    from distributed.dashboard.core import BokehApplication
    from distributed.dashboard.scheduler import applications, template_variables
    from tornado.ioloop import IOLoop

    served = set().union(*(a.app_paths for a in dask_apps))
    missing = {route: applications[route] for route in page_names() if route not in served}
    if not missing:
        return []
    variables = template_variables(scheduler)  # the dict Dask's pages render their menus from
    pages = BokehApplication(missing, scheduler, prefix=dask_apps[0].prefix, template_variables=variables)  # type: ignore[no-untyped-call]  # distributed is untyped
    http.add_application(pages)  # asked after Dask's own application, which answers 404 for these routes
    pages.initialize(IOLoop.current())
    pages.start()
    plots = variables.get("plots")
    if isinstance(plots, list):  # Dask's "More" menu: its list, shared with its pages
        listed = {p.get("url") for p in plots if isinstance(p, dict)}
        for route in missing:
            url = route.strip("/")
            if url not in listed:
                plots.append({"url": url, "name": " ".join(url.split("-")[1:]).title()})
        plots.sort(key=lambda d: d.get("name", "") if isinstance(d, dict) else "")
    logger.debug("interdist dashboard: added %d pages to the dashboard of %s", len(missing), scheduler.address)
    return sorted(missing)
