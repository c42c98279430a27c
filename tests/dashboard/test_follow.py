"""The time-axis views follow new data: the x range is the newest window, set from Python (``_base.Following``).

Events over 100 s (one step a second on two replicas) are fed to a model; each view's explicit
``Range1d`` must end at the newest event and span the chosen window, pinned ranges must stay where
the user left them, and empty views must have finite ranges from the start (no "could not set
initial ranges" in the browser).
"""

from __future__ import annotations

import math
from typing import Any

import pytest
from bokeh.document import Document
from bokeh.models import Range1d

from interdist import events as ev
from interdist.dashboard.components import Progress, Scalars, Timeline, Timings
from interdist.dashboard.components._base import Following
from interdist.dashboard.model import DashboardModel
from interdist.dashboard.report import report_html

from .streams import CPU, G

T0 = 1000.0
TIME_VIEWS = [Timeline, Timings, Progress]


def second(k: int) -> list[ev.Event]:
    """Step k+1 at second k: on both replicas an all_reduce, a logged loss of 100/(k+1), the step's end."""
    t, step = T0 + k, k + 1
    out: list[ev.Event] = []
    for r in (0, 1):
        out += [ev.RunStarted(G, step, r, t, "step", "run"),
                ev.CollectiveEntered(G, step, r, t + 0.1, "all_reduce", 1, 4000)]  # fmt: skip
    for r in (0, 1):
        out += [ev.CollectiveExited(G, step, r, t + 0.3, "all_reduce", 1, 4000, "ring", "dask", 0.1 * (1 - r), 0.05),
                ev.ScalarLogged(G, step, r, t + 0.35, "loss", 100.0 / step + r),
                ev.RunFinished(G, step, r, t + 0.5, "step", "run", 0.5, True)]  # fmt: skip
    return out


def fed(seconds: range, model: DashboardModel | None = None) -> DashboardModel:
    m = model or DashboardModel()
    if model is None:
        m.note_worker(0, "tcp://10.0.0.1:4000", CPU.format(0))
        m.note_worker(1, "tcp://10.0.0.2:4000", CPU.format(1))
    for k in seconds:
        m.feed_many(second(k))
    return m


def x(view: Any) -> tuple[float, float]:
    r = view.following.x_range
    assert isinstance(r, Range1d)  # explicit: never left to the browser's first layout
    return float(r.start), float(r.end)


def y_ranges(view: Any) -> list[tuple[float, float]]:
    figures = view.figures if hasattr(view, "figures") else [view.figure]
    return [(float(f.y_range.start), float(f.y_range.end)) for f in figures]


@pytest.mark.parametrize("cls", TIME_VIEWS)
def test_time_axes_show_the_last_30_s_and_move_with_new_events(cls: Any) -> None:
    v, m = cls(), fed(range(50))
    v.update(m)
    newest = m.last_time - T0  # 49.5 s: the last step's end
    start, end = x(v)
    assert start == pytest.approx(newest - 30) and newest < end < newest + 1
    fed(range(50, 100), m)
    v.update(m)
    newest = m.last_time - T0
    assert newest == pytest.approx(99.5)
    assert x(v) == pytest.approx((start + 50, end + 50))  # the same window, 50 s on
    assert v.following.following


def test_y_ranges_fit_the_data_in_the_window() -> None:
    m = fed(range(100))
    # long ago (at 10-15 s), one collective that took 5 s: out of the window, so not on its y scale
    m.feed_many([ev.CollectiveEntered(G, 11, 0, T0 + 10.6, "all_gather", 2, 64),
                 ev.CollectiveExited(G, 11, 0, T0 + 15.6, "all_gather", 2, 64, "ring", "dask", 4.9, 0.1)])  # fmt: skip
    prog, timings = Progress(), Timings()
    prog.update(m)
    timings.update(m)
    # steps 70..100 finished in the window: the count axis is theirs, not 0..100
    lo, hi = y_ranges(prog)[0]
    assert 65 < lo <= 70 and 100 <= hi < 105
    latency, nbytes, bus = y_ranges(timings)
    assert latency[0] == 0 and 200 <= latency[1] < 220  # from 0 to 200 ms (entered at +0.1 s, left at +0.3 s)
    assert nbytes[0] == 0 and 4000 <= nbytes[1] < 4400
    assert bus[0] == 0 and bus[1] > 0
    timings.following.window.active = timings.following.window.labels.index("all")
    assert y_ranges(timings)[0][1] >= 5000  # the 5 s collective, now in the window


