"""``GET /interdist/clusters``: the live interdist clusters and their dashboard pages, as JSON.

Pages of a dashboard on this host are given as paths through Jupyter's own proxy
(jupyter-server-proxy's ``{base_url}proxy/{port}/…``, as dask-labextension does): the
browser reaches them wherever Jupyter runs (JupyterHub, Binder, a remote server), behind
Jupyter's authentication, and Bokeh's websocket goes through the same proxy (the Dask
dashboard accepts any websocket origin by default:
``distributed.scheduler.dashboard.bokeh-application.allow_websocket_origin``). A dashboard
on another host keeps its absolute URL. Relative dashboard links, such as Dask's
``distributed.dashboard.link`` on JupyterHub (``{JUPYTERHUB_SERVICE_PREFIX}proxy/{port}/status``),
are accepted.

An embedded cluster's dashboard answers only requests that show its token (``?token=`` in the link
its registry file holds; ``interdist/lab/dashboard_auth.py``). This server reads the list of pages
with the token in an ``Authorization`` header; for pages through Jupyter's proxy it sets the token's
cookie (HttpOnly, SameSite=Strict, its path the proxy's ``{base_url}proxy/{port}/``) on its answer to
``/interdist/clusters``, which only Jupyter's own authentication reaches, so those page URLs carry
no token; pages reached directly (another host, no proxy) carry it as ``?token=``.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import os
import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode, urlsplit

import tornado.web
from jupyter_server.base.handlers import APIHandler
from jupyter_server.utils import url_path_join
from tornado.httpclient import AsyncHTTPClient

from interdist.lab import registry
from interdist.lab.dashboard_auth import cookie_name, token_of, with_query

PAGES_TIMEOUT_S = 3.0
PROXY_EXTENSION = "jupyter_server_proxy"
_PROXY_PATH = re.compile(r"(?:^|/)proxy/(\d{1,5})(?:/|$)")


def dashboard_origin(link: str | None) -> str | None:
    """``http://host:port`` of a dashboard link; None for anything but http(s)."""
    if not link:
        return None
    parts = urlsplit(link)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        return None
    return f"{parts.scheme}://{parts.netloc}"


def is_local_host(host: str | None) -> bool:
    """Whether ``host`` names this machine's loopback (what jupyter-server-proxy's ``proxy/{port}`` reaches)."""
    if not host:
        return False
    if host.lower() in ("localhost", "0.0.0.0", "::"):  # a dashboard bound to every interface listens on loopback
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True)
class Dashboard:
    """Where a cluster's dashboard is: ``fetch_root`` is what this server reads ``individual-plots.json``
    from; ``page_root`` prefixes the page paths the browser opens; ``url`` is the dashboard's own page for
    the browser. ``token``: what the dashboard asks for (from the link); ``proxy_port``: the dashboard's
    port when the browser reaches it through Jupyter's proxy (then by the token's cookie, and the page URLs
    carry no token), else None (then the page URLs carry ``?token=``)."""

    fetch_root: str
    page_root: str
    url: str
    token: str | None = None
    proxy_port: int | None = None

    @property
    def page_query(self) -> str:
        """What the browser's page URLs add: the token where no cookie carries it."""
        return "" if self.token is None or self.proxy_port is not None else urlencode({"token": self.token})


def locate_dashboard(link: str | None, base_url: str, proxy: bool = True, request_origin: str = "") -> Dashboard | None:
    """Where the browser and this server reach the dashboard of ``link`` (None: no usable link).

    - ``http://127.0.0.1:8787/status`` (this host), with jupyter-server-proxy: pages at
      ``{base_url}proxy/8787/…``, read from ``http://127.0.0.1:8787``;
    - ``http://other-host:8787/status``, or any link without the proxy: as given (absolute URLs);
    - a relative link through a proxy, ``proxy/8787/status``, ``/proxy/8787/status`` or
      ``/user/x/proxy/8787/status``: a local port, so through this server's proxy, read from loopback;
    - another relative link (``/dask/status``): a path on this server, read from ``request_origin``.
    """
    if not link:
        return None
    parts = urlsplit(link)
    token = token_of(link)
    if parts.scheme in ("http", "https") and parts.netloc:
        origin = f"{parts.scheme}://{parts.netloc}"
        try:
            port = parts.port
        except ValueError:
            return None
        if proxy and port is not None and is_local_host(parts.hostname):
            root = url_path_join(base_url, "proxy", str(port))
            return Dashboard(f"http://127.0.0.1:{port}", root, root + (parts.path or "/"), token, port)
        return Dashboard(origin, origin, link, token)
    if parts.scheme or parts.netloc:
        return None  # file:, javascript:, //host/… : not a dashboard we open
    found = _PROXY_PATH.search(parts.path)
    if found is not None:
        rest = parts.path[found.end() :]
        root = url_path_join(base_url, "proxy", found.group(1))
        url = url_path_join(root, rest) if rest else root + "/"
        return Dashboard(f"http://127.0.0.1:{found.group(1)}", root, url, token, int(found.group(1)))
    path = parts.path if parts.path.startswith("/") else url_path_join(base_url, parts.path)
    root = path.removesuffix("/status").rstrip("/") if path.endswith("/status") else path.rstrip("/")
    if not request_origin:
        return None
    return Dashboard(request_origin + root, root, with_query(path, parts.query), token)


