"""A worker killed in the middle of training with momentum: the restarted replica gets the variables
*and* the optimizer's slots, so the copies stay equal and the training goes on as if uninterrupted
(issue 17: "recovery restores optimizer slots and every other per-replica state with the variables")."""

from __future__ import annotations

import numpy as np
import pytest

import interdist as idist


def test_momentum_training_survives_a_killed_worker() -> None:
    lr, momentum = 0.1, 0.9
    with idist.MirroredStrategy(["CPU:0", "CPU:1"]) as s:
        with s.scope():
            w = idist.Variable(np.array([1.0, -2.0], np.float32), name="w")
            opt = idist.optimizers.SGD(learning_rate=lr, momentum=momentum)

        def step() -> None:
            r = idist.get_replica_context().replica_id_in_sync_group
            grad = np.array([1.0, 1.0], np.float32) * (r + 1)  # summed across replicas: 3
            opt.apply_gradients([(grad, w)])

        for _ in range(3):
            s.run(step)
        idist.debug.inject(s, replica=1, fault="kill", at="step")
        with pytest.raises(idist.WorkerLostError):
            s.run(step)  # killed before its update: no replica applies this step
        with pytest.warns(UserWarning, match="optimizers' state were copied"):
            s.run(step)
        for _ in range(2):
            s.run(step)
        copies = [np.asarray(c) for c in s.experimental_local_results(w)]
    # six applied steps of Keras' momentum rule on the summed gradient 3
    ref, m = np.array([1.0, -2.0], np.float32), np.zeros(2, np.float32)
    for _ in range(6):
        m = momentum * m - lr * np.float32(3.0)
        ref = ref + m
    np.testing.assert_allclose(copies[0], ref, rtol=1e-6)
    np.testing.assert_array_equal(copies[0], copies[1])
