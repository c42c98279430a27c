"""The live dashboard during a step, in a real ``jupyter lab`` and headless chromium.

A notebook whose step holds replica 1 back for ``HOLD_S`` seconds before its ``all_reduce``.
While that cell still runs, the rendered status strip must show replica 0 "waiting in
all_reduce #1 for [1]" (events come live from the scheduler's topic, not with the reply);
once it returns, both chips say "done", and the values shown for ``v`` are what the
replicas hold, after one step and again after the next. No widget error boxes, no
console errors. Screenshots go to the test's tmp dir (``live-*.png``).
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import pytest

from ._lab import running_lab
from .test_notebook_browser import NOTEBOOK as QUICKSTART
from .test_notebook_browser import error_boxes, values_table

pytest.importorskip("jupyterlab", reason="jupyterlab is not installed (pip install 'interdist[lab]')")
pytest.importorskip("jupyter_bokeh", reason="jupyter_bokeh is not installed (pip install 'interdist[lab]')")

VIEWPORT = {"width": 1400, "height": 1000}
HOLD_S = 3
CELLS = [
    f"""import time

import numpy as np

import interdist as idist

strategy = idist.MirroredStrategy(["CPU:0", "CPU:1"])
with strategy.scope():
    v = idist.Variable(np.zeros(3, np.float32), name="v", aggregation=idist.VariableAggregation.MEAN)


def held_back():
    ctx = idist.get_replica_context()
    if ctx.replica_id_in_sync_group == 1:
        time.sleep({HOLD_S})  # replica 0 waits for it in the all_reduce
    total = ctx.all_reduce("sum", np.float32(1.0))
    v.assign_add(np.full(3, total, np.float32))
    return total""",
    "dash = strategy.dashboard()\ndash",
    """strategy.run(held_back)
print("replica v:", " ".join(",".join(f"{x:g}" for x in c) for c in idist.debug.replica_values(strategy, v)))""",
]

pytestmark = [pytest.mark.timeout(240)]


def write_notebook(path: Path) -> None:
    cells = [{"cell_type": "code", "metadata": {}, "execution_count": None, "outputs": [], "source": c} for c in CELLS]
    # the quickstart's metadata (its kernelspec): without one, JupyterLab asks which kernel to start
    metadata = json.loads(QUICKSTART.read_text())["metadata"]
    path.write_text(json.dumps({"cells": cells, "metadata": metadata, "nbformat": 4, "nbformat_minor": 5}))


def chips(page: Any) -> dict[int, str]:
    """The rendered status strip: replica -> its chip's text (Playwright's CSS sees into Bokeh's shadow roots)."""
    out = {}
    for text in page.locator(".interdist-chip").all_inner_texts():
        replica, _, rest = text.strip().partition(" ")
        out[int(replica)] = rest
    return out


def shown_v(page: Any) -> list[str]:
    """The values column of each replica's copy of v, as the values table shows it."""
    return [r["values"] for r in sorted(values_table(page), key=lambda r: r.get("replica", "")) if r.get("variable") == "v"]


def printed_v(cell: Any) -> list[str]:
    text = cell.locator('.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stdout"]').inner_text()
    return ["[" + c.replace(",", ", ") + "]" for c in text.split("replica v:")[1].split()]


def wait_idle_after(page: Any, executions: int, timeout: float = 90.0) -> None:
    """Until some cell has execution count ``executions`` and the kernel is idle."""
    deadline = time.monotonic() + timeout
    while True:
        prompts = page.locator(".jp-CodeCell .jp-InputPrompt").all_inner_texts()
        counts = [int(m.group(1)) for p in prompts if (m := re.search(r"\[(\d+)\]", p))]
        if counts and max(counts) >= executions and page.locator(".jp-StatusBar-TextItem", has_text="| Idle").count():
            return
        assert time.monotonic() < deadline, f"cells did not finish: prompts {prompts}"
        page.wait_for_timeout(200)


def until(check: Any, timeout: float, page: Any) -> Any:
    deadline = time.monotonic() + timeout
    while not (got := check()) and time.monotonic() < deadline:
        page.wait_for_timeout(100)
    return got


