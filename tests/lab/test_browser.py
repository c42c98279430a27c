"""The JupyterLab sidebar end to end: a real ``jupyter lab`` with the prebuilt extension, headless chromium.

An interdist strategy runs in this process (its embedded cluster registers
itself); JupyterLab's "interdist" sidebar must list that cluster and its
interdist dashboard pages (through Jupyter's proxy, ``/proxy/<port>/…``: this
process is no kernel, so the cluster is named by its process), and clicking a
page must open it in a main-area IFrame. The screenshot goes to
``test-artifacts/jupyterlab-sidebar.png``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ._lab import Lab, running_lab

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"  # screenshots


pytest.importorskip("jupyterlab", reason="jupyterlab is not installed (pip install 'interdist[lab]')")
VIEWPORT = {"width": 1400, "height": 900}  # the browser fixture (tests/conftest.py) reads it
pytestmark = [
    pytest.mark.timeout(180),
]


@pytest.fixture(scope="module")
def lab_and_strategy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Lab, Any]]:
    import interdist as idist

    s = idist.MirroredStrategy(["CPU:0", "CPU:1"])
    try:
        registered = s._lease.registry_file
        assert registered is not None and registered.exists(), "the embedded cluster did not register itself"
        # the server reads the registry this process writes to (the user's runtime dir, or interdist.lab.registry-dir)
        with running_lab(tmp_path_factory.mktemp("lab"), registered.parent) as lab:
            yield lab, s
    finally:
        s.close()


def test_sidebar_lists_the_cluster_and_opens_a_page(browser: Any, lab_and_strategy: tuple[Lab, Any]) -> None:
    lab, strategy = lab_and_strategy
    address = strategy._lease.cluster.scheduler_address
    port = int(strategy.dashboard_link.split("://", 1)[1].split("/", 1)[0].rsplit(":", 1)[1])
    origin = f"/proxy/{port}"  # the lab's base URL is /
    page = browser.new_page()
    try:
        page.goto(f"{lab.url}lab?token={lab.token}", wait_until="domcontentloaded")
        tab = page.locator('.jp-SideBar .lm-TabBar-tab[data-id="interdist-sidebar"]')
        tab.wait_for(timeout=60_000)
        if page.locator("#interdist-sidebar").is_hidden():
            tab.click()
        entry = page.locator(f'#interdist-sidebar .jp-interdist-cluster[data-scheduler="{address}"]')
        entry.wait_for(timeout=20_000)
        assert "2 worker(s)" in entry.inner_text()
        assert entry.locator(".jp-interdist-cluster-name").inner_text() == f"process {os.getpid()}"
        buttons = entry.locator("button.jp-interdist-page")
        buttons.first.wait_for(timeout=10_000)
        titles = [buttons.nth(i).get_attribute("title") for i in range(buttons.count())]
        for view in ("replica-values", "placement", "timeline", "timings", "progress", "watchdog"):
            assert f"{origin}/individual-interdist-{view}" in titles
        assert entry.get_by_text("Interdist Replica Values", exact=True).count() == 1

        url = f"{origin}/individual-interdist-replica-values"
        entry.locator(f'button.jp-interdist-page[title="{url}"]').click()
        iframe = page.locator(".jp-MainAreaWidget .jp-interdist-iframe iframe")
        iframe.wait_for(timeout=10_000)
        assert iframe.get_attribute("src") == url
        tab_title = page.locator(".lm-DockPanel-tabBar .lm-TabBar-tabLabel", has_text="Interdist Replica Values")
        assert tab_title.count() == 1
        # the page itself runs inside the panel: Bokeh draws its document there
        frame = iframe.element_handle().content_frame()
        assert frame is not None
        frame.wait_for_url(lab.url.rstrip("/") + url, timeout=20_000)
        frame.wait_for_function("() => window.Bokeh && Bokeh.documents.length > 0", timeout=20_000)
        page.wait_for_timeout(500)
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "jupyterlab-sidebar.png"))

        # the command palette offers the command
        page.keyboard.press("Control+Shift+C")
        page.locator(".lm-CommandPalette-input").fill("interdist: open")
        assert page.locator(".lm-CommandPalette-itemLabel", has_text="interdist: open dashboard page").count() >= 1
        page.keyboard.press("Escape")
    finally:
        page.close()
