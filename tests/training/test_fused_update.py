"""SGD's update of a large copy runs tile by tile in place (replica/fused_update.py), with NumPy's bits.

``v.assign_sub(g * lr)`` is what Keras' SGD does (TF 2.21: two roundings, the product's and the
difference's); the tiled path runs the same two float32 ufuncs tile by tile, so every element must equal
NumPy's ``v - g * lr`` exactly, the copy-on-write contract of reads must hold (a read taken before the
update keeps its value), and every case the path does not cover must take ``assign_sub`` as before.
"""

from __future__ import annotations

from typing import Any

import numpy as np

import interdist as idist
from interdist.optimizers import rules
from interdist.replica import fused_update

N = (1 << 20) // 4 + 12_345  # above MIN_BYTES, not a whole number of tiles


def test_the_tiled_update_gives_numpys_bits_on_every_replica(mirrored2: Any) -> None:
    rng = np.random.default_rng(7)
    w0 = rng.normal(size=N).astype(np.float32)
    grads = [rng.normal(size=N).astype(np.float32) for _ in range(2)]
    with mirrored2.scope():
        w = idist.Variable(w0, name="w_fused")
        opt = idist.optimizers.SGD(0.37)

    def step(g: Any) -> None:
        opt.apply_gradients([(g, w)])

    per_replica = mirrored2.experimental_distribute_values_from_function(
        lambda ctx: grads[ctx.replica_id_in_sync_group]
    )
    for _ in range(3):
        mirrored2.run(step, args=(per_replica,))
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
    """``fn``'s result and whether each SGD update it made took the tiled path (True) or assign_sub (False).

    Runs where ``fn`` runs (on a replica's worker): the spy is set in that process for the call."""
    taken: list[bool] = []
    real = fused_update.assign_sub_scaled

    def spy(*args: Any) -> Any:
        out = real(*args)
        taken.append(out is not None)
        return out

    rules.assign_sub_scaled = spy
    try:
        return fn(), taken
    finally:
        rules.assign_sub_scaled = real


def test_a_read_alive_across_the_update_keeps_its_value(mirrored2: Any) -> None:
    with mirrored2.scope():
        w = idist.Variable(np.ones(N, np.float32), name="w_read")
        opt = idist.optimizers.SGD(0.1)

    def two_updates() -> Any:
        g = np.full(N, 0.5, np.float32)
        opt.apply_gradients([(g, w)])
        held = np.asarray(w)  # a read alive across the next update: that one must not write in place
        opt.apply_gradients([(g, w)])
        return held[:3].copy(), np.asarray(w)[:3].copy()

    out = mirrored2.experimental_local_results(mirrored2.run(lambda: _with_spy(two_updates)))
    first = np.float32(1) - np.float32(1.0) * np.float32(0.1)  # both replicas' 0.5 summed, times lr
    second = first - np.float32(1.0) * np.float32(0.1)
    for (held, after), taken in out:
        assert list(taken) == [True, False]
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
    assert [list(taken) for _, taken in out] == [[False, True], [False, True]]
    assert [float(np.asarray(c)[0]) for c in mirrored2.experimental_local_results(small)] == [0.75, 0.75]
    # 1 - 0.5 * 0.5, then momentum's first step: m = -0.5 * 0.5, v += m
    assert [float(np.asarray(c)[-1]) for c in mirrored2.experimental_local_results(big)] == [0.5, 0.5]


def test_outside_update_context_it_refuses() -> None:
    w = idist.Variable(np.ones(N, np.float32))
    assert fused_update.assign_sub_scaled(w, np.ones(N, np.float32), 0.1) is None  # not a replica's copy
