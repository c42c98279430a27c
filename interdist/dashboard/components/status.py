"""The replica status strip: a one-line summary, one chip per replica, and the failures list.

"replica 1: waiting in all_reduce #1 for [0]" answers the first question of a slow or
stuck step (who waits for whom) at a glance, which is why this view comes first inline
and is a Dask page of its own. Fed live (``dashboard.live``), it moves during a step.
The chips, the summary's counts and the failures list all read the model's replica
states (``dashboard/replica_state.py``): they cannot disagree with each other, and a
replica is never named failed because a peer failed.
"""

from __future__ import annotations

import html
import time
from collections.abc import Callable
from typing import Any

from bokeh.layouts import column
from bokeh.models.sources import ColumnDataSource
from bokeh.models.widgets import Div

from interdist.dashboard.components._base import View, set_data
from interdist.dashboard.model import DashboardModel, first_line
from interdist.dashboard.units import fmt_duration

COLUMNS = ["replica", "kind", "text", "detail"]
# (background, text) per kind: the colours say the state before the words do
COLORS = {
    "idle": ("#eeeeee", "#555555"),
    "starting": ("#e0f2fe", "#075985"),
    "running": ("#dbeafe", "#1e3a8a"),
    "waiting": ("#fef3c7", "#92400e"),
    "done": ("#dcfce7", "#166534"),
    "raised": ("#fee2e2", "#991b1b"),
    "released": ("#f3e8ff", "#6b21a8"),
    "frozen": ("#cffafe", "#155e75"),
    "lost": ("#1f2937", "#f9fafb"),
    "restarting": ("#ffedd5", "#9a3412"),
    "recovered": ("#ccfbf1", "#115e59"),
}
#: How the summary line counts the replicas in each state, in this order (kinds absent are not named).
COUNTED = ("raised", "frozen", "lost", "restarting", "recovered", "released", "waiting", "running", "starting")
#: The failures list shows the newest few.
SHOWN_INCIDENTS = 6


def summary_line(
    model: DashboardModel, threshold_s: float = 5.0, now: float | None = None, statuses: list[Any] | None = None
) -> str:
    """Replicas and their states, run number, last collective, divergence, failures, rate: the dashboard's
    first line (HTML). Every count comes from the replica-state model, as the chips do: ``statuses``, every
    replica's ``model.status`` at ``now`` when the caller has them (the list its chips are drawn from)."""
    now = time.time() if now is None else now
    n = model.world_size
    if statuses is None:
        statuses = [model.status(r, now) for r in range(n)]
    kinds: dict[str, int] = {}
    for c in statuses:
        kinds[c.kind] = kinds.get(c.kind, 0) + 1
    counted = [f"{kinds[k]} {k}" for k in COUNTED if kinds.get(k)]
    parts = [f"<b>{n}</b> replica(s)" + (f": {', '.join(counted)}" if counted else "")]
    if model.runs:
        fn = model.last_fn.rsplit(".", 1)[-1]  # "step", not "train.<locals>.step"
        parts.append(f"<b>run #{model.runs}</b>" + (f" ({html.escape(fn)})" if fn else ""))
    else:
        parts.append("no run yet")
    if model.last_collective is not None:
        op, seq, step = model.last_collective
        parts.append(f"last collective: {html.escape(op)} #{seq} of {model.run_label(step)}")
    stuck = model.stuck(threshold_s, now)
    if stuck:
        s = stuck[0]
        parts.append(
            f"<span style='color:#b91c1c'><b>stuck</b>: {html.escape(s.op)} #{s.seq} for "
            f"{fmt_duration(max(s.arrived.values()))}, missing {s.missing}</span>"
        )
    if model.diverged_since:
        names = [model.variables[v].name if v in model.variables else f"var {v}" for v in model.diverged_since]
        parts.append(
            f"<span style='color:#b91c1c'><b>{len(names)} diverged</b> ({html.escape(', '.join(names))})</span>"
        )
    elif model.variables:
        parts.append("copies agree")
    own = model.failures
    if own:
        f = own[-1]
        parts.append(
            f"<span style='color:#b91c1c'><b>{len(own)} failure(s)</b>, last: replica {f.replica} {f.kind} in "
            f"{model.run_label(f.step)}: {html.escape(first_line(f.error, 60))}</span>"
        )
    else:
        parts.append("no failures")
    rate = model.recent_rate(now=now)
    if rate:
        parts.append(f"{rate:.1f} steps/s")
    return "<span class='interdist-summary'>" + " &middot; ".join(parts) + "</span>"


