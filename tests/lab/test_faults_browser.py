"""Every injected fault, at every point, on 2 and 4 replicas: what the dashboard says, in a real JupyterLab.

A notebook in a real ``jupyter lab`` (headless Chromium) makes a strategy, shows its inline dashboard,
and runs one driver cell again and again with a new fault each time (``idist.debug.inject``: raise, slow,
freeze, kill; at the start of the step, a collective, a variable update, a checkpoint save). For each,
the test reads what is rendered on the page — the status strip's chips, the summary line and the
failures list — while the fault is live (a slow or frozen replica: its peers wait for it by name) and
after it, and asserts the names and states a person would give:

- the replica that raised is "raised <class>"; a frozen one "frozen"; a killed one "lost"; its peers,
  which were aborted because of it, "released: replica v <what happened>"; never "failed", never "done";
- in a checkpoint save (a program of the engine's with no collective) the peers did their part: "done";
- a slow replica is never failed: everyone ends "done" and no failure is added;
- the failures list's newest row names the replica and what happened; the summary counts the same.

The Dask dashboard's status page, opened through Jupyter's proxy as the sidebar opens it, must give
the same states. Screenshots: ``test-artifacts/faults/<n>-<fault>-<point>.png``.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ._lab import Lab, module_lab
from .test_notebook_browser import NOTEBOOK as QUICKSTART
from .test_notebook_browser import error_boxes

pytest.importorskip("jupyterlab", reason="jupyterlab is not installed (pip install 'interdist[lab]')")
pytest.importorskip("jupyter_bokeh", reason="jupyter_bokeh is not installed (pip install 'interdist[lab]')")
pytest.importorskip("jupyter_server_proxy", reason="jupyter-server-proxy is missing (pip install 'interdist[lab]')")

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "faults"
VIEWPORT = {"width": 1400, "height": 1100}
FAULTS = ("raise", "slow", "freeze", "kill")
POINTS = ("step", "collective", "update", "checkpoint_save")
FROZEN_AFTER = 1.5  # the liveness watch names a stopped replica after this (5 s by default)
FREEZE_S = 8.0  # a freeze outlasts the report, so the state after the cell is still "frozen"
SLOW_S = 2.0
# Every fault at every point on 2 replicas; on 4, each fault and each point once (a Latin square), plus
# the kill in a collective, whose survivors' chips once raced the loss: what 4 replicas add is more peers
# to name, which every case exercises, and the full matrix again cost 3-4 minutes of the suite.
MATRIX = {2: [(f, at) for f in FAULTS for at in POINTS],
          4: [("raise", "step"), ("slow", "collective"), ("freeze", "update"), ("kill", "checkpoint_save"),
              ("kill", "collective")]}

SETUP = f"""import json, os, tempfile, time, warnings
import numpy as np
import interdist as idist

idist.config.settings.frozen_after = {FROZEN_AFTER}
strategy = idist.MirroredStrategy([f"CPU:{{i}}" for i in range(N)])
with strategy.scope():
    w = idist.Variable(np.zeros(3, np.float32), name="w", aggregation=idist.VariableAggregation.MEAN)
manager = idist.CheckpointManager(idist.Checkpoint(w=w), tempfile.mkdtemp(), max_to_keep=2)


def step():
    ctx = idist.get_replica_context()
    w.assign_sub(np.full(3, 0.01, np.float32))  # a mirrored update: the "update" point, and an all-reduce
    return ctx.all_reduce("SUM", np.float32(1.0))


def case(fault, at, replica):
    seconds = {{"freeze": {FREEZE_S}, "slow": {SLOW_S}}}.get(fault, 1.0)
    idist.debug.inject(strategy, replica=replica, fault=fault, at=at, seconds=seconds)
    try:
        manager.save() if at == "checkpoint_save" else strategy.run(step)
        print("outcome: none")
    except Exception as e:
        print("outcome:", type(e).__name__)


def settle():
    # until the strategy takes a step again (a killed replica is replaced); a frozen one is resumed now,
    # as a debugger's "continue" would, instead of at the end of its freeze
    import psutil, signal
    for p in psutil.Process().children(recursive=True):
        try:
            if "kill -CONT" in " ".join(p.cmdline()):
                p.kill()  # the freeze's own timer: else it resumes the next freeze of that process early
        except psutil.Error:  # a process that ended meanwhile
            pass
    # the workers by the pids interdist knows (one forked from a zygote is a grandchild with its command line)
    for w in strategy._lease.cluster.workers.values():
        try:
            os.kill(w.pid, signal.SIGCONT)
        except (OSError, TypeError):  # ended meanwhile, or being started again (no pid yet)
            pass
    deadline = time.monotonic() + 60
    while True:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                strategy.run(step)
            print("settled")
            return
        except RuntimeError:
            assert time.monotonic() < deadline
            time.sleep(0.2)


