"""Faults inside a large all-reduce split between one owner per core (``collectives/split.py``), 4 replicas.

The owner of a chunk, or a rank the owners wait for, raises, freezes or dies at the all-reduce of
``apply_gradients``: the notebook gets the error naming that replica within the suite's bounds, no replica
applies the step, and the next steps (split again) apply exactly once on every copy.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

import interdist as idist
from interdist.config import settings

from ._resume import resume_frozen

pytestmark = pytest.mark.timeout(180)

SIZE = 1 << 20  # float32: a 4 MB gradient, reduce-broadcast's (AUTO) at 4 replicas on one host


@pytest.fixture(scope="module")
def strategy() -> Iterator[idist.MirroredStrategy]:
    s = idist.MirroredStrategy([f"CPU:{i}" for i in range(4)])
    yield s
    s.close()


@pytest.fixture(autouse=True)
def _fast_detection(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(settings, "frozen_after", 1.5)


def _split_in_two() -> None:
    """Two owners on every replica, whatever this machine's cores (the join sets it from them: a worker
    started again takes this machine's number, so the test sets it again after a restart)."""
    idist.get_replica_context()._replica.collectives.owners = 2  # type: ignore[attr-defined]


def _how_reduced() -> Any:
    coll = idist.get_replica_context()._replica.collectives  # type: ignore[attr-defined]
    return np.array([coll.owners, coll.last_timing.algorithm == "reduce-broadcast"])


def _step(s: idist.MirroredStrategy, v: Any, opt: Any) -> Any:
    def train_step() -> None:
        r = idist.get_replica_context().replica_id_in_sync_group
        opt.apply_gradients([(np.full(SIZE, r + 1.0, np.float32), v)])

    return train_step


def _copies(s: idist.MirroredStrategy, v: Any) -> list[list[float]]:
    return [[float(x) for x in np.asarray(c)[[0, SIZE // 2, SIZE - 1]]] for c in s.experimental_local_results(v)]


def _run_again(s: idist.MirroredStrategy, fn: Any, timeout: float = 60.0) -> None:
    """``s.run(fn)`` once the replicas take programs again (a frozen one resumed, a killed one restarted)."""
    t0 = time.monotonic()
    while True:
        try:
            s.run(fn)
            return
        except RuntimeError as e:  # "still running step N": a frozen replica not back yet
            if "still running" not in str(e) or time.monotonic() - t0 > timeout:
                raise
            time.sleep(0.25)


@pytest.mark.parametrize("victim", [1, 3], ids=["an-owner", "not-an-owner"])
@pytest.mark.parametrize("fault", ["raise", "freeze", "kill"])
def test_a_fault_in_a_split_all_reduce_is_named_and_the_next_steps_apply_once(
    strategy: idist.MirroredStrategy, fault: str, victim: int
) -> None:
    s = strategy
    with s.scope():
        v = idist.Variable(np.zeros(SIZE, np.float32), name=f"w_split_{fault}_{victim}")
        opt = idist.optimizers.SGD(0.5)
    step = _step(s, v, opt)
    s.run(_split_in_two)
    s.run(step)  # the sum of 1 + 2 + 3 + 4 over every element, times 0.5
    assert [[int(x) for x in a] for a in s.experimental_local_results(s.run(_how_reduced))] == [[2, 1]] * 4
    assert _copies(s, v) == [[-5.0] * 3] * 4

    idist.debug.inject(s, replica=victim, fault=fault, at="all_reduce", seconds=60.0)
    expected = {"raise": idist.errors.InjectedFaultError, "freeze": idist.errors.ReplicaFrozenError,
                "kill": idist.WorkerLostError}[fault]
    t0 = time.monotonic()
    with pytest.raises(expected) as info:
        s.run(step)
    took = time.monotonic() - t0
    assert f"replica {victim}" in str(info.value) or getattr(info.value, "interdist_replica", None) == victim
    assert took < {"raise": 3.0, "freeze": settings.frozen_after + 4.0, "kill": 10.0}[fault], took
    if fault == "freeze":
        resume_frozen(info.value)
    if fault == "kill":  # started again, the variables copied there, with a warning
        with pytest.warns(UserWarning, match=f"replica\\(s\\) \\[{victim}\\] .* restarted"):
            _run_again(s, _split_in_two)
    else:
        _run_again(s, _split_in_two)
    assert _copies(s, v) == [[-5.0] * 3] * 4  # the failed step applied nowhere
    s.run(step)
    assert [[int(x) for x in a] for a in s.experimental_local_results(s.run(_how_reduced))] == [[2, 1]] * 4
    assert _copies(s, v) == [[-10.0] * 3] * 4
