"""Keras metrics under MirroredStrategy: each replica accumulates its own batches, a read in the notebook sums them.

The expected numbers were recorded from TensorFlow 2.21 (Keras 3.15) with ``MirroredStrategy(["CPU:0", "CPU:1"])``
on two logical CPUs, fed the same per-replica batches through ``experimental_distribute_values_from_function``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import interdist as idist

P0 = np.array([[0.1, 0.6, 0.3], [0.05, 0.95, 0.0], [0.7, 0.2, 0.1]], np.float32)
L0 = np.array([2, 1, 0])
W0 = np.array([1.0, 0.5, 2.0], np.float32)
P1 = np.array([[0.2, 0.3, 0.5], [0.6, 0.3, 0.1]], np.float32)
L1 = np.array([0, 0])
W1 = np.array([3.0, 1.0], np.float32)


def assert_close(actual: Any, expected: float) -> None:
    np.testing.assert_allclose(np.asarray(actual), np.float32(expected), rtol=1e-6)


def _locals(s: idist.MirroredStrategy, value: Any) -> list[float]:
    return [float(np.asarray(c)) for c in s.experimental_local_results(value)]


def test_tutorial_metrics_aggregate_over_two_replicas(mirrored2: idist.MirroredStrategy) -> None:
    s = mirrored2
    M = idist.metrics
    with s.scope():
        acc, xent, wacc, loss = (
            M.SparseCategoricalAccuracy(),
            M.SparseCategoricalCrossentropy(),
            M.SparseCategoricalAccuracy(),
            M.Mean(),
        )
        cacc, cxent = M.CategoricalAccuracy(), M.CategoricalCrossentropy(label_smoothing=0.1)
        mse, bacc = M.MeanSquaredError(), M.BinaryAccuracy()
    data = s.experimental_distribute_values_from_function(
        lambda ctx: (L0, P0, W0) if ctx.replica_id_in_sync_group == 0 else (L1, P1, W1)
    )

    def step(batch: tuple[np.ndarray, np.ndarray, np.ndarray]) -> tuple[Any, Any]:
        y, p, w = batch
        acc.update_state(y, p)
        r = xent(y, p)  # __call__: update, then the replica's own result
        wacc.update_state(y, p, sample_weight=w)
        loss.update_state(r)
        onehot = np.eye(3, dtype=np.float32)[np.asarray(y)]
        cacc.update_state(onehot, p)
        cxent.update_state(onehot, p)
        mse.update_state(onehot, p)
        bacc.update_state(onehot, p)
        return r, acc.result()

    for _ in range(2):
        r, a = s.run(step, args=(data,))
        # inside run, result() is the replica's own value (TF: a PerReplica on CPU:0 and CPU:1)
        for got, want in zip(_locals(s, r), [0.5373137593269348, 1.0601317882537842], strict=True):
            assert_close(got, want)
        for got, want in zip(_locals(s, a), [0.6666666865348816, 0.5], strict=True):
            assert_close(got, want)
        assert [c.device for c in s.experimental_local_results(a)] == [
            "/job:localhost/replica:0/task:0/device:CPU:0",
            "/job:localhost/replica:0/task:0/device:CPU:1",
        ]

    expected = {
        acc: (0.6000000238418579, [4.0, 2.0], [6.0, 4.0]),
        xent: (0.7464410066604614, [3.2238826751708984, 4.240527153015137], [6.0, 4.0]),
        wacc: (0.46666666865348816, [5.0, 2.0], [7.0, 8.0]),
        loss: (0.7987227439880371, [1.0746275186538696, 2.1202635765075684], [2.0, 2.0]),
        cacc: (0.6000000238418579, [4.0, 2.0], [6.0, 4.0]),
        cxent: (0.9049644470214844, [4.731574535369873, 4.318070411682129], [6.0, 4.0]),
        mse: (0.1496666669845581, [0.6700000166893005, 0.8266667127609253], [6.0, 4.0]),
        bacc: (0.800000011920929, [4.6666669845581055, 3.3333334922790527], [6.0, 4.0]),
    }
    for m, (result, totals, counts) in expected.items():
        got = m.result()
        assert isinstance(got, idist.Tensor) and got.dtype == np.float32 and got.shape == ()
        assert got.device == "/job:localhost/replica:0/task:0/device:CPU:0"
        assert_close(got.numpy(), result)
        np.testing.assert_allclose(_locals(s, m.total), totals, rtol=1e-6)
        np.testing.assert_allclose(_locals(s, m.count), counts, rtol=1e-6)
    assert f"{acc.result():.3f}" == "0.600"

    acc.reset_state()
    assert float(acc.result()) == 0.0
    assert _locals(s, acc.total) == [0.0, 0.0] and _locals(s, acc.count) == [0.0, 0.0]
    a = s.run(lambda b: acc(b[0], b[1]), args=(data,))
    for got, want in zip(_locals(s, a), [0.6666666865348816, 0.5], strict=True):
        assert_close(got, want)
    assert_close(acc.result(), 0.6000000238418579)


def test_distributed_result_equals_one_replica_on_all_the_data(mirrored2: idist.MirroredStrategy) -> None:
    # TF: the same metrics fed the concatenated batches on one device give the same numbers
    one_xent, one_wacc = idist.metrics.SparseCategoricalCrossentropy(), idist.metrics.SparseCategoricalAccuracy()
    one_xent.update_state(np.concatenate([L0, L1]), np.concatenate([P0, P1]))
    one_wacc.update_state(np.concatenate([L0, L1]), np.concatenate([P0, P1]), sample_weight=np.concatenate([W0, W1]))
    assert_close(one_xent.result(), 0.7464410066604614)
    assert_close(one_wacc.result(), 0.46666666865348816)
    with mirrored2.scope():
        xent = idist.metrics.SparseCategoricalCrossentropy()
    data = mirrored2.experimental_distribute_values_from_function(
        lambda ctx: (L0, P0) if ctx.replica_id_in_sync_group == 0 else (L1, P1)
    )
    mirrored2.run(lambda b: xent.update_state(*b), args=(data,))
    assert_close(xent.result(), float(one_xent.result()))


@pytest.mark.parametrize("n", [1, 2])
def test_metric_made_outside_the_scope_is_a_plain_one(n: int) -> None:
    m = idist.metrics.Accuracy()
    for _ in range(n):
        m.update_state([[1], [2], [3], [4]], [[0], [2], [3], [4]])
    assert float(m.result()) == 0.75