def test_status_strip_shows_a_held_back_replica_while_the_cell_runs(browser: Any, tmp_path: Path) -> None:
    root = tmp_path / "lab"
    root.mkdir()
    (registry := tmp_path / "registry").mkdir()
    with running_lab(root, registry) as lab:
        write_notebook(root / "root" / "live.ipynb")
        page = browser.new_page()
        errors: list[str] = []

        def on_console(msg: Any) -> None:
            url = (msg.location or {}).get("url", "")
            if msg.type == "error" and not ("404" in msg.text and "/lsp/status" in url):  # see test_notebook_browser
                errors.append(f"{msg.text} ({url})")

        page.on("console", on_console)
        page.on("pageerror", lambda e: errors.append(f"uncaught: {e}"))
        try:
            page.goto(f"{lab.url}lab/tree/live.ipynb?token={lab.token}", wait_until="domcontentloaded")
            page.locator(".jp-Notebook .jp-CodeCell").first.wait_for(timeout=60_000)
            page.locator(".jp-StatusBar-TextItem", has_text="| Idle").wait_for(timeout=60_000)
            # The set-up and the dashboard first, until the strip is drawn (idle replicas) ...
            cells = page.locator(".jp-Notebook .jp-CodeCell")
            cells.first.locator(".jp-InputArea-editor").click()
            page.keyboard.press("Shift+Enter")
            page.keyboard.press("Shift+Enter")
            wait_idle_after(page, executions=2)
            assert until(lambda: chips(page) == {0: "idle", 1: "idle"}, 30, page), chips(page)
            assert not error_boxes(page), error_boxes(page)
            # ... then the step, held back on replica 1
            last = cells.last
            last.locator(".jp-InputArea-editor").click()
            page.keyboard.press("Control+Enter")

            # While the step's cell still runs ([*]), replica 0 waits in the all_reduce for replica 1.
            waiting = {0: "waiting in all_reduce #1 for [1]", 1: "running held_back"}
            assert until(lambda: chips(page) == waiting, 60, page), chips(page)
            prompt = last.locator(".jp-InputPrompt").inner_text()
            assert "*" in prompt, f"the cell had already finished ({prompt}): the strip was not live"
            print("strip while held back:", page.locator(".interdist-chip").all_inner_texts())
            page.screenshot(path=str(tmp_path / "live-1-waiting.png"))

            wait_idle_after(page, executions=3)
            assert until(lambda: chips(page) == {0: "done", 1: "done"}, 5, page), chips(page)
            assert not error_boxes(page), error_boxes(page)
            print("stderr of the step's cell:", last.locator(
                '.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]').all_inner_texts())
            held = printed_v(last)
            assert held == ["[2, 2, 2]"] * 2
            assert until(lambda: shown_v(page) == held, 5, page), (shown_v(page), held)
            page.screenshot(path=str(tmp_path / "live-2-done.png"))

            # One more step: the numbers shown change, and are again what the replicas hold.
            last.locator(".jp-InputArea-editor").click()
            page.keyboard.press("Control+Enter")
            assert until(lambda: chips(page).get(0, "").startswith("waiting in all_reduce"), 30, page), chips(page)
            wait_idle_after(page, executions=4)
            held2 = printed_v(last)
            assert held2 == ["[4, 4, 4]"] * 2 != held
            assert until(lambda: shown_v(page) == held2, 5, page), (shown_v(page), held2)
            summary = page.locator(".interdist-summary").first.inner_text() if page.locator(
                ".interdist-summary").count() else ""
            assert not re.search(r"\d\.\d+e-\d", summary), summary  # readable numbers
            page.screenshot(path=str(tmp_path / "live-3-next-step.png"))
            # A tab drawn while hidden gets its width once shown: the timeline's plot fills the tab.
            page.locator(".lm-TabBar-tabLabel", has_text="collectives").first.click()
            # (the first visible canvas: other tabs hold canvases too, hidden)
            canvas = page.locator(".bk-Canvas canvas >> visible=true")
            box = until(lambda: (b := canvas.first.bounding_box()) and b["width"] > 300 and b, 10, page)
            assert box, canvas.first.bounding_box() if canvas.count() else "no visible canvas"
            page.screenshot(path=str(tmp_path / "live-4-collectives-tab.png"))
            page.wait_for_timeout(300)
            assert not error_boxes(page), error_boxes(page)
            assert not errors, errors
        finally:
            page.close()
            lab.shutdown_kernels()
    print(f"screenshots in {tmp_path}")
