"""Assigns with random shapes, dtypes and aggregations: right values, and never a half-updated replica."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import interdist as idist

AGGREGATIONS = [idist.VariableAggregation.SUM, idist.VariableAggregation.MEAN,
                idist.VariableAggregation.ONLY_FIRST_REPLICA, idist.VariableAggregation.NONE]


@pytest.fixture(scope="module")
def s3() -> Iterator[idist.MirroredStrategy]:
    s = idist.MirroredStrategy(["CPU:0", "CPU:1", "CPU:2"])
    yield s
    s.close()


shapes = st.lists(st.integers(1, 3), min_size=0, max_size=2).map(tuple)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(shape=shapes, agg=st.sampled_from(AGGREGATIONS), start=st.integers(-3, 3), bad=st.booleans())
def test_replica_assign_add_follows_aggregation(s3: idist.MirroredStrategy, shape: tuple[int, ...],
                                                agg: idist.VariableAggregation, start: int, bad: bool) -> None:
    n = 3
    bad_shape = bad
    with s3.scope():
        v = idist.Variable(np.full(shape, start, np.float32), aggregation=agg)

    def step() -> None:
        r = int(idist.get_replica_context().replica_id_in_sync_group)
        delta_shape = shape + (1,) if bad_shape and r == n - 1 else shape  # the last replica sends a wrong shape
        v.assign_add(np.full(delta_shape, r + 1, np.float32))

    if bad and agg == idist.VariableAggregation.ONLY_FIRST_REPLICA:
        bad = False  # only replica 0's update counts: the last replica's wrong shape is never used
    if bad:
        # The failing replica's own error; the peers released by the abort are secondary and not raised.
        with pytest.raises(ValueError, match=r"Shapes .* are incompatible \(assigning to variable"):
            s3.run(step)
        # No replica is half-updated: a failed step changes no copy, or (aggregation NONE, where
        # each replica writes alone) only the replicas that did not fail.
        copies = [np.asarray(c) for c in s3.experimental_local_results(v)]
        assert np.array_equal(copies[n - 1], np.full(shape, start, np.float32))
        if agg != idist.VariableAggregation.NONE:
            assert all(np.array_equal(c, np.full(shape, start, np.float32)) for c in copies)
        return
    s3.run(step)
    copies = [np.asarray(c) for c in s3.experimental_local_results(v)]
    expected = {
        idist.VariableAggregation.SUM: [start + 6] * n,         # 1 + 2 + 3
        idist.VariableAggregation.MEAN: [start + 2] * n,        # (1 + 2 + 3) / 3
        idist.VariableAggregation.ONLY_FIRST_REPLICA: [start + 1] * n,
        idist.VariableAggregation.NONE: [start + 1, start + 2, start + 3],
    }[agg]
    for c, e in zip(copies, expected):
        assert c.shape == shape and np.array_equal(c, np.full(shape, e, np.float32))
    if agg == idist.VariableAggregation.NONE:
        assert idist.debug.replica_divergence(s3, [v])["Variable"].max_abs_diff == 2.0


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(shape=shapes, wrong=st.sampled_from(["shape", "dtype", "other_strategy", "none"]))
def test_cross_replica_assign_checked_before_any_replica(s3: idist.MirroredStrategy, shape: tuple[int, ...],
                                                         wrong: str) -> None:
    with s3.scope():
        v = idist.Variable(np.ones(shape, np.float32))
    value: object = np.full(shape, 5.0, np.float32)
    if wrong == "shape":
        value = np.full(shape + (2,), 5.0, np.float32)
    elif wrong == "dtype":
        value = np.full(shape, 5.0, np.float64)
    if wrong in ("shape", "dtype"):
        with pytest.raises(ValueError):
            v.assign(value)
        assert all(np.array_equal(np.asarray(c), np.ones(shape, np.float32))
                   for c in s3.experimental_local_results(v))
    elif wrong == "other_strategy":
        with idist.OneDeviceStrategy("CPU:0") as other, pytest.raises(ValueError, match="another strategy"):
            other.run(lambda x: x, args=(v,))
    else:
        v.assign(value)
        assert all(np.array_equal(np.asarray(c), value) for c in s3.experimental_local_results(v))
