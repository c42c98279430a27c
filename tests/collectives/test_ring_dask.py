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

    means, used = _steps(s, on, step, steps)
    return [np.asarray(c) for c in s.experimental_local_results(w)], means, used


def _steps(s: Any, on: bool, step: Any, steps: int) -> tuple[list[Any], list[int]]:
    """``steps`` runs of ``step`` with the ring ``on`` (on again after): their results, and the chunks of its
    peer's each replica consumed through the ring meanwhile."""
    s.run(_set_ring, args=(on,))
    try:
        before = s.experimental_local_results(s.run(_chunks_used))
        results = [s.experimental_local_results(s.run(step)) for _ in range(steps)]
        after = s.experimental_local_results(s.run(_chunks_used))
    finally:
        s.run(_set_ring, args=(True,))
    assert [a[0] for a in after] == [0, 1]
    return results, [a[1] - max(b[1], 0) for a, b in zip(after, before, strict=True)]


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


def _sgd(
    s: Any, on: bool, dtype: Any, momentum: float, steps: int = 4
) -> tuple[list[np.ndarray], list[Any], list[int]]:
    """``steps`` of ``SGD.apply_gradients`` inside ``run``; each step also holds a read of the copy across the
    update and reports whether it kept its values while the copy moved on."""
    w0 = np.random.default_rng(5).normal(size=N).astype(dtype)
    with s.scope():
        w = idist.Variable(w0, name=f"w_sgd_{on}_{np.dtype(dtype).name}_{momentum}")
        opt = idist.optimizers.SGD(0.1, momentum=momentum)

    def step() -> bool:
        r = idist.get_replica_context().replica_id_in_sync_group
        t = np.dtype(dtype).type
        g = (np.asarray(w) * t(0.01) + t(r + 1)) * t(0.5)
        held = np.asarray(w)  # a read alive across the update
        kept = held.copy()
        opt.apply_gradients([(g, w)])
        return bool(np.array_equal(held, kept) and not np.array_equal(np.asarray(w), kept))

    held, used = _steps(s, on, step, steps)
    return [np.asarray(c) for c in s.experimental_local_results(w)], held, used


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_sgd_through_the_ring_gives_the_all_gather_reduces_copies_and_leaves_reads_alone(
    mirrored2: Any, dtype: Any
) -> None:
    # The ring writes w - (g0 + g1) * lr into a new copy as the sum comes (fused_update.ring_swap); the
    # all-gather-reduce updates the copy in place once every part came. The same bits, NumPy's, either way; a
    # read taken before the step keeps what it read (copy on write), as a TF tensor read from a variable.
    with_ring, held_ring, used = _sgd(mirrored2, True, dtype, 0.0)
    without, held_plain, unused = _sgd(mirrored2, False, dtype, 0.0)
    assert min(used) > 0, used
    assert unused == [0, 0]
    assert all(all(h) for h in held_ring) and all(all(h) for h in held_plain)
    t = np.dtype(dtype).type
    lr = t(np.float32(0.1))  # Keras 3's learning rate is a float32 variable, cast to the variable's dtype
    w = np.random.default_rng(5).normal(size=N).astype(dtype)
    for _ in range(4):
        g = [(w * t(0.01) + t(r + 1)) * t(0.5) for r in (0, 1)]
        w = w - np.add(g[0], g[1]) * lr
    for copies in (with_ring, without):
        assert copies[0].dtype == dtype
        assert np.array_equal(copies[0], copies[1])
        assert np.array_equal(copies[0], w), np.flatnonzero(copies[0] != w)[:5]


def test_sgd_with_momentum_takes_the_rings_sum_and_its_own_update(mirrored2: Any) -> None:
    # No fused kernel for momentum: the ring returns the sum, then _apply_dense (Keras' rule) runs.
    with_ring, _, used = _sgd(mirrored2, True, np.float32, 0.9)
    without, _, _ = _sgd(mirrored2, False, np.float32, 0.9)
    assert min(used) > 0, used
    assert np.array_equal(with_ring[0], with_ring[1]) and np.array_equal(with_ring[0], without[0])
    w = np.random.default_rng(5).normal(size=N).astype(np.float32)
    m = np.zeros_like(w)
    for _ in range(4):
        g = [(w * np.float32(0.01) + np.float32(r + 1)) * np.float32(0.5) for r in (0, 1)]
        grad = np.add(g[0], g[1])
        m = m * np.float32(0.9) - grad * np.float32(0.1)
        w = w + m
    assert np.array_equal(with_ring[0], w), np.flatnonzero(with_ring[0] != w)[:5]


def _twice(s: Any, on: bool) -> list[np.ndarray]:
    """Three steps of ``apply_gradients([(g1, w), (g2, w)])`` with the ring ``on``: the copies."""
    with s.scope():
        w = idist.Variable(np.random.default_rng(9).normal(size=N).astype(np.float32), name=f"w_twice_{on}")
        opt = idist.optimizers.SGD(0.1)

    def step() -> None:
        r = idist.get_replica_context().replica_id_in_sync_group
        opt.apply_gradients([(np.full(N, r + 1.0, np.float32), w), (np.full(N, 10.0 * (r + 1), np.float32), w)])

    _steps(s, on, step, 3)
    return [np.asarray(c) for c in s.experimental_local_results(w)]


def test_a_variable_given_twice_takes_both_updates_through_the_ring(mirrored2: Any) -> None:
    # apply_gradients([(g1, w), (g2, w)]): each update applies to the copy the one before left, as the
    # all-gather-reduce's in-place updates do; two new copies made from the same old one would keep one.
    copies = {on: _twice(mirrored2, on) for on in (True, False)}
    expected = np.random.default_rng(9).normal(size=N).astype(np.float32)
    for _ in range(3):
        expected = expected - np.float32(3.0) * np.float32(0.1)
        expected = expected - np.float32(30.0) * np.float32(0.1)
    for on in (True, False):
        assert np.array_equal(copies[on][0], copies[on][1])
        assert np.array_equal(copies[on][0], expected), (on, np.flatnonzero(copies[on][0] != expected)[:5])
