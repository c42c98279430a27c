"""The dashboard's pictures from hand-made event streams: the placement diagram (Bokeh and SVG), the
values heatmap, logged scalars, the user's run numbers, and the one-file HTML report."""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest

from interdist import events as ev
from interdist._convert import SMALL_SUMMARY, _array_summary, _host_summary, block_means, summarize_with_sketch
from interdist.chrome_trace import to_chrome_trace
from interdist.dashboard.components import PlacementDiagram, Scalars, ValueHeatmap
from interdist.dashboard.model import FUSED_PROGRAM, DashboardModel
from interdist.dashboard.placement_layout import PlacementPicture, from_model, from_parameter_servers, to_svg
from interdist.dashboard.report import report_html
from interdist.replica.fused import fused_steps

from .streams import CPU, G, created, training_stream


def model_of(stream: list[ev.Event]) -> DashboardModel:
    m = DashboardModel()
    m.note_worker(0, "tcp://10.0.0.1:4000", CPU.format(0))
    m.note_worker(1, "tcp://10.0.0.1:4001", CPU.format(1))
    m.feed_many(stream)
    return m


def data(view: Any) -> dict[str, list[Any]]:
    return {k: list(v) for k, v in view.source.data.items()}


def central_stream() -> list[ev.Event]:
    """Mirrored w on both replicas, and central b (one copy, on replica 0's worker, device CPU:9)."""
    return [created(0, 1, "w", 1.0, 1.0), created(1, 1, "w", 1.0, 1.0),
            created(0, 2, "b", 4.0, 1.0, device=CPU.format(9))]  # fmt: skip


def test_run_numbers_count_a_run_steps_call_once_as_the_errors_do() -> None:
    assert fused_steps.__qualname__ == FUSED_PROGRAM  # the engine's program, named by the model
    stream: list[ev.Event] = []
    for r in (0, 1):
        stream += [ev.RunStarted(G, 1, r, 1.0, "create", "create"), ev.RunStarted(G, 2, r, 2.0, "step", "run"),
                   ev.RunStarted(G, 3, r, 3.0, FUSED_PROGRAM, FUSED_PROGRAM)]  # fmt: skip
        stream += [ev.RunStarted(G, s, r, 3.0 + s, "step", "run") for s in (3, 4, 5)]
        stream += [ev.RunFinished(G, 3, r, 9.0, FUSED_PROGRAM, FUSED_PROGRAM, 6.0, True),
                   ev.RunStarted(G, 6, r, 10.0, "assign", "assign"), ev.RunStarted(G, 7, r, 11.0, "step", "run")]  # fmt: skip
    m = model_of(stream)
    assert m.runs == 3 and m.train_steps == 5
    labels = [m.run_label(s) for s in range(1, 8)]
    assert labels == ["before run #1", "run #1", "run #2", "run #2", "run #2", "after run #2", "run #3"]


def test_logged_scalars_a_line_per_replica_over_training_steps() -> None:
    stream: list[ev.Event] = []
    for step, k in ((5, 1), (9, 2)):
        for r in (0, 1):
            stream += [ev.RunStarted(G, step, r, float(step), "step", "run"),
                       ev.ScalarLogged(G, step, r, step + 0.1, "loss", 1.0 / k + r)]  # fmt: skip
    m = model_of(stream)
    view = Scalars()
    view.update(m)
    d = data(view)
    assert d["xs"] == [[1, 2], [1, 2]] and d["ys"] == [[1.0, 0.5], [2.0, 1.5]]
    assert d["label"] == ["loss (replica 0)", "loss (replica 1)"] and d["last"] == ["0.5", "1.5"]
    view.replica = 1
    view.update(m)
    assert data(view)["ys"] == [[2.0, 1.5]]
    msg = ev.ScalarLogged(G, 5, 0, 1.0, "loss", 0.25).to_msg()
    assert ev.from_msg(msg) == ev.ScalarLogged(G, 5, 0, 1.0, "loss", 0.25)
    trace = to_chrome_trace([ev.ScalarLogged(G, 5, 1, 1.0, "loss", 0.25)])
    assert [e for e in trace["traceEvents"] if e["ph"] == "C"] == [
        {"ph": "C", "name": "loss", "pid": 1, "ts": 0.0, "args": {"replica 1": 0.25}}
    ]


def test_block_means_cut_the_flattened_copy_into_sixteen_blocks() -> None:
    assert block_means(np.arange(20.0), 16, 16) == tuple(float(i) for i in range(15)) + (17.0,)
    assert block_means(np.arange(16.0), 16, 16) == ()  # small: its values travel instead
    assert block_means(np.ones((4, 8), np.float32) * 2, 16, 16) == (2.0,) * 16
    assert block_means(np.array(["a"] * 40), 16, 16) == ()


