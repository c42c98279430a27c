"""The inline dashboard as static HTML: what stays of it once its kernel is gone.

An inline dashboard is an ipywidget; when its kernel restarts or dies, ipywidgets marks
every view of it disconnected (a broken-chain icon on each) and, once the page is
reloaded, shows "Error displaying widget: model not found" where it was. So the
dashboard carries, in a hidden ``ipywidgets.HTML`` child (class ``interdist-snapshot``),
this static rendering of its current state, kept current by its redraws. The JupyterLab
extension (``interdist[lab]``, ``extension/src/freeze.ts``) replaces each dashboard of a
notebook whose kernel restarts, shuts down or dies by that HTML, with a banner: a plain
``text/html`` output, which is what the cell then shows and what the notebook saves (so
a reload, nbviewer or GitHub show it too). The output's bundle also holds the HTML as
drawn when the dashboard was displayed, for frontends that do not run widgets.

Plain HTML with inline styles only (no script, no class that needs a stylesheet): it
must read the same wherever the output is shown, also sanitized.
"""

from __future__ import annotations

import html
import time

from interdist.dashboard.components.status import chip, failures_list, summary_line
from interdist.dashboard.model import DashboardModel
from interdist.dashboard.units import fmt_number, fmt_values

#: The snapshot lists at most this many variable copies (the newest variables' first).
SHOWN_COPIES = 24
CLASS = "interdist-snapshot"


def snapshot_html(model: DashboardModel, threshold_s: float = 5.0, now: float | None = None) -> str:
    """The dashboard's state at ``now`` as static HTML: the status strip (summary, one chip per replica,
    failures) and each variable's copies (values or norm, checksum, agreement).

    >>> from interdist.dashboard.model import DashboardModel
    >>> m = DashboardModel(); m.note_worker(0, "tcp://127.0.0.1:1"); m.note_worker(1, "tcp://127.0.0.1:2")
    >>> text = snapshot_html(m, now=0.0)
    >>> "interdist-chip" in text and "no run yet" in text and "<script" not in text
    True
    """
    now = time.time() if now is None else now
    # the time of the last event, not the clock's: an idle dashboard's snapshot stays the same (and is not sent)
    at = model.last_time or now
    when = time.strftime("%H:%M:%S", time.localtime(at))
    every = [model.status(r, now) for r in range(model.world_size)]
    chips = "".join(chip(s.replica, s.kind, s.text, s.detail) for s in every if s.replica in model.replicas)
    parts = [
        f"<div class='{CLASS}' data-time='{at:.3f}' style='font-size:13px;line-height:1.5'>",
        f"<div>{summary_line(model, threshold_s, now, every)}</div>",
        f"<div>{chips}</div>",
        failures_list(model),
        _copies_table(model),
        f"<div style='color:#6b7280;font-size:11px'>interdist dashboard, state of {when}</div>",
        "</div>",
    ]
    return "".join(parts)


def _copies_table(model: DashboardModel) -> str:
    if not model.copies:
        return ""
    th = "<th style='text-align:left;padding:0 10px 0 0'>{}</th>"
    td = "<td style='text-align:left;padding:0 10px 0 0{}'>{}</td>"
    head = "".join(th.format(h) for h in ("variable", "replica", "values / norm", "checksum", "status"))
    rows = []
    newest_first = sorted(model.copies.items(), key=lambda kv: (-kv[0][0], kv[0][1]))
    for (var_id, replica), c in newest_first[:SHOWN_COPIES]:
        info = model.variables.get(var_id)
        name = info.name if info is not None else f"var {var_id}"
        kind, status = model.variable_status(var_id)
        shown = fmt_values(c.values) if c.values else f"norm {fmt_number(c.norm)}"
        red = ";color:#b91c1c" if kind == "diverged" else ""
        cells = (name, str(replica), shown, fmt_number(c.checksum), status)
        rows.append("<tr>" + "".join(td.format(red, html.escape(x)) for x in cells) + "</tr>")
    more = len(model.copies) - SHOWN_COPIES
    tail = f"<div style='color:#6b7280'>and {more} more copies</div>" if more > 0 else ""
    return (
        "<table style='border-collapse:collapse;font-family:monospace;font-size:12px;margin-top:4px'>"
        f"<tr>{head}</tr>{''.join(rows)}</table>{tail}"
    )
