"""The one-file HTML report and the static placement picture, opened in headless chromium from disk
(no server, no kernel): every figure renders, with the run's data, and the console stays clean."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import interdist as idist

VIEWPORT = {"width": 1300, "height": 1000}  # the browser fixture (tests/conftest.py) reads it
pytestmark = [pytest.mark.timeout(120)]


def test_report_renders_from_a_file_with_no_errors(
    browser: Any, mirrored2: idist.MirroredStrategy, tmp_path: Path
) -> None:
    s = mirrored2
    with s.scope():
        v = idist.Variable(np.zeros(4, np.float32), name="report_v", aggregation=idist.VariableAggregation.MEAN)

    def step() -> None:
        ctx = idist.get_replica_context()
        total = ctx.all_reduce("sum", np.float32(1.0))
        v.assign_add(np.full(4, total, np.float32))
        idist.debug.log_scalar("browser_loss", total * (ctx.replica_id_in_sync_group + 1))

    path = tmp_path / "report.html"
    with idist.performance_report(path):
        for _ in range(3):
            s.run(step)
    svg = tmp_path / "placement.html"
    svg.write_text(f"<html><body>{idist.debug.visualize_placement(s)._repr_html_()}</body></html>")

    page = browser.new_page()
    errors: list[str] = []
    requests: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(f"uncaught: {e}"))
    page.on("request", lambda r: requests.append(r.url))
    try:
        page.goto(path.as_uri(), wait_until="load")
        page.locator(".bk-Canvas canvas").first.wait_for(timeout=30_000)
        page.wait_for_timeout(500)
        # the figures are drawn: timeline, timings, heatmap, scalars, placement diagram
        assert page.locator(".bk-Canvas canvas").count() >= 5
        page.wait_for_function("() => window.Bokeh && Bokeh.documents.length > 0", timeout=20_000)
        shown = page.evaluate(
            """() => {
              const doc = Bokeh.documents[0];
              const col = (name, c) => { const s = doc.get_model_by_name(name);
                return s ? Array.from(s.data.get ? s.data.get(c) : s.data[c]) : null; };
              const kinds = col("interdist-placement-diagram", "kind");
              return {labels: col("interdist-scalars", "label"), last: col("interdist-scalars", "last"),
                      copies: col("interdist-placement-diagram", "label").filter((_, i) => kinds[i] === "copy"),
                      ops: col("interdist-timeline", "op")};
            }"""
        )
        assert shown["labels"] == ["browser_loss (replica 0)", "browser_loss (replica 1)"], shown
        assert shown["last"] == ["2", "4"], shown
        assert shown["copies"].count("report_v") == 2, shown
        assert shown["ops"] == ["all_reduce"] * 12, shown  # 3 steps x 2 replicas x (ctx.all_reduce, MEAN update)
        assert page.locator(".slick-cell", has_text="report_v").count() == 4  # values and placement tables, 2 rows each
        page.screenshot(path=str(tmp_path / "report.png"), full_page=True)
        assert all(u.startswith("file:") or u.startswith("data:") for u in requests), requests  # self-contained
        assert not errors, errors

        page.goto(svg.as_uri(), wait_until="load")
        chips = page.locator("svg.interdist-placement g.interdist-copy")
        assert chips.count() == 2 and chips.first.text_content().startswith("report_v")
        box = page.locator("svg.interdist-placement").bounding_box()
        assert box is not None and box["width"] > 400 and box["height"] > 100
        page.screenshot(path=str(tmp_path / "placement.png"))
        assert not errors, errors
    finally:
        page.close()
    print(f"screenshots in {tmp_path}")