def test_summary_of_equal_copies_is_the_same_wherever_they_lie() -> None:
    """Equal copies give equal checksums (how divergence is seen), however their memory is aligned."""
    rng = np.random.default_rng(3)
    value = rng.normal(size=100_003).astype(np.float32)
    seen = set()
    for offset in range(16):  # every 4-byte alignment within a 64-byte line
        buf = np.empty(value.size + 16, np.float32)
        copy = buf[offset : offset + value.size]
        copy[:] = value
        seen.add(summarize_with_sketch(copy, 16, 16))
    assert len(seen) == 1
    norm, checksum, sketch = seen.pop()
    exact = value.astype(np.float64)
    assert checksum == pytest.approx(exact.sum(), abs=1e-6 * np.abs(exact).sum())
    assert norm == pytest.approx(np.sqrt((exact * exact).sum()), rel=1e-5)
    assert sketch == pytest.approx(block_means(exact, 16, 16), abs=1e-5)


def test_a_float32_sum_that_overflows_is_summed_again_in_float64() -> None:
    big = np.full(64, 3e38, np.float32)  # each finite, their float32 sum is not
    _, checksum, sketch = summarize_with_sketch(big, 16, 16)
    assert checksum == pytest.approx(64 * 3e38, rel=1e-6)
    assert sketch == pytest.approx((3e38,) * 16, rel=1e-6)
    assert summarize_with_sketch(np.array([1.0, np.inf] * 20, np.float32), 16, 16)[1] == np.inf


def test_a_numpy_copy_is_summarized_with_the_general_paths_bits() -> None:
    """The NumPy path (no conversions: ``_host_summary``) gives bit for bit what the general one (CuPy's) gives, for
    every dtype, size, shape and the values that take the float64 detour (an overflowing float32 sum, inf, NaN)."""
    rng = np.random.default_rng(5)
    values: list[np.ndarray] = []
    for dtype in (np.float32, np.float64, np.float16, np.int32, np.int64, np.uint8, np.bool_):
        for n in (17, 31, 64, 100, 640, 4096, 4097, 50_003):
            values.append((rng.normal(size=n) * 100).astype(dtype))
    values += [
        np.full(64, 3e38, np.float32),
        np.array([1.0, np.inf] * 20, np.float32),
        np.array([np.inf, -np.inf] * 20, np.float64),
        np.array([0.5, np.nan] * 40, np.float32),
        rng.normal(size=(70, 90)).astype(np.float32),  # 6,300 elements: the float32 dot's norm
        rng.normal(size=(3, 5, 7)),
    ]
    for a in values:
        for blocks in (16, 0):
            with np.errstate(invalid="ignore"):  # (inf - inf, in both)
                host, general = _host_summary(a, blocks), _array_summary(a, blocks)
            assert repr(host) == repr(general), (a.dtype, a.shape, blocks)


def test_a_small_copy_is_summarized_from_its_values() -> None:
    """Up to ``SMALL_SUMMARY`` elements: the sum of the values and the root of the sum of their squares, exactly
    (a scalar's checksum is its value, as the values table shows it)."""
    assert summarize_with_sketch(np.array(3, np.int64), 16, 16) == (3.0, 3.0, ())
    assert summarize_with_sketch(np.array([-2.5], np.float32), 16, 16) == (2.5, -2.5, ())
    assert summarize_with_sketch(np.array([3.0, 4.0], np.float32), 16, 16) == (5.0, 7.0, ())
    assert summarize_with_sketch(np.array([True, False, True]), 16, 16) == (pytest.approx(2**0.5), 2.0, ())
    assert summarize_with_sketch(np.arange(SMALL_SUMMARY, dtype=np.float64).reshape(4, 4), 16, 16) == (
        pytest.approx(float(np.sqrt((np.arange(16.0) ** 2).sum()))),
        120.0,
        (),
    )
    norm, checksum, _ = summarize_with_sketch(np.array([1.0, np.nan], np.float32), 16, 16)
    assert np.isnan(norm) and np.isnan(checksum)
    assert summarize_with_sketch(np.zeros(0, np.float32), 16, 16) == (0.0, 0.0, ())
    # One element more: the NumPy path, sketched.
    assert len(summarize_with_sketch(np.ones(SMALL_SUMMARY + 1, np.float32), 16, 16)[2]) == 16


def test_heatmap_marks_the_cells_where_a_copy_differs() -> None:
    sketch = tuple(float(i) for i in range(16))
    odd = sketch[:3] + (99.0,) + sketch[4:]
    stream: list[ev.Event] = [
        ev.VariableCreated(G, 1, r, 1.0, 1, "big", (64,), "float32", CPU.format(r), "ON_WRITE", "MEAN", 0.0, 0.0)
        for r in (0, 1, 2)
    ]
    stream += [ev.VariableUpdated(G, 2, r, 2.0, 1, "big", CPU.format(r), 1.0, 1.0, (), odd if r == 2 else sketch)
               for r in (0, 1, 2)]  # fmt: skip
    view = ValueHeatmap()
    view.update(model_of(stream))
    d = data(view)
    assert len(d["value"]) == 48
    assert [(d["replica"][i], d["col"][i]) for i in range(48) if d["differs"][i]] == [(2, 3)]
    i = d["differs"].index(True)
    assert d["where"][i] == "mean of elements 12:16" and d["text"][i] == "99" and d["line"][i] == "#d62728"
    assert list(view.rows.factors) == ["big · replica 2", "big · replica 1", "big · replica 0"]
    # small variables: a cell per element; 1 against 1 puts both copies in question
    view2 = ValueHeatmap()
    m = model_of(training_stream())
    view2.variable = "w"
    view2.update(m)
    d2 = data(view2)
    assert d2["value"] == [1.0, 1.0, 1.25, 1.25] and d2["differs"] == [True] * 4
    assert d2["where"] == ["element 0", "element 1"] * 2


