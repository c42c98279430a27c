"""Training steps of two replicas on one host through the ring (collectives/ring.py), on real Dask workers.

The ring changes how a large gradient all-reduce moves, never what it gives: SGD (updated in the ring), SGD
with momentum and Adam (given the sum) must leave every replica's copy with the bits the all-gather-reduce
gives (``interdist.collectives.ring: false``), and those of NumPy's sum and update.
"""

from __future__ import annotations

from typing import Any

import dask
import numpy as np
import pytest

import interdist as idist
from interdist.collectives import ring

pytestmark = pytest.mark.skipif(bool(ring.unavailable_reason()), reason=ring.unavailable_reason() or "ring")

N = (1 << 20) // 4 + 12_345  # float32: above the ring's 1 MB, not a whole number of chunks


def _set_ring(on: bool) -> None:
    dask.config.set({"interdist.collectives.ring": on})  # in the worker's process, for its later collectives


def _chunks_used() -> tuple[int, int]:
    """(this replica's rank, chunks of its peer's it consumed through the ring so far; -1: no ring)."""
    ctx = idist.get_replica_context()
    got = ctx._replica.collectives.transport._ring  # type: ignore[attr-defined]
    return ctx.replica_id_in_sync_group, -1 if got is None else int(got.state[1])


def _train(s: Any, make_opt: Any, on: bool, steps: int = 4) -> tuple[list[np.ndarray], list[int]]:
    rng = np.random.default_rng(3)
    w0 = rng.normal(size=N).astype(np.float32)
    with s.scope():
        w = idist.Variable(w0, name=f"w_ring_{on}")
        opt = make_opt()

    def step() -> None:
        r = idist.get_replica_context().replica_id_in_sync_group
        g = (np.asarray(w) * np.float32(0.01) + np.float32(r + 1)) * np.float32(0.5)
        opt.apply_gradients([(g, w)])

    s.run(_set_ring, args=(on,))
    try:
        before = s.experimental_local_results(s.run(_chunks_used))
        for _ in range(steps):
            s.run(step)
        after = s.experimental_local_results(s.run(_chunks_used))
    finally:
        s.run(_set_ring, args=(True,))
    used = [a[1] - max(b[1], 0) for a, b in zip(after, before, strict=True)]
    assert [a[0] for a in after] == [0, 1]
    return [np.asarray(c) for c in s.experimental_local_results(w)], used


@pytest.mark.parametrize(
    "make_opt",
    [
        lambda: idist.optimizers.SGD(0.1),
        lambda: idist.optimizers.SGD(0.1, momentum=0.9),
        lambda: idist.optimizers.Adam(1e-3),
    ],
    ids=["sgd", "momentum", "adam"],
)
def test_the_ring_leaves_the_all_gather_reduces_bits_on_every_copy(mirrored2: Any, make_opt: Any) -> None:
    with_ring, used = _train(mirrored2, make_opt, True)
    without, unused = _train(mirrored2, make_opt, False)
    assert min(used) > 0, used  # the ring carried the gradients (from the pair's second large all-reduce)
    assert unused == [0, 0]
    for c in with_ring + without:
        assert c.dtype == np.float32
    assert np.array_equal(with_ring[0], with_ring[1])
    assert np.array_equal(with_ring[0], without[0]), np.flatnonzero(with_ring[0] != without[0])[:5]


def test_sgd_through_the_ring_is_numpys_sum_then_update(mirrored2: Any) -> None:
    copies, used = _train(mirrored2, lambda: idist.optimizers.SGD(0.1), True, steps=3)
    assert min(used) > 0
    w = np.random.default_rng(3).normal(size=N).astype(np.float32)
    for _ in range(3):
        g = [(w * np.float32(0.01) + np.float32(r + 1)) * np.float32(0.5) for r in (0, 1)]
        w = w - np.add(g[0], g[1]) * np.float32(0.1)
    for c in copies:
        assert np.array_equal(c, w)
