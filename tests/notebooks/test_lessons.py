"""The lessons in ``notebooks/`` run top to bottom in a real kernel, and what they show is right.

Every ``notebooks/*.ipynb`` (a glob: a notebook added later is run too) is executed headless with
nbclient, once, and must finish without an error output or a traceback on stderr, each code cell run.
The lessons assert nothing themselves (they are stories for a class): cells tagged ``check-*`` print
JSON lines of facts, and the tests below read those outputs and check the semantics they show (a
reduce is the sum of the parts, a SUM sync-on-read variable reads as the sum of its copies, which rows
reach which replica...). The check cells sit together in a last section, "For the course's tests", just
before the cell that closes the strategy, out of the story's way: what they read from the lesson's
middle (the dashboard's chips right after a failure, say), the lesson keeps in a variable there.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

from tests.notebooks._lesson_runs import _executed, executed, facts  # noqa: E402 - after the importorskips

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"
ALL = sorted(p.name for p in NOTEBOOKS.glob("*.ipynb"))
LESSONS = [f"{n:02d}" for n in range(1, 9)]  # the course: 01 ... 08


def lesson(number: str) -> Any:
    names = [n for n in ALL if n.startswith(number + "_")]
    assert len(names) == 1, f"one notebook {number}_*.ipynb expected, found {names}"
    return executed(names[0])


def test_the_course_is_complete_and_saved_without_outputs() -> None:
    for number in LESSONS:
        assert [n for n in ALL if n.startswith(number + "_")], f"lesson {number} is missing"
    for name in ALL:
        if name[:2] not in LESSONS:
            continue
        nb = nbformat.read(NOTEBOOKS / name, as_version=4)
        nbformat.validate(nb)
        code = [c for c in nb.cells if c.cell_type == "code"]
        assert all(not c.outputs and c.execution_count is None for c in code), f"{name} is saved with outputs"
        assert nb.cells[0].cell_type == "markdown" and nb.cells[0].source.startswith("# "), name
        assert not any("assert " in c.source for c in code), f"{name}: lessons tell, tests check"
        assert ".close()" in code[-1].source, f"{name} must close its strategy in its last cell"
        assert any(t.startswith("check-") for c in code for t in c.metadata.get("tags", [])), name
        checks = [i for i, c in enumerate(nb.cells) if any(t.startswith("check-") for t in c.metadata.get("tags", []))]
        closing = nb.cells.index(code[-1])
        assert checks == list(range(checks[0], closing)), f"{name}: the check cells come last, before the closing cell"
        head = nb.cells[checks[0] - 1]
        assert head.cell_type == "markdown" and "## For the course's tests" in head.source, name


@pytest.mark.timeout(300)
@pytest.mark.parametrize("name", ALL)
def test_notebook_runs_without_errors(name: str) -> None:
    nb = executed(name)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert all(c.execution_count for c in code), f"{name}: a cell did not run"
    outputs = [o for c in code for o in c.get("outputs", [])]
    assert not [o for o in outputs if o.get("output_type") == "error"], name
    stderr = [o["text"] for o in outputs if o.get("output_type") == "stream" and o.get("name") == "stderr"]
    assert not [t for t in stderr if "Traceback" in t or "Error" in t], stderr
    took = _executed[name][1]
    print(f"\n[lessons] {name}: {took:.1f} s")
    if name[:2] in LESSONS:
        assert took < 120, f"{name} took {took:.0f} s: a lesson must run well under a minute on a quiet machine"


def test_01_quickstart_learns_the_line_and_the_dashboard_saw_every_step() -> None:
    f = facts(lesson("01"), "check-quickstart")
    assert f["steps_done"] == f["steps"] == 20
    assert len(f["w"]) == len(f["b"]) == 2
    assert f["w"][0] == f["w"][1] and f["b"][0] == f["b"][1]  # mirrored copies, bit for bit
    assert abs(f["w"][0] - 3) < 0.1 and abs(f["b"][0] - 2) < 0.1
    assert f["diverged"] == []
    assert {"w", "b"} <= set(f["shown_variables"]) and f["shown_replicas"] == [0, 1]
    ops = f["timeline_ops"]
    assert sum(ops.values()) == f["collective_exits_logged"]  # the collectives tab shows every collective
    assert ops["all_reduce"] >= 2 * 2 * 20  # per replica and step: the update's gradients, the loss
    # each replica logged its own loss every step (idist.debug.log_scalar): the scalars tab draws two falling lines
    loss = f["scalars"]["loss"]
    assert f["scalars_logged"] == 2 * 20 and sorted(loss) == ["0", "1"] and all(len(v) == 20 for v in loss.values())
    assert loss["0"] != loss["1"]  # different rows, different losses
    assert all(v[-1] < v[0] / 100 for v in loss.values())


def test_02_run_gives_one_value_per_replica_and_reduce_combines_them() -> None:
    nb = lesson("02")
    f = facts(nb, "check-run")
    assert f["replicas"] == 3 and f["ids"] == [0, 1, 2]
    assert len(set(f["pids"])) == 3 and f["notebook_pid"] not in f["pids"]  # three processes, none the kernel
    r = facts(nb, "check-reduce")
    parts = r["parts"]
    assert parts == [[2.0 * (10 * i + k) for k in range(4)] for i in range(3)]
    assert r["sum"] == [sum(p[k] for p in parts) for k in range(4)]
    assert r["mean"] == [sum(p[k] for p in parts) / 3 for k in range(4)]
    assert r["sum_axis0"] == sum(map(sum, parts)) and r["mean_axis0"] == sum(map(sum, parts)) / 12
    printed = "".join(o.get("text", "") for c in nb.cells if "chatty" in c.source for o in c.get("outputs", []))
    assert [ln for ln in printed.splitlines() if ln] == [f"[replica {i}] I am replica {i} of 3" for i in range(3)]


def test_03_collectives_give_everyone_the_result_and_show_who_waited() -> None:
    nb = lesson("03")
    f = facts(nb, "check-all-reduce")
    assert f["mine"] == [1.0, 2.0, 3.0] and f["summed"] == [6.0] * 3 and f["averaged"] == [2.0] * 3
    assert f["gathered"] == [[0, 0, 1, 1, 2, 2]] * 3
    w = facts(nb, "check-wait")
    wait = {int(k): v for k, v in w["wait_s"].items()}
    assert sorted(wait) == [0, 1, 2] and w["ops"] == ["all_reduce"]
    # Replica 2 slept 0.3 s before its all-reduce; each replica's wait is the time until the last one came (its
    # entry), whenever the notebook's programs happened to start them: conditions on the events, not on timing.
    started = {int(k): v for k, v in w["started"].items()}
    entered = {int(k): v for k, v in w["entered"].items()}
    assert sorted(started) == sorted(entered) == [0, 1, 2]
    assert entered[2] - started[2] >= 0.3
    last = max(entered.values())
    for r in range(3):  # (less a margin for a replica preempted between its entry's stamp and its wait's start)
        assert wait[r] >= last - entered[r] - 0.05, (r, wait, entered)  # it waited for the last one to come
    assert all(n >= 4096 for n in w["nbytes"].values())
    assert set(facts(nb, "check-merge-call")["merged"]) == {60.0}  # (1 + 2 + 3) * 10, on every replica
    merge_cell = next(c for c in nb.cells if "def with_merge" in c.source)
    printed = "".join(o.get("text", "") for o in merge_cell.outputs if o.get("output_type") == "stream")
    want = [f"[replica {i}] merge_fn sees [1.0, 2.0, 3.0]" for i in range(3)]  # merge_fn runs on every replica
    assert [ln for ln in printed.splitlines() if ln] == want


def test_04_aggregation_rules_of_mirrored_and_sync_on_read_variables() -> None:
    nb = lesson("04")
    assert facts(nb, "check-mirrored") == {"total": [6.0] * 3, "average": [2.0] * 3, "first": [1.0] * 3}
    s = facts(nb, "check-sync-on-read")
    assert s["seen_copies"] == s["mean_seen_copies"] == [10.0, 20.0, 30.0]  # each replica kept its own
    assert s["seen"] == 60.0 and s["mean_seen"] == 20.0
    assert facts(nb, "check-metric")["metric"] == 1.0  # mean of 4 zeros, 4 ones, 4 twos


def test_05_placement_and_asynchronous_staleness() -> None:
    nb = lesson("05")
    p = facts(nb, "check-placement")
    assert [d.rsplit("/", 1)[-1] for d in p["mirrored"]] == ["device:CPU:0", "device:CPU:1"]
    assert len(p["central"]) == 1 and len(p["central_compute"]) == 2  # one copy, two computing replicas
    assert p["central_value"] == [3.0] * 4  # 1 + 2, applied once to the single copy
    s = facts(nb, "check-staleness")
    assert s["ps_devices"] == ["/job:ps/replica:0/task:0/device:CPU:0"] and s["w_devices"] == s["ps_devices"]
    assert s["final"] == len(s["seen"]) == 8  # every asynchronous update applied, none lost
    assert set(s["workers"]) == {"worker:0", "worker:1"}
    assert all(0 <= v < 8 for v in s["seen"])
    assert len(set(s["seen"])) < len(s["seen"])  # steps that ran together read the same (stale) value


def test_06_rows_reach_replicas_as_tensorflow_splits_them() -> None:
    nb = lesson("06")
    assert facts(nb, "check-split")["split"] == [[[0, 1], [2, 3], [4, 5]], [[6, 7], [8, 9], [10, 11]]]
    # TF: ceil(4 / 3) = 2 rows per replica until the rows run out; the last replica gets an empty batch
    assert facts(nb, "check-partial")["partial"] == [[[0, 1], [2, 3], []], [[4, 5], [6, 7], []], [[8], [9], []]]
    f = facts(nb, "check-from-function")
    assert f["from_function"] == [[[0, 1], [2, 3], [4, 5]], [[6, 7], [8, 9], [10, 11]]]
    assert f["contexts"] == [[1, 0, 3]]  # one input pipeline on one machine, for 3 replicas
    cell = next(c for c in nb.cells if "def step(rows)" in c.source)
    text = "".join(o.get("text", "") for o in cell.outputs)
    assert "replica sums [1, 5, 9], global sum 15" in text and "replica sums [13, 17, 21], global sum 51" in text


def test_07_failures_are_named_and_the_strategy_recovers() -> None:
    nb = lesson("07")
    docked = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
              if "application/vnd.interdist.dock+json" in o.get("data", {})]
    assert len(docked) == 1 and "individual-interdist-overview" in docked[0]["data"]["text/plain"]
    e = facts(nb, "check-exception")
    assert e["raise"]["type"] == "InjectedFaultError" and e["raise"]["replica"] == 1
    assert e["raise"]["line"].startswith("InjectedFaultError on replica 1 of 3 in run #")
    assert e["raise"]["line"].endswith("(step); replicas 0, 2 released") and e["raise"]["seconds"] < 5
    assert e["value_error"]["type"] == "ValueError" and e["value_error"]["message"] == "this replica's batch has a NaN"
    assert "ValueError on replica 2 of 3" in e["value_error"]["line"]
    assert e["value_error"]["line"].endswith("(buggy); replicas 0, 1 released")
    assert e["after"] == [3.0] * 3
    failures = e["dashboard_failures"]  # the failures list: each replica's own failure, never a peer's release
    assert [1, "InjectedFaultError"] in failures and [2, "ValueError"] in failures
    assert [f for f in failures if f[1] == "WorkerLostError"] == [[1, "WorkerLostError"]]
    assert [f for f in failures if f[1] == "ReplicaFrozenError"] == [[2, "ReplicaFrozenError"]]
    h = facts(nb, "check-hang")
    assert h["type"] == "ReplicaMismatchError" and h["seconds"] < 10 and "can never complete" in h["message"]
    assert "replica 0 returned from forgot_all_reduce without entering all_reduce #1" in h["line"]
    k = facts(nb, "check-kill")
    assert k["type"] == "WorkerLostError" and k["seconds"] < 5
    assert k["message"].startswith("replica 1 (") and "was lost during run #" in k["message"]
    # the lost replica, and its peers released, never named failed or lost themselves: "released: replica 1 lost"
    # (now and then, under load, "released: the step was aborted": a peer's abort reason that names no replica)
    peer0, lost, peer2 = k["strip_after_kill"]
    assert lost == "1: lost" and peer0.startswith("0: released: ") and peer2.startswith("2: released: ")
    assert k["recovered"] == [3.0] * 3 and k["strip_after_recovery"] == ["0: done", "1: done", "2: done"]
    incidents = k["incidents"]
    assert incidents.index([1, "lost"]) < incidents.index([1, "recovered"])  # the failures list: lost, then recovered
    recovery = next(c for c in nb.cells if c.source.startswith("recovered = strategy.run(step)"))
    warned = "".join(o["text"] for o in recovery.outputs if o.get("name") == "stderr")
    assert "replica(s) [1] of this MirroredStrategy were restarted on new workers" in warned
    assert "variable(s) and the optimizers' state were copied there from replica 0" in warned
    assert [2, "freeze", "all_reduce", "fired"] in k["faults"]
    assert [0, "raise", "all_gather", "disarmed"] in k["faults"]  # persist=True: not dropped by a call that missed it
    f = facts(nb, "check-frozen")
    assert f["type"] == "ReplicaFrozenError" and f["replica"] == 2 and "replica 2 is frozen" in f["message"]
    assert f["frozen_after"] <= f["seconds"] < f["frozen_after"] + 5
    assert f["strip_when_frozen"][:2] == ["0: released: replica 2 frozen", "1: released: replica 2 frozen"]
    assert f["strip_when_frozen"][2].startswith("2: frozen ") and f["strip_when_frozen"][2].endswith(" s")
    assert f["resumed"] == [3.0] * 3
    d = facts(nb, "check-divergence")
    assert len(d["warned"]) == 1 and "aggregation NONE" in d["warned"][0]
    assert d["before"] == 2.0 and d["diverged"] is True and d["dashboard"] == ["bias"]
    assert d["after"] == 0.0 and d["copies_after"] == [0.0] * 3
    # resync_variables clears the dashboard's marker at once, not at the next run
    assert d["dashboard_after"] == [] and d["bias_on_dashboard"][0].startswith("repaired (resync)")


def test_08_performance_figures_are_consistent() -> None:
    nb = lesson("08")
    f = facts(nb, "check-fused")
    assert f["run_last"] == f["fused_last"] == [[354], [356], [358]]  # same results: the last batch, doubled
    assert f["per_run_s"] > 0 and f["per_fused_s"] > 0
    a = facts(nb, "check-algorithms")
    assert [r["bytes"] for r in a["auto"]] == [r["bytes"] for r in a["forced"]] == [4096, 65536, 1 << 20, 1 << 22]
    assert all(r["algorithm"] == ["reduce-broadcast"] for r in a["forced"])  # ReductionToOneDevice forces it
    assert all(len(r["algorithm"]) == 1 and r["seconds"] > 0 for r in a["auto"])
    assert a["same_bits"] is True and a["first"] == a["expected_first"]  # (1 + 2 + 3) * x[1]
    s = facts(nb, "check-scaling")["scaling"]
    assert [r["replicas"] for r in s] == [1, 2, 3] and all(r["seconds_per_step"] > 0 for r in s)
    assert s[1]["last_sum"] == pytest.approx(s[0]["last_sum"], rel=1e-5)  # the same work, however split
    assert s[2]["last_sum"] == pytest.approx(s[0]["last_sum"], rel=1e-5)
    t = facts(nb, "check-trace")
    assert t["same_on_disk"] is True and t["tracks"] == [0, 1, 2]
    assert {"all_reduce", "wait", "transfer", "tiny_step", "dense_step"} <= set(t["names"])
    assert t["slices"] > t["runs_logged"] > 60
