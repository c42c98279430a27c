"""A replica that dies while its peer waits inside the ring (collectives/ring.py): the peer's wait in compiled
code ends at the step's abort, the death is named, no copy is half-updated, and the pair trains on through a
new ring with the restarted worker."""

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

    def die(*args: Any, **kwargs: Any) -> None:
        os._exit(3)

    ring_module.exchange = die


def _ring_chunks() -> tuple[int, int, str]:
    ctx = idist.get_replica_context()
    got = ctx._replica.collectives.transport._ring  # type: ignore[attr-defined]
    return ctx.replica_id_in_sync_group, -1 if got is None else int(got.state[1]), "" if got is None else got.name


def test_a_replica_dying_while_its_peer_waits_in_the_ring_is_named_and_the_pair_goes_on() -> None:
    w0 = np.random.default_rng(1).normal(size=N).astype(np.float32)
    with idist.MirroredStrategy(["CPU:0", "CPU:1"]) as s:
        with s.scope():
            w = idist.Variable(w0, name="w_ring_fault")
            opt = idist.optimizers.SGD(0.1)

        def step() -> None:
            r = idist.get_replica_context().replica_id_in_sync_group
            opt.apply_gradients([(np.full(N, r + 1.0, np.float32), w)])  # summed: 3 everywhere

        for _ in range(3):
            s.run(step)
        before = s.experimental_local_results(s.run(_ring_chunks))
        assert [b[1] > 0 for b in before] == [True, True]  # the ring carries the steps

        s.run(lambda: _die_entering_the_ring() if idist.get_replica_context().replica_id_in_sync_group == 1 else None)
        t0 = time.monotonic()
        with pytest.raises(idist.WorkerLostError, match="replica 1"):
            s.run(step)
        assert time.monotonic() - t0 < 15  # named: the peer's wait inside the ring ended with the step's abort
        # Neither copy took the aborted step (replica 0 waited for replica 1's first chunk before any update).
        with pytest.warns(UserWarning):
            s.run(step)  # the restarted replica gets the copies back, then the step runs
        for _ in range(3):
            s.run(step)
        after = s.experimental_local_results(s.run(_ring_chunks))
        copies = [np.asarray(c) for c in s.experimental_local_results(w)]
    assert after[0][2] != before[0][2] and after[0][2] == after[1][2]  # a new ring with the new worker
    assert [a[1] > 0 for a in after] == [True, True]
    expected = w0.copy()
    for _ in range(3 + 4):  # the three steps before, the four after; the aborted one nowhere
        expected = expected - np.float32(3.0) * np.float32(0.1)
    assert np.array_equal(copies[0], copies[1])
    assert np.array_equal(copies[0], expected)
