"""SGD's update of a large copy runs tile by tile in place (replica/fused_update.py), with NumPy's bits.

Inside ``run``, of mirrored variables, the update is fused with the gradients' all-reduce: a tile of the
sum is added up in rank order and applied while in the cache (``sum_assign_sub_scaled``), or, where two
replicas' ring runs (collectives/ring.py), ``v - sum * lr`` is written into a new copy as the sum comes
(``ring_swap``); the bits must be those of the sum, then ``v - sum * lr``.

``v.assign_sub(g * lr)`` is what Keras' SGD does (TF 2.21: two roundings, the product's and the
difference's); the tiled path runs the same two float32 ufuncs tile by tile, so every element must equal
NumPy's ``v - g * lr`` exactly, the copy-on-write contract of reads must hold (a read taken before the
update keeps its value), and every case the path does not cover must take ``assign_sub`` as before.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import dask
import numpy as np
import pytest

import interdist as idist
from interdist.collectives import ring, split
from interdist.optimizers import rules
from interdist.replica import fused_update

N = (1 << 20) // 4 + 12_345  # above MIN_BYTES, not a whole number of tiles
WAYS = [
    "all-gather-reduce",
    pytest.param("ring", marks=pytest.mark.skipif(bool(ring.unavailable_reason()), reason="ring")),
]


def _set_ring(on: bool) -> None:
    dask.config.set({"interdist.collectives.ring": on})  # in the worker's process, for its later collectives
    if on:  # the pair's first large all-reduce maps the ring: from here on the ring carries them
        idist.get_replica_context().all_reduce("sum", np.zeros(N, np.float32))


@contextmanager
def _way(s: Any, way: str) -> Iterator[str]:
    """The path a 2-replica fused update takes, by the way its all-reduce goes: "sum" or "ring"."""
    s.run(_set_ring, args=(way == "ring",))
    try:
        yield "ring" if way == "ring" else "sum"
    finally:
        s.run(_set_ring, args=(True,))


@pytest.mark.parametrize("way", WAYS)
def test_the_tiled_update_gives_numpys_bits_on_every_replica(mirrored2: Any, way: str) -> None:
    rng = np.random.default_rng(7)
    w0 = rng.normal(size=N).astype(np.float32)
    grads = [rng.normal(size=N).astype(np.float32) for _ in range(2)]
    with mirrored2.scope():
        w = idist.Variable(w0, name=f"w_fused_{way}")
        opt = idist.optimizers.SGD(0.37)

    def step(g: Any) -> Any:
        return _with_spy(lambda: opt.apply_gradients([(g, w)]))[1]

    per_replica = mirrored2.experimental_distribute_values_from_function(
        lambda ctx: grads[ctx.replica_id_in_sync_group]
    )
    with _way(mirrored2, way) as fused:
        for _ in range(3):
            paths = mirrored2.experimental_local_results(mirrored2.run(step, args=(per_replica,)))
            assert [list(p) for p in paths] == [[fused], [fused]]  # fused with the all-reduce (algorithms.py)
    expected = w0.copy()
    total = grads[0] + grads[1]  # the all-reduce adds in rank order
    for _ in range(3):
        expected = expected - total * np.float32(0.37)
    copies = [np.asarray(c) for c in mirrored2.experimental_local_results(w)]
    assert len(copies) == 2
    for c in copies:
        assert c.dtype == np.float32
        assert np.array_equal(c, expected), np.flatnonzero(c != expected)[:5]


def _with_spy(fn: Any) -> Any:
    """``fn``'s result and the path each SGD update it made took: ``"sum"`` (the update fused with the
    gradients' all-reduce, ``sum_assign_sub_scaled``), ``"ring"`` (written into a new copy by the ring,
    ``ring_swap``), ``"chunks"`` (from a split reduce-broadcast's chunks where they lie, ``sub_scaled_chunks``),
    ``"tiled"`` (``assign_sub_scaled`` on the reduced gradient) or ``"assign_sub"``.

    Runs where ``fn`` runs (on a replica's worker): the spies are set in that process for the call."""
    taken: list[str] = []
    real, real_sum, real_ring, real_chunks = (
        fused_update.assign_sub_scaled,
        fused_update.sum_assign_sub_scaled,
        fused_update.ring_swap,
        fused_update.sub_scaled_chunks,
    )

    def spy(*args: Any) -> Any:
        out = real(*args)
        taken.append("tiled" if out is not None else "assign_sub")
        return out

    def spy_sum(*args: Any) -> Any:
        out = real_sum(*args)
        if out:
            taken.append("sum")  # (declined: the update goes on through spy)
        return out

    def spy_ring(*args: Any) -> Any:
        out = real_ring(*args)
        if out is not None:
            taken.append("ring")
        return out

    def spy_chunks(*args: Any) -> Any:
        out = real_chunks(*args)
        if out:
            taken.append("chunks")  # (declined: the sum is made whole and the update goes on through spy)
        return out

    rules.assign_sub_scaled, rules.sum_assign_sub_scaled, rules.ring_swap = spy, spy_sum, spy_ring
    rules.sub_scaled_chunks = spy_chunks
    try:
        return fn(), taken
    finally:
        rules.assign_sub_scaled, rules.sum_assign_sub_scaled, rules.ring_swap = real, real_sum, real_ring
        rules.sub_scaled_chunks = real_chunks


@pytest.mark.parametrize("way", WAYS)
def test_a_read_alive_across_the_update_keeps_its_value(mirrored2: Any, way: str) -> None:
    with mirrored2.scope():
        w = idist.Variable(np.ones(N, np.float32), name=f"w_read_{way}")
        opt = idist.optimizers.SGD(0.1)

    def two_updates() -> Any:
        g = np.full(N, 0.5, np.float32)
        opt.apply_gradients([(g, w)])
        held = np.asarray(w)  # a read alive across the next update: that one must not write in place
        opt.apply_gradients([(g, w)])
        return held[:3].copy(), np.asarray(w)[:3].copy()

    with _way(mirrored2, way) as fused:
        out = mirrored2.experimental_local_results(mirrored2.run(lambda: _with_spy(two_updates)))
    first = np.float32(1) - np.float32(1.0) * np.float32(0.1)  # both replicas' 0.5 summed, times lr
    second = first - np.float32(1.0) * np.float32(0.1)
    # All-gather-reduce: fused with the all-reduce, then a copy on write (the read holds the copy). The ring
    # writes every step into a new copy: the read keeps the old one either way.
    for (held, after), taken in out:
        assert list(taken) == (["sum", "assign_sub"] if fused == "sum" else ["ring", "ring"])
        assert np.asarray(held).tolist() == [first] * 3
        assert np.asarray(after).tolist() == [second] * 3


def test_what_the_tiled_path_leaves_to_assign_sub(mirrored2: Any) -> None:
    """A small copy, a gradient of another dtype, momentum: assign_sub, with the results it gives."""
    with mirrored2.scope():
        small = idist.Variable(np.ones(8, np.float32), name="w_small")
        big = idist.Variable(np.ones(N, np.float32), name="w_big")
        plain = idist.optimizers.SGD(0.5)
        heavy = idist.optimizers.SGD(0.5, momentum=0.9)

    def updates() -> None:
        plain.apply_gradients([(np.full(8, 0.25, np.float32), small)])
        plain.apply_gradients([(np.full(N, 0.25, np.float64), big)])  # converted to float32 first: then tiled
        heavy.apply_gradients([(np.full(N, 0.25, np.float32), big)])  # momentum: no assign_sub(g * lr) at all

    out = mirrored2.experimental_local_results(mirrored2.run(lambda: _with_spy(updates)))
    assert [list(taken) for _, taken in out] == [["assign_sub", "tiled"]] * 2
    assert [float(np.asarray(c)[0]) for c in mirrored2.experimental_local_results(small)] == [0.75, 0.75]
    # 1 - 0.5 * 0.5, then momentum's first step: m = -0.5 * 0.5, v += m
    assert [float(np.asarray(c)[-1]) for c in mirrored2.experimental_local_results(big)] == [0.5, 0.5]


def test_outside_update_context_it_refuses() -> None:
    w = idist.Variable(np.ones(N, np.float32))
    assert fused_update.assign_sub_scaled(w, np.ones(N, np.float32), 0.1) is None  # not a replica's copy


@pytest.mark.filterwarnings("ignore:the replica function .* pickles to:UserWarning")  # (its arrays are the test)
def test_the_update_fused_with_a_three_replica_sum_gives_its_bits() -> None:
    """Three replicas: each tile of the sum is ``(g0 + g1) + g2`` in float32, as ``_reduce_owned`` adds
    (its blocked sum), then ``v - sum * lr``; a small variable of the same batch is reduced and updated as
    before, and every copy ends equal."""
    rng = np.random.default_rng(11)
    w0 = rng.normal(size=N).astype(np.float32)
    grads = [rng.normal(size=N).astype(np.float32) * np.float32(10 ** (r - 1)) for r in range(3)]
    with idist.MirroredStrategy(["CPU:0", "CPU:1", "CPU:2"]) as s3:
        with s3.scope():
            w = idist.Variable(w0, name="w_fused3")
            b = idist.Variable(np.ones(4, np.float32), name="b_fused3")
            opt = idist.optimizers.SGD(0.3)

        def step(algorithm: str, owners: int = 1, with_b: bool = True) -> Any:
            ctx = idist.get_replica_context()
            g = grads[ctx.replica_id_in_sync_group]
            coll = ctx._replica.collectives  # type: ignore[attr-defined]
            (auto, coll.algorithm), (joined, coll.owners) = (coll.algorithm, algorithm), (coll.owners, owners)
            threshold, split.SPLIT_MIN_ELEMENTS = split.SPLIT_MIN_ELEMENTS, 1  # (the model splits from ~2.5 MB)
            pairs = [(g, w), (g[:4].copy(), b)] if with_b else [(g, w)]
            try:
                return _with_spy(lambda: opt.apply_gradients(pairs))[1]
            finally:
                coll.algorithm, coll.owners, split.SPLIT_MIN_ELEMENTS = auto, joined, threshold

        # AUTO picks reduce-broadcast for 3 replicas on one host: with one owner (replicas not pinned round
        # the cores), the root makes the sum and sends it, and updates from it; the others update from the sum
        # where the root sent it. All-gather-reduce (forced here, on every replica alike): every replica adds
        # up the sum tile by tile as it updates. Split between two owners (set here; where two replicas share
        # each core, the join sets it: collectives/split.py), every replica updates from the owners' chunks.
        paths = s3.experimental_local_results(s3.run(step, args=("auto",)))
        # (b: too small for the tiled path)
        assert [list(p) for p in paths] == [["tiled", "assign_sub"], ["sum", "assign_sub"], ["sum", "assign_sub"]]
        paths = s3.experimental_local_results(s3.run(step, args=("auto", 2)))
        assert [list(p) for p in paths] == [["chunks", "assign_sub"]] * 3
        # w alone: each owner's sum written straight into the segment the others read (no chunk in a header)
        paths = s3.experimental_local_results(s3.run(step, args=("auto", 2, False)))
        assert [list(p) for p in paths] == [["chunks"]] * 3
        paths = s3.experimental_local_results(s3.run(step, args=("all-gather-reduce",)))
        assert [list(p) for p in paths] == [["sum", "assign_sub"]] * 3
        total = (grads[0] + grads[1]) + grads[2]
        lr = np.float32(0.3)
        for c in s3.experimental_local_results(w):
            assert np.array_equal(np.asarray(c), (((w0 - total * lr) - total * lr) - total * lr) - total * lr)
        for c in s3.experimental_local_results(b):
            b3 = ((np.ones(4, np.float32) - total[:4] * lr) - total[:4] * lr) - total[:4] * lr
            assert np.array_equal(np.asarray(c), b3)
