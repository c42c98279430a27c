"""A one-file HTML report of a run, as Dask's ``performance_report`` writes one: the dashboard's views,
drawn from the events, in a standalone page (BokehJS inline: no CDN, no server, no kernel).

``idist.performance_report("report.html")`` (a ``with`` block) and ``strategy.events.report(path)``
write it. Each strategy is one section: a summary line, then the collective timeline and timings, the
values (table and heatmap), the logged scalars and the placement (diagram and table).
"""

from __future__ import annotations

import html
import os
from collections import deque
from collections.abc import Iterable, Sequence
from pathlib import Path

from bokeh.embed import file_html
from bokeh.layouts import column
from bokeh.models.layouts import LayoutDOM
from bokeh.models.widgets import Div
from bokeh.resources import INLINE

from interdist.dashboard.components import PlacementDiagram, ReplicaValues, Scalars, Timeline, Timings, ValueHeatmap
from interdist.dashboard.components.placement import Placement
from interdist.dashboard.model import DashboardModel
from interdist.dashboard.units import fmt_duration
from interdist.events import Event

# A report is read, not watched: the tables show more rows than inline before they scroll.
TABLE_ROWS = 30


Section = tuple[str, list[Event]] | tuple[str, list[Event], list[tuple[str, str]]]
"""(label, events) or (label, events, each replica's (worker address, device)), one per strategy."""


def section_model(
    evs: Iterable[Event], since: float | None = None, workers: list[tuple[str, str]] | None = None
) -> DashboardModel:
    """The model of a strategy's events. Its state (variables, placement, run numbers) is from all of
    them; with ``since``, its timeline and timings keep only the collectives that ended after ``since``."""
    model = DashboardModel()
    for r, (address, device) in enumerate(workers or ()):
        model.note_worker(r, address, device)
    model.feed_many(list(evs))
    if since is not None:
        model.timeline = deque((e for e in model.timeline if e.end >= since), maxlen=model.timeline.maxlen)
        model.timings = deque((t for t in model.timings if t.time >= since), maxlen=model.timings.maxlen)
    return model


def summary(model: DashboardModel, label: str, since: float | None) -> str:
    times = [e.end for e in model.timeline] + [t for t, _ in model.steps_done if since is None or t >= since]
    span = fmt_duration(max(times) - min(times)) if len(times) > 1 else "-"
    failures = model.failures
    parts = [
        f"<b>{len(model.replicas)}</b> replica(s)",
        f"<b>{model.runs}</b> run call(s)",
        f"<b>{len(model.variables)}</b> variable(s)",
        f"<b>{len(model.timeline)}</b> collective exit(s) over {span}",
    ]
    if failures:
        parts.append(f"<span style='color:red'><b>{len(failures)} failure(s)</b></span>")
    return f"<h2>{html.escape(label)}</h2><p>" + " &middot; ".join(parts) + "</p>"


def section(model: DashboardModel, label: str, since: float | None = None) -> LayoutDOM:
    """One strategy's part of the report: its summary and its views, drawn once."""
    values = ReplicaValues(height=30 + 26 * TABLE_ROWS)
    views = [Timeline(), Timings(), values, ValueHeatmap(), Scalars(), PlacementDiagram(), Placement()]
    parts: list[LayoutDOM] = [Div(text=summary(model, label, since), sizing_mode="stretch_width")]
    for title, view in zip(
        ["Collectives", "Timings", "Values", "", "Logged scalars", "Placement", ""], views, strict=True
    ):
        if view.following is not None:
            view.following.show_all()  # no Python behind the page to move a window: all of the data
        view.update(model, force=True)
        if title:
            parts.append(Div(text=f"<h3>{title}</h3>"))
        parts.append(view.root)
    return column(*parts, sizing_mode="stretch_width")


def report_html(sections: Sequence[Section], since: float | None = None, title: str = "interdist report") -> str:
    """The standalone page: a header, then one section per (label, events)."""
    head = Div(text=f"<h1>{html.escape(title)}</h1>", sizing_mode="stretch_width")
    body: list[LayoutDOM] = [head]
    if not sections:
        body.append(Div(text="<p>No interdist events were recorded.</p>"))
    for label, evs, *workers in sections:
        body.append(section(section_model(evs, since, workers[0] if workers else None), label, since))
    # the follow controls' Python callbacks are inert here, and their controls hidden (show_all)
    page = column(*body, sizing_mode="stretch_width")
    return file_html(page, resources=INLINE, title=title, suppress_callback_warning=True)


def write_report(
    path: str | os.PathLike[str],
    sections: Sequence[Section],
    since: float | None = None,
    title: str = "interdist report",
) -> Path:
    """Write ``report_html`` to ``path``; the path."""
    out = Path(path)
    out.write_text(report_html(sections, since, title), encoding="utf-8")
    return out
