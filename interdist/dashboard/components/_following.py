"""What the views with a time (or step) axis share: ``Following``, an x range that follows new data, with the
windows it offers and the browser's half of it (``FOLLOW_JS``). Split from ``_base.py``, which re-exports it."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from contextlib import AbstractContextManager
from typing import Any

import numpy as np
from bokeh.events import Reset
from bokeh.layouts import row
from bokeh.models.callbacks import CustomJS
from bokeh.models.plots import Plot
from bokeh.models.ranges import Range1d
from bokeh.models.sources import ColumnDataSource
from bokeh.models.widgets import RadioButtonGroup, Toggle

from interdist.dashboard.model import DashboardModel

#: The windows the follow control offers on a time axis (seconds; None: all the rows the view keeps).
#: 30 s by default: the watchdog lists a collective open past 5 s, and a 30 s window shows a freeze of
#: that size whole, with the steps before and after it to compare; 10 s cuts it, 2 min squeezes the
#: millisecond bars around it into slivers. At 4-5 redraws a second it moves by under 1% each time.
TIME_WINDOWS: dict[str, float | None] = {"10 s": 10.0, "30 s": 30.0, "2 min": 120.0, "all": None}
#: On the logged scalars' axis of training steps: 200 steps show a loss curve's recent trend and noise,
#: and keep the first steps' large values from setting the y scale of the whole plot.
STEP_WINDOWS: dict[str, float | None] = {"50 steps": 50.0, "200 steps": 200.0, "all": None}

Fit = Callable[[float, float], "tuple[float, float] | None"]
"""The least and greatest y of a plot's data whose x lies in [x0, x1]; None when there is none."""


def elapsed(model: DashboardModel) -> float | None:
    """Seconds from the first event to the newest one: "now" on the time axes; None before any event."""
    return None if model.t0 is None else model.last_time - model.t0


def in_window(xs: Any, ys: Any, x0: float, x1: float) -> tuple[float, float] | None:
    """The least and greatest finite ``ys`` whose ``xs`` lie in [x0, x1] (a ``Fit`` over two columns)."""
    x = np.asarray(xs, dtype=float)
    y = np.asarray(ys, dtype=float)
    if x.size == 0 or x.shape != y.shape:
        return None
    seen = y[(x >= x0) & (x <= x1) & np.isfinite(y)]
    return (float(seen.min()), float(seen.max())) if seen.size else None


def _number(value: Any) -> float:
    return float(value)  # a Range1d's start is typed float | datetime | timedelta: these are numbers


def _set_range(r: Range1d, start: float, end: float) -> None:
    """Set only what changed: each change is a message to the browser (inline, echoed back), and
    a y range stays put while the window's least and greatest values do."""
    if r.start != start:
        r.start = start
    if r.end != end:
        r.end = end


def _padded(lo: float, hi: float, share: float, least: float) -> tuple[float, float]:
    pad = share * (hi - lo) if hi > lo else max(least, share * abs(hi))
    return lo - pad, hi + pad


