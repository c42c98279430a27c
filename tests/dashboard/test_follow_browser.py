"""The plotted x range moves with new data in a real browser (headless chromium, Playwright).

A Bokeh server in this process serves the timeline's Dask page (``pages._page``, on a stand-in
scheduler whose events plugin the test feeds) and a page of the four time-axis views in tabs,
hidden behind a first tab. Both are drawn empty; then events come, and the ranges read from the
page's Bokeh document must move by as much, with no "could not set initial ranges" warning. A drag
on the plot pins its range (in the browser, FOLLOW_JS); the "follow" button lets it follow again.
"""

from __future__ import annotations

import asyncio
import functools
import socket
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from bokeh.application import Application
from bokeh.application.handlers.function import FunctionHandler
from bokeh.document import Document
from bokeh.models import Div, TabPanel, Tabs

from interdist.dashboard.components import Progress, Scalars, Timeline, Timings
from interdist.dashboard.pages import INTERVAL_MS, PLUGIN_NAME, EventsPlugin, _page

from .test_follow import second

pytestmark = [pytest.mark.timeout(90)]


class Scheduler:
    """What a page reads of a scheduler: its events plugin, here fed by the test."""

    def __init__(self) -> None:
        self.plugin = EventsPlugin()
        self.plugins = {PLUGIN_NAME: self.plugin}


def tabbed_page(scheduler: Scheduler, doc: Document) -> None:
    """The four views in tabs behind a first one, as the inline dashboard draws them: hidden."""
    views = [Timeline(), Timings(), Progress(), Scalars()]
    doc.add_periodic_callback(lambda: [v.update(scheduler.plugin.model()) for v in views], INTERVAL_MS)
    panels = [TabPanel(child=Div(text="first tab"), title="first")]
    tabs = [TabPanel(child=v.root, title=v.name) for v in views]
    doc.add_root(Tabs(tabs=panels + tabs, name="tabs", sizing_mode="stretch_width"))


class Served:
    def __init__(self) -> None:
        self.scheduler = Scheduler()
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()
        assert self._ready.wait(20), "the Bokeh server did not start"

    def _serve(self) -> None:
        from bokeh.server.server import Server

        asyncio.set_event_loop(asyncio.new_event_loop())
        apps = {
            "/timeline": Application(FunctionHandler(functools.partial(_page, "timeline", self.scheduler, {}))),
            "/tabs": Application(FunctionHandler(functools.partial(tabbed_page, self.scheduler))),
        }
        self.server = Server(apps, port=self.port, address="127.0.0.1",
                             allow_websocket_origin=[f"127.0.0.1:{self.port}"])  # fmt: skip
        self.server.start()
        self._ready.set()
        self.server.io_loop.start()

    def feed(self, seconds: range) -> None:
        """Events of those seconds, fed on the server's loop (where the pages read the model)."""

        def go() -> None:
            for k in seconds:
                for e in second(k):
                    self.scheduler.plugin.hub.feed(e, f"tcp://10.0.0.{e.replica + 1}:4000")

        self.server.io_loop.add_callback(go)

    def stop(self) -> None:
        loop = self.server.io_loop

        def go() -> None:
            self.server.stop()
            loop.stop()

        loop.add_callback(go)
        self._thread.join(10)


@pytest.fixture
def served() -> Iterator[Served]:
    s = Served()
    yield s
    s.stop()


def open_page(browser: Any, url: str) -> tuple[Any, list[str]]:
    page = browser.new_page()
    warnings: list[str] = []
    page.on("console", lambda m: warnings.append(m.text) if "initial ranges" in m.text else None)
    page.goto(url, wait_until="load")
    page.wait_for_function("() => window.Bokeh && Bokeh.documents.length > 0", timeout=20_000)
    return page, warnings


def model_value(page: Any, name: str, attr: str) -> Any:
    return page.evaluate("([n, a]) => { const m = Bokeh.documents[0].get_model_by_name(n); return m ? m[a] : null }",
                         [name, attr])  # fmt: skip


def rows(page: Any, view: str) -> int:
    return int(page.evaluate("(n) => { const s = Bokeh.documents[0].get_model_by_name(n);"
                             " return s ? s.get_length() : 0 }", f"interdist-{view}"))  # fmt: skip