def test_the_window_choices_and_all() -> None:
    v, m = Timeline(), fed(range(100))
    v.update(m)
    f = v.following
    assert f.window.labels == ["10 s", "30 s", "2 min", "all"]
    f.window.active = 0  # 10 s: applied at once, without a new event
    assert x(v)[0] == pytest.approx(99.5 - 10)
    f.window.active = 3  # all: from the first bar to the newest event
    start, end = x(v)
    assert start < 0.1 and 99.5 < end < 102  # the first bar starts at 0.1 s
    f.window.active = 2  # 2 min, more than the data: no empty time before the first bar
    assert x(v) == pytest.approx((start, end))


def test_scalars_follow_the_last_200_training_steps() -> None:
    v, m = Scalars(), fed(range(300))
    v.update(m)
    start, end = x(v)
    assert start == pytest.approx(300 - 200) and 300 < end < 306
    lo, hi = y_ranges(v)[0]  # losses 100/k + r for the steps 100..300: not the first steps' 100
    assert lo < 100 / 300 and 1 + 100 / 100 < hi < 3
    v.following.window.active = v.following.window.labels.index("all")
    assert x(v)[0] < 1 and y_ranges(v)[0][1] > 100


@pytest.mark.parametrize("cls", [*TIME_VIEWS, Scalars])
def test_pinned_ranges_stay_and_their_y_fits_what_the_user_chose(cls: Any) -> None:
    v, m = cls(), fed(range(50))
    doc = Document()  # as on a Dask page, or inline (jupyter_bokeh's document)
    doc.add_root(v.root)
    v.update(m)
    f: Following = v.following
    # what the browser sends after a pan: the new range, then "follow" off (FOLLOW_JS pins it there)
    f.x_range.update(start=10.0, end=20.0)
    assert f.following  # a range alone is no pin: following, it is an echo of Python's own
    f.toggle.active = False
    fed(range(50, 100), m)
    v.update(m)
    assert x(v) == (10.0, 20.0)  # pinned: new data does not move it
    if cls is Progress:  # steps 11..20 finished in [10, 20] s (at 10.5 .. 19.5): the y range is theirs
        lo, hi = y_ranges(v)[0]
        assert 10 <= lo <= 11 and 20 <= hi <= 21
    f.toggle.active = True  # "follow" again: the newest window at once
    assert x(v)[1] > (100 if cls is Scalars else 99.5)
    # each window's ranges went to the browser, which applies the chosen one itself
    targets = f.targets.data
    assert len(targets["s0"]) == len(f.window.labels) and targets["e0"][f.window.active] == x(v)[1]


def test_an_echo_of_an_older_range_changes_nothing() -> None:
    """jupyter_bokeh sends every change it applies back to the kernel, late when a cell runs."""
    v, m = Progress(), fed(range(20))
    v.update(m)
    older = x(v)
    fed(range(20, 40), m)
    v.update(m)
    v.following.x_range.update(start=older[0], end=older[1])  # the browser echoes the first window
    assert v.following.following
    fed(range(40, 41), m)
    v.update(m)
    assert x(v)[1] > 40


@pytest.mark.parametrize("cls", [*TIME_VIEWS, Scalars])
def test_empty_views_have_finite_explicit_ranges(cls: Any) -> None:
    v = cls()
    for model in (None, DashboardModel()):
        if model is not None:
            v.update(model)
        start, end = x(v)
        assert math.isfinite(start) and math.isfinite(end) and start < end
        for lo, hi in y_ranges(v):
            assert math.isfinite(lo) and math.isfinite(hi) and lo < hi


def test_the_report_shows_all_data_without_controls() -> None:
    evs = [e for k in range(100) for e in second(k)]
    page = report_html([("run", evs)])
    assert "interdist-timeline-x" in page  # the explicit ranges went into the page
    v = Timeline()
    v.following.show_all()
    v.update(fed(range(100)))
    assert not v.following.controls.visible
    start, end = x(v)
    assert start < 0.1 and end > 99.5


def test_inline_widgets_sync_back_through_jupyter_bokeh() -> None:
    """Inline, the browser's changes come as jupyter_bokeh "jsevent" messages (its ``_sync_model``)."""
    jupyter_bokeh = pytest.importorskip("jupyter_bokeh")
    v, m = Progress(), fed(range(50))
    v.update(m)
    widget = jupyter_bokeh.BokehModel(v.root)
    f = v.following

    def from_browser(model: Any, attr: str, new: Any) -> None:
        content = {"event": "jsevent", "kind": "ModelChanged", "model": {"id": model.id}, "attr": attr, "new": new}
        widget._sync_model(widget, content, [])

    following = x(v)
    from_browser(f.x_range, "start", 12.5)  # a pan ...
    from_browser(f.toggle, "active", False)  # ... which the browser pinned
    assert not f.following and x(v) == (12.5, following[1])
    from_browser(f.toggle, "active", True)  # the "follow" button
    assert f.following and x(v) == following
    from_browser(f.window, "active", 0)  # "10 s"
    assert x(v)[0] == pytest.approx(49.5 - 10)
