"""``strategy.dashboard()``: the views in a notebook, as ipywidgets through ``jupyter_bokeh``.

Events reach the notebook with each step's reply and, while the dashboard is open,
as the workers log them during the step (``live.LiveFeed``: the scheduler's
``interdist`` topic, deduplicated by the event log). The step's thread only appends
their wire form to ``strategy.events``; a pump thread reads the new ones from there
(``EventLog.since``), feeds the model and redraws the views at most ``1 / interval``
times a second, sending only the rows that are new. So a fast training loop pays
almost nothing for a live dashboard (measured in benchmarks/bench_dashboard.py).

A redraw reaches the browser as patches to the views' documents, which only views
already on the page receive. A view drawn later starts from its widget's state, so
that state is made current whenever it is read or shown: the dashboard's display
(which also loads BokehJS, see ``bokehjs``), the refresh button, and a page that
asks the kernel for its widgets again after a reload (``LiveBokehModel.get_state``, in ``widgets``).

The dashboard also keeps its state as static HTML in a hidden child (``snapshot``): once
its kernel restarts or dies, the JupyterLab extension shows that in its place, not
ipywidgets' broken-chain icons or "model not found". To keep the dashboard in view while
the cells run, ``strategy.dashboard(docked=True)`` docks the overview page instead (``docked``).
"""

from __future__ import annotations

import functools
import html
import logging
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any, cast

from interdist.dashboard.components import VIEWS, ReplicaStatusStrip, View, Watchdog
from interdist.dashboard.live import LiveFeed
from interdist.dashboard.model import ArmedFault, DashboardModel
from interdist.dashboard.widgets import DashboardBox as DashboardBox  # (this module's API too)
from interdist.dashboard.widgets import _live_bokeh_model_class
from interdist.replica import faults

logger = logging.getLogger("interdist")

#: The most of one core the pump thread takes (reading events, redrawing): past it, redraws come less often.
CPU_SHARE = 0.03