def test_placement_diagram_nests_hosts_workers_devices_and_copies() -> None:
    m = model_of(central_stream())
    hosts = from_model(m)
    assert [(h.host, [w.address for w in h.workers]) for h in hosts] == [
        ("10.0.0.1", ["tcp://10.0.0.1:4000", "tcp://10.0.0.1:4001"])
    ]
    w0 = hosts[0].workers[0]
    assert [(d.short, d.role, [c.name for c in d.copies]) for d in w0.devices] == [
        ("CPU:0", "replica 0", ["w"]),
        ("CPU:9", "parameter device", ["b"]),
    ]
    view = PlacementDiagram()
    view.update(m)
    d = data(view)
    assert [(k, lab) for k, lab in zip(d["kind"], d["label"], strict=True)] == [
        ("host", "host 10.0.0.1"), ("worker", "worker :4000"), ("device", "CPU:0"), ("copy", "w"),
        ("parameter", "CPU:9"), ("copy", "b"), ("worker", "worker :4001"), ("device", "CPU:1"), ("copy", "w"),
    ]  # fmt: skip
    assert set(view.text_source.data["text"]) >= {"replica 0", "parameter device", "w", "b"}
    assert view.figure.width == 2 * 210 + 5 * 8  # two worker columns, their gaps and the margins
    # a copy that differs has a red border
    m.feed(ev.VariableUpdated(G, 2, 1, 2.0, 1, "w", CPU.format(1), 5.0, 5.0, (2.5, 2.5)))
    m.feed(ev.VariableUpdated(G, 2, 0, 2.0, 1, "w", CPU.format(0), 1.0, 1.0, (0.5, 0.5)))
    view.update(m)
    d = data(view)
    assert [lab for lab, line in zip(d["label"], d["line"], strict=True) if line == "#d62728"] == ["w", "w"]


def test_static_svg_and_parameter_server_shards() -> None:
    hosts = from_parameter_servers(
        [("tcp://h1:1", "/job:worker/replica:0/task:0/device:CPU:0")],
        [("tcp://h2:1", "/job:ps/replica:0/task:0/device:CPU:0"), ("tcp://h2:2", "/job:ps/replica:0/task:1/device:CPU:0")],
        [("emb", (10, 4), "float32", [("/job:ps/replica:0/task:0/device:CPU:0", 0, 5),
                                      ("/job:ps/replica:0/task:1/device:CPU:0", 5, 10)])],
    )  # fmt: skip
    text = repr(PlacementPicture(hosts, "PS"))
    assert text.splitlines() == [
        "PS", "host h1", "  worker tcp://h1:1", "    job:worker/task:0/CPU:0 (worker 0): -", "host h2",
        "  worker tcp://h2:1", "    job:ps/task:0/CPU:0 (ps task 0): emb [0:5]",
        "  worker tcp://h2:2", "    job:ps/task:1/CPU:0 (ps task 1): emb [5:10]",
    ]  # fmt: skip
    svg = to_svg(hosts, "PS <x>")
    assert svg.startswith('<svg xmlns="http://www.w3.org/2000/svg"') and svg.endswith("</svg>")
    assert "PS &lt;x&gt;" in svg and svg.count('class="interdist-copy"') == 2
    assert "(10, 4) float32, shard 1 of 2: rows 5:10" in svg
    assert "no replicas yet" in to_svg([])


def test_report_is_one_self_contained_file_with_the_figures_data() -> None:
    stream = training_stream() + [ev.ScalarLogged(G, 3, 0, 102.4, "loss_xyz", 0.125)]
    page = report_html([("replica group g", stream)], since=101.5, title="my report")
    assert not re.search(r"<script[^>]*\bsrc=", page) and "cdn.bokeh.org" not in page
    assert "<title>my report</title>" in page and "Bokeh.embed" in page
    assert "loss_xyz" in page and "all_reduce" in page and "interdist-placement-diagram" in page
    assert "replica group g" in page and "run call(s)" in page
    # only the collectives that ended in the block: step 3's two exits, not step 2's
    assert "&lt;b&gt;2&lt;/b&gt; collective exit(s)" in page  # the summary Div, escaped in the page
    assert "No interdist events" in report_html([])
