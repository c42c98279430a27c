"""A replica that dies while its peer waits inside the ring (collectives/ring.py): the peer's wait in compiled
code ends at the step's abort, the death is named, no copy took the step (the ring's sums are new arrays,
dropped with the step; SGD's update through the ring writes a new copy, swapped in only once the batch went
through), and the pair trains on through a new ring with the restarted worker, the copies equal to
uninterrupted NumPy steps."""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import pytest

import interdist as idist
from interdist.collectives import ring

pytestmark = pytest.mark.skipif(bool(ring.unavailable_reason()), reason=ring.unavailable_reason() or "ring")

N = (1 << 20) // 4 + 12_345


def _die_entering_the_ring() -> None:
    """On this replica's worker: exit at once where the exchange would start (after the hellos: its peer is
    then inside the ring, waiting for this replica's first chunk)."""
    import os

    from interdist.collectives import ring as ring_module

    class Dying:
        @staticmethod
        def exchange(*args: Any) -> int:
            os._exit(3)

    ring_module.kernels = lambda: Dying


def _die_half_way_through_the_ring() -> None:
    """On this replica's worker: exchange the first 3 chunks of the next ring all-reduce, then exit (its peer
    has summed those 3 chunks and waits for the 4th)."""
    import os

    from interdist.collectives import ring as ring_module

    real = ring_module.kernels()

    class Dying:
        @staticmethod
        def exchange(mine: Any, out: Any, *rest: Any) -> int:
            chunk = rest[5]  # (ring_me, ring_pe, counters, state, base, chunk, ...)
            real.exchange(mine[: 3 * chunk], out[: 3 * chunk], *rest)
            os._exit(3)

    ring_module.kernels = lambda: Dying


def _ring_chunks() -> tuple[int, int, str]:
    ctx = idist.get_replica_context()
    got = ctx._replica.collectives.transport._ring  # type: ignore[attr-defined]
    return ctx.replica_id_in_sync_group, -1 if got is None else int(got.state[1]), "" if got is None else got.name


@pytest.mark.parametrize("how", ["all_reduce", "apply_gradients"])
@pytest.mark.parametrize("die", [_die_entering_the_ring, _die_half_way_through_the_ring], ids=["entering", "half-way"])
def test_a_replica_dying_while_its_peer_waits_in_the_ring_is_named_and_the_pair_goes_on(die: Any, how: str) -> None:
    w0 = np.random.default_rng(1).normal(size=N).astype(np.float32)
    with idist.MirroredStrategy(["CPU:0", "CPU:1"]) as s:
        with s.scope():
            w = idist.Variable(w0, name="w_ring_fault")
            opt = idist.optimizers.SGD(0.1)

        def step() -> None:
            ctx = idist.get_replica_context()
            grad = np.full(N, ctx.replica_id_in_sync_group + 1.0, np.float32)  # summed: 3
            if how == "apply_gradients":  # SGD's update written through the ring (fused_update.ring_swap)
                opt.apply_gradients([(grad, w)])
            else:  # a loop that all-reduces its gradients itself, then updates its copy
                w.assign_sub(ctx.all_reduce("sum", grad) * np.float32(0.1))

        for _ in range(3):
            s.run(step)
        before = s.experimental_local_results(s.run(_ring_chunks))
        assert [b[1] > 0 for b in before] == [True, True]  # the ring carries the steps

        s.run(lambda: die() if idist.get_replica_context().replica_id_in_sync_group == 1 else None)
        t0 = time.monotonic()
        with pytest.raises(idist.WorkerLostError, match="replica 1"):
            s.run(step)
        assert time.monotonic() - t0 < 15  # named: the peer's wait inside the ring ended with the step's abort
        # Neither copy took the aborted step: replica 0 waited for replica 1's first chunk ("entering") or its
        # 4th ("half-way"), and its sum (or its new copy, three chunks of it written) was dropped with the step.
        with pytest.warns(UserWarning):
            s.run(step)  # the restarted replica gets the copies back, then the step runs
        for _ in range(3):
            s.run(step)
        after = s.experimental_local_results(s.run(_ring_chunks))
        copies = [np.asarray(c) for c in s.experimental_local_results(w)]
        steps = [int(np.asarray(v)) for v in s.experimental_local_results(opt.iterations)]
    assert steps == ([7, 7] if how == "apply_gradients" else [0, 0])
    assert after[0][2] != before[0][2] and after[0][2] == after[1][2]  # a new ring with the new worker
    assert [a[1] > 0 for a in after] == [True, True]
    expected = w0.copy()
    for _ in range(3 + 4):  # the three steps before, the four after; the aborted one nowhere
        expected = expected - np.float32(3.0) * np.float32(0.1)

    assert np.array_equal(copies[0], copies[1])
    assert np.array_equal(copies[0], expected)
