"""After a fault, mirrored copies are compared, and copies that differ are reported by name (issue 17,
item 3: "after any fault, a cheap checksum comparison of all copies runs and a difference is reported
by name, never left silent")."""

from __future__ import annotations

import time

import numpy as np
import pytest

import interdist as idist
from interdist.config import settings


def _fail_on_replica_1() -> None:
    if idist.get_replica_context().replica_id_in_sync_group == 1:
        raise ValueError("replica 1 fails on purpose")


def test_copies_that_differ_after_a_fault_are_named(mirrored2: idist.MirroredStrategy) -> None:
    s = mirrored2
    with s.scope():
        w = idist.Variable(np.zeros(3, np.float32), name="w")
        b = idist.Variable(np.float32(1.0), name="b")
        seen = idist.Variable(0.0, name="seen", synchronization=idist.VariableSynchronization.ON_READ,
                              aggregation=idist.VariableAggregation.SUM)
    s.run(lambda: seen.assign_add(1.0))  # sync-on-read copies may differ: never reported
    w.values[1].assign(np.ones(3, np.float32))  # one copy changed alone: what a half-applied step leaves
    with pytest.raises(ValueError, match="on purpose"):
        s.run(_fail_on_replica_1)
    with pytest.raises(idist.errors.DivergedCopiesError) as info:
        s.run(lambda: 1)
    message = str(info.value)
    assert "'w'" in message and "'b'" not in message and "'seen'" not in message
    assert "replicas [0] hold one value; replicas [1] hold one value" in message
    assert "the failed run #" in message and "resync_variables" in message
    # the check ran once: the next call goes on, and the user can repair the copies
    assert s.resync_variables(from_replica=0) == ["w", "b"]
    assert [np.asarray(c).tolist() for c in s.experimental_local_results(w)] == [[0.0, 0.0, 0.0]] * 2
    with pytest.raises(ValueError):
        s.run(_fail_on_replica_1)
    assert float(s.reduce("SUM", s.run(lambda: np.float32(1.0)), axis=None)) == 2.0  # equal copies: no error


def test_resync_right_after_the_fault_repairs_instead_of_refusing(mirrored2: idist.MirroredStrategy) -> None:
    """The DivergedCopiesError says to call resync_variables: called first after the fault, that call
    itself used to run the check and raise the same error; it repairs what the check would report."""
    s = mirrored2
    with s.scope():
        w = idist.Variable(np.zeros(2, np.float32), name="w")
    w.values[1].assign(np.ones(2, np.float32))
    with pytest.raises(ValueError, match="on purpose"):
        s.run(_fail_on_replica_1)
    assert s.resync_variables(from_replica=0)[-1] == "w"
    assert [np.asarray(c).tolist() for c in s.experimental_local_results(w)] == [[0.0, 0.0]] * 2
    assert float(s.reduce("SUM", s.run(lambda: np.float32(1.0)), axis=None)) == 2.0  # no error after it


def test_no_report_when_the_copies_agree(mirrored2: idist.MirroredStrategy) -> None:
    s = mirrored2
    with s.scope():
        v = idist.Variable(np.float32(5.0), name="v")
    with pytest.raises(ValueError):
        s.run(_fail_on_replica_1)
    assert float(s.run(lambda: v.read_value() + 0).values[0]) == 5.0


@pytest.mark.parametrize("bad", [-1, 2, 1.0, True])
def test_resync_checks_its_argument(mirrored2: idist.MirroredStrategy, bad: object) -> None:
    with pytest.raises(TypeError if not isinstance(bad, int) or isinstance(bad, bool) else ValueError):
        mirrored2.resync_variables(from_replica=bad)  # type: ignore[arg-type]


def test_a_late_replica_never_applies_an_aborted_update_alone(
    mirrored2: idist.MirroredStrategy, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The review's reproduction: replica 1 is 3 s late to a MEAN assign_add whose collective times out
    after 1 s. Both copies end equal (both applied, or neither), and nothing is reported."""
    s = mirrored2
    with s.scope():
        v = idist.Variable(np.float32(0.0), name="late", aggregation=idist.VariableAggregation.MEAN)
    monkeypatch.setattr(settings, "collective_timeout", 1.0)

    def step() -> None:
        if idist.get_replica_context().replica_id_in_sync_group == 1:
            time.sleep(3.0)
        v.assign_add(1.0)

    with pytest.raises(Exception):  # noqa: B017, PT011 - a timeout on replica 0, an abort on replica 1
        s.run(step)
    monkeypatch.setattr(settings, "collective_timeout", 60.0)
    time.sleep(2.5)  # replica 1 wakes up and reaches the collective of the aborted step
    copies = [float(c) for c in s.experimental_local_results(v)]
    assert copies[0] == copies[1], copies


def test_a_post_fault_check_that_cannot_run_runs_at_the_next_call(
    mirrored2: idist.MirroredStrategy, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The copy check after a fault needs every replica; while one is still in the failed step ("still
    running") it cannot run. It must then run at the next call, not be forgotten (a difference left
    unreported is what it exists to prevent)."""
    with mirrored2.scope():
        v = idist.Variable(np.float32(1.0), name="checked_later", aggregation=idist.VariableAggregation.MEAN)
    cls = type(mirrored2)
    real = cls._check_copies
    calls: list[str] = []

    def not_yet(self: idist.MirroredStrategy, fault: str) -> None:
        calls.append(fault)
        if len(calls) == 1:
            raise RuntimeError("replica 1 (CPU:1) is still running step 7")
        real(self, fault)

    monkeypatch.setattr(cls, "_check_copies", not_yet)
    mirrored2._group.suspect = "the failed run #3"
    with pytest.raises(RuntimeError, match="still running"):
        mirrored2.run(lambda: np.float32(0.0))
    assert mirrored2._group.suspect == "the failed run #3"
    mirrored2.run(lambda: v.assign_add(np.float32(1.0)))  # the check runs first (copies equal), then the step
    assert calls == ["the failed run #3"] * 2 and mirrored2._group.suspect is None
    assert [float(c) for c in mirrored2.experimental_local_results(v)] == [2.0, 2.0]
