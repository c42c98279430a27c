"""The ring (collectives/ring.py) between two replicas on real Dask workers: ``ReplicaContext.all_reduce`` of a
large batch goes through it from the pair's second one on, with the bits of the all-gather-reduce
(``interdist.collectives.ring: false``) and of NumPy's sum; a training loop that all-reduces its gradients
itself and updates its copies leaves them equal to NumPy's steps either way."""

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


def _train(s: Any, on: bool, steps: int = 4) -> tuple[list[np.ndarray], list[Any], list[int]]:
    w0 = np.random.default_rng(3).normal(size=N).astype(np.float32)
    with s.scope():
        w = idist.Variable(w0, name=f"w_ring_{on}")

    def step() -> Any:
        ctx = idist.get_replica_context()
        r = ctx.replica_id_in_sync_group
        g = (np.asarray(w) * np.float32(0.01) + np.float32(r + 1)) * np.float32(0.5)
        total = ctx.all_reduce("sum", g)
        w.assign_sub(total * np.float32(0.1))
        return ctx.all_reduce("mean", g)[:5]

    s.run(_set_ring, args=(on,))
    try:
        before = s.experimental_local_results(s.run(_chunks_used))
        means = [s.experimental_local_results(s.run(step)) for _ in range(steps)]
        after = s.experimental_local_results(s.run(_chunks_used))
    finally:
        s.run(_set_ring, args=(True,))
    assert [a[0] for a in after] == [0, 1]
    used = [a[1] - max(b[1], 0) for a, b in zip(after, before, strict=True)]
    return [np.asarray(c) for c in s.experimental_local_results(w)], means, used


def test_all_reduces_through_the_ring_give_the_all_gather_reduces_bits_and_numpys(mirrored2: Any) -> None:
    with_ring, means_ring, used = _train(mirrored2, True)
    without, means_plain, unused = _train(mirrored2, False)
    assert min(used) > 0, used  # the ring carried the sums (from the pair's second large all-reduce)
    assert unused == [0, 0]
    assert np.array_equal(with_ring[0], with_ring[1])
    assert np.array_equal(with_ring[0], without[0]), np.flatnonzero(with_ring[0] != without[0])[:5]
    for a, b in zip(means_ring, means_plain, strict=True):
        assert [np.asarray(x).tolist() for x in a] == [np.asarray(x).tolist() for x in b]
    w = np.random.default_rng(3).normal(size=N).astype(np.float32)
    for _ in range(4):
        g = [(w * np.float32(0.01) + np.float32(r + 1)) * np.float32(0.5) for r in (0, 1)]
        w = w - np.add(g[0], g[1]) * np.float32(0.1)
    assert np.array_equal(with_ring[0], w)
