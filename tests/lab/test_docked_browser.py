"""The docked dashboard and the inline dashboard's snapshot, in a real ``jupyter lab`` and headless chromium.

A notebook shows the inline dashboard, then ``strategy.dashboard(docked=True)``, then runs a step:

- the docked panel opens by itself, split to the right of the notebook (once: the output renders a
  note with a link), and shows the overview page's chips, idle, then done after the step; closed,
  the note's link docks it again;
- saved and reloaded, the page brings the panel back (JupyterLab's layout restorer), live (one more
  step shows in it), and the saved output opens no second one;
- Kernel > Restart: the inline dashboard becomes a static snapshot (banner, chips, values), with no
  broken-chain icon; saved and reloaded, the snapshot is still there and no widget error shows;
- the notebook run again: the same panel follows the new cluster (a new dashboard port).

No console errors. Screenshots (``docked-*.png``) in the test's tmp dir, whose path it prints.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import pytest

from ._lab import running_lab
from .test_notebook_browser import error_boxes, watch_errors

pytest.importorskip("jupyterlab", reason="jupyterlab is not installed (pip install 'interdist[lab]')")
pytest.importorskip("jupyter_bokeh", reason="jupyter_bokeh is not installed (pip install 'interdist[lab]')")
pytest.importorskip("jupyter_server_proxy", reason="jupyter-server-proxy is missing (pip install 'interdist[lab]')")

VIEWPORT = {"width": 1500, "height": 1000}  # the browser fixture (tests/conftest.py) reads it
NOTEBOOK = "docked.ipynb"
PAGE = "individual-interdist-overview"
CELLS = [
    """import numpy as np

import interdist as idist

strategy = idist.MirroredStrategy(["CPU:0", "CPU:1"])
with strategy.scope():
    w = idist.Variable(np.float32(1.0), name="w", aggregation=idist.VariableAggregation.MEAN)
strategy.dashboard()""",
    "strategy.dashboard(docked=True)",
    """def step():
    w.assign_add(idist.get_replica_context().all_reduce("sum", np.float32(1.0)))

strategy.run(step)
print("w =", float(w.numpy()))""",
]

pytestmark = [pytest.mark.timeout(240)]


def write_notebook(path: Path) -> None:
    cells = [{"cell_type": "code", "metadata": {}, "execution_count": None, "outputs": [], "source": c} for c in CELLS]
    metadata = {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}}
    path.write_text(json.dumps({"cells": cells, "metadata": metadata, "nbformat": 4, "nbformat_minor": 5}))


def until(check: Any, page: Any, timeout: float = 30.0, what: str = "") -> Any:
    deadline = time.monotonic() + timeout
    while not (got := check()):
        assert time.monotonic() < deadline, f"timed out waiting for {what or check}"
        page.wait_for_timeout(150)
    return got


def idle_after(page: Any, executions: int) -> bool:
    """Whether some cell has run ``executions`` times in all and the kernel is idle."""
    prompts = page.locator(".jp-CodeCell .jp-InputPrompt").all_inner_texts()
    counts = [int(m.group(1)) for p in prompts if (m := re.search(r"\[(\d+)\]", p))]
    return bool(counts) and max(counts) >= executions and page.locator(
        ".jp-StatusBar-TextItem", has_text="| Idle").count() > 0


def open_notebook(page: Any, lab: Any) -> None:
    page.goto(f"{lab.url}lab/tree/{NOTEBOOK}?token={lab.token}", wait_until="domcontentloaded")
    page.locator(".jp-Notebook .jp-CodeCell").first.wait_for(timeout=60_000)
    page.locator(".jp-StatusBar-TextItem", has_text="| Idle").wait_for(timeout=60_000)  # the kernel is up


def menu(page: Any, top: str, item: str) -> None:
    page.locator(".lm-MenuBar-itemLabel", has_text=top).first.click()
    page.locator(".lm-Menu-itemLabel", has_text=item).first.click()


def save_and_reload(page: Any, lab: Any) -> None:
    page.locator(".jp-NotebookPanel").first.click(position={"x": 5, "y": 5})  # the notebook has the focus
    page.keyboard.press("Control+s")
    page.locator(".jp-mod-dirty").first.wait_for(state="detached", timeout=20_000)
    page.reload(wait_until="domcontentloaded")
    page.locator(".jp-Notebook .jp-CodeCell").first.wait_for(timeout=60_000)


def docked_frame(page: Any) -> Any:
    """The docked panel's page (its iframe's frame), once it is loaded and drawn."""
    iframe = page.locator(".jp-interdist-docked .jp-interdist-iframe iframe")
    until(lambda: (iframe.get_attribute("src") or "").endswith(PAGE), page, 30, "the docked page's src")
    frame = iframe.element_handle().content_frame()
    frame.wait_for_function("() => window.Bokeh && Bokeh.documents.length > 0", timeout=30_000)
    return frame


def chips(where: Any) -> dict[int, str]:
    """Replica -> its chip's text (Playwright's CSS sees into Bokeh's shadow roots)."""
    out = {}
    for text in where.locator(".interdist-chip").all_inner_texts():
        replica, _, rest = text.strip().partition(" ")
        out[int(replica)] = rest
    return out


