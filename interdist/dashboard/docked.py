"""``strategy.dashboard(docked=True)``: the overview page, docked beside the notebook in JupyterLab.

The inline dashboard lives in a cell's output: Run All scrolls it away, and JupyterLab's
"Create New View for Cell Output" shows it elsewhere only while the widget state lives
("Loading widget..." after a reload). The docked dashboard is instead a Dask dashboard page,
``/individual-interdist-overview`` (``components.overview.Overview``), fed by the scheduler's
event log: nothing in the notebook page has to stay alive for it.

Displayed, a :class:`DockedDashboard` is a mime bundle of three renderings:

- ``application/vnd.interdist.dock+json`` (:class:`DockRequest`): for the JupyterLab extension
  (``interdist[lab]``, ``extension/src/dock.ts``), which finds the page through the server's
  ``/interdist/clusters`` (by scheduler address: a path through Jupyter's own proxy), opens it
  in a main-area panel split to the right of the notebook, and renders a one-line note with a
  link that brings the panel to the front. The panel opens once per notebook and page: running
  the cell again (after Kernel > Restart too) points the open panel at the new cluster instead.
  JupyterLab's layout restorer brings it back after a page reload (it is an IFrame of a server
  page, no widget state), and while it is open it follows the notebook's next cluster, as the
  sidebar's pages do. ``token`` is new for each display, so each output docks once: a reloaded
  page renders the saved output again without reopening a panel the user closed.
- ``text/html``: a link to the page (from the cluster's ``dashboard_link``, which honours Dask's
  ``distributed.dashboard.link``), for the classic Notebook, VS Code, or JupyterLab without the
  extension.
- ``text/plain``: the same link.
"""

from __future__ import annotations

import html
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypedDict

from interdist.dashboard.pages import OVERVIEW, PREFIX

MIME_TYPE = "application/vnd.interdist.dock+json"


class DockRequest(TypedDict):
    """What the JupyterLab extension reads (``IDockRequest`` in ``extension/src/dock.ts``)."""

    version: int
    page: str  # the page's name, "overview"
    path: str  # its path on the dashboard, "/individual-interdist-overview"
    scheduler_address: str  # how the extension finds the cluster in /interdist/clusters
    cluster_id: str | None  # the cluster's registry id (interdist.lab.registry), when it is listed
    url: str | None  # the page from the kernel's side (the dashboard link), or None without a dashboard
    token: str  # new for each display: the extension docks each output once


def page_url(dashboard_link: str | None, page: str = OVERVIEW) -> str | None:
    """The page's URL next to a cluster's dashboard link (``…/status``), or None without a link.

    >>> page_url("http://127.0.0.1:8787/status")
    'http://127.0.0.1:8787/individual-interdist-overview'
    >>> page_url("/user/ann/proxy/8787/status", "watchdog")
    '/user/ann/proxy/8787/individual-interdist-watchdog'

    The link's query (an embedded cluster's dashboard token) goes with it:

    >>> page_url("http://127.0.0.1:8787/status?token=abc")
    'http://127.0.0.1:8787/individual-interdist-overview?token=abc'
    """
    if not dashboard_link:
        return None
    without_fragment = dashboard_link.split("#", 1)[0]
    base, _, query = without_fragment.partition("?")
    base = base.removesuffix("/status").rstrip("/")
    return base + PREFIX + page + (f"?{query}" if query else "")


@dataclass(frozen=True)
class DockedDashboard:
    """A strategy's overview page, to display (see the module's docstring).

    >>> import interdist as idist
    >>> with idist.MirroredStrategy(["CPU:0", "CPU:1"]) as s:
    ...     bundle = s.dashboard(docked=True)._repr_mimebundle_()
    >>> sorted(bundle)
    ['application/vnd.interdist.dock+json', 'text/html', 'text/plain']
    >>> bundle["application/vnd.interdist.dock+json"]["path"]
    '/individual-interdist-overview'
    """

    scheduler_address: str
    dashboard_link: str | None
    cluster_id: str | None = None
    page: str = OVERVIEW

    @property
    def url(self) -> str | None:
        """The page's URL as the kernel knows it (see :func:`page_url`)."""
        return page_url(self.dashboard_link, self.page)

    def request(self) -> DockRequest:
        """A new request to dock the page (a new ``token``)."""
        return DockRequest(
            version=1,
            page=self.page,
            path=PREFIX + self.page,
            scheduler_address=self.scheduler_address,
            cluster_id=self.cluster_id,
            url=self.url,
            token=uuid.uuid4().hex,
        )

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, Any]:
        url = self.url
        if url is None:
            text = f"interdist dashboard ({self.page}): this cluster ({self.scheduler_address}) has no dashboard"
            link = html.escape(text)
        else:
            text = f"interdist dashboard ({self.page}): {url}"
            link = (
                f"<a href='{html.escape(url, quote=True)}' target='_blank' rel='noopener noreferrer'>"
                f"interdist dashboard: {html.escape(self.page)} &#8599;</a> "
                "<span style='color:#6b7280'>(a live page of the cluster's Dask dashboard; in JupyterLab with "
                "<code>interdist[lab]</code> it docks beside the notebook)</span>"
            )
        return {
            MIME_TYPE: self.request(),
            "text/html": f"<div class='interdist-docked'>{link}</div>",
            "text/plain": text,
        }

    def __repr__(self) -> str:
        return f"<DockedDashboard {self.page} of {self.scheduler_address}: {self.url}>"


def docked(lease: Any, page: str = OVERVIEW) -> DockedDashboard:
    """The docked dashboard of a strategy's workers (its ``_lease``: client, dashboard link, registry file)."""
    registry_file = getattr(lease, "registry_file", None)
    cluster_id = Path(registry_file).stem.split("-", 1)[1] if registry_file is not None else None
    return DockedDashboard(
        scheduler_address=str(lease.client.scheduler.address),
        dashboard_link=lease.dashboard_link,
        cluster_id=cluster_id,
        page=page,
    )