def x_range(page: Any, view: str) -> tuple[float, float]:
    return model_value(page, f"interdist-{view}-x", "start"), model_value(page, f"interdist-{view}-x", "end")


def until(page: Any, check: Callable[[], Any], timeout_s: float = 10.0) -> Any:
    for _ in range(int(timeout_s / 0.1)):
        if got := check():
            return got
        page.wait_for_timeout(100)
    return check()


def test_the_timeline_page_follows_and_pins(browser: Any, served: Served) -> None:
    page, warnings = open_page(browser, f"{served.url}/timeline")
    try:
        start, end = x_range(page, "timeline")
        assert start is not None and start < end  # explicit from the first draw, empty as it is
        served.feed(range(50))
        assert until(page, lambda: x_range(page, "timeline")[1] > 49.5), x_range(page, "timeline")
        first = x_range(page, "timeline")
        assert first[0] == pytest.approx(49.5 - 30)  # the last 30 s
        served.feed(range(50, 100))
        assert until(page, lambda: x_range(page, "timeline")[1] > 99.5), x_range(page, "timeline")
        assert x_range(page, "timeline") == pytest.approx((first[0] + 50, first[1] + 50))

        # a drag pins the range: Python turns "follow" off and new events leave it where it is
        box = page.locator(".bk-Figure").first.bounding_box()
        x0, y0 = box["x"] + box["width"] / 2, box["y"] + box["height"] / 2
        page.mouse.move(x0, y0)
        page.mouse.down()
        for k in range(1, 6):
            page.mouse.move(x0 + 30 * k, y0)
        page.mouse.up()
        assert until(page, lambda: model_value(page, "interdist-timeline-follow", "active") is False)
        pinned = x_range(page, "timeline")
        assert pinned[1] < 99.5
        served.feed(range(100, 110))
        assert until(page, lambda: rows(page, "timeline") >= 220)  # 2 replicas x 110 s
        served.feed(range(110, 120))  # once its rows are drawn, a range change sent after the first ones has come
        assert until(page, lambda: rows(page, "timeline") >= 240)
        assert x_range(page, "timeline") == pinned
        # a following range that Python sent before it knew of the pin (inline, while a cell runs) is undone
        page.evaluate("""() => { const d = Bokeh.documents[0], t = d.get_model_by_name('interdist-timeline-targets');
            const col = (c) => t.data.get ? t.data.get(c) : t.data[c];
            const x = d.get_model_by_name('interdist-timeline-x'); x.start = col('s0')[1]; x.end = col('e0')[1] }""")
        assert x_range(page, "timeline") == pinned

        page.locator(".bk-btn", has_text="follow").first.click()
        assert until(page, lambda: x_range(page, "timeline")[1] > 119.5), x_range(page, "timeline")
        page.locator(".bk-btn", has_text="10 s").first.click()  # applied in the browser, then by Python
        assert until(page, lambda: x_range(page, "timeline")[0] == pytest.approx(119.5 - 10)), x_range(page, "timeline")
        assert not warnings, warnings
    finally:
        page.close()


def test_views_drawn_empty_in_hidden_tabs_follow_without_warnings(browser: Any, served: Served) -> None:
    page, warnings = open_page(browser, f"{served.url}/tabs")
    try:
        views = ["timeline", "timings", "progress", "scalars"]
        empty = {v: x_range(page, v) for v in views}
        assert all(start is not None and start < end for start, end in empty.values()), empty
        served.feed(range(50))
        for view in views:  # drawn hidden: they follow all the same (the last 30 s; the last 200 steps)
            newest = 50 if view == "scalars" else 49.5
            assert until(page, lambda v=view, n=newest: x_range(page, v)[1] > n), (view, x_range(page, view))
        page.evaluate("() => { Bokeh.documents[0].get_model_by_name('tabs').active = 2 }")  # show the timings
        served.feed(range(50, 60))
        assert until(page, lambda: x_range(page, "timings")[1] > 59.5), x_range(page, "timings")
        assert x_range(page, "timings")[0] == pytest.approx(59.5 - 30)
        lo, hi = model_value(page, "interdist-timings-latency_ms-y", "start"), model_value(
            page, "interdist-timings-latency_ms-y", "end")
        assert lo == 0 and 200 <= hi < 220  # fitted to the window's latencies (200 ms)
        assert not warnings, warnings
    finally:
        page.close()