class Following:
    """The x range of a view's plots: the newest ``window`` of its data, moving as the data comes.

    Python computes, at each redraw, explicit ``Range1d`` starts and ends for every window the
    control offers (and y ranges fitted to the data in each), sets the chosen one, and sends them
    all in ``targets``. Measured in chromium (Bokeh 3.9): a ``DataRange1d`` follows a live
    document's data but logs "could not set initial ranges" while its plot is empty or hidden,
    and once its document is drawn again from Python (the inline dashboard's resync, which
    ``jupyter_bokeh`` does with the start and end the browser computed and synced back), that
    start and end are fixed for good, ``follow="end"`` or not. A ``Range1d`` set from Python
    moved with every redraw, drawn hidden, empty or again, and never warned.

    Whether to follow is the browser's call (``FOLLOW_JS``): a pan, zoom or reset there pins the
    range at once, "follow", a window or the reset tool apply ``targets`` at once. Inline, the
    kernel reads the browser's messages only between cells: during a training cell, a pan seen
    only by Python was undone by the next redraw, and afterwards the queued echoes of old ranges
    (``jupyter_bokeh`` sends back each change it applies) looked like pans (measured in
    JupyterLab). Python learns the toggle and window through ``on_change`` (Dask pages: at once;
    inline: when the kernel is free) and, pinned, fits the y ranges to the range the user chose.
    """

    def __init__(
        self, name: str, windows: dict[str, float | None], default: str, lock: AbstractContextManager[Any]
    ) -> None:
        self.windows = windows
        self.x_range = Range1d(start=0.0, end=windows[default] or 1.0, name=f"interdist-{name}-x")
        self.toggle = Toggle(label="follow", active=True, width=70, name=f"interdist-{name}-follow")
        self.window = RadioButtonGroup(
            labels=list(windows), active=list(windows).index(default), name=f"interdist-{name}-window"
        )
        self.controls = row(self.toggle, self.window)
        # each window's x start and end (s0, e0) and each y range's (s1, e1, ...), a row per window
        self.targets = ColumnDataSource({"s0": [], "e0": []}, name=f"interdist-{name}-targets")
        self._fits: list[tuple[Range1d, Fit, bool]] = []
        self._extent: tuple[float, float] | None = None  # the oldest and newest x of the data shown
        self._lock = lock  # the view's (``View.lock``): the widget callbacks change its document too
        self.x_range.on_change("start", self._on_x)
        self.x_range.on_change("end", self._on_x)
        self.toggle.on_change("active", self._on_control)
        self.window.on_change("active", self._on_control)

    def y_range(self, name: str, fit: Fit, zero: bool = False) -> Range1d:
        """A y range fitted at each redraw to the data in the x window (with 0 in it if ``zero``)."""
        y = Range1d(start=0.0, end=1.0, name=f"interdist-{name}-y")
        self._fits.append((y, fit, zero))
        return y

    def attach(self, *plots: Plot) -> None:
        """Wire the browser's side, once the plots and their y ranges exist."""
        ranges = [self.x_range, *(y for y, _, _ in self._fits)]
        args: dict[str, Any] = {"toggle": self.toggle, "choice": self.window, "targets": self.targets}
        args |= {"x": self.x_range, "ys": ranges[1:]}
        apply = CustomJS(args={**args, "mode": "apply"}, code=FOLLOW_JS)
        for model, attr in ((self.targets, "data"), (self.toggle, "active"), (self.window, "active")):
            model.js_on_change(attr, apply)
        changed = CustomJS(args={**args, "mode": "range"}, code=FOLLOW_JS)
        for r in ranges:
            r.js_on_change("start", changed)
            r.js_on_change("end", changed)
        for plot in plots:  # the reset tool: follow again
            plot.js_on_event(Reset, CustomJS(args={"toggle": self.toggle}, code="toggle.active = true"))
        self.targets.data = self._columns([(_number(r.start), _number(r.end)) for r in ranges] for _ in self.windows)

    @property
    def following(self) -> bool:
        return bool(self.toggle.active)

    def show(self, lo: float | None, hi: float | None) -> None:
        """Redraw: ``lo`` and ``hi`` are the oldest and newest x of the data (None: none shown yet)."""
        with self._lock:
            self._extent = None if lo is None or hi is None else (float(lo), float(hi))
            self._apply()

    def show_rows(self, first: Any, last: Any, now: float | None) -> None:
        """Redraw from the x columns of the rows shown: from the oldest of ``first`` to the newest of
        ``last``, or to ``now`` (the newest event) if later: a freeze shows as the empty time after
        the last row, not as a plot that stopped."""
        if len(first) == 0:
            self.show(None, None)
        else:
            newest = float(np.max(last))
            self.show(float(np.min(first)), newest if now is None else max(newest, now))

    def show_all(self) -> None:
        """For a static page (no Python behind it): all the data, and no controls."""
        self.window.active = list(self.windows).index("all")
        self.toggle.active = True
        self.controls.visible = False

    def _window_ranges(self, span: float | None) -> list[tuple[float, float]]:
        """The x range of a window ``span`` wide (None: all) ending at the newest data, then each y range's."""
        assert self._extent is not None
        lo, hi = self._extent
        start = lo if span is None else max(lo, hi - span)
        x0, x1 = _padded(start, hi, 0.02, 0.5)
        if start > lo:
            x0 = start  # older data continues past the left edge: no margin there
        return [(x0, x1), *self._fitted(x0, x1)]

    def _fitted(self, x0: float, x1: float) -> list[tuple[float, float]]:
        out = []
        for y, fit, zero in self._fits:
            got = fit(x0, x1)
            if got is None:  # nothing in the window: leave the y range as it is
                out.append((_number(y.start), _number(y.end)))
                continue
            lo, hi = (min(got[0], 0.0), max(got[1], 0.0)) if zero else got
            start, end = _padded(lo, hi, 0.05, 0.5)
            out.append((max(start, 0.0) if zero and lo >= 0 else start, end))
        return out

    def _columns(self, rows: Iterable[Sequence[tuple[float, float]]]) -> dict[str, list[float]]:
        data: dict[str, list[float]] = {f"{c}{k}": [] for k in range(1 + len(self._fits)) for c in "se"}
        for ranges in rows:
            for k, (start, end) in enumerate(ranges):
                data[f"s{k}"].append(start)
                data[f"e{k}"].append(end)
        return data

    def _apply(self) -> None:
        ranges = [self.x_range, *(y for y, _, _ in self._fits)]
        if self._extent is None:
            chosen = None
        else:
            # the targets first: the browser tells Python's starts and ends from a user's by them
            rows = [self._window_ranges(span) for span in self.windows.values()]
            data = self._columns(rows)
            if data != {k: list(v) for k, v in self.targets.data.items()}:
                self.targets.data = data
            active = self.window.active
            chosen = rows[active if active is not None else -1]
        if self.following and chosen is not None:
            for r, (start, end) in zip(ranges, chosen, strict=True):
                _set_range(r, start, end)
        elif not self.following:  # pinned: the y ranges fit what the user looks at
            x0, x1 = sorted((_number(self.x_range.start), _number(self.x_range.end)))
            for r, (start, end) in zip(ranges[1:], self._fitted(x0, x1), strict=True):
                _set_range(r, start, end)

    def _on_x(self, attr: str, old: Any, new: Any) -> None:
        # Following, a start or end that comes back is an echo, or a pan the browser already
        # turned into a pin (its toggle comes next): nothing to do until then.
        with self._lock:
            if not self.following:
                self._apply()

    def _on_control(self, attr: str, old: Any, new: Any) -> None:
        with self._lock:
            self._apply()


