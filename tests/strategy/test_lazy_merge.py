"""merge_call's large arguments are held back: a reduction of them is one all-reduce, not a gather.

The values must be TF's (the sum in rank order, every replica's values when merge_fn asks
for them), and the bytes must not travel: the merge_call exchange carries a skeleton only.
Arrays below 64 KB travel with the skeleton as before, so the same program on a small
slice is the reference for the held path (reductions are elementwise: a slice of the big
result has the bits of the small one's).
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

import interdist as idist
from interdist import events

BIG = 1 << 15  # float32 elements: 128 KB, held back
SMALL = 64  # 256 bytes: travels with the skeleton


@pytest.fixture(scope="module")
def s3() -> Iterator[idist.MirroredStrategy]:
    s = idist.MirroredStrategy(["CPU:0", "CPU:1", "CPU:2"])
    yield s
    s.close()


def _data(rid: int, n: int, dtype: str = "float32") -> np.ndarray:
    rng = np.random.default_rng(100 + rid)
    a = rng.normal(size=n) * 1000
    return a.astype(dtype)


def _exits(s: idist.MirroredStrategy, since: int) -> list[events.CollectiveExited]:
    return [
        e
        for e in list(s.events.events)[since:]
        if isinstance(e, events.CollectiveExited) and e.group == s._group_id and e.replica == 0
    ]


def test_apply_gradients_is_one_all_reduce_and_exact(s3: idist.MirroredStrategy) -> None:
    """Mirrored variables, NumPy gradients: no merge_call exchange at all (extended_view.py), one all-reduce
    of the whole batch, and the sum in rank order, as the merge_call path gives it."""
    with s3.scope():
        w = idist.Variable(np.ones(BIG, np.float32), name="w_lazy")
        b = idist.Variable(np.zeros(SMALL, np.float32), name="b_lazy")
        opt = idist.optimizers.SGD(0.5)

    def step() -> None:
        rid = idist.get_replica_context().replica_id_in_sync_group
        opt.apply_gradients([(_data(rid, BIG), w), (_data(rid, SMALL), b)])

    since = len(s3.events.events)
    s3.run(step)
    g = _data(0, BIG) + _data(1, BIG) + _data(2, BIG)  # float32, in rank order
    gb = _data(0, SMALL) + _data(1, SMALL) + _data(2, SMALL)
    for copy in s3.experimental_local_results(w):
        np.testing.assert_array_equal(np.asarray(copy), np.ones(BIG, np.float32) - np.float32(0.5) * g)
    for copy in s3.experimental_local_results(b):
        np.testing.assert_array_equal(np.asarray(copy), np.zeros(SMALL, np.float32) - np.float32(0.5) * gb)
    assert [int(np.asarray(c)) for c in s3.experimental_local_results(opt.iterations)] == [1, 1, 1]
    colls = _exits(s3, since)
    assert [e.op for e in colls] == ["all_reduce"], [(e.op, e.nbytes) for e in colls]
    assert colls[0].nbytes >= 4 * (BIG + SMALL)


class _OwnMerge(idist.optimizers.SGD):
    """An optimizer with its own ``_distributed_apply``: its merge must run, in a merge_call."""

    merged = 0

    def _distributed_apply(
        self, strategy: object, pairs: list[tuple[object, object]], from_notebook: bool = False
    ) -> None:
        type(self).merged += 1
        super()._distributed_apply(strategy, pairs, from_notebook)


def test_an_optimizer_with_its_own_merge_goes_through_merge_call(s3: idist.MirroredStrategy) -> None:
    with s3.scope():
        w = idist.Variable(np.ones(BIG, np.float32), name="w_own_merge")
        opt = _OwnMerge(0.5)

    def step() -> int:
        rid = idist.get_replica_context().replica_id_in_sync_group
        before = type(opt).merged
        opt.apply_gradients([(_data(rid, BIG), w)])
        return 100 * rid + type(opt).merged - before

    since = len(s3.events.events)
    merged = s3.experimental_local_results(s3.run(step))
    assert [int(m) for m in merged] == [1, 101, 201]  # its merge ran once on every replica
    g = _data(0, BIG) + _data(1, BIG) + _data(2, BIG)
    for copy in s3.experimental_local_results(w):
        np.testing.assert_array_equal(np.asarray(copy), np.ones(BIG, np.float32) - np.float32(0.5) * g)
    colls = _exits(s3, since)
    merges = [e for e in colls if e.op == "merge_call"]
    reduces = [e for e in colls if e.op == "all_reduce"]
    assert len(merges) == 1 and len(reduces) == 1, [(e.op, e.nbytes) for e in colls]
    assert merges[0].nbytes < 4096  # the skeleton, not the 128 KB gradient


def test_apply_gradients_of_batches_that_differ_fails_every_replica_and_updates_none(
    s3: idist.MirroredStrategy,
) -> None:
    """One replica's gradient batch is not the others' (a shape, then a count): every replica fails with a
    ValueError kind (ReplicaMismatchError, as the merge_call path's reduction raises) before any update,
    and the strategy stays usable."""
    with s3.scope():
        w = idist.Variable(np.ones(SMALL, np.float32), name="w_mismatch")
        u = idist.Variable(np.ones(SMALL, np.float32), name="u_mismatch")
        opt = idist.optimizers.SGD(0.5)

    def shape(n: int) -> None:
        rid = idist.get_replica_context().replica_id_in_sync_group
        g = np.ones(n + (rid == 2), np.float32)  # replica 2: one element more
        opt.apply_gradients([(g, w)])

    def count() -> None:
        rid = idist.get_replica_context().replica_id_in_sync_group
        pairs = [(np.ones(SMALL, np.float32), w), (np.ones(SMALL, np.float32), u)]
        opt.apply_gradients(pairs[: 1 + (rid == 1)])  # replica 1: two gradients, the others one

    for fn, args in ((shape, (SMALL,)), (shape, (BIG,)), (count, ())):
        with pytest.raises(ValueError) as info:
            s3.run(fn, args=args)
        assert "replica" in str(info.value)
    for v in (w, u):
        for copy in s3.experimental_local_results(v):
            np.testing.assert_array_equal(np.asarray(copy), np.ones(SMALL, np.float32))
    assert [int(np.asarray(c)) for c in s3.experimental_local_results(opt.iterations)] == [0, 0, 0]
    out = s3.run(lambda: idist.get_replica_context().all_reduce("SUM", np.float32(1)))
    assert float(np.asarray(s3.experimental_local_results(out)[0])) == 3.0


@pytest.mark.parametrize(
    ("dtype", "op"),
    [("float32", "SUM"), ("float32", "MEAN"), ("float64", "MEAN"), ("int32", "SUM"), ("int64", "MEAN")],
)
def test_held_reduce_has_the_bits_of_the_gathered_reduce(s3: idist.MirroredStrategy, dtype: str, op: str) -> None:
    def merge_fn(strategy: object, big: object, small: object) -> tuple[object, object, object]:
        ext = strategy.extended  # type: ignore[attr-defined]
        r_big = strategy.reduce(op, big, axis=None)  # type: ignore[attr-defined]
        r_small = strategy.reduce(op, small, axis=None)  # type: ignore[attr-defined]
        # (two int32 values in one batch: TF's MirroredStrategy refuses them, test_batch_reduce_dtypes.py)
        pairs = [(big, big), (small, small)] if dtype != "int32" else [(big, big)]
        batched = ext.batch_reduce_to(op, pairs)
        return r_big, r_small, batched[0]

    def step() -> tuple[object, object, object]:
        rid = idist.get_replica_context().replica_id_in_sync_group
        big = _data(rid, BIG, dtype)
        return idist.get_replica_context().merge_call(merge_fn, args=(big, big[:SMALL].copy()))

    r_big, r_small, batched = (np.asarray(x) for x in s3.experimental_local_results(s3.run(step))[0])
    assert r_big.dtype == r_small.dtype and r_big.shape == (BIG,)
    np.testing.assert_array_equal(r_big[:SMALL], r_small)
    np.testing.assert_array_equal(batched, r_big)
    total = _data(0, BIG, dtype) + _data(1, BIG, dtype) + _data(2, BIG, dtype)
    if op == "SUM":
        np.testing.assert_array_equal(r_big, total)
    else:
        np.testing.assert_allclose(r_big, total / 3, rtol=1e-6)


def test_merge_fn_still_sees_every_replicas_values(s3: idist.MirroredStrategy) -> None:
    def merge_fn(strategy: object, big: object) -> object:
        parts = strategy.experimental_local_results(big)  # type: ignore[attr-defined]
        summed = strategy.reduce("SUM", big, axis=0)  # type: ignore[attr-defined]
        return np.stack([np.asarray(p) for p in parts]), summed

    def step() -> object:
        rid = idist.get_replica_context().replica_id_in_sync_group
        return idist.get_replica_context().merge_call(merge_fn, args=(_data(rid, BIG),))

    since = len(s3.events.events)
    stacked, summed = (np.asarray(x) for x in s3.experimental_local_results(s3.run(step))[1])
    for r in range(3):
        np.testing.assert_array_equal(stacked[r], _data(r, BIG))
    assert summed.shape == ()
    # one skeleton exchange, then one gather of the held values for experimental_local_results
    assert [e.op for e in _exits(s3, since)] == ["merge_call", "merge_call"]


def test_update_with_a_held_value_uses_the_local_one(s3: idist.MirroredStrategy) -> None:
    """extended.update(var, fn, args=(per_replica,)) gives each replica its own component: nothing moves."""
    with s3.scope():
        v = idist.Variable(np.zeros(BIG, np.float32), name="v_lazy", synchronization=idist.VariableSynchronization.ON_READ,
                           aggregation=idist.VariableAggregation.SUM)

    def merge_fn(strategy: object, x: object) -> None:
        strategy.extended.update(v, lambda var, val: var.assign(val), args=(x,))  # type: ignore[attr-defined]

    def step() -> None:
        rid = idist.get_replica_context().replica_id_in_sync_group
        idist.get_replica_context().merge_call(merge_fn, args=(_data(rid, BIG),))

    since = len(s3.events.events)
    s3.run(step)
    for r, copy in enumerate(s3.experimental_local_results(v)):
        np.testing.assert_array_equal(np.asarray(copy), _data(r, BIG))
    assert [e.op for e in _exits(s3, since)] == ["merge_call"]


def test_mismatched_shapes_fail_as_the_gathered_path_does(s3: idist.MirroredStrategy) -> None:
    def merge_fn(strategy: object, x: object) -> object:
        return strategy.reduce("SUM", x, axis=None)  # type: ignore[attr-defined]

    def step(n: int) -> object:
        rid = idist.get_replica_context().replica_id_in_sync_group
        return idist.get_replica_context().merge_call(merge_fn, args=(_data(rid, n + rid),))

    errors = []
    for n in (SMALL, BIG):  # gathered (small) and held (big)
        with pytest.raises(Exception) as info:
            s3.run(step, args=(n,))
        errors.append(type(info.value))
    assert errors[0] is errors[1] and issubclass(errors[0], ValueError)
    # still usable
    out = s3.run(lambda: idist.get_replica_context().all_reduce("SUM", np.float32(1)))
    assert float(np.asarray(s3.experimental_local_results(out)[0])) == 3.0


def test_held_values_are_gone_after_merge_fn(s3: idist.MirroredStrategy) -> None:
    kept: list[object] = []

    def merge_fn(strategy: object, x: object) -> None:
        kept.append(x)

    def step() -> None:
        rid = idist.get_replica_context().replica_id_in_sync_group
        idist.get_replica_context().merge_call(merge_fn, args=(_data(rid, BIG),))
        kept[-1].values  # type: ignore[attr-defined]  # noqa: B018 - the read is the test

    with pytest.raises(RuntimeError, match="only while merge_fn runs"):
        s3.run(step)
