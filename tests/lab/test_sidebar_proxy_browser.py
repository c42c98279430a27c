"""The sidebar as on JupyterHub/Binder: pages through Jupyter's own proxy, clusters named by their notebook.

A real ``jupyter lab`` (with jupyter-server-proxy, as ``interdist[lab]`` installs it) and headless
chromium. A notebook in that lab starts a strategy in its own kernel; then:

- the sidebar lists that cluster by its notebook's name, by itself (no click on refresh);
- every page link is a path through Jupyter's proxy, ``/proxy/<port>/individual-interdist-…``,
  never ``127.0.0.1:<port>`` (which a remote browser cannot reach);
- the opened page fills its tab, its Bokeh websocket goes through the proxy too, and the
  document is drawn inside the iframe with the kernel's current value; no console errors;
- Kernel > Restart and running the notebook again: the open page follows the new cluster of
  the same kernel and shows the new run's value;
- the kernel shut down: its cluster leaves the sidebar by itself and its registry file is gone.

Screenshots: ``test-artifacts/jupyterlab-sidebar-proxy*.png``.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from interdist.lab import registry

from ._lab import Lab, module_lab

pytest.importorskip("jupyterlab", reason="jupyterlab is not installed (pip install 'interdist[lab]')")
pytest.importorskip("jupyter_server_proxy", reason="jupyter-server-proxy is missing (pip install 'interdist[lab]')")

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
VIEWPORT = {"width": 1400, "height": 900}  # the browser fixture (tests/conftest.py) reads it
NOTEBOOK = "sidebar.ipynb"
# w is 2.5 on the first run, 7.0 on every later one (after a restart): which run a page shows.
CELL = """import os

import interdist as idist

first = not os.path.exists("ran-once")
open("ran-once", "w").close()
strategy = idist.MirroredStrategy(["CPU:0", "CPU:1"])
with strategy.scope():
    w = idist.Variable(2.5 if first else 7.0, name="w")
print("w =", float(w.numpy()))"""
PAGE = "individual-interdist-replica-values"

pytestmark = [pytest.mark.timeout(240)]


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    with module_lab(tmp_path_factory, "lab-sidebar") as lab:
        yield lab


def watch_errors(page: Any) -> list[str]:
    """The page's (and its iframes') console errors and uncaught exceptions, from now on."""
    errors: list[str] = []

    def on_console(msg: Any) -> None:
        url = (msg.location or {}).get("url", "")
        # _lab.py disables jupyter_lsp's server extension and the LSP front end still polls it
        if msg.type == "error" and not ("404" in msg.text and "/lsp/status" in url):
            errors.append(f"{msg.text} ({url})")

    page.on("console", on_console)
    page.on("pageerror", lambda e: errors.append(f"uncaught: {e}"))
    return errors


def kernel_id(lab: Lab) -> str:
    status, sessions = lab.get("api/sessions")
    assert status == 200
    (session,) = [s for s in sessions if s["path"] == NOTEBOOK]
    return str(session["kernel"]["id"])


def cluster_of(lab: Lab, kernel: str, not_id: str | None = None, timeout: float = 60.0) -> dict[str, Any]:
    """The registry entry of ``kernel``'s cluster (another than ``not_id``), once the kernel registered it."""
    deadline = time.monotonic() + timeout
    while True:
        listed = registry.live_clusters(lab.registry)  # type: ignore[attr-defined]
        mine = [c for c in listed if c["kernel_id"] == kernel and c["id"] != not_id]
        if mine:
            return mine[0]
        assert time.monotonic() < deadline, f"kernel {kernel} registered no cluster: {listed}"
        time.sleep(0.25)


def port_of(link: str) -> int:
    found = re.match(r"https?://127\.0\.0\.1:(\d+)/", link)
    assert found, link
    return int(found.group(1))


def run_all(page: Any) -> None:
    page.locator(".lm-MenuBar-itemLabel", has_text="Run").first.click()
    page.locator(".lm-Menu-itemLabel", has_text="Run All Cells").first.click()


def shown_w(frame: Any) -> list[float]:
    """The checksums (for a scalar: its value) of w's rows in the page's values table."""
    table = frame.locator(".bk-DataTable").first  # Playwright's CSS sees into Bokeh's shadow roots
    titles = table.locator(".slick-column-name").all_inner_texts()
    rows = [dict(zip(titles, r.locator(".slick-cell").all_inner_texts(), strict=False))
            for r in table.locator(".slick-row").all()]
    return [float(r["checksum"]) for r in rows if r.get("variable") == "w"]


