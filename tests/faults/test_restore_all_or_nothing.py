"""``Checkpoint.restore`` is all or nothing (issue 25, deliverable 3a).

The restore reads what it will replace (each replica's copy of each variable, the optimizer's slots with
their update counts), assigns a strategy's variables and slots in one program, and, when that fails, puts
back what was there. A fault is injected on one replica at each assignment of that program in turn
(``inject(..., at="checkpoint_restore")`` with ``strategy._restore_fault_at = k``): whatever ``k``, the
error keeps its class (``WorkerLostError``, ``InjectedFaultError``) and says "not applied", and every copy
on every replica, every slot and every update count equals its value before the restore, exactly.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

import interdist as idist
from interdist import checkpoint_restore as checkpoint_lib
from interdist.checkpoint_restore import RESTORE_POINT

pytestmark = pytest.mark.timeout(240)

# The program's assignments: 3 weights, the sync-on-read count, the optimizer's iterations, then the
# momentum slots of the 3 weights.
UNITS = 8


@pytest.fixture(scope="module", params=[2, 4], ids=["2-replicas", "4-replicas"])
def strategy(request: pytest.FixtureRequest) -> Iterator[idist.MirroredStrategy]:
    s = idist.MirroredStrategy([f"CPU:{i}" for i in range(request.param)])
    yield s
    s.close()


def _model(s: idist.MirroredStrategy) -> tuple[list[Any], Any, Any]:
    mean = idist.VariableAggregation.MEAN
    with s.scope():
        ws = [idist.Variable(np.arange(k + 1, dtype=np.float32) + k, aggregation=mean, name=f"w{k}") for k in range(3)]
        count = idist.Variable(
            np.float32(0.0),
            synchronization=idist.VariableSynchronization.ON_READ,
            aggregation=idist.VariableAggregation.SUM,
            name="count",
        )
        opt = idist.optimizers.SGD(0.1, momentum=0.9)
    return ws, count, opt


def _train(s: idist.MirroredStrategy, ws: list[Any], count: Any, opt: Any, steps: int) -> None:
    """``steps`` momentum steps; each replica counts ``rank + 1`` per step (its own sync-on-read copy)."""

    def step() -> None:
        ctx = idist.get_replica_context()
        r = ctx.replica_id_in_sync_group
        grads = [np.full(w.shape, 0.5 + r, np.float32) for w in ws]
        opt.apply_gradients(zip(grads, ws, strict=True))
        count.assign_add(np.float32(r + 1))

    for _ in range(steps):
        s.run(step)


def _slots(replica: Any, key: str, var_ids: list[int]) -> str:
    """(A system program) this replica's raw slots of ``var_ids``, update counts included (as JSON)."""
    store = replica.store.get(key, {})
    return json.dumps({
        v: {k: (np.asarray(a).tolist() if hasattr(a, "shape") else a) for k, a in store[v].items()}
        for v in var_ids
        if v in store
    })


def _state(s: idist.MirroredStrategy, ws: list[Any], count: Any, opt: Any) -> dict[str, Any]:
    """Everything a restore may change, on every replica, exactly."""
    from interdist.optimizers import _store_key

    per_copy = {
        v._name: [np.asarray(c).tolist() for c in s.experimental_local_results(v)]
        for v in [*ws, count, opt.iterations]
    }
    metas = s._system(_slots, _store_key(opt._id), [w._var_id for w in ws])
    slots = [json.loads(m.value if m.has_value else s._group.fetch(r, m.key)) for r, m in enumerate(metas)]
    return {"copies": per_copy, "slots": slots}


def _setup(s: idist.MirroredStrategy, tmp_path: Any) -> tuple[Any, str, dict[str, Any], dict[str, Any], Any]:
    ws, count, opt = _model(s)
    _train(s, ws, count, opt, 2)
    ck = idist.Checkpoint(ws=ws, count=count, opt=opt)
    path = ck.save(str(tmp_path / "ckpt"))
    saved = _state(s, ws, count, opt)
    _train(s, ws, count, opt, 3)  # every variable, slot and count now differs from the checkpoint
    before = _state(s, ws, count, opt)
    assert before["copies"] != saved["copies"] and before["slots"] != saved["slots"]
    return ck, path, saved, before, (ws, count, opt)


def _restored_copies(saved: dict[str, Any], n: int) -> dict[str, Any]:
    """What a restore gives: sync-on-read SUM copies hold the saved total divided by the replicas."""
    out = dict(saved["copies"])
    total = float(np.sum(saved["copies"]["count"]))
    out["count"] = [total / n] * n
    return out


def _restore_failing(s: idist.MirroredStrategy, ck: Any, path: str, fault: str, k: int) -> BaseException:
    victim = s.num_replicas_in_sync - 1
    s._restore_fault_at = k
    try:
        idist.debug.inject(s, replica=victim, fault=fault, at=RESTORE_POINT)
        expected = {"kill": idist.WorkerLostError, "raise": idist.errors.InjectedFaultError}[fault]
        t0 = time.monotonic()
        if fault == "kill":  # the rollback restarts the lost replica first (copies from a survivor), and says so
            restarted = f"replica\\(s\\) \\[{victim}\\] .* restarted"
            with pytest.warns(UserWarning, match=restarted), pytest.raises(expected) as info:
                ck.restore(path)
        else:
            with pytest.raises(expected) as info:
                ck.restore(path)
        took = time.monotonic() - t0
    finally:
        del s._restore_fault_at
    print(f"\n[restore] {s.num_replicas_in_sync} replicas, {fault} before assignment {k}: "
          f"{type(info.value).__name__} after {took:.2f} s (rolled back)")
    return info.value