def assert_docked_right(page: Any) -> None:
    """One docked panel, beside the notebook (to its right, as tall), not in a tab behind it."""
    assert page.locator(".jp-interdist-docked").count() == 1
    dock = page.locator(".jp-interdist-docked").bounding_box()
    notebook = page.locator(".jp-NotebookPanel").first.bounding_box()
    assert dock and notebook, (dock, notebook)
    assert dock["x"] >= notebook["x"] + notebook["width"] - 10, (dock, notebook)
    assert abs(dock["y"] - notebook["y"]) < 40 and dock["width"] > 300, (dock, notebook)


def test_docked_dashboard_and_the_inline_snapshot(browser: Any, tmp_path: Path) -> None:
    t0 = time.monotonic()
    (tmp_path / "registry").mkdir()
    (tmp_path / "lab").mkdir()
    with running_lab(tmp_path / "lab", tmp_path / "registry") as lab:
        write_notebook(tmp_path / "lab" / "root" / NOTEBOOK)
        page = browser.new_page()
        errors = watch_errors(page)
        try:
            open_notebook(page, lab)
            page.locator(".jp-Notebook .jp-CodeCell").first.locator(".jp-InputArea-editor").click()
            page.keyboard.press("Shift+Enter")
            page.keyboard.press("Shift+Enter")
            until(lambda: idle_after(page, 2), page, 90, "the first two cells")

            # docked by the output, to the right of the notebook, without taking its focus; the note links to it
            note = page.locator(".jp-interdist-dock-note")
            assert "docked at the right" in note.inner_text()
            until(lambda: page.locator(".jp-interdist-docked").count(), page, 20, "the docked panel")
            assert_docked_right(page)
            frame = docked_frame(page)
            src = page.locator(".jp-interdist-docked iframe").get_attribute("src")
            assert re.fullmatch(rf"/proxy/\d+/{PAGE}", src or ""), src  # through Jupyter's proxy
            until(lambda: chips(frame) == {0: "idle", 1: "idle"}, page, 30, "idle chips")
            assert frame.locator(".bk-DataTable").count() >= 1 and frame.locator(".bk-Canvas canvas").count() >= 1
            page.screenshot(path=str(tmp_path / "docked-1-opened.png"))

            # a step: the panel's chips change while the notebook stays where it is
            page.keyboard.press("Shift+Enter")
            until(lambda: idle_after(page, 3), page, 60, "the step")
            until(lambda: chips(frame) == {0: "done", 1: "done"}, page, 20, "done chips")
            assert "run #1" in frame.locator(".interdist-summary").first.inner_text()
            page.screenshot(path=str(tmp_path / "docked-2-after-step.png"))

            # closed, then the note's link: docked again, at the right
            page.locator('.lm-DockPanel-tabBar .lm-TabBar-tab[data-id^="interdist-docked-"] .lm-TabBar-tabCloseIcon').click()
            until(lambda: page.locator(".jp-interdist-docked").count() == 0, page, 10, "the panel to close")
            note.locator("a.jp-interdist-dock-show").click()
            until(lambda: page.locator(".jp-interdist-docked").count(), page, 20, "the panel again")
            assert_docked_right(page)
            frame = docked_frame(page)
            until(lambda: chips(frame) == {0: "done", 1: "done"}, page, 20, "done chips in the panel again")

            # saved and reloaded: the layout restorer brings the panel back, live; the saved output opens no other
            save_and_reload(page, lab)
            until(lambda: page.locator(".jp-interdist-docked").count(), page, 30, "the restored panel")
            frame = docked_frame(page)
            until(lambda: chips(frame) == {0: "done", 1: "done"}, page, 20, "done chips after the reload")
            page.wait_for_timeout(500)  # a second panel would have opened by now
            assert_docked_right(page)
            assert src == page.locator(".jp-interdist-docked iframe").get_attribute("src")
            # live: one more step (the kernel runs on) shows in the restored panel
            page.locator(".jp-Notebook .jp-CodeCell").nth(2).locator(".jp-InputArea-editor").click()
            page.keyboard.press("Shift+Enter")
            until(lambda: idle_after(page, 4), page, 60, "the second step")
            until(lambda: "run #2" in frame.locator(".interdist-summary").first.inner_text(), page, 20, "run #2")
            # the inline dashboard is drawn again (its state from the kernel) before the kernel goes
            until(lambda: page.locator(".jp-OutputArea-output .bk-DataTable .slick-row").count() >= 2, page, 30,
                  "the inline dashboard after the reload")
            page.screenshot(path=str(tmp_path / "docked-3-reloaded.png"))

            # Kernel > Restart: the inline dashboard becomes its static snapshot
            page.locator(".jp-NotebookPanel").first.click(position={"x": 5, "y": 5})
            menu(page, "Kernel", "Restart Kernel…")
            page.locator(".jp-Dialog-button.jp-mod-accept").click()
            frozen = page.locator(".jp-OutputArea-output .interdist-frozen")
            frozen.wait_for(timeout=20_000)
            assert "Kernel restarted" in frozen.inner_text() and "as it last was" in frozen.inner_text()
            assert chips(frozen) == {0: "done", 1: "done"}  # the last state: shown before the step, it said idle
            assert "run #2" in frozen.inner_text() and "w" in frozen.locator("table").inner_text()
            assert not page.locator(".jupyter-widgets-disconnected").count()
            page.locator(".jp-StatusBar-TextItem", has_text="| Idle").wait_for(timeout=60_000)
            frozen.scroll_into_view_if_needed()
            page.screenshot(path=str(tmp_path / "docked-4-restarted.png"))

            # saved and reloaded with the kernel that drew it gone: the snapshot, no widget error
            save_and_reload(page, lab)
            frozen.wait_for(timeout=20_000)
            assert chips(frozen) == {0: "done", 1: "done"} and "Kernel restarted" in frozen.inner_text()
            page.wait_for_timeout(500)
            assert not error_boxes(page), error_boxes(page)
            # the restored panel does not load the page of a cluster that is gone; it says it waits for the next
            until(lambda: "is gone" in page.locator(".jp-interdist-docked-note").inner_text(), page, 10, "gone")
            page.screenshot(path=str(tmp_path / "docked-5-restarted-reloaded.png"))

            # the notebook again: the open panel follows the new cluster, no second panel opens
            menu(page, "Run", "Run All Cells")
            until(lambda: idle_after(page, 3), page, 90, "Run All")
            until(lambda: page.locator(".jp-interdist-docked iframe").get_attribute("src") not in (src, None, ""),
                  page, 20, "the panel to follow the new cluster")
            frame = docked_frame(page)
            until(lambda: chips(frame) == {0: "done", 1: "done"}, page, 20, "the new cluster's chips")
            assert_docked_right(page)
            page.screenshot(path=str(tmp_path / "docked-6-rerun.png"))
            assert not error_boxes(page), error_boxes(page)
            # Known, not interdist's (as in test_restart_browser): a jupyter_bokeh view removed after its kernel
            # went (here: the snapshot taking its place) sends one last change over its dead comm, and
            # @jupyter-widgets throws "Cannot send" (uncaught, nothing shown). Anything else fails.
            assert [e for e in errors if e != "uncaught: Cannot send"] == [], errors
            print("console errors (known):", errors)
        finally:
            page.close()
            lab.shutdown_kernels()
    print(f"screenshots in {tmp_path}; {time.monotonic() - t0:.1f} s")