def wait_shown(frame: Any, expected: list[float], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while (shown := shown_w(frame)) != expected:
        assert time.monotonic() < deadline, f"the page shows w = {shown}, not {expected}"
        time.sleep(0.25)


def test_sidebar_opens_a_kernels_pages_through_jupyters_proxy(browser: Any, lab: Any) -> None:
    t0 = time.monotonic()
    (lab.root / NOTEBOOK).write_text(json.dumps({
        "cells": [{"cell_type": "code", "metadata": {}, "execution_count": None, "outputs": [], "source": CELL}],
        "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}},
        "nbformat": 4, "nbformat_minor": 5}))
    page = browser.new_page()
    errors = watch_errors(page)
    sockets: list[str] = []
    page.on("websocket", lambda ws: sockets.append(ws.url))
    try:
        # the sidebar is open before the kernel starts its cluster: it must show up by itself
        page.goto(f"{lab.url}lab/tree/{NOTEBOOK}?token={lab.token}", wait_until="domcontentloaded")
        tab = page.locator('.jp-SideBar .lm-TabBar-tab[data-id="interdist-sidebar"]')
        tab.wait_for(timeout=60_000)
        if page.locator("#interdist-sidebar").is_hidden():
            tab.click()
        page.locator(".jp-Notebook .jp-CodeCell").first.wait_for(timeout=60_000)
        page.locator(".jp-StatusBar-TextItem", has_text="| Idle").wait_for(timeout=60_000)  # kernel up
        run_all(page)
        kernel = kernel_id(lab)
        first = cluster_of(lab, kernel)
        assert first["notebook"] is not None and Path(first["notebook"]).name == NOTEBOOK
        port = port_of(first["dashboard_link"])

        entry = page.locator(f'#interdist-sidebar .jp-interdist-cluster[data-kernel="{kernel}"]')
        entry.wait_for(timeout=15_000)  # polled: nobody clicks refresh
        assert entry.locator(".jp-interdist-cluster-name").inner_text() == NOTEBOOK
        assert "2 worker(s)" in entry.inner_text()
        assert entry.locator("a.jp-interdist-dashboard-link").get_attribute("href") == f"/proxy/{port}/status"
        buttons = entry.locator("button.jp-interdist-page")
        buttons.first.wait_for(timeout=10_000)
        titles = [buttons.nth(i).get_attribute("title") for i in range(buttons.count())]
        assert f"/proxy/{port}/{PAGE}" in titles and len(titles) >= 6, titles
        assert all(t.startswith(f"/proxy/{port}/individual-interdist-") for t in titles), titles

        entry.locator(f'button.jp-interdist-page[title="/proxy/{port}/{PAGE}"]').click()
        iframe = page.locator(".jp-MainAreaWidget .jp-interdist-iframe iframe")
        iframe.wait_for(timeout=10_000)
        assert iframe.get_attribute("src") == f"/proxy/{port}/{PAGE}"  # not http://127.0.0.1:<port>/…
        frame = iframe.element_handle().content_frame()
        assert frame is not None
        frame.wait_for_url(f"{lab.url}proxy/{port}/{PAGE}", timeout=20_000)
        # a Bokeh server page pulls its document over the websocket: drawn means connected, through the proxy
        frame.wait_for_function("() => window.Bokeh && Bokeh.documents.length > 0", timeout=20_000)
        wait_shown(frame, [2.5, 2.5])
        assert frame.locator(".bk-DataTable .slick-row").count() >= 2
        ws = lab.url.replace("http", "ws", 1) + f"proxy/{port}/{PAGE}/ws"
        assert ws in [s.split("?")[0] for s in sockets], sockets
        assert not [s for s in sockets if f"127.0.0.1:{port}" in s], sockets  # never straight to the dashboard
        # the page fills its tab (JupyterLab leaves an iframe 150 px tall)
        box = iframe.bounding_box()
        area = page.locator(".jp-MainAreaWidget", has=page.locator(".jp-interdist-iframe"))
        outer = area.bounding_box()
        assert box is not None and outer is not None
        assert box["height"] >= 0.9 * outer["height"] and box["width"] >= 0.95 * outer["width"], (box, outer)
        assert box["height"] > 600
        page.wait_for_timeout(500)
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "jupyterlab-sidebar-proxy.png"))
        assert not errors, errors

        # Kernel > Restart, then the notebook again: the open page follows the kernel's new cluster
        tabs = page.locator(".lm-DockPanel-tabBar .lm-TabBar-tab")
        # the Kernel menu acts on the current notebook
        tabs.and_(page.locator('[data-type="document-title"]')).filter(has_text=NOTEBOOK).click()
        page.locator(".lm-MenuBar-itemLabel", has_text="Kernel").first.click()
        page.locator(".lm-Menu-itemLabel", has_text="Restart Kernel…").first.click()
        page.locator(".jp-Dialog-button.jp-mod-accept").click()
        page.locator(".jp-StatusBar-TextItem", has_text="| Idle").wait_for(timeout=60_000)
        assert kernel_id(lab) == kernel  # a restart keeps the kernel's id
        run_all(page)
        second = cluster_of(lab, kernel, not_id=first["id"])
        new_port = port_of(second["dashboard_link"])
        assert new_port != port
        page.wait_for_function(  # within a few polls
            "src => document.querySelector('.jp-interdist-iframe iframe').getAttribute('src') === src",
            arg=f"/proxy/{new_port}/{PAGE}", timeout=15_000)
        page_tab = tabs.and_(page.locator('[data-id^="interdist-page-"]'))
        assert page_tab.inner_text() == f"Interdist Replica Values ({NOTEBOOK})"
        page_tab.click()
        frame = iframe.element_handle().content_frame()
        frame.wait_for_url(f"{lab.url}proxy/{new_port}/{PAGE}", timeout=20_000)
        frame.wait_for_function("() => window.Bokeh && Bokeh.documents.length > 0", timeout=20_000)
        wait_shown(frame, [7.0, 7.0])
        assert page.locator(f'#interdist-sidebar .jp-interdist-cluster[data-kernel="{kernel}"]').count() == 1
        page.screenshot(path=str(ARTIFACTS / "jupyterlab-sidebar-proxy-after-restart.png"))

        # the kernel shut down: its cluster leaves the list by itself, and its registry file goes
        status, _ = lab.get(f"api/kernels/{kernel}", method="DELETE")
        assert status == 204
        page.locator("#interdist-sidebar .jp-interdist-cluster").first.wait_for(state="detached", timeout=20_000)
        assert page.locator("#interdist-sidebar .jp-interdist-note").inner_text().startswith("No interdist cluster")
        assert list(lab.registry.glob("*.json")) == []
    finally:
        page.close()
    print(f"{time.monotonic() - t0:.1f} s")
