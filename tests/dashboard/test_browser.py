"""The Dask dashboard pages in a real browser (Debian's chromium, headless, driven by Playwright).

A short training runs on an embedded cluster; each ``/individual-interdist-*``
page is opened on that cluster's dashboard, checked for what a user should see,
and saved as a screenshot in ``test-artifacts/``.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import bokeh
import numpy as np
import pytest

from interdist import events

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"  # screenshots

pytestmark = [
    pytest.mark.timeout(180),
]


@pytest.fixture(scope="module")
def trained() -> Iterator[Any]:
    import interdist as idist

    from ._training import train

    s = idist.MirroredStrategy(["CPU:0", "CPU:1"])
    train(s, steps=4)
    # the workers send their events to the scheduler every 250 ms
    sched = s._lease.cluster.scheduler
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        msgs = [m for _, b in sched.get_events("interdist") for m in events.unpack_batch(b)
                if m.get("group") == s._group_id]
        if sum(m["kind"] == "run-finished" and m["fn"] == "step" for m in msgs) >= 8:
            break
        time.sleep(0.1)
    yield s
    s.close()


def source_rows(page: Any, view: str, column: str) -> list[Any]:
    return list(page.evaluate(
        "([name, col]) => { const s = Bokeh.documents[0].get_model_by_name(name);"
        " return s ? Array.from(s.data.get ? s.data.get(col) : s.data[col]) : null }",
        [f"interdist-{view}", column]) or [])


def open_page(browser: Any, strategy: Any, view: str, column: str, ready: int) -> Any:
    from interdist.dashboard.docked import page_url

    page = browser.new_page()
    page.goto(page_url(strategy.dashboard_link, view), wait_until="load")  # with the dashboard's token
    page.wait_for_function("() => window.Bokeh && Bokeh.documents.length > 0", timeout=20_000)
    deadline = time.monotonic() + 20
    while len(source_rows(page, view, column)) < ready and time.monotonic() < deadline:
        page.wait_for_timeout(200)
    page.wait_for_timeout(300)  # let the canvas paint before the screenshot
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"interdist-{view}.png"), full_page=True)
    return page


def test_replica_values_page(browser: Any, trained: Any) -> None:
    page = open_page(browser, trained, "replica-values", "variable", 4)
    # what a user reads: replica ids, variable names, devices
    names = source_rows(page, "replica-values", "variable")
    replicas = source_rows(page, "replica-values", "replica")
    # w and b, and the optimizer's own variables (its step counter), on both replicas
    assert sorted(r for n, r in zip(names, replicas) if n in ("w", "b")) == [0, 0, 1, 1]
    assert page.get_by_text("DIVERGED").count() == 0
    assert page.get_by_text("copies agree").count() == 1
    for text in ("w", "b", "CPU:1"):  # the device column shows the part of the device string that differs
        assert page.get_by_text(text, exact=True).count() >= 1, text
    page.close()


def test_status_page_shows_a_chip_per_replica(browser: Any, trained: Any) -> None:
    page = open_page(browser, trained, "status", "replica", 2)
    assert source_rows(page, "status", "kind") == ["done", "done"]
    assert page.locator(".interdist-chip").all_inner_texts() == ["0 done", "1 done"]
    assert "no failures" in page.locator(".interdist-summary").first.inner_text()
    page.close()


def test_placement_page(browser: Any, trained: Any) -> None:
    page = open_page(browser, trained, "placement", "replica", 2)
    assert source_rows(page, "placement", "replica") == ["0", "1"]
    assert source_rows(page, "placement", "worker") == list(trained._lease.addresses)
    assert all("w, b" in v for v in source_rows(page, "placement", "variables"))
    assert page.get_by_text("w, b").count() == 2
    page.close()


def test_timeline_page_is_not_empty(browser: Any, trained: Any) -> None:
    page = open_page(browser, trained, "timeline", "op", 16)
    ops = source_rows(page, "timeline", "op")
    assert len(ops) >= 16 and set(ops) == {"all_reduce"}  # 4 steps x 2 all-reduces (gradients, loss) x 2 replicas
    assert set(source_rows(page, "timeline", "replica")) == {0, 1}
    assert page.locator("canvas").count() >= 1
    page.close()


@pytest.mark.parametrize("view,column,ready", [("timings", "latency_ms", 16), ("progress", "step", 4),
                                               ("watchdog", "op", 0)])
def test_other_pages(browser: Any, trained: Any, view: str, column: str, ready: int) -> None:
    page = open_page(browser, trained, view, column, ready)
    assert len(source_rows(page, view, column)) >= ready
    if view == "watchdog":
        assert page.get_by_text("OK", exact=True).count() == 1
    if view == "progress":
        assert page.get_by_text("steps/s", exact=False).count() >= 1
    page.close()


def rendered_rows(page: Any) -> list[list[str]]:
    """The cells of the page's first DataTable as drawn (Playwright's CSS locators see into Bokeh's shadow roots)."""
    rows = page.locator(".bk-DataTable").first.locator(".slick-row")
    return [rows.nth(i).locator(".slick-cell").all_inner_texts() for i in range(rows.count())]


def test_replica_values_page_repaints_new_values(browser: Any, trained: Any) -> None:
    """New values in as many rows are drawn (Bokeh 3.9 left the table at its first draw: _base.set_data)."""
    import interdist as idist

    with trained.scope():
        probe = idist.Variable(np.float32(0.0), name="probe", aggregation=idist.VariableAggregation.ONLY_FIRST_REPLICA)
    trained.run(lambda: probe.assign_add(np.float32(1.0)))
    page = open_page(browser, trained, "replica-values", "variable", 4)
    try:
        for k in (1.0, 2.0, 3.0):
            if k > 1:
                trained.run(lambda: probe.assign_add(np.float32(1.0)))
            deadline = time.monotonic() + 10  # events reach the scheduler every 250 ms, the page redraws as often
            while time.monotonic() < deadline:
                shown = [float(r[6]) for r in rendered_rows(page) if r[0] == "probe"]  # its checksum: the value
                if shown == [k, k]:
                    break
                page.wait_for_timeout(200)
            assert shown == [k, k], rendered_rows(page)
    finally:
        page.close()


def test_bokehjs_loader_runs_once_per_page(browser: Any) -> None:
    """The output that strategy.dashboard() shows first loads BokehJS, and a second one reuses it."""
    from interdist.dashboard import bokehjs

    page = browser.new_page()
    try:
        page.set_content("<html><body></body></html>")
        page.add_script_tag(content=bokehjs.loader_js())
        first = page.evaluate_handle("() => window.Bokeh")
        assert page.evaluate("() => [Bokeh.version, typeof Bokeh.Widgets, typeof Bokeh.Tables]") == [
            bokeh.__version__, "object", "object"]
        page.add_script_tag(content=bokehjs.loader_js())  # a second dashboard, or the output drawn again
        # without the guard the core bundle would run again and replace Bokeh[version] with a new instance
        assert page.evaluate("(first) => window.Bokeh === first && Bokeh[Bokeh.version] === first", first)
    finally:
        page.close()