def interdist_pages(plots: Any, page_root: str, query: str = "") -> list[dict[str, str]]:
    """The interdist entries of a dashboard's ``/individual-plots.json``, each URL ``page_root`` + its path
    (+ ``?query``: the token, where no cookie carries it)."""
    if not isinstance(plots, dict):
        return []
    pages = []
    for title, uri in plots.items():
        if not (isinstance(title, str) and isinstance(uri, str)) or "interdist" not in uri.lower():
            continue
        if not uri.startswith("/"):
            continue
        name = title.removeprefix("Individual ")
        pages.append({"name": name, "url": with_query(page_root.rstrip("/") + uri, query)})
    return sorted(pages, key=lambda p: p["url"])


def cluster_name(cluster: dict[str, Any], notebook: str | None) -> str:
    """What the sidebar calls a cluster: its notebook's file name, else its kernel, else its process."""
    if notebook:
        return os.path.basename(notebook.rstrip("/")) or notebook
    if cluster.get("kernel_id"):
        return f"kernel {str(cluster['kernel_id'])[:8]}"
    return f"process {cluster['pid']}"


async def with_pages(
    cluster: dict[str, Any],
    base_url: str = "/",
    proxy: bool = True,
    request_origin: str = "",
    notebook: str | None = None,
) -> dict[str, Any]:
    notebook = notebook or cluster.get("notebook")
    where = locate_dashboard(cluster.get("dashboard_link"), base_url, proxy, request_origin)
    out = {
        **cluster,
        "name": cluster_name(cluster, notebook),
        "notebook": notebook,
        "dashboard_url": where.url if where else None,
        "pages": [],
        "pages_error": None,
    }
    if where is None:
        out["pages_error"] = "this cluster has no dashboard"
        return out
    try:
        response = await AsyncHTTPClient().fetch(
            f"{where.fetch_root}/individual-plots.json",
            request_timeout=PAGES_TIMEOUT_S,
            connect_timeout=PAGES_TIMEOUT_S,
            follow_redirects=False,
            headers={"Authorization": f"token {where.token}"} if where.token else None,
        )
        out["pages"] = interdist_pages(json.loads(response.body), where.page_root, where.page_query)
    except Exception as e:  # noqa: BLE001 - a dashboard closing as we ask, a refused connection
        out["pages_error"] = f"could not read the dashboard's pages: {type(e).__name__}: {e}"
    return out


class ClustersHandler(APIHandler):
    @tornado.web.authenticated
    async def get(self) -> None:
        base_url = self.settings.get("base_url", "/")
        origin = f"{self.request.protocol}://{self.request.host}"
        notebooks = await self._notebooks_by_kernel()
        proxy = self._proxy_enabled()
        live = registry.live_clusters()
        clusters = await asyncio.gather(
            *(with_pages(c, base_url, proxy, origin, notebooks.get(c.get("kernel_id") or "")) for c in live)
        )
        for c in live:
            self._set_token_cookie(locate_dashboard(c.get("dashboard_link"), base_url, proxy, origin))
        self.finish(json.dumps({"clusters": list(clusters)}))

    def _set_token_cookie(self, where: Dashboard | None) -> None:
        """The cookie that lets the browser's requests through Jupyter's proxy to ``where`` show its
        dashboard's token (see the module's docstring): HttpOnly, SameSite=Strict, for that port's path."""
        if where is None or where.token is None or where.proxy_port is None:
            return
        self.set_cookie(
            cookie_name(where.proxy_port),
            where.token,
            path=where.page_root.rstrip("/") + "/",
            httponly=True,
            samesite="Strict",
            secure=self.request.protocol == "https",
        )

    def _proxy_enabled(self) -> bool:
        """Whether jupyter-server-proxy serves ``{base_url}proxy/{port}`` in this server."""
        try:
            serverapp: Any = self.serverapp
            extension = serverapp.extension_manager.extensions.get(PROXY_EXTENSION)
            return bool(extension is not None and extension.enabled)
        except Exception:  # noqa: BLE001 - an older server without the extension manager: absolute URLs
            return False

    async def _notebooks_by_kernel(self) -> dict[str, str]:
        """The path of each session's document, by kernel id (current even after a rename)."""
        try:
            manager: Any = self.session_manager
            sessions = await manager.list_sessions()
            return {s["kernel"]["id"]: s["path"] for s in sessions if s.get("kernel") and s.get("path")}
        except Exception:  # noqa: BLE001 - no session manager: names from the registry files
            return {}


def setup_handlers(web_app: Any) -> None:
    base_url = web_app.settings["base_url"]
    web_app.add_handlers(".*$", [(url_path_join(base_url, "interdist", "clusters"), ClustersHandler)])