#: The browser's half of ``Following``: ``mode`` "apply" (targets, toggle or window changed) sets
#: the chosen window's ranges if following; "range" (a range changed) tells the user's pan, zoom or
#: reset (an x start and end that are none of Python's targets) from Python's, and pins there.
#: Pinned, a following range Python sent before it knew is undone; following, Python's ranges for
#: another window (the user chose one before Python knew) give way to the chosen one.
FOLLOW_JS = """
const ranges = [x, ...ys]
const col = (name) => { const d = targets.data; return d instanceof Map ? d.get(name) : d[name] }
const n = col("s0").length
function is_target(r, k) {
  const s = col(`s${k}`), e = col(`e${k}`)
  for (let i = 0; i < n; i++) { if (r.start == s[i] || r.end == e[i]) return true }
  return false
}
function set(r, start, end) {
  x._interdist_setting = true
  try { r.setv({start, end}) } finally { x._interdist_setting = false }
}
function apply() {
  if (!toggle.active || n == 0) return
  const i = choice.active ?? n - 1
  ranges.forEach((r, k) => set(r, col(`s${k}`)[i], col(`e${k}`)[i]))
}
if (mode == "apply") {
  apply()
} else if (!x._interdist_setting) {
  const k = ranges.indexOf(cb_obj)
  if (k == 0 && !is_target(x, 0)) {
    x._interdist_pinned = [x.start, x.end]
    toggle.active = false
  } else if (toggle.active) {
    apply()
  } else if (k == 0 && x._interdist_pinned != null) {
    set(x, ...x._interdist_pinned)
  }
}
"""
