"""Each view built from an event stream, with its data sources asserted exactly."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from bokeh.document import Document

from interdist import events as ev
from interdist.dashboard.components import Placement, Progress, ReplicaValues, Timeline, Timings, Watchdog
from interdist.dashboard.components._base import set_data
from interdist.dashboard.model import DashboardModel
from interdist.dashboard.pages import _page, ensure_plugin, page_names, register_pages

from .streams import CPU, G, created, hang_stream, training_stream

RECORDED = Path(__file__).with_name("recorded_events.json")


def model_of(stream: list[ev.Event]) -> DashboardModel:
    m = DashboardModel()
    m.note_worker(0, "tcp://10.0.0.1:4000", CPU.format(0))
    m.note_worker(1, "tcp://10.0.0.2:4000", CPU.format(1))
    m.feed_many(stream)
    return m


def data(view: Any) -> dict[str, list[Any]]:
    return {k: list(v) for k, v in view.source.data.items()}


def test_replica_values_one_row_per_replica_per_variable_with_divergence() -> None:
    v = ReplicaValues()
    v.update(model_of(training_stream()))
    assert data(v) == {
        "var_id": [1, 1, 2, 2],
        "variable": ["w", "w", "s", "s"],
        "replica": [0, 1, 0, 1],
        "shape": ["(2,)"] * 4,
        "dtype": ["float32"] * 4,
        "device": [CPU.format(0), CPU.format(1)] * 2,
        "where": ["CPU:0", "CPU:1"] * 2,  # the part of the device string that differs
        # values of small variables; copies that differ (here 1 against 1: both) in red; on-read copies differ by design
        "values": ["[1, 1]", "[1.25, 1.25]", "[1.5, 1.5]", "[2, 2]"],
        "values_color": ["red", "red", "black", "black"],
        "norm": [2.0, 2.5, 3.0, 4.0],
        "checksum": [2.0, 2.5, 3.0, 4.0],
        "step": ["run #2"] * 4,  # step 3 was the user's second run call
        "status": ["DIVERGED since run #2"] * 2 + ["per replica (sync-on-read)"] * 2,
        "color": ["red", "red", "black", "black"],
    }
    assert "1 diverged" in v.summary.text
    v.replica, v.variable = 1, "w"
    v.update(model_of(training_stream()))
    assert data(v)["replica"] == [1] and data(v)["variable"] == ["w"]


def test_placement_hosts_workers_devices_and_parameter_devices_apart() -> None:
    v = Placement()
    v.update(model_of(training_stream()))
    assert data(v) == {"host": ["10.0.0.1", "10.0.0.2"],
                       "worker": ["tcp://10.0.0.1:4000", "tcp://10.0.0.2:4000"],
                       "device": [CPU.format(0), CPU.format(1)], "where": ["CPU:0", "CPU:1"],
                       "replica": ["0", "1"], "variables": ["w, s", "w, s"]}
    assert {k: list(x) for k, x in v.param_source.data.items()} == {k: [] for k in data(v)}
    assert not v.param_table.visible and not v.param_title.visible  # no empty "Parameter devices" under Mirrored
    # central storage: one copy of v, held by replica 0's worker on the parameter device
    central = [ev.RunStarted(G, 1, 1, 100.0, "create_variable", "create_variable"),
               created(0, 5, "v", 1.0, 100.0, sync="AUTO", device="/job:localhost/replica:0/task:0/device:CPU:0")]
    v.update(model_of(central))
    assert {k: list(x) for k, x in v.param_source.data.items()} == {
        "host": ["10.0.0.1"], "worker": ["tcp://10.0.0.1:4000"], "device": ["/job:localhost/replica:0/task:0/device:CPU:0"],
        "where": ["CPU:0"], "replica": ["held by 0"], "variables": ["v"]}
    assert v.param_table.visible and v.param_title.visible
    assert data(v)["variables"] == ["", ""]


def test_timeline_bars_split_wait_and_transfer() -> None:
    v = Timeline()
    v.update(model_of(training_stream()))
    d = data(v)
    assert {k: d[k] for k in ("replica", "op", "step", "seq", "nbytes", "bytes", "algorithm", "backend")} == {
        "replica": [0, 1, 0, 1], "op": ["all_reduce"] * 4, "step": [2, 2, 3, 3], "seq": [1] * 4,
        "nbytes": [1000] * 4, "bytes": ["1.0 KB"] * 4, "algorithm": ["ring"] * 4, "backend": ["dask"] * 4}
    assert d["start"] == pytest.approx([1.1, 1.2, 2.1, 2.2])
    assert d["mid"] == pytest.approx([1.2, 1.2, 2.2, 2.2])
    assert d["end"] == pytest.approx([1.25, 1.25, 2.25, 2.25])
    assert d["wait_ms"] == pytest.approx([100.0, 0.0, 100.0, 0.0])
    assert d["transfer_ms"] == pytest.approx([50.0] * 4)


def test_timings_per_op_latency_bytes_bandwidth() -> None:
    v = Timings()
    v.update(model_of(training_stream()))
    d = data(v)
    assert {k: d[k] for k in ("op", "step", "replica", "nbytes", "color")} == {
        "op": ["all_reduce"] * 4, "step": [2, 2, 3, 3], "replica": [0, 1, 0, 1], "nbytes": [1000] * 4,
        "color": ["#1f77b4"] * 4}
    assert d["time"] == pytest.approx([1.25, 1.25, 2.25, 2.25])
    assert d["latency_ms"] == pytest.approx([150.0, 50.0, 150.0, 50.0])
    assert d["bus_gbps"] == pytest.approx([2e-5] * 4)


def test_watchdog_names_the_missing_replica() -> None:
    v = Watchdog(threshold_s=5.0, clock=lambda: 110.0)
    v.update(model_of(hang_stream()))
    assert data(v) == {"op": ["all_gather"], "step": [7], "seq": [1], "arrived": ["0 (10.0), 2 (9.0)"],
                       "waiting_s": [10.0], "missing": ["1"]}
    assert "1 collective(s) stuck" in v.status.text
    v = Watchdog(threshold_s=5.0, clock=lambda: 103.0)
    v.update(model_of(hang_stream()))
    assert data(v)["op"] == []


def test_progress_steps_and_rate() -> None:
    v = Progress()
    v.update(model_of(training_stream()))
    d = data(v)
    assert d["step"] == [2, 3] and d["count"] == [1, 2] and d["time"] == pytest.approx([1.5, 2.5])
    assert "<b>2</b> step(s) finished on <b>2</b> replica(s), <b>1.0</b> steps/s" in v.status.text


def test_update_skips_when_nothing_changed() -> None:
    m, v = model_of(training_stream()), Timeline()
    assert v.update(m) and not v.update(m)
    m.feed(ev.RunStarted(G, 4, 0, 104.0, "step", "run"))
    assert v.update(m)


def many_steps(first: int, n: int) -> list[ev.Event]:
    """Steps ``first``... of two replicas, one all_reduce each, a second apart (after training_stream)."""
    out: list[ev.Event] = []
    for step in range(first, first + n):
        t = 100.0 + step
        for r in (0, 1):
            out += [ev.RunStarted(G, step, r, t, "step", "run"),
                    ev.CollectiveEntered(G, step, r, t + 0.1, "all_reduce", 1, 1000),
                    ev.CollectiveExited(G, step, r, t + 0.2, "all_reduce", 1, 1000, "ring", "dask", 0.0, 0.1)]
        out += [ev.RunFinished(G, step, r, t + 0.5, "step", "run", 0.5, True) for r in (0, 1)]
    return out


def sent_changes(view: Any) -> list[Any]:
    """The changes to a view's rows (its source) that its update sends to the browser (recorded from now on);
    not those of its follow control (each window's ranges, a few numbers: _base.Following.targets)."""
    doc = Document()
    doc.add_root(view.root)
    changes: list[Any] = []
    doc.on_change(lambda event: changes.append(event) if getattr(event, "model", None) is view.source else None)
    return changes


@pytest.mark.parametrize(("cls", "rows_per_step"), [(Timeline, 2), (Timings, 2), (Progress, 1)])
def test_append_only_views_send_only_the_new_rows(cls: Any, rows_per_step: int) -> None:
    from bokeh.document.events import ColumnDataChangedEvent, ColumnsStreamedEvent

    m, v = model_of(training_stream()), cls()
    changes = sent_changes(v)
    v.update(m)
    assert [type(c) for c in changes if isinstance(c, (ColumnsStreamedEvent, ColumnDataChangedEvent))] == [
        ColumnDataChangedEvent]  # the first draw: every row
    changes.clear()
    m.feed_many(many_steps(4, 3))
    v.update(m)
    streamed = [c for c in changes if isinstance(c, ColumnsStreamedEvent)]
    assert not [c for c in changes if isinstance(c, ColumnDataChangedEvent)]
    assert len(streamed) == 1 and list(streamed[0].data["step"]) == [s for s in (4, 5, 6) for _ in range(rows_per_step)]
    fresh = cls()
    fresh.update(m)
    assert data(v) == data(fresh)  # what was streamed adds up to what a new view draws
    # A filter shows other rows: all of them again.
    if cls is not Progress:
        changes.clear()
        v.replica = 1
        v.update(m)
        assert [type(c) for c in changes if isinstance(c, ColumnDataChangedEvent)] == [ColumnDataChangedEvent]
        assert set(data(v)["replica"]) == {1}


def test_appended_rows_past_the_window_are_sent_whole_and_counted_from_the_first_step() -> None:
    from interdist.dashboard.components import progress, timeline

    m, line, prog = model_of(training_stream()), Timeline(), Progress()
    line.update(m)
    prog.update(m)
    m.feed_many(many_steps(4, timeline.SHOWN))  # 2 rows a step: more new rows than the timeline shows
    line.update(m)
    fresh = Timeline()
    fresh.update(m)
    assert data(line) == data(fresh) and len(data(line)["step"]) == timeline.SHOWN
    assert data(line)["step"][-1] == 3 + timeline.SHOWN
    m.feed_many(many_steps(4 + timeline.SHOWN, progress.SHOWN))
    prog.update(m)
    d = data(prog)
    finished = 2 + timeline.SHOWN + progress.SHOWN
    assert m.steps_finished == finished and len(d["count"]) == progress.SHOWN
    assert d["count"][-1] == finished and d["count"][0] == finished - progress.SHOWN + 1
    assert f"<b>{finished}</b> step(s) finished" in prog.status.text


def test_set_data_makes_the_tables_showing_the_source_repaint() -> None:
    # Bokeh >= 3.9 repaints a DataTable only when its CDSView changes, which new values in as many
    # rows do not do; set_data changes the view (its tags) so the table repaints (tests/lab checks it drawn).
    m, v = model_of(training_stream()), ReplicaValues()
    Document().add_root(v.root)
    v.update(m)
    tags = list(v.table.view.tags)
    rows = data(v)
    assert not set_data(v.source, rows) and v.table.view.tags == tags  # same data: nothing sent
    assert set_data(v.source, {**rows, "norm": [x + 1 for x in rows["norm"]]})
    assert v.table.view.tags != tags
    p = Placement()  # two tables: only the one showing the source changed
    Document().add_root(p.root)
    before = list(p.param_table.view.tags)
    set_data(p.source, {k: ["x"] for k in p.source.data})
    assert p.param_table.view.tags == before and p.table.view.tags != before


def recorded() -> list[ev.Event]:
    return [ev.from_msg(m) for m in json.loads(RECORDED.read_text())]


def test_views_from_a_recorded_training_run() -> None:
    stream = recorded()
    m = model_of(stream)
    last: dict[tuple[int, int], Any] = {}
    for e in stream:
        if isinstance(e, (ev.VariableCreated, ev.VariableUpdated)):
            last[(e.var_id, e.replica)] = e
    exits = [e for e in stream if isinstance(e, ev.CollectiveExited)]
    views: dict[str, Any] = {cls.__name__: cls() for cls in (ReplicaValues, Placement, Timeline, Timings, Progress)}
    for v in views.values():
        v.update(m)
    rv = data(views["ReplicaValues"])
    keys = sorted(last)
    names = {e.var_id: e.name for e in stream if isinstance(e, ev.VariableCreated)}
    assert rv["variable"] == [names[k[0]] for k in keys] == ["w", "w", "b", "b"]
    assert rv["replica"] == [0, 1, 0, 1]
    assert rv["checksum"] == [last[k].checksum for k in keys] and rv["status"] == ["ok"] * 4
    assert data(views["Placement"])["variables"] == ["w, b", "w, b"]
    tl = data(views["Timeline"])
    assert tl["op"] == [e.op for e in exits] and tl["replica"] == [e.replica for e in exits]
    assert tl["wait_ms"] == pytest.approx([e.wait_s * 1e3 for e in exits])
    assert tl["transfer_ms"] == pytest.approx([e.transfer_s * 1e3 for e in exits])
    assert set(tl["op"]) == {"all_reduce", "merge_call"}
    assert data(views["Timings"])["nbytes"] == [e.nbytes for e in exits]
    assert len(data(views["Progress"])["step"]) == 3  # three training steps, each finished by both replicas


class FakeScheduler:
    """What the pages use of a scheduler: plugins, the event topic, add_plugin."""

    def __init__(self, logged: list[tuple[float, Any]]) -> None:
        self.plugins: dict[str, Any] = {}
        self.logged = logged

    def get_events(self, topic: str) -> tuple[tuple[float, Any], ...]:
        return tuple(self.logged) if topic == "interdist" else ()

    def add_plugin(self, plugin: Any, name: str) -> None:
        self.plugins[name] = plugin


def test_pages_are_registered_and_read_the_scheduler_topic() -> None:
    from distributed.dashboard.scheduler import applications

    register_pages()
    assert set(page_names()) <= set(applications)
    stream = recorded()
    half = len(stream) // 2
    worker_of = {0: "tcp://127.0.0.1:4001", 1: "tcp://127.0.0.1:4002"}

    def batches(evs: list[ev.Event], packed: bool) -> list[dict[str, Any]]:
        # As workers log them (packed msgpack bytes), and as plain structures.
        msgs = [[e.to_msg() for e in evs if e.replica == r] for r in (0, 1)]
        return [{**(ev.pack_batch(msgs[r]) if packed else {"batch": msgs[r]}), "worker": worker_of[r]}
                for r in (0, 1)]

    sched = FakeScheduler([(0.0, b) for b in batches(stream[:half], packed=False)])
    plugin = ensure_plugin(sched)  # catches up on what was logged before it existed
    assert ensure_plugin(sched) is plugin
    for b in batches(stream[half:], packed=True):
        plugin.log_event("interdist", b)
    plugin.log_event("other-topic", {"batch": [{"kind": "nonsense"}]})
    m = plugin.model()
    assert m.group == "recorded" and m.workers == worker_of
    assert sorted(m.copies) == [(1, 0), (1, 1), (2, 0), (2, 1)]
    doc = Document()
    _page("placement", sched, {}, doc)
    (root,) = doc.roots
    assert doc.title == "interdist: placement"
    tables = [x for x in root.children if type(x).__name__ == "DataTable"]
    assert list(tables[0].source.data["worker"]) == [worker_of[0], worker_of[1]]
    assert list(tables[0].source.data["host"]) == ["127.0.0.1", "127.0.0.1"]




def test_value_heatmap_has_explicit_ranges_empty_and_after_data() -> None:
    """Drawn empty (a hidden tab, no variable yet) a DataRange1d logged "could not set initial ranges" in the
    browser; the heatmap's column range is explicit, and fits the widest row once data comes."""
    from bokeh.models import Range1d

    from interdist.dashboard.components import ValueHeatmap

    v = ValueHeatmap()
    v.update(DashboardModel())
    assert isinstance(v.figure.x_range, Range1d) and (v.figure.x_range.start, v.figure.x_range.end) == (-0.5, 15.5)
    v.update(model_of(training_stream()))
    assert (v.figure.x_range.start, v.figure.x_range.end) == (-0.5, 1.5)  # w and s: two elements each


def test_replica_values_show_a_large_variables_block_means() -> None:
    """A (4, 16) variable's events carry 16 block means, not its 64 elements: the values column said nothing."""
    m = DashboardModel()
    m.feed(ev.VariableCreated("g", 1, 0, 1.0, 1, "W1", (4, 16), "float32", "CPU:0", "ON_WRITE", "MEAN", 1.0, 2.0))
    m.feed(ev.VariableUpdated("g", 2, 0, 2.0, 1, "W1", "CPU:0", 1.0, 2.0, (), tuple(float(i) for i in range(16))))
    v = ReplicaValues()
    v.update(m)
    assert v.source.data["values"] == ["≈ [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15]"]


def test_the_status_summary_and_its_chips_are_one_text_counted_from_one_list() -> None:
    """The summary line and the chips are one Div's text (a page gets them in one change, never the counts of one
    moment beside the chips of another), and the summary counts the very statuses the chips show."""
    import re

    from bokeh.models import Div

    from interdist.dashboard.components.status import ReplicaStatusStrip

    v = ReplicaStatusStrip(clock=lambda: 103.0)
    m = DashboardModel()
    for r in (0, 1, 2):
        m.note_worker(r, f"tcp://10.0.0.{r + 1}:4000", CPU.format(r))
    m.feed_many(hang_stream())  # replicas 0 and 2 wait in an all_gather, replica 1 runs its function
    v.update(m)
    texts = [d.text for d in v.root.children if isinstance(d, Div) and "interdist-chip" in d.text]
    assert len(texts) == 1 and "interdist-summary" in texts[0]
    chips = re.findall(r"data-kind='(\w+)'", texts[0])
    assert chips == ["waiting", "running", "waiting"]
    assert "<b>3</b> replica(s): 2 waiting, 1 running" in texts[0]
