"""The fault-injection suite (issue 17, item 4): each kind of fault at each named point, through the
public hook ``idist.debug.inject``, on 2 and 4 replicas.

For every case: the notebook gets a clear error naming the replica (or, for a slow replica, the right
result), within bounded time, never a hang; the strategy is usable afterwards; a mirrored variable's
copies are equal afterwards (the post-fault check would raise ``DivergedCopiesError`` otherwise); and
at the end no worker process, shared-memory segment or control-socket directory of the suite is left.
The figures (time to error per case) are printed for docs/reliability.md (``pytest -s``).
"""

from __future__ import annotations

import contextlib
import glob
import os
import tempfile
import time
import warnings
from collections.abc import Iterator

import numpy as np
import pytest

import interdist as idist
from interdist import events
from interdist.config import settings

from ._resume import resume_frozen

pytestmark = pytest.mark.timeout(180)

POINTS = ["step", "all_reduce", "update"]


@pytest.fixture(scope="module", params=[2, 4], ids=["2-replicas", "4-replicas"])
def strategy(request: pytest.FixtureRequest) -> Iterator[idist.MirroredStrategy]:
    s = idist.MirroredStrategy([f"CPU:{i}" for i in range(request.param)])
    yield s
    s.close()


@pytest.fixture(autouse=True)
def _fast_detection(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(settings, "frozen_after", 1.5)


def _step(v: idist.MirroredVariable) -> object:
    def step() -> object:
        ctx = idist.get_replica_context()
        total = ctx.all_reduce("SUM", np.float32(ctx.replica_id_in_sync_group + 1))
        v.assign_add(1.0)  # MEAN: every copy + 1, or none
        return total

    return step


# A freeze lasts far longer than it takes to name it (so that a loaded machine cannot turn it into a slow
# step); once named, the test resumes the process, as the error tells a user to (SIGCONT to its pid).
FREEZE_S = 60.0


def _usable(s: idist.MirroredStrategy, v: idist.MirroredVariable, timeout: float = 60.0) -> float:
    """Wait until the strategy takes steps again (a frozen replica must resume, a killed one restart);
    check a step's result and that the variable's copies are equal; the seconds it took."""
    t0 = time.monotonic()
    while True:
        try:
            out = s.run(_step(v))
            break
        except RuntimeError as e:  # "still running step N": a frozen replica not back yet
            if "still running" not in str(e) or time.monotonic() - t0 > timeout:
                raise
            time.sleep(0.25)
    n = s.num_replicas_in_sync
    assert [float(x) for x in s.experimental_local_results(out)] == [n * (n + 1) / 2] * n
    copies = [float(c) for c in s.experimental_local_results(v)]
    assert len(set(copies)) == 1, copies
    return time.monotonic() - t0


@pytest.mark.parametrize("at", POINTS)
@pytest.mark.parametrize("fault", ["raise", "slow", "freeze", "kill"])
def test_fault(strategy: idist.MirroredStrategy, fault: str, at: str) -> None:
    s, n = strategy, strategy.num_replicas_in_sync
    victim = n - 1
    with s.scope():
        v = idist.Variable(np.float32(0.0), aggregation=idist.VariableAggregation.MEAN)
    idist.debug.inject(s, replica=victim, fault=fault, at=at, seconds=FREEZE_S if fault == "freeze" else 2.0)
    t0 = time.monotonic()
    if fault == "slow":
        out = s.run(_step(v))
        took = time.monotonic() - t0
        assert took >= 2.0 and [float(x) for x in s.experimental_local_results(out)] == [n * (n + 1) / 2] * n
        print(f"\n[faults] {n} replicas, slow at {at}: no error, step took {took:.2f} s")
        _usable(s, v)
        return
    expected = {"raise": idist.errors.InjectedFaultError, "freeze": idist.errors.ReplicaFrozenError,
                "kill": idist.WorkerLostError}[fault]
    with pytest.raises(expected) as info:
        s.run(_step(v))
    took = time.monotonic() - t0
    assert f"replica {victim}" in str(info.value) or getattr(info.value, "interdist_replica", None) == victim
    if fault == "freeze":
        resume_frozen(info.value)
    bound = {"raise": 3.0, "freeze": settings.frozen_after + 4.0, "kill": 10.0}[fault]
    assert took < bound, (fault, at, took)
    if fault == "kill":  # the worker is started again and the variables copied there, with a warning
        with pytest.warns(UserWarning, match=f"replica\\(s\\) \\[{victim}\\] .* restarted"):
            back = _usable(s, v)
    else:
        back = _usable(s, v)
    print(f"\n[faults] {n} replicas, {fault} at {at}: {type(info.value).__name__} after {took:.2f} s; "
          f"usable again after {back:.2f} s")


@pytest.mark.parametrize("fault", ["raise", "slow", "freeze", "kill"])
def test_fault_during_checkpoint_save(strategy: idist.MirroredStrategy, fault: str, tmp_path: object) -> None:
    """``at="checkpoint_save"``: the fault fires in the middle of ``Checkpoint.save`` (after the first
    variable's file). The save fails with the replica's error and leaves nothing: the previous checkpoint
    is still the latest and restores; the strategy is usable afterwards."""
    s, n = strategy, strategy.num_replicas_in_sync
    victim = n - 1
    with s.scope():
        v = idist.Variable(np.float32(0.0), aggregation=idist.VariableAggregation.MEAN)
        w = idist.Variable(np.arange(3, dtype=np.float32), aggregation=idist.VariableAggregation.MEAN)
    manager = idist.CheckpointManager(idist.Checkpoint(v=v, w=w), str(tmp_path), max_to_keep=3)
    _ = v.assign(5.0)
    first = manager.save()
    _ = v.assign(6.0)
    seconds = FREEZE_S if fault == "freeze" else 2.0
    idist.debug.inject(s, replica=victim, fault=fault, at="checkpoint_save", seconds=seconds)
    t0 = time.monotonic()
    if fault == "slow":
        second = manager.save()
        took = time.monotonic() - t0
        assert took >= 2.0 and manager.latest_checkpoint == second
        print(f"\n[faults] {n} replicas, slow at checkpoint_save: no error, the save took {took:.2f} s")
        _usable(s, v)
        return
    expected = {"raise": idist.errors.InjectedFaultError, "freeze": idist.errors.ReplicaFrozenError,
                "kill": idist.WorkerLostError}[fault]
    with pytest.raises(expected) as info:
        manager.save()
    took = time.monotonic() - t0
    if fault == "freeze":
        resume_frozen(info.value)
    assert f"replica {victim}" in str(info.value) or getattr(info.value, "interdist_replica", None) == victim
    assert took < {"raise": 3.0, "freeze": settings.frozen_after + 4.0, "kill": 10.0}[fault], took
    assert manager.checkpoints == [first]
    assert sorted(os.listdir(str(tmp_path))) == ["checkpoint.json", os.path.basename(first)]  # nothing half-written
    if fault == "kill":
        with pytest.warns(UserWarning, match=f"replica\\(s\\) \\[{victim}\\] .* restarted"):
            back = _usable(s, v)
    else:
        back = _usable(s, v)
    manager.restore_or_initialize()
    assert [float(c) for c in s.experimental_local_results(v)] == [5.0] * n
    print(f"\n[faults] {n} replicas, {fault} at checkpoint_save: {type(info.value).__name__} after {took:.2f} s; "
          f"usable again after {back:.2f} s")


# -- honest injection: the point however it is reached, the next user program only, persist, events ----------
# On the 2-replica instance of the module's strategy (the same pooled cluster as the cases above).
on_two = pytest.mark.parametrize("strategy", [2], indirect=True, ids=["2-replicas"])


def _fault_events(s: idist.MirroredStrategy, since: float) -> list[events.Event]:
    """The fault events of ``s`` since the time ``since``, in the order the log keeps them."""
    return [e for e in list(s.events.events) if e.time >= since and e.kind.startswith("fault-")]


@contextlib.contextmanager
def _no_inject_warning() -> Iterator[None]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield
    assert [str(w.message) for w in caught if "idist.debug.inject" in str(w.message)] == []


def _train(s: idist.MirroredStrategy, size: int) -> tuple[idist.MirroredVariable, object]:
    """A variable and a step whose only collectives are inside ``optimizer.apply_gradients``."""
    with s.scope():
        v = idist.Variable(np.zeros(size, np.float32), name="w")
        opt = idist.optimizers.SGD(0.5)

    def train_step() -> None:
        r = idist.get_replica_context().replica_id_in_sync_group
        opt.apply_gradients([(np.full(size, r + 1.0, np.float32), v)])

    return v, train_step


def _copies(s: idist.MirroredStrategy, v: idist.MirroredVariable) -> list[list[float]]:
    return [np.asarray(c)[:2].tolist() for c in s.experimental_local_results(v)]


@on_two
@pytest.mark.parametrize("size", [3, 40_000], ids=["gathered", "held"])  # below and above LAZY_MIN_BYTES
def test_an_all_reduce_fault_fires_inside_apply_gradients(strategy: idist.MirroredStrategy, size: int) -> None:
    """The user's report: the step's only collective is the optimizer's (merge_call, batch_reduce_to).
    Small gradients are gathered by the merge_call and reduced where they are; the fault fires there,
    before replica 1's gradients leave it, and no replica applies the step (the copies stay equal)."""
    s = strategy
    v, train_step = _train(s, size)
    since = time.time()
    idist.debug.inject(s, replica=1, fault="raise", at="all_reduce")
    with pytest.raises(idist.errors.InjectedFaultError, match="all_reduce \\(in batch_reduce_to\\)") as info:
        s.run(train_step)
    assert info.value.interdist_replica == 1  # type: ignore[attr-defined]
    assert _copies(s, v) == [[0.0, 0.0], [0.0, 0.0]]  # applied nowhere
    s.run(train_step)  # untouched: the fault fired once
    assert _copies(s, v) == [[-1.5, -1.5], [-1.5, -1.5]]
    assert [(e.kind, e.replica, e.at) for e in _fault_events(s, since)] == [
        ("fault-armed", 1, "all_reduce"),
        ("fault-fired", 1, "all_reduce"),
    ]


@on_two
@pytest.mark.parametrize("at", ["all_reduce", "collective", "merge_call"])
def test_a_fault_fires_in_reduce_to_inside_merge_call(strategy: idist.MirroredStrategy, at: str) -> None:
    """``strategy.extended.reduce_to`` in a ``merge_fn`` is an all-reduce (of values the merge_call
    gathered); ``at="merge_call"`` fires at the merge_call, ``"collective"`` at the first collective."""
    s = strategy
    with s.scope():
        dest = idist.Variable(np.float32(0.0), name="dest")

    def merge_fn(strategy: object, x: object) -> object:
        return strategy.extended.reduce_to("SUM", x, dest)  # type: ignore[attr-defined]

    def step() -> object:
        ctx = idist.get_replica_context()
        return ctx.merge_call(merge_fn, args=(np.float32(ctx.replica_id_in_sync_group + 1),))

    since = time.time()
    idist.debug.inject(s, replica=1, fault="raise", at=at)
    with pytest.raises(idist.errors.InjectedFaultError) as info:
        s.run(step)
    assert info.value.interdist_replica == 1  # type: ignore[attr-defined]
    where = {"all_reduce": "all_reduce (in reduce_to)", "collective": "merge_call", "merge_call": "merge_call"}[at]
    fired = [e for e in _fault_events(s, since) if isinstance(e, events.FaultFired)]
    assert [(e.at, e.where.split(",")[0]) for e in fired] == [(at, where)]
    assert [float(x) for x in s.experimental_local_results(s.run(step))] == [3.0, 3.0]


@on_two
def test_a_merge_fn_that_reads_every_value_while_armed(strategy: idist.MirroredStrategy) -> None:
    """Armed at "all_reduce", replica 1 holds back even small merge_call arrays (lazy_merge.py) that its
    peer sends along: a merge_fn that reads every replica's value gathers them on both replicas alike
    (no replica waits alone in an exchange), and gets TF's values."""
    s = strategy

    def merge_fn(strategy: object, x: object) -> object:
        return float(sum(np.asarray(c).sum() for c in strategy.experimental_local_results(x)))  # type: ignore[attr-defined]

    def step() -> object:
        ctx = idist.get_replica_context()
        return ctx.merge_call(merge_fn, args=(np.full(3, ctx.replica_id_in_sync_group + 1.0, np.float32),))

    idist.debug.inject(s, replica=1, fault="raise", at="all_reduce")
    with pytest.warns(UserWarning, match="was not reached in run #"):
        out = s.run(step)
    assert float(out) == 9.0


@on_two
def test_a_fault_not_reached_warns_and_is_disarmed(strategy: idist.MirroredStrategy) -> None:
    """The next user program does not reach the point: a warning at the user's line at its end, a
    FaultDisarmed event, and the program after it, which does reach the point, is untouched."""
    s = strategy
    _, train_step = _train(s, 3)
    since = time.time()
    idist.debug.inject(s, replica=1, fault="raise", at="all_gather")
    run = s._group.runs + 1
    expected = (
        f"idist.debug.inject: the raise armed at all_gather on replica 1 was not reached in run #{run} "
        f"({train_step.__qualname__}) and is disarmed; pass persist=True to keep it armed"
    )
    with pytest.warns(UserWarning) as caught:
        s.run(train_step)
    ours = [w for w in caught if "idist.debug.inject" in str(w.message)]
    assert [str(w.message) for w in ours] == [expected]
    assert ours[0].filename == __file__  # the user's line, not interdist's

    def gather() -> object:
        return idist.get_replica_context().all_gather(np.ones(1, np.float32), axis=0)

    with _no_inject_warning():
        out = s.run(gather)
    assert [np.asarray(x).tolist() for x in s.experimental_local_results(out)] == [[1.0, 1.0]] * 2
    disarmed = _fault_events(s, since)[-1]
    assert isinstance(disarmed, events.FaultDisarmed)
    assert (disarmed.replica, disarmed.fault, disarmed.at) == (1, "raise", "all_gather")
    assert disarmed.reason == f"not reached in run #{run} ({train_step.__qualname__})"
    assert [e.kind for e in _fault_events(s, since)] == ["fault-armed", "fault-disarmed"]


@on_two
def test_system_programs_neither_fire_nor_disarm_a_fault(strategy: idist.MirroredStrategy) -> None:
    """Armed at "collective" (not persist): creating a variable, assigning it from the notebook and a
    notebook ``strategy.reduce`` (the engine's programs, one of them with a collective) leave it armed
    for the next user program, which it fails."""
    s = strategy
    # Larger than settings.inline_bytes: the values stay on the replicas, and reducing them is a program there.
    per_replica = s.run(lambda: np.full(2048, idist.get_replica_context().replica_id_in_sync_group + 1, np.float32))
    idist.debug.inject(s, replica=0, fault="raise", at="collective")
    with s.scope():
        v = idist.Variable(np.zeros(2, np.float32), name="sys")
    v.assign(np.ones(2, np.float32))
    assert np.asarray(s.reduce("SUM", per_replica, axis=None))[:2].tolist() == [3.0, 3.0]
    with pytest.raises(idist.errors.InjectedFaultError) as info:
        s.run(lambda: idist.get_replica_context().all_reduce("SUM", np.float32(1.0)))
    assert info.value.interdist_replica == 0  # type: ignore[attr-defined]


@on_two
def test_a_checkpoint_save_fault_is_for_the_next_save(strategy: idist.MirroredStrategy, tmp_path: object) -> None:
    """``at="checkpoint_save"``: its program is the next ``Checkpoint.save``, not the steps before it."""
    s = strategy
    with s.scope():
        v = idist.Variable(np.float32(1.0), aggregation=idist.VariableAggregation.MEAN)
    idist.debug.inject(s, replica=1, fault="raise", at="checkpoint_save")
    with _no_inject_warning():
        s.run(lambda: idist.get_replica_context().all_reduce("SUM", np.float32(1.0)))
    with pytest.raises(idist.errors.InjectedFaultError, match=r"Checkpoint\.save on replica 1"):
        idist.Checkpoint(v=v).save(os.path.join(str(tmp_path), "ckpt"))


@on_two
def test_a_persistent_fault_waits_for_its_point(strategy: idist.MirroredStrategy) -> None:
    """``persist=True``: programs that do not reach the point keep it armed, without a warning (the engine's
    in between too); the first that reaches it fires it, once; ``disarm`` drops one that never fires."""
    s = strategy
    v, train_step = _train(s, 3)
    since = time.time()
    idist.debug.inject(s, replica=1, fault="raise", at="all_reduce", persist=True)
    with _no_inject_warning():
        s.run(lambda: np.float32(1.0))
        s.run_steps(lambda b: b, iter(s.experimental_distribute_dataset(idist.data.Dataset.range(4).batch(2))), 2)
        v.assign(np.ones(3, np.float32))  # a system program
    with pytest.raises(idist.errors.InjectedFaultError):
        s.run(train_step)
    s.run(train_step)  # fired once: gone
    assert [e.kind for e in _fault_events(s, since)] == ["fault-armed", "fault-fired"]
    idist.debug.inject(s, replica=0, fault="raise", at="all_gather", persist=True)
    s.run(train_step)
    idist.debug.disarm(s)
    s.run(lambda: idist.get_replica_context().all_gather(np.ones(1, np.float32), axis=0))
    last = _fault_events(s, since)[-1]
    assert isinstance(last, events.FaultDisarmed) and last.reason == "dropped by idist.debug.disarm"


@on_two
def test_run_steps_is_the_next_program(strategy: idist.MirroredStrategy) -> None:
    """A fused loop is a user call: ``at="step"`` fires at its first step; one not reached warns, naming it."""
    s = strategy

    def batches() -> object:
        return iter(s.experimental_distribute_dataset(idist.data.Dataset.range(8).batch(2)))

    def double(b: object) -> object:
        return b * 2  # type: ignore[operator]

    idist.debug.inject(s, replica=1, fault="raise", at="step")
    with pytest.raises(idist.errors.InjectedFaultError):
        s.run_steps(double, batches(), 2)
    idist.debug.inject(s, replica=1, fault="raise", at="all_reduce")
    with pytest.warns(UserWarning, match=f"not reached in run_steps #{s._group.runs + 1} \\(.*double\\)"):
        s.run_steps(double, batches(), 2)


@on_two
def test_fault_events_and_the_dashboard_model(strategy: idist.MirroredStrategy) -> None:
    """FaultArmed (the notebook's), FaultFired and FaultDisarmed (the replica's), with their fields; the
    dashboard model lists each fault's state from them."""
    from interdist.dashboard.model import DashboardModel

    s = strategy
    _, train_step = _train(s, 3)
    since = time.time()
    idist.debug.inject(s, replica=1, fault="raise", at="all_reduce", seconds=2.5)
    step0 = s._group.step  # the arm program's
    with pytest.raises(idist.errors.InjectedFaultError):
        s.run(train_step)
    idist.debug.inject(s, replica=0, fault="slow", at="update", seconds=0.0)
    with pytest.warns(UserWarning, match="not reached"):
        s.run(train_step)  # its updates are in cross-replica context (merge_fn): not "update" points
    idist.debug.inject(s, replica=1, fault="freeze", at="all_gather", persist=True)
    s.run(train_step)
    s.events.wait_for(lambda _: len(_fault_events(s, since)) >= 5, timeout=10.0)
    armed, fired, armed2, disarmed, armed3 = _fault_events(s, since)
    assert isinstance(armed, events.FaultArmed)
    assert (armed.group, armed.step, armed.replica, armed.fault, armed.at, armed.seconds, armed.persist) == (
        s._group.group_id, step0, 1, "raise", "all_reduce", 2.5, False)  # fmt: skip
    assert isinstance(fired, events.FaultFired)
    assert (fired.group, fired.replica, fired.fault, fired.at) == (s._group.group_id, 1, "raise", "all_reduce")
    assert fired.step > armed.step and fired.where.startswith("all_reduce (in batch_reduce_to), run #")
    assert isinstance(armed2, events.FaultArmed) and (armed2.replica, armed2.fault) == (0, "slow")
    assert isinstance(disarmed, events.FaultDisarmed)
    assert (disarmed.replica, disarmed.fault, disarmed.at) == (0, "slow", "update")
    assert disarmed.reason.startswith("not reached in run #")
    assert isinstance(armed3, events.FaultArmed) and armed3.persist
    model = DashboardModel()
    model.feed_many(_fault_events(s, since))
    assert [(f.replica, f.fault, f.at, f.state, f.persist) for f in model.faults] == [
        (1, "raise", "all_reduce", "fired", False),
        (0, "slow", "update", "disarmed", False),
        (1, "freeze", "all_gather", "armed", True),
    ]
    assert model.faults[0].where == fired.where and model.faults[1].where == disarmed.reason
    idist.debug.disarm(s)
    model = DashboardModel()
    model.feed_many(_fault_events(s, since))
    assert [f.state for f in model.faults] == ["fired", "disarmed", "disarmed"]
    assert model.faults[-1].where == "dropped by idist.debug.disarm"


@on_two
def test_the_faults_tab_arms_with_persist_and_lists_faults(strategy: idist.MirroredStrategy) -> None:
    s = strategy
    d = s.dashboard(interval=60).dashboard
    try:
        d._fault_replica.value, d._fault_kind.value, d._fault_point.value = 1, "raise", "all_reduce"
        d._fault_persist.value = True
        assert d.arm_fault() == "armed: raise at all_reduce on replica 1, until it fires"
        s.run(lambda: np.float32(1.0))
        d.refresh()
        assert "armed (persist)" in d._fault_table.value
        with pytest.raises(idist.errors.InjectedFaultError):
            s.run(lambda: idist.get_replica_context().all_reduce("SUM", np.float32(1.0)))
        d.refresh()
        assert "fired" in d._fault_table.value and "armed (persist)" not in d._fault_table.value  # fired once: done
        d._fault_persist.value = False
        d._fault_point.value = "step"
        assert d.arm_fault() == "armed: raise at step on replica 1, for the next program"
        with pytest.raises(idist.errors.InjectedFaultError):
            s.run(lambda: np.float32(1.0))
        d.refresh()
        assert "<td style='padding:0 8px'>fired</td>" in d._fault_table.value
    finally:
        d.close()


@on_two
def test_freeze_at_all_reduce_inside_apply_gradients(strategy: idist.MirroredStrategy) -> None:
    """The user's report with its freeze: the step that applies gradients is the one that freezes (named
    frozen after ``frozen_after``); the next, unrelated all-reduce step is not."""
    s = strategy
    v, train_step = _train(s, 3)
    with s.scope():
        w = idist.Variable(np.float32(0.0), aggregation=idist.VariableAggregation.MEAN)
    # Stopped for longer than it takes to name it frozen (frozen_after, and the liveness watch's polls).
    idist.debug.inject(s, replica=1, fault="freeze", at="all_reduce", seconds=FREEZE_S)
    t0 = time.monotonic()
    with pytest.raises(idist.errors.ReplicaFrozenError) as info:
        s.run(train_step)
    resume_frozen(info.value)
    assert info.value.replica == 1 and time.monotonic() - t0 < settings.frozen_after + 4.0
    _usable(s, w)  # waits for replica 1 to resume; then an all-reduce step, untouched
    assert _copies(s, v) == [[0.0, 0.0], [0.0, 0.0]]


_KILLED_SAVE = """
import os, signal, sys
import numpy as np
import interdist as idist
from interdist import checkpoint

a, b = idist.Variable(np.float32(1.0)), idist.Variable(np.arange(4.0))
manager = idist.CheckpointManager(idist.Checkpoint(a=a, b=b), sys.argv[1], max_to_keep=2)
manager.save()
a.assign(2.0)
sha = checkpoint._sha256
calls = []

def dying(path):
    calls.append(path)
    if len(calls) == 2:  # the second variable of this save: the notebook is killed mid-save
        os.kill(os.getpid(), signal.SIGKILL)
    return sha(path)

checkpoint._sha256 = dying
manager.save()
"""


def test_a_killed_save_leaves_the_previous_checkpoint(tmp_path: object) -> None:
    """The notebook itself killed (SIGKILL) in the middle of a save: the index is written last and the
    directory renamed into place only when complete, so the previous checkpoint stays the latest, whole."""
    import subprocess
    import sys

    directory = str(tmp_path)
    proc = subprocess.run([sys.executable, "-c", _KILLED_SAVE, directory], capture_output=True, timeout=120)
    assert proc.returncode == -9, proc.stderr.decode()[-2000:]
    assert idist.checkpoint.latest_checkpoint(directory) == os.path.join(directory, "ckpt-1")
    assert not os.path.exists(os.path.join(directory, "ckpt-2"))
    a, b = idist.Variable(np.float32(0.0)), idist.Variable(np.zeros(4))
    idist.CheckpointManager(idist.Checkpoint(a=a, b=b), directory, max_to_keep=2).restore_or_initialize()
    assert float(a) == 1.0 and np.asarray(b).tolist() == [0.0, 1.0, 2.0, 3.0]


def test_nothing_is_left_behind() -> None:
    """After the suite's strategies close and their clusters shut down: no shared-memory segment of ours
    and no control-socket directory of this process."""
    from interdist.client import cluster

    cluster.shutdown_all()
    time.sleep(0.5)
    mine = [p for p in glob.glob("/dev/shm/idist-*") if os.path.exists(p) and "-probe-" not in p]
    assert mine == [], mine
    dirs = glob.glob(os.path.join(tempfile.gettempdir(), f"*idist*{os.getpid()}-*"))
    assert dirs == [], dirs
