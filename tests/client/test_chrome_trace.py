"""strategy.events.to_chrome_trace: the collective timeline as a Chrome trace / Perfetto JSON (issue 13)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

import interdist as idist


def _two_collectives() -> object:
    ctx = idist.get_replica_context()
    a = ctx.all_reduce("SUM", np.ones(1000, np.float32))
    b = ctx.all_reduce("MEAN", a)
    return b[0]


def test_one_slice_per_replica_per_collective_with_wait_and_transfer(
    mirrored2: idist.MirroredStrategy, tmp_path: Path
) -> None:
    s = mirrored2
    s.run(_two_collectives)
    s.events.wait_for(lambda evs: sum(e.kind == "run-finished" and e.fn == "_two_collectives" for e in evs) >= 2)
    path = tmp_path / "trace.json"
    returned = s.events.to_chrome_trace(path)
    trace = json.loads(path.read_text())  # loaded back, as Perfetto would
    assert trace == json.loads(json.dumps(returned))
    evs = trace["traceEvents"]
    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in evs if e["ph"] == "M" and e["name"] == "thread_name"}
    # a track per replica, and the notebook's (the calls it sent)
    assert sorted(names.values()) == ["notebook", "replica 0", "replica 1"]
    runs = [e for e in evs if e["ph"] == "X" and e["name"] == "_two_collectives"]
    step = max(e["args"]["step"] for e in runs)
    runs = [e for e in runs if e["args"]["step"] == step]
    assert sorted(e["tid"] for e in runs) == [0, 1]
    colls = [e for e in evs if e["ph"] == "X" and e["cat"] == "collective" and e["args"].get("step") == step]
    # one all_reduce slice per replica per collective of the step (numbered from 1 within the step)
    counts = Counter((e["name"], e["tid"]) for e in colls)
    assert counts == {("all_reduce #1", 0): 1, ("all_reduce #1", 1): 1, ("all_reduce #2", 0): 1,
                      ("all_reduce #2", 1): 1}
    for c in colls:
        run = next(r for r in runs if r["tid"] == c["tid"])
        assert run["ts"] <= c["ts"] and c["ts"] + c["dur"] <= run["ts"] + run["dur"] + 1  # inside its run
        assert c["args"]["bytes"] >= 4000 and c["args"]["algorithm"]  # the array and its framing
        parts = {e["name"]: e for e in evs if e["ph"] == "X" and e["args"].get("op") == c["name"]
                 and e["tid"] == c["tid"] and c["ts"] <= e["ts"] <= c["ts"] + c["dur"]}
        assert set(parts) == {"wait", "transfer"}
        assert parts["wait"]["ts"] + parts["wait"]["dur"] == pytest.approx(parts["transfer"]["ts"], abs=1)
        assert parts["transfer"]["ts"] + parts["transfer"]["dur"] == pytest.approx(c["ts"] + c["dur"], abs=1)
        assert all(p["dur"] >= 0 for p in parts.values())


def test_a_failure_is_an_instant_event_naming_the_error(mirrored2: idist.MirroredStrategy) -> None:
    def bad() -> None:
        if idist.get_replica_context().replica_id_in_sync_group == 1:
            raise ValueError("boom in replica 1")

    with pytest.raises(ValueError):
        mirrored2.run(bad)
    mirrored2.events.wait_for(lambda evs: any(e.kind == "replica-failed" for e in evs))
    evs = mirrored2.events.to_chrome_trace()["traceEvents"]
    failed = [e for e in evs if e["ph"] == "i" and e["name"] == "failed"]
    assert failed and failed[-1]["tid"] == 1 and "boom in replica 1" in failed[-1]["args"]["error"]


def test_empty_log_gives_an_empty_trace() -> None:
    from interdist.client.event_log import EventLog

    assert EventLog().to_chrome_trace() == {"traceEvents": [], "displayTimeUnit": "ms"}