strategy.run(step)"""
DRIVER = "settle()"
SHOW = "dash = strategy.dashboard()\ndash"

pytestmark = [pytest.mark.timeout(900)]


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    with module_lab(tmp_path_factory, "lab-faults") as lab:
        yield lab


def write_notebook(path: Path, n: int) -> None:
    cells = [f"N = {n}\n" + SETUP, DRIVER, SHOW]
    metadata = json.loads(QUICKSTART.read_text())["metadata"]
    path.write_text(json.dumps({
        "cells": [{"cell_type": "code", "metadata": {}, "execution_count": None, "outputs": [], "source": c}
                  for c in cells],
        "metadata": metadata, "nbformat": 4, "nbformat_minor": 5}))


def chips(page: Any) -> dict[int, tuple[str, str]]:
    """The rendered status strip: replica -> (kind, text). Playwright's CSS sees into Bokeh's shadow roots."""
    out = {}
    for el in page.locator(".interdist-chip").all():
        _, _, text = (el.text_content() or "").strip().partition(" ")
        out[int(str(el.get_attribute("data-replica")))] = (str(el.get_attribute("data-kind")), text)
    return out


def summary(page: Any) -> str:
    texts = [t for t in page.locator(".interdist-summary").all_text_contents() if t.strip()]
    return texts[0] if texts else ""


def failures(page: Any) -> list[tuple[str, int, str]]:
    """The failures list, newest first: (kind, replica, text)."""
    rows = page.locator(".interdist-failure")
    return [(str(r.get_attribute("data-kind")), int(str(r.get_attribute("data-replica"))), r.text_content() or "")
            for r in rows.all()]


def until(check: Any, timeout: float, page: Any) -> Any:
    deadline = time.monotonic() + timeout
    while not (got := check()) and time.monotonic() < deadline:
        page.wait_for_timeout(100)
    return got


def prompt_count(cell: Any) -> int:
    m = re.search(r"\[(\d+)\]", cell.locator(".jp-InputPrompt").inner_text())
    return int(m.group(1)) if m else 0


def run_cell(page: Any, cell: Any, source: str | None = None) -> int:
    """Set ``cell``'s source (if given) and run it in place; the execution count it will end with."""
    before = max(prompt_count(c) for c in page.locator(".jp-Notebook .jp-CodeCell").all())
    editor = cell.locator(".jp-InputArea-editor")
    content = editor.locator(".cm-content")
    for _ in range(5):
        editor.click()
        if source is None:
            break
        page.keyboard.press("Control+A")
        page.keyboard.insert_text(source)  # no key events: no auto-closed brackets
        if content.inner_text().strip() == source:
            break
        page.wait_for_timeout(200)
    assert source is None or content.inner_text().strip() == source, content.inner_text()
    page.keyboard.press("Control+Enter")
    return before + 1


def wait_done(page: Any, cell: Any, count: int, timeout: float = 90.0) -> str:
    deadline = time.monotonic() + timeout
    while prompt_count(cell) < count or page.locator(".jp-StatusBar-TextItem", has_text="| Idle").count() == 0:
        assert time.monotonic() < deadline, f"the cell did not finish: {cell.locator('.jp-InputPrompt').inner_text()}"
        page.wait_for_timeout(100)
    return str(cell.locator(".jp-OutputArea-output").all_inner_texts())


def expected(fault: str, at: str, victim: int, n: int) -> dict[int, tuple[str, str]]:
    """The states a person would name once the faulty call returned: kind, and the start of the words."""
    if fault == "slow":
        return {r: ("done", "done") for r in range(n)}
    own = {"raise": ("raised", "raised InjectedFaultError"), "freeze": ("frozen", "frozen"),
           "kill": ("lost", "lost")}[fault]
    what = {"raise": "raised", "freeze": "frozen", "kill": "lost"}[fault]
    peer = ("done", "done") if at == "checkpoint_save" else ("released", f"released: replica {victim} {what}")
    return {r: own if r == victim else peer for r in range(n)}


def kinds(shown: dict[int, tuple[str, str]]) -> dict[int, str]:
    return {r: k for r, (k, _) in shown.items()}


def matches(shown: dict[int, tuple[str, str]], want: dict[int, tuple[str, str]]) -> bool:
    return set(shown) == set(want) and all(
        shown[r][0] == k and shown[r][1].startswith(t) for r, (k, t) in want.items())


def status_page(browser: Any, lab: Any, kernel: str) -> Any:
    """The Dask status page of the kernel's cluster, at the URL the sidebar opens (through Jupyter's proxy)."""
    deadline = time.monotonic() + 60
    while True:
        status, listed = lab.get("interdist/clusters")  # what the sidebar lists
        mine = [c for c in (listed or {}).get("clusters", []) if c.get("kernel_id") == kernel] if status == 200 else []
        pages = [p["url"] for c in mine for p in c.get("pages", []) if p["url"].endswith("individual-interdist-status")]
        if pages:
            break
        assert time.monotonic() < deadline, f"no status page listed for kernel {kernel}: {mine}"
        time.sleep(0.25)
    dask = browser.new_page()
    # as the sidebar does: /interdist/clusters sets the cookie that carries the dashboard's token through the proxy
    dask.goto(lab.url + f"interdist/clusters?token={lab.token}", wait_until="domcontentloaded")
    dask.goto(lab.url + pages[0].lstrip("/") + f"?token={lab.token}", wait_until="domcontentloaded")
    dask.wait_for_function("() => window.Bokeh && Bokeh.documents.length > 0", timeout=30_000)
    return dask


