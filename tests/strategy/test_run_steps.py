"""The fused loop gives the step-by-step results, with every step's events."""

from __future__ import annotations

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
