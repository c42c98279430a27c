"""The dashboard's new pictures and controls on a real 2-replica strategy: logged scalars, run numbers
that match the errors', the fault control, the placement picture and the one-file report."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

import interdist as idist


def test_logged_scalars_and_run_numbers_reach_the_dashboard(mirrored2: idist.MirroredStrategy) -> None:
    s = mirrored2
    d = s.dashboard(interval=60).dashboard  # redrawn by hand below
    try:
        def step(x: object) -> None:
            ctx = idist.get_replica_context()
            idist.debug.log_scalar("loss", np.float32(x) * (ctx.replica_id_in_sync_group + 1))

        s.run(step, args=(1.0,))
        s.run_steps(step, iter([2.0, 3.0]), steps=2)  # one call, two steps
        with pytest.raises(ZeroDivisionError) as info:
            s.run(lambda: 1 / 0)
        d.refresh()
        m = d.model
        said = re.search(r"in run #(\d+)", str(info.value.__notes__[-1]))
        assert said is not None and m.runs == int(said.group(1)) == s._group.runs  # the errors' numbering
        first = m.runs - 2  # runs of this module's earlier tests came first
        assert {m.run_label(st) for st, n in m.run_of_step.items() if n == first + 1} == {f"run #{first + 1}"}
        pts = {r: [v for _, _, v in p][-3:] for r, p in m.scalars["loss"].items()}
        assert pts == {0: [1.0, 2.0, 3.0], 1: [2.0, 4.0, 6.0]}
        xs = d.views["scalars"].source.data["xs"]
        assert [x[-3:] for x in xs] == [[m.train_steps - 3, m.train_steps - 2, m.train_steps - 1]] * 2
    finally:
        d.close()
    idist.debug.log_scalar("loss", 1.0)  # outside any scope: the default strategy's one replica logs it
    with pytest.raises(ValueError, match="one real number"):
        s.run(lambda: idist.debug.log_scalar("loss", np.zeros(2)))


def test_the_fault_control_arms_a_fault_for_the_next_step(mirrored2: idist.MirroredStrategy) -> None:
    s = mirrored2
    d = s.dashboard(interval=60).dashboard
    try:
        assert d.tabs.titles[-1] == "faults"
        d._fault_replica.value, d._fault_kind.value, d._fault_point.value = 1, "raise", "all_reduce"
        d._fault_arm.click()
        assert d._fault_status.value == "armed: raise at all_reduce on replica 1, for the next program"
        with pytest.raises(idist.errors.InjectedFaultError) as info:
            s.run(lambda: idist.get_replica_context().all_reduce("sum", np.float32(1.0)))
        assert info.value.interdist_replica == 1  # type: ignore[attr-defined]
        assert float(s.run(lambda: idist.get_replica_context().all_reduce("sum", np.float32(1.0))).values[0]) == 2.0
        d._fault_kind.options = [*d._fault_kind.options, "melt"]  # what inject refuses is shown, not raised
        d._fault_kind.value = "melt"
        assert d.arm_fault().startswith("not armed: ValueError: fault must be one of")
    finally:
        d.close()


def test_placement_picture_and_report(mirrored2: idist.MirroredStrategy, tmp_path: Path) -> None:
    s = mirrored2
    with s.scope():
        v = idist.Variable(np.zeros(40, np.float32), name="pic_v", aggregation=idist.VariableAggregation.MEAN)
    picture = idist.debug.visualize_placement(s)
    svg = picture._repr_html_()
    assert svg.count(">pic_v<") == 2 and "replica 0" in svg and "replica 1" in svg
    assert "(40,) float32" in svg
    path = tmp_path / "report.html"

    def step() -> None:
        ctx = idist.get_replica_context()
        total = ctx.all_reduce("sum", np.float32(1.0))
        v.assign_add(np.full(40, total, np.float32))
        idist.debug.log_scalar("report_loss", total)

    with idist.performance_report(path, title="two steps"):
        s.run(step)
        s.run(step)
    page = path.read_text()
    assert not re.search(r"<script[^>]*\bsrc=", page)
    assert "<title>two steps</title>" in page and "report_loss" in page and "pic_v" in page
    assert "MirroredStrategy (2 replicas" in page
    own = s.events.report(tmp_path / "all.html")
    assert own == tmp_path / "all.html" and "report_loss" in own.read_text()
