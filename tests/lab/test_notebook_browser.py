"""The quickstart's inline dashboard as a user sees it: a real ``jupyter lab``, headless chromium, Run All.

What the headless notebook run (tests/dashboard/test_notebook.py) cannot see, read from
the rendered page:

- the dashboard renders by itself: BokehJS is loaded by ``strategy.dashboard()``'s own
  output (no ``output_notebook``), so no "Failed to create view" boxes, no console errors,
  and the Bokeh views (tables, canvases) are drawn;
- the replica-values table repaints: after one more training step its ``checksum`` for
  ``w`` (a scalar: its value) changes to what the replicas hold (Bokeh 3.9 froze tables
  whose row count stays the same, see ``components._base.set_data``);
- after saving and reloading the page the dashboard renders again, from its current
  state (BokehJS comes from the saved output; the views' state from the kernel).

Then every lesson in ``notebooks/`` (a glob) is opened in the same JupyterLab and run with Run All:
every code cell runs, no widget shows an error box, nothing is written to stderr as a traceback,
and the browser logs no console error (``lesson-*.png`` screenshots).

Screenshots go to the test's tmp dir (``dashboard-*.png``).
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import pytest

from ._lab import running_lab

pytest.importorskip("jupyterlab", reason="jupyterlab is not installed (pip install 'interdist[lab]')")
pytest.importorskip("jupyter_bokeh", reason="jupyter_bokeh is not installed (pip install 'interdist[lab]')")

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"
NOTEBOOK = NOTEBOOKS / "01_quickstart.ipynb"
LESSONS = sorted(p.name for p in NOTEBOOKS.glob("*.ipynb"))
VIEWPORT = {"width": 1400, "height": 1700}  # the browser fixture reads it: the whole dashboard in one screenshot
# One more training step, then every replica's copy of w read from its worker; the test runs it twice.
STEP_CELL = """strategy.run(step, args=(batch,))
print("replica w:", " ".join(f"{float(v):.6f}" for v in idist.debug.replica_values(strategy, w)))"""
# What a broken widget or a failed cell shows
ERROR_TEXTS = ("Failed to create view", "Error displaying widget", "Click to show javascript error",
               "JavaScript output is disabled")

pytestmark = [pytest.mark.timeout(240)]


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """One jupyter lab for every test of this module; notebooks go in ``lab.root``, the folder it serves."""
    tmp = tmp_path_factory.mktemp("lab-notebooks")
    (tmp / "lab").mkdir()
    (tmp / "registry").mkdir()
    with running_lab(tmp / "lab", tmp / "registry") as lab:
        lab.root = tmp / "lab" / "root"  # type: ignore[attr-defined]
        yield lab


def quickstart_copy(path: Path) -> int:
    """The quickstart without its last cell (asserts, then closes the strategy), plus ``STEP_CELL``; code cells."""
    nb = json.loads(NOTEBOOK.read_text())
    assert "strategy.close()" in "".join(nb["cells"][-1]["source"])
    nb["cells"] = [*nb["cells"][:-1], {"cell_type": "code", "metadata": {}, "execution_count": None, "outputs": [],
                                       "source": STEP_CELL}]
    path.write_text(json.dumps(nb))
    return sum(c["cell_type"] == "code" for c in nb["cells"])


def wait_idle(page: Any, code_cells: int, executions: int, timeout: float = 90.0) -> None:
    """Until every code cell has run (``executions`` is the highest count expected) and the kernel is idle."""
    deadline = time.monotonic() + timeout
    while True:
        prompts = page.locator(".jp-CodeCell .jp-InputPrompt").all_inner_texts()
        counts = [int(m.group(1)) for p in prompts if (m := re.search(r"\[(\d+)\]", p))]
        idle = page.locator(".jp-StatusBar-TextItem", has_text="| Idle").count() > 0
        if len(counts) == code_cells and max(counts) >= executions and idle:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"cells did not finish: prompts {prompts}, idle {idle}")
        page.wait_for_timeout(200)


def error_boxes(page: Any) -> list[str]:
    """Widget errors and tracebacks on the page (none expected)."""
    found = [t for t in ERROR_TEXTS if page.get_by_text(t, exact=False).count()]
    for sel in ('.jp-RenderedText[data-mime-type="application/vnd.jupyter.stderr"]',
                '.jp-RenderedText[data-mime-type="application/vnd.jupyter.error"]'):
        found += [t[:500] for t in page.locator(sel).all_inner_texts() if "Traceback" in t or "Error" in t]
    return found


def values_table(page: Any) -> list[dict[str, str]]:
    """The rendered rows of the replica-values table (the page's first DataTable), as {column title: cell text}."""
    table = page.locator(".bk-DataTable").first  # Playwright's CSS locators see into Bokeh's shadow roots
    titles = table.locator(".slick-column-name").all_inner_texts()
    rows = []
    for i in range(table.locator(".slick-row").count()):
        cells = table.locator(".slick-row").nth(i).locator(".slick-cell").all_inner_texts()
        rows.append(dict(zip(titles, cells, strict=False)))
    return rows


def shown_w(page: Any) -> list[float]:
    """The checksum (for a scalar: the value) of each replica's copy of w, as the table shows it."""
    return [float(r["checksum"]) for r in sorted(values_table(page), key=lambda r: r.get("replica", ""))
            if r.get("variable") == "w"]


def assert_rendered(page: Any, timeout: float = 30.0) -> None:
    """Every Bokeh view is drawn: six roots, the tables with rows, the plots with canvases; no error boxes."""
    deadline = time.monotonic() + timeout
    while not page.locator(".bk-DataTable .slick-row").count() and not error_boxes(page):
        assert time.monotonic() < deadline, "no Bokeh table was drawn, and no error shown"
        page.wait_for_timeout(200)
    assert not error_boxes(page), error_boxes(page)
    # the views' roots, outside any shadow root (querySelectorAll does not look into them)
    roots = page.evaluate("""() => Array.from(document.querySelectorAll('.jp-OutputArea-output [class^="bk-"]'))
                                 .map(e => e.classList[0]).filter(c => c !== "bk-Notifications")""")
    assert len(roots) >= 7, roots  # the status strip, and six views in tabs (and controls the dashboard adds)
    assert page.locator(".bk-DataTable").count() >= 3  # values, placement, watchdog
    assert page.locator(".bk-Figure canvas, .bk-Canvas canvas").count() >= 3


def watch_errors(page: Any) -> list[str]:
    """The page's console errors and uncaught exceptions, collected from now on."""
    errors: list[str] = []

    def on_console(msg: Any) -> None:
        if msg.type != "error":
            return
        url = (msg.location or {}).get("url", "")
        # Known and not ours: _lab.py disables the jupyter_lsp server extension, and JupyterLab's
        # LSP front end still polls it (Chromium logs each 404 as a console error).
        if "404" in msg.text and "/lsp/status" in url:
            return
        errors.append(f"{msg.text} ({url})")

    page.on("console", on_console)
    page.on("pageerror", lambda e: errors.append(f"uncaught: {e}"))
    return errors


def open_and_run_all(page: Any, lab: Any, name: str, code_cells: int, timeout: float = 90.0,
                     workspace: str | None = None) -> None:
    """Open ``name`` (in the lab's root), wait for its kernel, Run All Cells, wait until every cell ran.

    ``workspace``: a JupyterLab workspace of its own, so that the notebooks opened by earlier tests are
    not restored beside this one (their cells would be counted too)."""
    where = f"lab/workspaces/{workspace}/tree/{name}" if workspace else f"lab/tree/{name}"
    page.goto(f"{lab.url}{where}?token={lab.token}", wait_until="domcontentloaded")
    page.locator(".jp-Notebook .jp-CodeCell").first.wait_for(timeout=60_000)
    page.locator(".jp-StatusBar-TextItem", has_text="| Idle").wait_for(timeout=60_000)  # kernel up
    page.locator(".lm-MenuBar-itemLabel", has_text="Run").first.click()
    page.locator(".lm-Menu-itemLabel", has_text="Run All Cells").first.click()
    wait_idle(page, code_cells, executions=code_cells, timeout=timeout)


def test_quickstart_dashboard_renders_updates_and_survives_a_reload(browser: Any, lab: Any, tmp_path: Path) -> None:
    t0 = time.monotonic()
    code_cells = quickstart_copy(lab.root / "quickstart.ipynb")
    page = browser.new_page()
    errors = watch_errors(page)
    try:
        open_and_run_all(page, lab, "quickstart.ipynb", code_cells)
        assert_rendered(page)
        before = shown_w(page)
        assert len(before) == 2, values_table(page)
        page.screenshot(path=str(tmp_path / "dashboard-1-run-all.png"))

        # One more step: the table must show the new value that the replicas hold.
        last = page.locator(".jp-Notebook .jp-CodeCell").last
        last.locator(".jp-InputArea-editor").click()
        page.keyboard.press("Control+Enter")
        wait_idle(page, code_cells, executions=code_cells + 1)
        printed = last.locator(".jp-OutputArea-output").inner_text()
        held = [float(v) for v in printed.split("replica w:")[1].split()]
        assert held != before  # the step moved w
        deadline = time.monotonic() + 10  # the dashboard redraws at most 5 times a second
        while (shown := shown_w(page)) != pytest.approx(held, abs=2e-6) and time.monotonic() < deadline:
            page.wait_for_timeout(200)
        assert shown == pytest.approx(held, abs=2e-6), (shown, held, before)
        page.locator(".bk-DataTable").first.scroll_into_view_if_needed()
        page.screenshot(path=str(tmp_path / "dashboard-2-after-one-more-step.png"))

        # Save, reload: BokehJS comes back from the saved output, the views from the kernel, as they are now.
        page.keyboard.press("Control+s")
        page.locator(".jp-mod-dirty").first.wait_for(state="detached", timeout=20_000)
        page.reload(wait_until="domcontentloaded")
        page.locator(".jp-Notebook .jp-CodeCell").first.wait_for(timeout=60_000)
        assert_rendered(page)
        # not "no variables yet": the views' state, asked of the kernel again, is the current one
        assert shown_w(page) == pytest.approx(held, abs=2e-6)
        page.wait_for_timeout(500)  # let late errors (a view created after the check) arrive
        assert not error_boxes(page), error_boxes(page)
        page.screenshot(path=str(tmp_path / "dashboard-3-after-reload.png"))
        assert not errors, errors
    finally:
        page.close()
        lab.shutdown_kernels()  # the kernel's cluster goes with it
    print(f"screenshots in {tmp_path}; {time.monotonic() - t0:.1f} s")


@pytest.mark.timeout(300)
@pytest.mark.parametrize("name", LESSONS)
def test_lesson_runs_all_in_jupyterlab_without_widget_or_console_errors(
        browser: Any, lab: Any, name: str, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    t0 = time.monotonic()
    nb = json.loads((NOTEBOOKS / name).read_text())
    (lab.root / name).write_text(json.dumps(nb))
    code_cells = sum(c["cell_type"] == "code" for c in nb["cells"])
    page = browser.new_page()
    errors = watch_errors(page)
    try:
        where = f"lab/workspaces/lesson-{Path(name).stem[:2]}/tree/{name}"  # its own workspace: see open_and_run_all
        page.goto(f"{lab.url}{where}?token={lab.token}", wait_until="domcontentloaded")
        page.locator(".jp-Notebook .jp-CodeCell").first.wait_for(timeout=60_000)
        page.locator(".jp-StatusBar-TextItem", has_text="| Idle").wait_for(timeout=60_000)  # kernel up
        page.locator(".lm-MenuBar-itemLabel", has_text="Run").first.click()
        page.locator(".lm-Menu-itemLabel", has_text="Run All Cells").first.click()
        started = time.monotonic()
        # JupyterLab renders only the cells near the view (windowing), so wait for the last cell's count (Run All
        # scrolls there), then save and read what ran from the file.
        deadline = time.monotonic() + 200
        while True:
            prompts = page.locator(".jp-CodeCell .jp-InputPrompt").all_inner_texts()
            counts = [int(m.group(1)) for p in prompts if (m := re.search(r"\[(\d+)\]", p))]
            idle = page.locator(".jp-StatusBar-TextItem", has_text="| Idle").count() > 0
            if counts and max(counts) >= code_cells and idle:
                break
            assert time.monotonic() < deadline, f"cells did not finish: prompts {prompts}"
            page.wait_for_timeout(250)
        page.wait_for_timeout(1000)  # widgets and Bokeh views render after the kernel went idle
        assert not error_boxes(page), error_boxes(page)
        shown = page.locator(".jp-OutputArea-output").count()
        assert shown >= 1
        page.locator(".jp-Notebook .jp-CodeCell").last.scroll_into_view_if_needed()
        page.screenshot(path=str(tmp_path / f"lesson-{Path(name).stem}.png"))
        page.locator(".jp-Notebook .jp-CodeCell").last.locator(".jp-InputPrompt").click()
        page.keyboard.press("Control+s")
        page.locator(".jp-mod-dirty").first.wait_for(state="detached", timeout=20_000)
        ran = [c for c in json.loads((lab.root / name).read_text())["cells"] if c["cell_type"] == "code"]
        assert [c["execution_count"] for c in ran] == list(range(1, code_cells + 1))  # every cell, in order, once
        outputs = [o for c in ran for o in c["outputs"]]
        assert not [o for o in outputs if o["output_type"] == "error"], name
        assert not errors, errors
        # tests/notebooks checks what the lesson printed: it reads this run (a real kernel, the cells in order)
        # rather than running the lesson once more with nbclient; see tests/notebooks/conftest.py.
        ran_dir = tmp_path_factory.getbasetemp() / "lessons-ran"
        ran_dir.mkdir(exist_ok=True)
        (ran_dir / f"{name}.seconds").write_text(f"{time.monotonic() - started:.3f}")
        (ran_dir / name).write_text((lab.root / name).read_text())
    finally:
        page.close()
        lab.shutdown_kernels()
    print(f"\n[lessons-browser] {name}: {time.monotonic() - t0:.1f} s; screenshot in {tmp_path}")
