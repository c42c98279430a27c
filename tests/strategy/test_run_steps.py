"""The fused loop gives the step-by-step results, with every step's events."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import interdist as idist
from interdist import events


def _train(s: idist.Strategy, fused: bool) -> list[float]:
    with s.scope():
        w = idist.Variable(np.float32(0.0))
        opt = idist.optimizers.SGD(0.05)
    x = np.arange(32, dtype=np.float32) / 32
    it = iter(s.experimental_distribute_dataset(idist.data.Dataset.from_tensor_slices((x, 3 * x)).batch(8)))

    def step(batch: tuple[np.ndarray, np.ndarray]) -> object:
        xb, yb = batch
        err = np.asarray(w) * xb - yb
        opt.apply_gradients([(np.float32(np.sum(err * xb) / 8), w)])
        return np.float32(np.sum(err * err))

    if fused:
        last = s.run_steps(step, it, steps=4)
    else:
        for batch in it:
            last = s.run(step, args=(batch,))
    return [float(np.asarray(w))] + [float(v) for v in s.experimental_local_results(last)]


def test_fused_equals_step_by_step(mirrored2: idist.MirroredStrategy) -> None:
    assert _train(mirrored2, fused=True) == _train(mirrored2, fused=False)


def test_every_step_has_events(mirrored2: idist.MirroredStrategy) -> None:
    s = mirrored2
    first = s._group.step + 1
    it = iter(s.experimental_distribute_dataset(idist.data.Dataset.range(6).batch(2)))
    s.run_steps(lambda b: idist.get_replica_context().all_reduce("sum", b), it, steps=3)
    evs = [e for e in s.events.events if e.step >= first and e.group == s._group_id]
    runs = sorted((e.step, e.replica) for e in evs if isinstance(e, events.RunFinished) and e.program == "run")
    assert runs == [(first + k, r) for k in range(3) for r in (0, 1)]
    colls = sorted((e.step, e.replica) for e in evs if isinstance(e, events.CollectiveExited) and e.op == "all_reduce")
    assert colls == runs
    assert s._group.step == first + 2  # the notebook reserved one step number per inner step


def test_fused_over_dataset_fn_stops_at_the_end(mirrored2: idist.MirroredStrategy) -> None:
    s = mirrored2
    it = iter(s.distribute_datasets_from_function(lambda ctx: idist.data.Dataset.range(6).batch(1)))
    last = s.run_steps(lambda b: b * 2, it, steps=100)  # only 3 steps of data per replica
    assert [np.asarray(v).tolist() for v in s.experimental_local_results(last)] == [[8], [10]]
    with pytest.raises(StopIteration):
        s.run_steps(lambda b: b, it, steps=1)


@pytest.mark.parametrize("progress", [False, True])
def test_fused_takes_the_padded_steps_of_uneven_ends_as_a_loop_does(
    mirrored2: idist.MirroredStrategy, progress: bool
) -> None:
    """``range(5).batch(1)`` from a function: replica 0 reads 0, 2, 4 and replica 1 reads 1, 3. A loop of ``run``
    takes 3 steps, the last padded with an empty batch for replica 1 (TF 2.21); ``run_steps`` stopped after 2,
    leaving the padded step for its next call."""
    s = mirrored2

    def values(x: Any) -> list[Any]:
        return [np.asarray(v).tolist() for v in s.experimental_local_results(x)]

    def uneven() -> Any:
        return iter(s.distribute_datasets_from_function(lambda ctx: idist.data.Dataset.range(5).batch(1)))

    it = uneven()
    assert values(s.run_steps(lambda b: b * 10, it, steps=3, progress=progress)) == [[40], []]
    assert list(it) == []
    it = uneven()
    assert values(s.run_steps(lambda b: b * 10, it, steps=7, progress=progress)) == [[40], []]  # 3 steps of data
    with pytest.raises(StopIteration):
        s.run_steps(lambda b: b, it, steps=1, progress=progress)


def test_fused_training_over_uneven_ends_equals_a_loop_bit_for_bit(mirrored2: idist.MirroredStrategy) -> None:
    """39 rows, 3 a replica a step: the last step has 3 rows for replica 0 and none for replica 1. SGD with
    momentum over 7 steps, fused or a loop of ``run``: the same variable, bit for bit (it differed)."""
    s = mirrored2
    x = (np.arange(39, dtype=np.float32) / np.float32(7.3)) ** np.float32(1.3)
    y = np.sin(x).astype(np.float32)

    def train(fused: bool) -> bytes:
        with s.scope():
            w = idist.Variable(np.array([0.3, -0.2], np.float32))
            opt = idist.optimizers.SGD(0.05, momentum=0.9)
        data = idist.data.Dataset.from_tensor_slices((x, y))
        it = iter(s.distribute_datasets_from_function(lambda ctx: data.batch(3)))

        def step(b: Any) -> Any:
            xb, yb = b
            wv = np.asarray(w)
            err = wv[0] * xb + wv[1] - yb
            opt.apply_gradients([(np.array([np.sum(err * xb), np.sum(err)], np.float32) / np.float32(6), w)])
            return np.float32(np.sum(err * err))

        if fused:
            s.run_steps(step, it, steps=50)
        else:
            for batch in it:
                s.run(step, args=(batch,))
        return np.asarray(w).tobytes()

    assert train(True) == train(False)


def test_failure_inside_fused_names_the_step(mirrored2: idist.MirroredStrategy) -> None:
    s = mirrored2
    it = iter(s.experimental_distribute_dataset(idist.data.Dataset.range(8).batch(2)))

    def fn(b: np.ndarray) -> object:
        if int(b[0]) == 5:  # replica 1 of the third step
            raise ArithmeticError("bad batch")
        return idist.get_replica_context().all_reduce("sum", b)

    with pytest.raises(ArithmeticError) as info:
        s.run_steps(fn, it, steps=4)
    assert "replica 1" in "\n".join(info.value.__notes__)
    out = s.run(lambda: np.float32(1.0))  # still usable
    assert [float(v) for v in s.experimental_local_results(out)] == [1.0, 1.0]


def _own_events(s: idist.MirroredStrategy, first: int, replica: int) -> list[tuple[str, int]]:
    """Replica ``replica``'s events from step ``first`` on, less the fused program's own (its start,
    end and the exchange of batch counts)."""
    return [(e.kind, e.step) for e in s.events.events
            if e.group == s._group_id and e.replica == replica and e.step >= first
            and not (e.kind.startswith("collective") and e.op == "fused_count")
            and not (e.kind.startswith("run-") and e.program != "run")]


def test_events_of_fused_steps_keep_their_order(mirrored2: idist.MirroredStrategy) -> None:
    """Steps that emit nothing travel as one record; expanded, the notebook sees exactly a step-by-step log."""
    s = mirrored2
    first = s._group.step + 1
    it = iter(s.experimental_distribute_dataset(idist.data.Dataset.range(10).batch(2)))

    def fn(b: np.ndarray) -> object:
        if int(b[0]) in (2, 3):  # only the second step makes a collective
            return idist.get_replica_context().all_reduce("sum", b)
        return b

    s.run_steps(fn, it, steps=4)
    for r in (0, 1):
        got = [(k, st - first) for k, st in _own_events(s, first, r)]
        assert got[:2] == [("run-started", 0), ("run-finished", 0)]
        assert got[2:6] == [("run-started", 1), ("collective-entered", 1), ("collective-exited", 1),
                            ("run-finished", 1)]
        assert got[6:10] == [("run-started", 2), ("run-finished", 2), ("run-started", 3), ("run-finished", 3)]
        finished = [e for e in s.events.events if isinstance(e, events.RunFinished) and e.group == s._group_id
                    and e.replica == r and first <= e.step < first + 4 and e.program == "run"]
        assert [e.fn for e in finished] == ["test_events_of_fused_steps_keep_their_order.<locals>.fn"] * 4
        assert all(e.ok and e.duration_s >= 0 for e in finished)


def test_a_failing_fused_step_keeps_the_steps_before_it(mirrored2: idist.MirroredStrategy) -> None:
    s = mirrored2
    first = s._group.step + 1
    it = iter(s.experimental_distribute_dataset(idist.data.Dataset.range(8).batch(2)))

    def fn(b: np.ndarray) -> object:
        if int(b[0]) == 4:  # replica 0 of the third step
            raise ValueError("bad")
        return b

    with pytest.raises(ValueError, match="bad"):
        s.run_steps(fn, it, steps=4)
    kinds = [(k, st - first) for k, st in _own_events(s, first, 0) if st < first + 4]
    assert kinds[:5] == [("run-started", 0), ("run-finished", 0), ("run-started", 1), ("run-finished", 1),
                         ("run-started", 2)]
    assert ("replica-failed", 2) in kinds[5:]


def test_a_run_steps_record_expands_to_step_events() -> None:
    msg = events.steps_msg("g", 7, 1, "fn", [1.0, 1.5, 2.0, 2.25])
    assert events.expand(msg) == [
        events.RunStarted("g", 7, 1, 1.0, "fn", "run"), events.RunFinished("g", 7, 1, 1.5, "fn", "run", 0.5, True),
        events.RunStarted("g", 8, 1, 2.0, "fn", "run"), events.RunFinished("g", 8, 1, 2.25, "fn", "run", 0.25, True)]
    one = events.RunStarted("g", 1, 0, 0.5, "f", "run")
    assert events.expand(one.to_msg()) == [one]


def test_event_batches_for_the_scheduler_round_trip() -> None:
    """Workers log their events to the scheduler packed; the dashboard pages read them back."""
    msgs = [events.RunStarted("g", 1, 0, 0.5, "f", "run").to_msg(), events.steps_msg("g", 2, 0, "f", [1.0, 2.0])]
    logged = events.pack_batch(msgs)
    assert isinstance(logged["packed"], bytes) and logged["count"] == 2
    assert [e for m in events.unpack_batch(logged) for e in events.expand(m)] == [
        events.RunStarted("g", 1, 0, 0.5, "f", "run"), events.RunStarted("g", 2, 0, 1.0, "f", "run"),
        events.RunFinished("g", 2, 0, 2.0, "f", "run", 1.0, True)]
    assert events.unpack_batch({"batch": msgs}) == msgs
    assert events.unpack_batch("not a batch") == []