def chip(replica: int, kind: str, text: str, detail: str = "") -> str:
    bg, fg = COLORS.get(kind, COLORS["idle"])
    title = f" title='{html.escape(detail, quote=True)}'" if detail else ""
    return (
        f"<span class='interdist-chip interdist-chip-{kind}' data-replica='{replica}' data-kind='{kind}'{title} "
        f"style='display:inline-block;margin:2px 6px 2px 0;padding:2px 8px;border-radius:10px;"
        f"background:{bg};color:{fg};font-family:monospace;white-space:nowrap'>"
        f"<b>{replica}</b> {html.escape(text)}</span>"
    )


def failures_list(model: DashboardModel, shows: Callable[[int], bool] = lambda r: True) -> str:
    """The newest incidents (a replica's own failure: raised, frozen, lost; and what followed: a recovery, a
    fault that fired or was never reached), newest first, as HTML rows with class ``interdist-failure``."""
    rows = [i for i in model.incidents if shows(i.replica)][-SHOWN_INCIDENTS:]
    out = []
    for i in reversed(rows):
        bg, fg = COLORS.get(i.kind, ("#f3f4f6", "#374151"))
        out.append(
            f"<div class='interdist-failure interdist-failure-{i.kind}' data-replica='{i.replica}' "
            f"data-kind='{i.kind}' style='font-family:monospace;font-size:12px;margin:1px 0'>"
            f"<span style='background:{bg};color:{fg};padding:0 4px;border-radius:4px'>{html.escape(i.kind)}</span> "
            f"replica {i.replica} · {html.escape(model.run_label(i.step))} · {html.escape(first_line(i.error, 140))}"
            "</div>"
        )
    return "".join(out)


class ReplicaStatusStrip(View):
    """A summary line and one chip per replica (``source`` holds each chip's kind and text, for tests)."""

    name = "status"
    title = "interdist: replica status"

    def __init__(self, threshold_s: float = 5.0, clock: Callable[[], float] = time.time, **kwargs: Any) -> None:
        super().__init__()
        self.threshold_s = threshold_s
        self.clock = clock
        self.source = ColumnDataSource({c: [] for c in COLUMNS}, name=f"interdist-{self.name}")
        # The summary line and the chips in one Div: one text, so a page shows both from the same moment (two
        # Divs changed one after the other reached the browser as two changes, and a page could show the
        # header's counts and chips of another moment in between).
        self.header = Div(text="no replicas yet", sizing_mode="stretch_width")
        self.failures = Div(text="", sizing_mode="stretch_width", css_classes=["interdist-failures"])
        # the source is drawn by nothing (the chips are HTML): held in the root's tags so that it is in the
        # document, where tests in a browser find it by name as they find the other views' sources
        self.root = column(self.header, self.failures, sizing_mode="stretch_width", tags=[self.source], **kwargs)

    def _clock_key(self, model: DashboardModel) -> Any:
        # the steps/s window and a stuck collective's time move without events: redraw each second
        return int(self.clock())

    def _update(self, model: DashboardModel) -> None:
        now = self.clock()
        every = [model.status(r, now) for r in range(model.world_size)]
        chips = [c for c in every if self.shows_replica(c.replica)]
        set_data(
            self.source,
            {
                "replica": [c.replica for c in chips],
                "kind": [c.kind for c in chips],
                "text": [c.text for c in chips],
                "detail": [c.detail for c in chips],
            },
        )
        strip = "".join(chip(c.replica, c.kind, c.text, c.detail) for c in chips)
        header = f"{summary_line(model, self.threshold_s, now, every)}<div class='interdist-chips'>{strip}</div>"
        if self.header.text != header:
            self.header.text = header
        failures = failures_list(model, self.shows_replica)
        if self.failures.text != failures:
            self.failures.text = failures
