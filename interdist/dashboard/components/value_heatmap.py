"""Values per replica as a heatmap: a row per copy, a cell per element (small variables) or per block of
elements (larger ones: each cell the mean of 1/16 of the flattened copy), coloured by value.

A cell where a copy differs from the other copies (at the same step) has a red border, so a divergence
shows where it is in the variable, not only that the checksums differ.
"""

from __future__ import annotations

from typing import Any

from bokeh.models import ColumnDataSource, FactorRange, HoverTool, Range1d
from bokeh.palettes import Viridis256
from bokeh.plotting import figure

from interdist.dashboard.components._base import View, set_data
from interdist.dashboard.model import CopySummary, DashboardModel
from interdist.dashboard.placement_layout import DIFFERS, close
from interdist.dashboard.units import fmt_number

COLUMNS = ["row", "col", "value", "text", "where", "variable", "replica", "color", "line", "width", "differs"]
ROW_PX = 22


class ValueHeatmap(View):
    """One row per (variable, replica), one cell per element or block, red borders where copies differ."""

    name = "value-heatmap"
    title = "interdist: values per replica"

    def __init__(self, **kwargs: Any) -> None:
        super().__init__()
        self.source = ColumnDataSource({c: [] for c in COLUMNS}, name=f"interdist-{self.name}")
        self.rows = FactorRange(factors=["-"])
        # explicit, not a DataRange1d: drawn empty (no variable yet, or a hidden tab) that logged "could not set
        # initial ranges" in the browser; the widest row sets it
        self.columns = Range1d(start=-0.5, end=15.5)
        self.figure = fig = figure(
            x_range=self.columns,
            title="values per replica (a cell per element, or per 1/16 of a larger variable); red: differs",
            y_range=self.rows,
            height=kwargs.pop("height", 120),
            sizing_mode="stretch_width",
            tools="",
            toolbar_location=None,
            x_axis_label="element (or block)",
            **kwargs,
        )
        fig.rect(
            x="col",
            y="row",
            width=0.94,
            height=0.86,
            fill_color="color",
            line_color="line",
            line_width="width",
            source=self.source,
        )
        fig.ygrid.visible = False
        fig.add_tools(HoverTool(tooltips=[("", "@variable, replica @replica"), ("", "@where"), ("value", "@text")]))
        self.root = fig

    def _update(self, model: DashboardModel) -> None:
        data: dict[str, list[Any]] = {c: [] for c in COLUMNS}
        rows: list[str] = []
        for var_id, info in sorted(model.variables.items()):
            if self.variable is not None and info.name != self.variable:
                continue
            copies = {r: c for (v, r), c in model.copies.items() if v == var_id and self.shows_replica(r)}
            cells = {r: c.values or c.sketch for r, c in copies.items()}
            if not any(cells.values()):
                continue
            flagged = set() if info.synchronization == "ON_READ" else differing_cells(copies, model.rtol, model.atol)
            every = [x for vals in cells.values() for x in vals]
            lo, hi = min(every), max(every)
            for r in sorted(cells):
                vals = cells[r]
                row = f"{info.name} · replica {r}"
                rows.append(row)
                size = 1
                for n in info.shape:
                    size *= n
                for i, x in enumerate(vals):
                    level = 0.5 if hi == lo else (x - lo) / (hi - lo)
                    bad = (r, i) in flagged
                    where = f"element {i}" if copies[r].values else f"mean of elements {block(i, len(vals), size)}"
                    for k, v in zip(
                        COLUMNS,
                        (row, i, x, fmt_number(x), where, info.name, r, Viridis256[int(level * 255)],
                         DIFFERS if bad else "white", 3 if bad else 1, bad),
                        strict=True,
                    ):  # fmt: skip
                        data[k].append(v)
        set_data(self.source, data)
        fig = self.figure
        end = max((c for c in data["col"]), default=15) + 0.5
        if (self.columns.start, self.columns.end) != (-0.5, end):
            self.columns.update(start=-0.5, end=end)
        factors = list(reversed(rows)) or ["-"]  # the first variable's replica 0 on top
        if list(self.rows.factors) != factors:
            self.rows.factors = factors
        height = 70 + ROW_PX * len(factors)
        if fig.height != height:
            fig.height = height


def block(i: int, blocks: int, size: int) -> str:
    """The elements block ``i`` of ``blocks`` covers (as ``_convert.block_means`` cuts them): ``"0:62"``."""
    k = size // blocks if size >= blocks else 1
    start = i * k
    stop = size if i == blocks - 1 else start + k
    return f"{start}:{stop}"


def differing_cells(copies: dict[int, CopySummary], rtol: float, atol: float) -> set[tuple[int, int]]:
    """(replica, cell) where a copy's cell differs from the majority copy's, among the copies of the newest
    step; with no majority (1 against 1) every copy's differing cells."""
    newest = max((c.step for c in copies.values()), default=0)
    now = {r: c.values or c.sketch for r, c in copies.items() if c.step == newest and (c.values or c.sketch)}
    if len(now) < 2:
        return set()
    counts: dict[tuple[float, ...], int] = {}
    for vals in now.values():
        counts[vals] = counts.get(vals, 0) + 1
    common = max(counts, key=lambda v: counts[v])
    majority = 2 * counts[common] > len(now)
    out = set()
    for i in range(max(len(v) for v in now.values())):
        column = {r: v[i] for r, v in now.items() if i < len(v)}
        if majority:
            ref = common[i] if i < len(common) else None
            out |= {(r, i) for r, x in column.items() if ref is None or not close((x,), (ref,), rtol, atol)}
        elif any(not close((x,), (next(iter(column.values())),), rtol, atol) for x in column.values()):
            out |= {(r, i) for r in column}
    return out