class InlineDashboard:
    """The model, the views, the controls and the pump thread of one strategy's dashboard.

    ``strategy.dashboard()`` makes one and shows its ``widget``; ``close()`` stops its thread.

    >>> import interdist as idist, numpy as np
    >>> with idist.MirroredStrategy(["CPU:0", "CPU:1"]) as s:
    ...     board = idist.dashboard.InlineDashboard(s)
    ...     _ = s.run(lambda: np.float32(1.0))
    ...     _ = board.pump()  # the thread does it too, every ``interval`` seconds
    ...     board.model.replicas, board.model.status(1).text
    ...     board.close()
    ([0, 1], 'done')
    """

    def __init__(
        self,
        strategy: Any,
        interval: float = 0.2,
        threshold_s: float = 5.0,
        inject: Callable[..., None] | None = None,
    ) -> None:
        self.model = DashboardModel()
        self._inject = inject  # idist.debug.inject bound to the strategy (the fault control), if offered
        self.interval = interval
        self.updates = 0  # redraws done, for the status line and tests
        self.cpu_s = 0.0  # CPU time the pump thread spent reading events and redrawing
        self.paused = False
        # the pump thread, widget callbacks and state requests all read or redraw the views;
        # reentrant, as resync() sets widget state, which reads the documents again
        self._lock = threading.RLock()
        self._stop = threading.Event()
        self._strategy = weakref.ref(strategy)
        devices = list(strategy.extended.worker_devices)
        for r, address in enumerate(strategy._lease.addresses):
            self.model.note_worker(r, address, devices[r] if r < len(devices) else None)
        self.views: dict[str, View] = {name: cls() for name, cls in VIEWS.items()}
        cast(Watchdog, self.views["watchdog"]).threshold_s = threshold_s  # VIEWS["watchdog"] is Watchdog
        cast(ReplicaStatusStrip, self.views["status"]).threshold_s = threshold_s
        # Every event the log keeps, and from then on the new ones (the pump reads them from its position).
        seed, self._position = strategy.events.since(0)
        self.model.feed_many(seed)
        self.live = LiveFeed(strategy)  # after the seed: the log drops what the feed brings again
        self.widget = self._build_widgets()
        self.refresh(force=True)
        self._thread = threading.Thread(target=self._run, name="interdist-dashboard", daemon=True)
        self._thread.start()
        self._cell_hook = _on_cell_end(self.drain)  # each cell ends with the views showing all it did

    # -- the loop ------------------------------------------------------------------
    def pump(self) -> int:
        """Feed the model with the events that arrived since the last call; how many."""
        strategy = self._strategy()
        if strategy is None:
            return 0
        new, self._position = strategy.events.since(self._position)
        del strategy
        self.model.feed_many(new)
        return len(new)

    def refresh(self, force: bool = False, shown_only: bool = False) -> None:
        """Redraw every view whose data changed (all of them with ``force``); with ``shown_only``, only the
        status strip and the views of the tab on screen (the others are redrawn when their tab is chosen)."""
        with self._lock:
            self.pump()
            self._sync_selectors()
            views = [self.views[n] for n in self._shown_views()] if shown_only else list(self.views.values())
            changed = [v.update(self.model, force) for v in views]
            self._update_fault_table()
            if any(changed):
                self.updates += 1
                self.widget.update_snapshot()  # the static state the JupyterLab extension keeps once the kernel is gone
            status = ("live" if self.live.active else "after each step") + (" (paused)" if self.paused else "")
            if self._status.value != status:
                self._status.value = status

    def resync(self) -> None:
        """Send the full current state: every view redrawn, and its widget's document replaced in every frontend.

        ``refresh`` sends only what changed, as patches, and only frontends with a view
        already open apply them; this is for views drawn from older state (the refresh
        button, a new display of the dashboard).
        """
        with self._lock:
            self.refresh(force=True)
            for name, model in self.bokeh_models.items():
                model.update_from_model(self.views[name].root)

    def _run(self) -> None:
        wait = self.interval
        while not self._stop.wait(wait):
            strategy = self._strategy()
            closed = strategy is None or getattr(strategy, "_closed", False)
            del strategy
            cpu = time.thread_time()
            try:
                if self.paused:
                    self.pump()
                else:
                    # The tab on screen only: a redraw of every view took 15-50 ms at 4 replicas, which the
                    # CPU budget turned into one redraw a second or less; the strip then lagged its replicas.
                    self.refresh(shown_only=True)
            except Exception:
                logger.debug("interdist dashboard: redraw failed", exc_info=True)
            spent = time.thread_time() - cpu
            self.cpu_s += spent
            # At most CPU_SHARE of a core, however many events come: a redraw of a fast loop's
            # steps waits longer (it then sends more rows at once, which costs less per row).
            wait = max(self.interval, spent / CPU_SHARE - spent)
            if closed:
                self.close()

    def drain(self) -> None:
        """Bring the views up to every event the log holds now, at once (not at the next redraw).

        Called at the end of each notebook cell (an IPython ``post_run_cell`` hook) and by ``close``: a
        Run All whose last cell reads or closes the dashboard sees every step the cells before it ran,
        however far behind the throttled redraws were.
        """
        if self._stop.is_set():
            return
        try:
            self.refresh()
        except Exception:  # a redraw that fails must not fail the user's cell: logged, not raised
            logger.debug("interdist dashboard: drain failed", exc_info=True)

    def close(self) -> None:
        """Show every event that came so far, then stop updating and unsubscribe (the widgets stay,
        showing that last state)."""
        self.drain()
        self._stop.set()
        self.live.close()
        hook, self._cell_hook = self._cell_hook, None
        if hook is not None:
            hook()

    # -- widgets -------------------------------------------------------------------
    def _build_widgets(self) -> Any:
        import ipywidgets as w

        self._replica = w.Dropdown(description="replica", options=[("all", -1)], value=-1)
        self._variable = w.Dropdown(description="variable", options=["all"], value="all")
        self._pause = w.ToggleButton(description="pause", icon="pause", value=False)
        self._refresh = w.Button(description="refresh", icon="refresh")
        self._status = w.Label(value="")
        self._replica.observe(self._on_filter, names="value")
        self._variable.observe(self._on_filter, names="value")
        self._pause.observe(self._on_pause, names="value")
        self._refresh.on_click(lambda _: self.resync())
        controls = w.HBox([self._replica, self._variable, self._pause, self._refresh, self._status])
        self.fault_controls = self._build_fault_controls(w)
        live = _live_bokeh_model_class()
        self.bokeh_models = {
            name: live(v.root, lock=self._lock, before=functools.partial(v.update, self.model))
            for name, v in self.views.items()
        }
        # The status strip and summary on top, the rest in tabs: one screen high, beside the code.
        m = self.bokeh_models
        tabs = {
            "values": [m["replica-values"], m["value-heatmap"]],
            "scalars": [m["scalars"]],
            "collectives": [m["timeline"], m["watchdog"]],
            "timings": [m["timings"]],
            "progress": [m["progress"]],
            "placement": [m["placement-diagram"], m["placement"]],
        }
        if self.fault_controls is not None:
            tabs["faults"] = [self.fault_controls]
        self.tabs = w.Tab(children=[c[0] if len(c) == 1 else w.VBox(c) for c in tabs.values()], titles=tuple(tabs))
        self.tabs.observe(self._on_tab, names="selected_index")
        # each tab's views, by name (a tab holds a view's widget, or a box of them)
        self._tab_views = [[n for n, bm in m.items() if any(bm is c for c in group)] for group in tabs.values()]
        box = DashboardBox([controls, m["status"], self.tabs])
        box.dashboard = self
        return box

    def _build_fault_controls(self, w: Any) -> Any:
        """A row that arms a fault on one replica for the next program (``idist.debug.inject``)."""
        if self._inject is None:
            return None
        n = len(self.model.replicas)
        self._fault_replica = w.Dropdown(description="replica", options=list(range(n)), value=n - 1 if n else None)
        self._fault_kind = w.Dropdown(description="fault", options=list(faults.FAULTS), value="raise")
        points = [*faults.POINTS, "all_reduce", "all_gather", "merge_call"]
        self._fault_point = w.Dropdown(description="at", options=points, value="step")
        self._fault_seconds = w.BoundedFloatText(description="seconds", value=3.0, min=0.0, max=3600.0)
        self._fault_persist = w.Checkbox(description="persist", value=False, indent=False)
        self._fault_arm = w.Button(description="arm", icon="bolt", button_style="warning")
        self._fault_status = w.Label(value="")
        self._fault_arm.on_click(lambda _: self.arm_fault())
        note = w.HTML(
            "Arms one fault on one replica for the strategy's <b>next</b> program (as "
            "<code>idist.debug.inject</code>): run a step to see it fail, hang or lose its worker. "
            "A program that does not reach the point drops it, unless <i>persist</i>: then it waits until it fires."
        )
        row = w.HBox(
            [
                self._fault_replica,
                self._fault_kind,
                self._fault_point,
                self._fault_seconds,
                self._fault_persist,
                self._fault_arm,
            ]
        )
        self._fault_table = w.HTML(value=_fault_table([]))
        self._faults_shown: list[tuple[Any, ...]] = []
        return w.VBox([note, row, self._fault_status, self._fault_table])

    def arm_fault(self) -> str:
        """Arm the fault the controls describe; what the status line then says."""
        assert self._inject is not None
        replica, fault, at = self._fault_replica.value, self._fault_kind.value, self._fault_point.value
        persist = bool(self._fault_persist.value)
        try:
            self._inject(replica=replica, fault=fault, at=at, seconds=float(self._fault_seconds.value), persist=persist)
        except Exception as e:  # noqa: BLE001 - shown beside the button, not raised into the widget's callback
            text = f"not armed: {type(e).__name__}: {e}"
        else:
            until = "until it fires" if persist else "for the next program"
            text = f"armed: {fault} at {at} on replica {replica}, {until}"
        self._fault_status.value = text
        self._update_fault_table()
        return text

    def _update_fault_table(self) -> None:
        """Show ``model.faults`` under the controls, when they changed since last shown."""
        if self._inject is None:
            return
        rows = [(f.replica, f.fault, f.at, f.state, f.where, f.persist, f.armed_at) for f in self.model.faults]
        if rows != self._faults_shown:
            self._faults_shown = rows
            self._fault_table.value = _fault_table(self.model.faults)

    def _shown_views(self) -> list[str]:
        """The views on screen: the status strip, and those of the selected tab."""
        index = self.tabs.selected_index
        tab = self._tab_views[index] if index is not None and 0 <= index < len(self._tab_views) else []
        return ["status", *[n for n in tab if n != "status"]]

    def _on_tab(self, _: Any) -> None:
        # A view drawn while its tab was hidden had no width: send it again, now that it has one.
        self.resync()

    def _sync_selectors(self) -> None:
        replicas = [("all", -1), *[(f"replica {r}", r) for r in self.model.replicas]]
        if list(self._replica.options) != replicas:
            self._replica.options = replicas
        names = ["all", *sorted({v.name for v in self.model.variables.values()})]
        if list(self._variable.options) != names:
            self._variable.options = names

    def _on_filter(self, _: Any) -> None:
        replica = self._replica.value
        variable = self._variable.value
        for v in self.views.values():
            v.replica = None if replica in (-1, None) else int(replica)
            v.variable = None if variable in ("all", None) else str(variable)
        self.refresh(force=True)

    def _on_pause(self, change: Any) -> None:
        self.paused = bool(change["new"])
        self._pause.description = "resume" if self.paused else "pause"
        if not self.paused:
            self.refresh(force=True)