def kernel_of(lab: Lab, notebook: str) -> str:
    status, sessions = lab.get("api/sessions")
    assert status == 200
    (session,) = [s for s in sessions if s["path"] == notebook]
    return str(session["kernel"]["id"])


@pytest.mark.parametrize("n", [2, 4])
def test_every_fault_at_every_point_is_named_right(browser: Any, lab: Any, n: int) -> None:
    t0 = time.monotonic()
    name = f"faults-{n}.ipynb"
    write_notebook(lab.root / name, n)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page = browser.new_page()
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" and "/lsp/" not in (
        (m.location or {}).get("url", "")) else None)
    page.on("pageerror", lambda e: errors.append(f"uncaught: {e}"))
    dask = None
    seen: list[str] = []
    try:
        # ?reset: a fresh workspace, not the one the other size left open
        page.goto(f"{lab.url}lab/tree/{name}?reset&token={lab.token}", wait_until="domcontentloaded")
        page.locator(".jp-Notebook .jp-CodeCell").first.wait_for(timeout=60_000)
        page.locator(".jp-StatusBar-TextItem", has_text="| Idle").wait_for(timeout=60_000)
        cells = page.locator(".jp-Notebook .jp-CodeCell")
        setup, driver, show = cells.nth(0), cells.nth(1), cells.nth(2)
        wait_done(page, setup, run_cell(page, setup))
        wait_done(page, show, run_cell(page, show))
        assert until(lambda: matches(chips(page), {r: ("done", "done") for r in range(n)}), 30, page), chips(page)
        dask = status_page(browser, lab, kernel_of(lab, name))
        victim = n - 1
        for fault, at in MATRIX[n]:
            label = f"{n}-{fault}-{at}"
            before = len(failures(page))
            count = run_cell(page, driver, f'case("{fault}", "{at}", {victim})')
            live = at != "checkpoint_save" and fault in ("slow", "freeze")
            if live:  # while it lasts, its peers wait for it by name
                waiting = re.compile(rf"waiting in \w+ #1 for \[{victim}\]")
                assert until(lambda: all(waiting.fullmatch(chips(page).get(r, ("", ""))[1])
                                         for r in range(n) if r != victim), 20, page), \
                    (label, chips(page), driver.locator(".jp-OutputArea-output").all_inner_texts())
                show.scroll_into_view_if_needed()
                page.screenshot(path=str(ARTIFACTS / f"{label}-live.png"))
            if fault == "freeze":
                assert until(lambda: chips(page).get(victim, ("", ""))[0] == "frozen", 20, page), \
                    (label, chips(page))
            out = wait_done(page, driver, count)
            want = expected(fault, at, victim, n)
            assert until(lambda: matches(chips(page), want), 10, page), (label, out, chips(page), want)
            shown = failures(page)
            line = summary(page)
            if fault == "slow":
                assert len(shown) == before, (label, shown)
            else:
                kind = want[victim][0]
                assert shown and shown[0][:2] == (kind, victim), (label, shown)
                assert f"1 {kind}" in line and "no failures" not in line, (label, line)
                assert "failed" not in " ".join(t for _, t in chips(page).values()), chips(page)
            show.scroll_into_view_if_needed()
            page.screenshot(path=str(ARTIFACTS / f"{label}.png"))
            # the Dask page (and so the sidebar) gives the same states, from the scheduler's events: the
            # same as the notebook's page at the same moment (a frozen replica may resume meanwhile)
            assert until(lambda: kinds(chips(dask)) == kinds(chips(page)), 10, dask), \
                (label, chips(dask), chips(page))
            seen.append(f"{label}: {out.strip()[:60]} -> {chips(page)}")
            # until the strategy runs again: every replica done, a replaced one noted as recovered
            settled = wait_done(page, driver, run_cell(page, driver, DRIVER), timeout=90)
            assert until(lambda: matches(chips(page), {r: ("done", "done") for r in range(n)}), 15, page), \
                (label, "after settle()", settled, chips(page))
            if fault == "kill":
                assert failures(page)[0][:2] == ("recovered", victim), failures(page)
        assert not error_boxes(page), error_boxes(page)
        bokeh_noise = [e for e in errors if "could not set initial ranges" in e]
        assert not [e for e in errors if e not in bokeh_noise], errors
    finally:
        print("\n".join(seen))
        if dask is not None:
            dask.close()
        page.close()
        lab.shutdown_kernels()
    print(f"{n} replicas: {len(MATRIX[n])} faults in {time.monotonic() - t0:.0f} s; screenshots in {ARTIFACTS}")
