"""``GET /interdist/clusters``: the live interdist clusters and their dashboard pages, as JSON."""

from __future__ import annotations

import asyncio
import json
from typing import Any
from urllib.parse import urlsplit

import tornado.web
from jupyter_server.base.handlers import APIHandler
from jupyter_server.utils import url_path_join
from tornado.httpclient import AsyncHTTPClient

from interdist.lab import registry

PAGES_TIMEOUT_S = 3.0


def dashboard_origin(link: str | None) -> str | None:
    """``http://host:port`` of a dashboard link; None for anything but http(s)."""
    if not link:
        return None
    parts = urlsplit(link)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        return None
    return f"{parts.scheme}://{parts.netloc}"


def interdist_pages(plots: Any, origin: str) -> list[dict[str, str]]:
    """The interdist entries of a dashboard's ``/individual-plots.json``, as absolute URLs."""
    if not isinstance(plots, dict):
        return []
    pages = []
    for title, uri in plots.items():
        if not (isinstance(title, str) and isinstance(uri, str)) or "interdist" not in uri.lower():
            continue
        if not uri.startswith("/"):
            continue
        name = title.removeprefix("Individual ")
        pages.append({"name": name, "url": origin + uri})
    return sorted(pages, key=lambda p: p["url"])


async def with_pages(cluster: dict[str, Any]) -> dict[str, Any]:
    origin = dashboard_origin(cluster.get("dashboard_link"))
    out = {**cluster, "pages": [], "pages_error": None}
    if origin is None:
        out["pages_error"] = "this cluster has no dashboard"
        return out
    try:
        response = await AsyncHTTPClient().fetch(
            f"{origin}/individual-plots.json",
            request_timeout=PAGES_TIMEOUT_S,
            connect_timeout=PAGES_TIMEOUT_S,
            follow_redirects=False,
        )
        out["pages"] = interdist_pages(json.loads(response.body), origin)
    except Exception as e:  # noqa: BLE001 - a dashboard closing as we ask, a refused connection
        out["pages_error"] = f"could not read the dashboard's pages: {type(e).__name__}: {e}"
    return out


class ClustersHandler(APIHandler):
    @tornado.web.authenticated
    async def get(self) -> None:
        clusters = await asyncio.gather(*(with_pages(c) for c in registry.live_clusters()))
        self.finish(json.dumps({"clusters": list(clusters)}))


def setup_handlers(web_app: Any) -> None:
    base_url = web_app.settings["base_url"]
    web_app.add_handlers(".*$", [(url_path_join(base_url, "interdist", "clusters"), ClustersHandler)])