def _on_cell_end(fn: Callable[[], None]) -> Callable[[], None] | None:
    """Call ``fn`` after every cell the IPython kernel runs (``post_run_cell``); the function that stops
    it. None outside IPython (a script: every step's events are in the log when ``run`` returns)."""
    try:
        from IPython import get_ipython
    except ImportError:
        return None
    ip = get_ipython()
    if ip is None or not hasattr(ip, "events"):
        return None

    def hook(*_: Any) -> None:
        fn()

    ip.events.register("post_run_cell", hook)

    def stop() -> None:
        try:
            ip.events.unregister("post_run_cell", hook)
        except ValueError:  # already gone
            pass

    return stop


def _fault_table(armed: list[ArmedFault]) -> str:
    """The faults tab's table: each fault ``inject`` armed, newest first, and what became of it."""
    if not armed:
        return "<i>no fault armed yet</i>"
    head = "".join(f"<th style='text-align:left;padding:0 8px'>{h}</th>" for h in _FAULT_COLUMNS)
    rows = []
    for f in reversed(armed):
        state = f.state + (" (persist)" if f.persist and f.state == "armed" else "")
        cells = (str(f.replica), f.fault, f.at, state, f.where)
        rows.append("<tr>" + "".join(f"<td style='padding:0 8px'>{html.escape(c)}</td>" for c in cells) + "</tr>")
    return f"<table><tr>{head}</tr>{''.join(rows)}</table>"


_FAULT_COLUMNS = ("replica", "fault", "at", "state", "where / why")


def show(
    strategy: Any, interval: float = 0.2, threshold_s: float = 5.0, inject: Callable[..., None] | None = None
) -> Any:
    """A live dashboard of ``strategy``'s replicas, as an ipywidgets layout.

    ``interval`` (seconds) throttles redraws (0.2: five a second); ``threshold_s``
    is how long a collective may stay open before the watchdog lists it. ``inject``
    (``idist.debug.inject`` bound to ``strategy``, as ``strategy.dashboard()`` passes it)
    adds the "faults" tab, a control that arms a fault for the next program.

    >>> import interdist as idist
    >>> s = idist.MirroredStrategy(["CPU:0", "CPU:1"])
    >>> box = s.dashboard()
    >>> sorted(box.dashboard.views)  # doctest: +NORMALIZE_WHITESPACE
    ['placement', 'placement-diagram', 'progress', 'replica-values', 'scalars', 'status',
     'timeline', 'timings', 'value-heatmap', 'watchdog']
    >>> box.dashboard.close(); s.close()
    """
    return InlineDashboard(strategy, interval, threshold_s, inject).widget
