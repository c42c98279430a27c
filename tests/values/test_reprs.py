"""Rich reprs: the HTML cards of strategies and distributed values, ``idist.visualize``, text reprs."""

from __future__ import annotations

import warnings
from html.parser import HTMLParser
from typing import Any

import numpy as np
import pytest

import interdist as idist

VOID = {"br", "hr", "img", "input", "meta", "link", "wbr"}


class _Checker(HTMLParser):
    """Every tag closed, in order; collects the text and the attributes' values."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.stack: list[str] = []
        self.errors: list[str] = []
        self.text: list[str] = []
        self.tags: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        if tag not in VOID:
            self.stack.append(tag)

    def handle_endtag(self, tag: str) -> None:
        if not self.stack or self.stack[-1] != tag:
            self.errors.append(f"</{tag}> closes {self.stack[-1:] or 'nothing'}")
        else:
            self.stack.pop()

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def parse(markup: str) -> _Checker:
    p = _Checker()
    p.feed(markup)
    p.close()
    assert not p.errors, p.errors
    assert not p.stack, f"unclosed: {p.stack}"
    return p


def test_per_replica_html_shows_devices_and_small_values(mirrored2: Any) -> None:
    s = mirrored2
    pr = s.run(lambda: np.float32(idist.get_replica_context().replica_id_in_sync_group) + 0.5)
    p = parse(pr._repr_html_())
    text = " ".join(p.text)
    assert "PerReplica" in text and "2 replicas" in text
    assert "CPU:0" in text and "CPU:1" in text
    assert "0.5" in text and "1.5" in text
    assert "table" in p.tags


def test_large_value_shows_shape_and_no_values_without_a_fetch(mirrored2: Any, monkeypatch: Any) -> None:
    s = mirrored2
    calls: list[Any] = []
    fetch = s._group.fetch

    def counting(rank: int, key: str) -> Any:
        calls.append((rank, key))
        return fetch(rank, key)

    monkeypatch.setattr(s._group, "fetch", counting)
    pr = s.run(lambda: np.full((300, 400), 7.0, np.float32))
    calls.clear()
    markup = pr._repr_html_()
    pic = idist.visualize(pr)._repr_html_()
    assert calls == [], "a repr fetched a large value from a worker"
    text = " ".join(parse(markup).text)
    assert "(300, 400)" in text and "float32" in text and "not fetched" in text
    assert "7" not in text.replace("(300, 400)", "")
    assert "(300, 400)" in " ".join(parse(pic).text)


def test_mirrored_variable_marks_a_divergent_copy(mirrored2: Any) -> None:
    s = mirrored2
    with s.scope():
        v = idist.Variable(np.array([1.0, 2.0], np.float32), name="w")
    p = parse(v._repr_html_())
    assert "all copies equal" in " ".join(p.text)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        v.values[1].assign(np.array([1.0, 5.0], np.float32))
    markup = v._repr_html_()
    text = " ".join(parse(markup).text)
    assert "MirroredVariable 'w'" in text
    assert "\u2260 replica 0 (max |diff| 3)" in text
    assert "1 copy differ" in text
    assert markup.count("background: #fde2e1") == 1  # replica 1's row, not replica 0's


def test_large_variable_is_not_read(mirrored2: Any, monkeypatch: Any) -> None:
    s = mirrored2
    with s.scope():
        v = idist.Variable(np.zeros((64,), np.float32), name="big")
    calls: list[Any] = []
    monkeypatch.setattr(s._group, "read_variable", lambda *a: calls.append(a))
    text = " ".join(parse(v._repr_html_()).text)
    assert calls == []
    assert "(64,)" in text and "float32" in text and "copies not compared" in text


def test_sync_on_read_variable_html(mirrored2: Any) -> None:
    s = mirrored2
    with s.scope():
        v = idist.Variable(
            np.float32(0.0),
            name="total",
            synchronization=idist.VariableSynchronization.ON_READ,
            aggregation=idist.VariableAggregation.SUM,
        )
    text = " ".join(parse(v._repr_html_()).text)
    assert "SyncOnReadVariable 'total' (aggregation SUM)" in text
    assert "differ" not in text  # the copies of a sync-on-read variable differ by design: nothing is marked


def test_hostile_name_is_escaped(mirrored2: Any) -> None:
    s = mirrored2
    with s.scope():
        v = idist.Variable(np.float32(1.0), name="<script>alert(1)</script>")
    for markup in (v._repr_html_(), idist.visualize(v)._repr_html_()):
        p = parse(markup)
        assert "script" not in p.tags
        assert "&lt;script&gt;" in markup


def test_mirrored_value_and_visualize(mirrored2: Any) -> None:
    s = mirrored2
    m = s.run(lambda: idist.get_replica_context().all_reduce("SUM", np.int32(1)) + 1)
    vis = idist.visualize(m)
    text = " ".join(parse(vis._repr_html_()).text)
    assert "replica 0" in text and "replica 1" in text and "CPU:1" in text and "3" in text
    assert "replica 1 [CPU:1]: 3" in repr(vis)


def test_strategy_card(mirrored2: Any) -> None:
    s = mirrored2
    markup = s._repr_html_()
    p = parse(markup)
    text = " ".join(p.text)
    assert "MirroredStrategy" in text
    for address in s._lease.addresses:
        assert address in text
    assert "CPU:0" in text and "CPU:1" in text and "ok" in text
    link = s.dashboard_link
    if link:
        assert f'href="{link}"' in markup


def test_closed_strategy_card() -> None:
    with idist.MirroredStrategy(["CPU:0"]) as s:
        pass
    text = " ".join(parse(s._repr_html_()).text)
    assert "closed" in text


def test_text_reprs(mirrored2: Any) -> None:
    s = mirrored2
    devices = ", ".join(s.extended.worker_devices)
    assert repr(s.extended) == f"<interdist.StrategyExtended of MirroredStrategy on {devices}>"
    ds = s.experimental_distribute_dataset(idist.data.Dataset.range(8).batch(2))
    assert "DistributedDataset" in repr(ds) and "2 replica(s)" in repr(ds)
    assert "DistributedIterator" in repr(iter(ds))
    v = idist.Variable(np.float32(1.0))
    assert repr(idist.Checkpoint(v=v)) == "<interdist.Checkpoint of v; save_counter=0>"


@pytest.mark.parametrize(
    ("devices", "short"),
    [
        (["/job:localhost/replica:0/task:0/device:CPU:0", "/job:localhost/replica:0/task:0/device:CPU:1"],
         ["CPU:0", "CPU:1"]),
        (["/job:worker/task:0/device:GPU:0", "/job:worker/task:1/device:GPU:0"], ["task:0/GPU:0", "task:1/GPU:0"]),
        (["/job:localhost/replica:0/task:0/device:CPU:0"], ["CPU:0"]),
    ],
)
def test_short_devices(devices: list[str], short: list[str]) -> None:
    from interdist.values.reprs import short_devices

    assert short_devices(devices) == short


def test_mirrored_marks_a_copy_that_differs() -> None:
    dev = "/job:localhost/replica:0/task:0/device:CPU:{}"
    m = idist.Mirrored([idist.Tensor(np.int32(1), dev.format(0)), idist.Tensor(np.int32(2), dev.format(1))])
    text = " ".join(parse(m._repr_html_()).text)
    assert "Mirrored" in text and "\u2260 replica 0" in text and "1 copy differ" in text
