"""A failed step says whether its update was applied (issue 25, deliverable 3b).

A replica is killed at each fault point of a step that updates a MEAN mirrored variable ``v`` by exactly 1
(``merge_call`` + ``extended.update``, ``apply``-style reduce then update, update then reduce, a replica-context
``assign_add``). The error says "WAS applied" or "NOT applied"; after the next call (which restarts the
replica and copies a survivor's variables there) the claim is checked against the values: applied means ``v``
holds the update exactly once on every replica, not applied means it holds its value before the step.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest

import interdist as idist
from interdist.client.replies import step_outcome

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module", params=[2, 4], ids=["2-replicas", "4-replicas"])
def strategy(request: pytest.FixtureRequest) -> Iterator[idist.MirroredStrategy]:
    s = idist.MirroredStrategy([f"CPU:{i}" for i in range(request.param)])
    yield s
    s.close()


def _add_one(var: Any) -> Any:
    return var.assign_add(np.float32(1.0))


def merge_then_count(v: Any, m: Any) -> Callable[[], None]:
    """``merge_call`` updates ``v``; then a replica-context update of the sync-on-read ``m`` (no collective)."""

    def step() -> None:
        ctx = idist.get_replica_context()
        ctx.merge_call(lambda s: s.extended.update(v, _add_one))
        m.assign_add(np.float32(1.0))  # the "update" point, after v's update and the last collective

    return step


def _reduce_then_update(x: Any, v: Any) -> Callable[[], None]:
    def step() -> None:
        def merge_fn(s: Any, x: Any) -> None:
            total = s.reduce("SUM", x, axis=None)  # the "all_reduce" point, before the update
            s.extended.update(v, lambda var, t: var.assign_add(t / np.float32(s.num_replicas_in_sync)), args=(total,))

        idist.get_replica_context().merge_call(merge_fn, args=(x,))

    return step


def reduce_then_update(v: Any, m: Any) -> Callable[[], None]:
    """As ``apply_gradients``: reduce an array in ``merge_fn``, then update. The replica armed at "all_reduce"
    holds its array back (``faults.holds_back``): the reduction is a real all-reduce, which its death stops."""
    return _reduce_then_update(np.ones((), np.float32), v)


def reduce_scalar_then_update(v: Any, m: Any) -> Callable[[], None]:
    """The same with a NumPy scalar: it travels with the ``merge_call`` exchange, so every survivor reduces the
    gathered values by itself and applies the update although the victim dies at its "all_reduce" point."""
    return _reduce_then_update(np.float32(1.0), v)


def update_then_reduce(v: Any, m: Any) -> Callable[[], None]:
    """``merge_fn`` updates, then reduces something (the "all_reduce" point comes after the update)."""

    def step() -> None:
        def merge_fn(s: Any, x: Any) -> None:
            s.extended.update(v, _add_one)
            s.reduce("SUM", x, axis=None)  # an array: a real all-reduce (held back on the armed replica)

        idist.get_replica_context().merge_call(merge_fn, args=(np.ones((), np.float32),))

    return step


def replica_assign_add(v: Any, m: Any) -> Callable[[], None]:
    """A replica-context update of a MEAN variable: the "update" point, then its all-reduce."""

    def step() -> None:
        v.assign_add(np.float32(1.0))

    return step


# (fault point, step, whether the update is applied when the victim dies there, what the error says)
CASES = [
    ("step", merge_then_count, False, "NOT applied anywhere"),
    ("merge_call", merge_then_count, False, "NOT applied anywhere"),
    ("update", merge_then_count, True, "WAS applied (survivors had it"),
    ("all_reduce", reduce_then_update, False, "NOT applied anywhere"),
    ("all_reduce", reduce_scalar_then_update, True, "WAS applied (survivors had it"),
    ("all_reduce", update_then_reduce, True, "WAS applied up to where it stopped"),
    ("update", replica_assign_add, False, "NOT applied anywhere"),
]


def _variables(s: idist.MirroredStrategy) -> tuple[Any, Any]:
    with s.scope():
        v = idist.Variable(np.float32(5.0), aggregation=idist.VariableAggregation.MEAN, name="v")
        m = idist.Variable(
            np.float32(0.0),
            synchronization=idist.VariableSynchronization.ON_READ,
            aggregation=idist.VariableAggregation.SUM,
            name="m",
        )
    return v, m


def _copies(s: idist.MirroredStrategy, v: Any) -> list[float]:
    return [float(c) for c in s.experimental_local_results(v)]


@pytest.mark.parametrize(("at", "make", "applied", "says"), CASES, ids=[f"{c[0]}-{c[1].__name__}" for c in CASES])
def test_a_killed_step_says_whether_it_was_applied(
    strategy: idist.MirroredStrategy, at: str, make: Any, applied: bool, says: str
) -> None:
    s, n = strategy, strategy.num_replicas_in_sync
    victim = n - 1
    v, m = _variables(s)
    step = make(v, m)
    idist.debug.inject(s, replica=victim, fault="kill", at=at)
    t0 = time.monotonic()
    with pytest.raises(idist.WorkerLostError) as info:
        s.run(step)
    took = time.monotonic() - t0
    message = str(info.value)
    assert says in message, message
    if applied:
        assert "do not run it again" in message and "by copy from replica 0" in message
        assert "run it again:" not in message
    else:
        assert "run it again" in message and "do not run" not in message
    with pytest.warns(UserWarning, match=f"replica\\(s\\) \\[{victim}\\] .* restarted"):
        s.run(lambda: None)  # the next call restarts the replica and copies replica 0's variables there
    expected = 6.0 if applied else 5.0  # the update exactly once, or not at all
    assert _copies(s, v) == [expected] * n
    if make is merge_then_count:
        # m is each replica's own: the survivors counted the step when it was applied, the restarted replica
        # got its last reported value (before the step); the error said "applied", so nothing counts twice
        assert float(np.sum(_copies(s, m))) == (n - 1 if applied else 0.0)
    if not applied:  # as the error says: run it again, and it is applied once
        s.run(step)
        assert _copies(s, v) == [6.0] * n
    print(f"\n[applied] {n} replicas, kill at {at} in {make.__name__}: {'applied' if applied else 'not applied'}, "
          f"error after {took:.2f} s")


@pytest.mark.parametrize("strategy", [2], indirect=True, ids=["2-replicas"])
@pytest.mark.parametrize(
    ("at", "make", "says", "expected"),
    [
        ("step", merge_then_count, "", 5.0),  # nothing changed anywhere: the error stays as it was, one line
        # every replica ran merge_fn (v + 1 on each); the victim raised before m's update: partly applied
        ("update", merge_then_count, "partly applied on replicas 0, 1", 6.0),
    ],
)
def test_a_raising_step_says_whether_it_was_applied(
    strategy: idist.MirroredStrategy, at: str, make: Any, says: str, expected: float
) -> None:
    s = strategy
    v, m = _variables(s)
    idist.debug.inject(s, replica=1, fault="raise", at=at)
    with pytest.raises(idist.errors.InjectedFaultError) as info:
        s.run(make(v, m))
    notes = "\n".join(getattr(info.value, "__notes__", []))
    if says:
        assert says in notes, notes
    else:
        assert "applied" not in notes and len(info.value.__notes__) == 1, notes
    assert _copies(s, v) == [expected, expected]


def _reply(ok: bool, updated: tuple[str, ...] = (), **flags: Any) -> dict[str, Any]:
    events = [{"kind": "variable-updated", "name": f"{name}:0", "var_id": i} for i, name in enumerate(updated)]
    return {"ok": ok, "events": events, **flags}


def test_the_rule_over_survivors() -> None:
    """The decision, replica by replica: what the survivors hold, not what the failed replica did."""
    lost = {"ok": False, "lost": True}
    call = "run #7 (train_step)"
    assert "WAS applied (survivors had it" in step_outcome([_reply(True, ("v",)), _reply(True, ("v",)), lost], call)
    assert "NOT applied anywhere" in step_outcome([_reply(False, secondary=True), lost], call)
    partly = step_outcome([_reply(False, ("v",), secondary=True), _reply(False, (), secondary=True), lost], call)
    assert "partly applied on replica 0" in partly and "not on replica 1" in partly
    assert "copies replica 0's variables to the restarted replica" in partly
    unknown = step_outcome([_reply(True, ("v",)), {"ok": False, "stuck": True}, lost], call)
    assert "replica 1 did not answer" in unknown and "WAS applied" not in unknown
    assert "cannot be known" in step_outcome([lost, {"ok": False, "frozen": True}], call)
    assert step_outcome([_reply(True), lost], "_restore_program (step 4)") == ""  # the engine's own programs