@pytest.mark.parametrize("k", range(UNITS))
def test_a_replica_killed_mid_restore_leaves_every_previous_value(
    strategy: idist.MirroredStrategy, k: int, tmp_path: Any
) -> None:
    s, n = strategy, strategy.num_replicas_in_sync
    ck, path, saved, before, (ws, count, opt) = _setup(s, tmp_path)
    counter = ck.save_counter
    err = _restore_failing(s, ck, path, "kill", k)
    message = str(err)
    said = f"not applied: nothing of checkpoint {path} was restored; the variables hold their previous values"
    assert said in message
    assert isinstance(err.__cause__, idist.WorkerLostError) and "was lost during" in str(err.__cause__)
    assert _state(s, ws, count, opt) == before  # every copy on every replica, every slot and update count
    assert ck.save_counter == counter
    ck.restore(path)  # and the checkpoint restores whole once nothing fails
    after = _state(s, ws, count, opt)
    assert after["copies"] == _restored_copies(saved, n) and after["slots"] == saved["slots"]


@pytest.mark.parametrize("strategy", [2], indirect=True, ids=["2-replicas"])
@pytest.mark.parametrize("k", [0, 3, 5, 7])
def test_a_replica_raising_mid_restore_leaves_every_previous_value(
    strategy: idist.MirroredStrategy, k: int, tmp_path: Any
) -> None:
    s = strategy
    ck, path, _, before, (ws, count, opt) = _setup(s, tmp_path)
    err = _restore_failing(s, ck, path, "raise", k)
    assert "not applied: nothing of checkpoint" in str(err)
    assert isinstance(err.__cause__, idist.errors.InjectedFaultError)
    assert _state(s, ws, count, opt) == before


@pytest.mark.parametrize("strategy", [2], indirect=True, ids=["2-replicas"])
def test_any_exception_after_the_program_rolls_it_back(
    strategy: idist.MirroredStrategy, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A notebook variable in the same checkpoint whose assignment fails after the replicas' program ran:
    the replicas' values are put back too, and the notebook variable keeps its value."""
    s = strategy
    ws, count, opt = _model(s)
    plain = idist.Variable(np.float32(1.0), name="plain")
    ck = idist.Checkpoint(ws=ws, count=count, opt=opt, plain=plain)
    path = ck.save(str(tmp_path / "ckpt"))
    _train(s, ws, count, opt, 1)
    plain.assign(2.0)
    before = _state(s, ws, count, opt)

    def refuse(self: Any) -> None:
        raise ValueError("disk on fire")

    monkeypatch.setattr(checkpoint_lib._Single, "commit", refuse)
    with pytest.raises(ValueError, match="not applied: nothing of checkpoint") as info:
        ck.restore(path)
    assert isinstance(info.value.__cause__, ValueError)
    assert _state(s, ws, count, opt) == before and float(np.asarray(plain)) == 2.0


@pytest.mark.parametrize("strategy", [2], indirect=True, ids=["2-replicas"])
def test_a_rollback_that_fails_says_which_variables_hold_which(
    strategy: idist.MirroredStrategy, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    s = strategy
    ck, path, saved, before, (ws, count, opt) = _setup(s, tmp_path)
    real = checkpoint_lib._retrying

    def unreachable(call: Any) -> Any:
        raise ConnectionError("the workers cannot be reached")

    monkeypatch.setattr(checkpoint_lib, "_retrying", unreachable)
    err = _restore_failing(s, ck, path, "raise", 3)
    monkeypatch.setattr(checkpoint_lib, "_retrying", real)
    message = str(err)
    assert isinstance(err, idist.errors.InjectedFaultError)
    assert "rollback could not complete" in message and "MIX" in message
    assert "the replica that failed holds the checkpoint's values for the first 3 (w0, w1, w2)" in message
    # ... and it is so: replica 0 finished the program (all restored), replica 1 assigned w0, w1, w2 only; the
    # next call names the mirrored variable whose copies differ (the weights' copies are equal: both restored)
    with pytest.raises(idist.errors.DivergedCopiesError, match=f"1 mirrored variable.*'{opt.iterations._name}'"):
        s.run(lambda: None)
    now = _state(s, ws, count, opt)
    restored = _restored_copies(saved, 2)
    for name in ("w0", "w1", "w2"):
        assert now["copies"][name] == restored[name]
    it = opt.iterations._name
    assert now["copies"][it][0] == saved["copies"][it][0] and now["copies"][it][1] == before["copies"][it][1]
    ck.restore(path)  # restoring again repairs it, as the message says
    assert _state(s, ws, count, opt)["copies"] == restored


def test_the_restore_is_one_program(strategy: idist.MirroredStrategy, tmp_path: Any) -> None:
    """One program reads what is replaced, one assigns everything: the restore does not grow with the
    number of variables in round trips."""
    s = strategy
    ck, path, _, _, _ = _setup(s, tmp_path)
    steps = s._group.step
    ck.restore(path)
    assert s._group.step - steps == 2
    names = [e.fn for e in s.events.events if e.kind == "run-started" and e.step > steps]
    assert sorted(set(names)) == ["_restore_program", "_snapshot_program"], names
