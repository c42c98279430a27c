"""A per-cluster token for the dashboard of an embedded cluster.

The Dask dashboard (Bokeh pages, their websockets, ``/statics``, ``/info``, ``/metrics``, the JSON
routes) has no authentication of its own: any account on the host that finds its port (in
``/proc/net/tcp``) could read it, a live variable's values among it. The scheduler of an embedded
cluster runs in this process, so its ``TokenScheduler`` (:func:`token_scheduler`) wraps its HTTP
application before it serves its first request: every request must show the cluster's token, or gets
403. A request shows it

- as ``?token=...`` in its URL (the dashboard link carries it: ``Lease.dashboard_link``); the answer
  then sets an HttpOnly, SameSite=Strict cookie named for the dashboard's port
  (``interdist-dashboard-PORT``), so the page's own requests (its scripts, its Bokeh websocket) show it
  without the query;
- as that cookie (the JupyterLab server extension sets it for the pages it lists through Jupyter's
  proxy, ``lab/handlers.py``, so those pages go without the token in their URL);
- as an ``Authorization: token ...`` header (programs; the server extension reading a dashboard's list
  of pages).

Dask's ``/health`` stays open (a liveness check, says nothing). Tokens are compared in constant time.
Clusters the user passes in (``cluster=``) are theirs: their dashboards are left as they are.
"""

from __future__ import annotations

import functools
import hmac
import secrets
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import tornado.web

COOKIE_PREFIX = "interdist-dashboard-"
QUERY = "token"
#: Paths served without the token (Dask's liveness check).
OPEN_PATHS = frozenset({"/health"})
FORBIDDEN = "403: this interdist dashboard needs its token: open it from the cluster's dashboard link\n"


def new_token() -> str:
    return secrets.token_urlsafe(32)


def cookie_name(port: int | str) -> str:
    """The cookie that carries the token of the dashboard on ``port``."""
    return f"{COOKIE_PREFIX}{port}"


def link_with_token(link: str | None, token: str | None) -> str | None:
    """``link`` with ``?token=`` added (replacing one it had); ``link`` itself without a token."""
    if not link or not token:
        return link
    parts = urlsplit(link)
    query = [(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True) if k != QUERY]
    return urlunsplit(parts._replace(query=urlencode([*query, (QUERY, token)])))


def token_of(link: str | None) -> str | None:
    """The ``token`` query argument of a dashboard link, or None."""
    if not link:
        return None
    found = [v for k, v in parse_qsl(urlsplit(link).query) if k == QUERY]
    return found[-1] if found else None


def with_query(url: str, query: str) -> str:
    """``url`` with ``query`` (``a=1&b=2``, from a link) added to its own."""
    if not query:
        return url
    return url + ("&" if "?" in url else "?") + query


class _Forbidden(tornado.web.RequestHandler):
    """The answer to a request without the token, whatever its method (a websocket upgrade included)."""

    def prepare(self) -> None:
        raise tornado.web.HTTPError(403)

    def check_xsrf_cookie(self) -> None:  # a POST without the token is refused, not asked for its xsrf cookie
        pass

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        self.set_header("Content-Type", "text/plain; charset=UTF-8")
        self.finish(FORBIDDEN if status_code == 403 else f"{status_code}\n")


def _matches(given: str | bytes | None, token: bytes) -> bool:
    if not given:
        return False
    if isinstance(given, str):
        given = given.encode("utf-8", "surrogateescape")
    return hmac.compare_digest(given, token)


def guard(application: Any, port: int, token: str) -> None:
    """Make ``application`` (a scheduler's ``http_application``, a ``tornado.web.Application`` that
    routes to the Bokeh applications too) answer 403 to every request without ``token``."""
    expected = token.encode()
    name = cookie_name(port)
    find_handler = application.find_handler

    def guarded(request: Any, **kwargs: Any) -> Any:
        if request.path in OPEN_PATHS:
            return find_handler(request, **kwargs)
        auth = request.headers.get("Authorization", "")
        scheme, _, value = auth.partition(" ")
        by_header = scheme.lower() == "token" and _matches(value.strip(), expected)
        by_query = any(_matches(v, expected) for v in request.query_arguments.get(QUERY, []))
        try:
            morsel = request.cookies.get(name)
        except Exception:  # noqa: BLE001 - a malformed Cookie header: no cookie
            morsel = None
        by_cookie = morsel is not None and _matches(morsel.value, expected)
        if not (by_header or by_query or by_cookie):
            return application.get_handler_delegate(request, _Forbidden)
        delegate = find_handler(request, **kwargs)
        handler_class = getattr(delegate, "handler_class", None)
        if by_query and not by_cookie and handler_class is not None:
            delegate.handler_class = functools.partial(_with_cookie, handler_class, name, token)
        return delegate

    application.find_handler = guarded


def _with_cookie(handler_class: Any, name: str, token: str, *args: Any, **kwargs: Any) -> Any:
    """The request's handler, its answer setting the token's cookie (the page's own requests show it)."""
    handler = handler_class(*args, **kwargs)
    handler.set_cookie(name, token, path="/", httponly=True, samesite="Strict")
    return handler


@functools.cache
def token_scheduler() -> Any:
    """``TokenScheduler``: a Dask ``Scheduler`` whose dashboard needs its ``dashboard_token`` option (none:
    an open dashboard, as Dask's). Made on first use: the Jupyter server imports this module for the link
    helpers above, and needs no Dask scheduler.

    The guard is in place before the scheduler serves anything: it starts its HTTP server in its
    constructor, and a request is only served once the event loop runs again."""
    from distributed import Scheduler

    class TokenScheduler(Scheduler):
        def __init__(self, *args: Any, dashboard_token: str | None = None, **kwargs: Any) -> None:
            self.dashboard_token = dashboard_token
            super().__init__(*args, **kwargs)

        def start_http_server(self, *args: Any, **kwargs: Any) -> None:
            super().start_http_server(*args, **kwargs)  # type: ignore[no-untyped-call]  # distributed is untyped
            if self.dashboard_token:
                port: int = self.http_server.port  # type: ignore[attr-defined]  # set by Dask's start_http_server
                guard(self.http_application, port, self.dashboard_token)

    return TokenScheduler


def use_token_scheduler(cluster: Any) -> None:
    """Before a ``SpecCluster`` (``LocalCluster``, ``LocalCUDACluster``) starts its scheduler: make it a
    ``TokenScheduler`` (:func:`token_scheduler`; its ``scheduler_kwargs`` carry ``dashboard_token``)."""
    from distributed import Scheduler

    spec = getattr(cluster, "scheduler_spec", None)
    if getattr(cluster, "scheduler", None) is None and isinstance(spec, dict) and spec.get("cls") is Scheduler:
        cluster.scheduler_spec = {**spec, "cls": token_scheduler()}


@functools.cache
def token_cluster_class(cluster_class: Any) -> Any:
    """``cluster_class`` (a ``LocalCluster`` or a subclass) whose scheduler is a ``TokenScheduler``:
    pass ``scheduler_kwargs={"dashboard_token": ...}``."""

    class TokenCluster(cluster_class):  # type: ignore[misc]  # a class given at run time
        async def _start(self) -> None:
            use_token_scheduler(self)
            await super()._start()

    TokenCluster.__name__ = TokenCluster.__qualname__ = f"Token{cluster_class.__name__}"
    return TokenCluster
