"""Each optimizer applies Keras 3's update rule exactly: TF 2.21's values, step by step (no cluster).

The references (``_optimizer_cases.py``) were recorded with TF 2.21 / Keras 3.15, eagerly on one CPU.
"""

from __future__ import annotations

import numpy as np
import pytest

import interdist as idist
from interdist import optimizers as O

from ._optimizer_cases import GRADS, IEEE_EXACT, MAKERS, W0, reference


@pytest.mark.parametrize("name", list(MAKERS))
def test_each_step_equals_tf(name: str) -> None:
    steps, slots = reference(name)
    w = idist.Variable(W0.copy())
    opt = MAKERS[name]()
    for k, g in enumerate(GRADS):
        opt.apply_gradients([(g, w)])
        got = np.asarray(w)
        assert got.dtype == np.float32
        np.testing.assert_allclose(got, steps[k], rtol=1e-6, atol=0, err_msg=f"step {k + 1}")
        if name in IEEE_EXACT:
            assert got.tobytes() == steps[k].tobytes(), f"step {k + 1}: {got.tolist()} != {steps[k].tolist()}"
    assert int(np.asarray(opt.iterations)) == 4
    kept = opt._checkpoint_read_slots([w])[0]
    assert sorted(kept) == sorted(slots)
    for slot, value in slots.items():
        np.testing.assert_allclose(kept[slot], value, rtol=1e-6, atol=0, err_msg=slot)


def test_adam_takes_beta_powers_as_tf_does() -> None:
    # TF's scalar pow is the C library's powf: 0.9f ** 4 is 0.6560999 there (NumPy's float32 power says 0.6561).
    assert O._power(np.float32(0.9), 4) == np.float32(0.6560999)
    assert O._power(np.float32(0.9), 4).dtype == np.float32
    assert O._power(np.float64(0.9), 2) == np.float64(0.9) ** 2
    w = idist.Variable(W0.copy())
    opt = O.Adam(0.1)
    for g in GRADS:
        opt.apply_gradients([(g, w)])
    assert np.asarray(w).tobytes() == reference("adam")[0][3].tobytes()  # bit for bit on glibc, as TF 2.21


def test_keras_3_defaults() -> None:
    rms = O.RMSprop()
    assert (rms.learning_rate, rms.rho, rms.momentum, rms.epsilon, rms.centered) == (0.001, 0.9, 0.0, 1e-7, False)
    ada = O.Adagrad()
    assert (ada.learning_rate, ada.initial_accumulator_value, ada.epsilon) == (0.001, 0.1, 1e-7)
    assert O.SGD().learning_rate == 0.01 and O.Adam().learning_rate == 0.001
    assert O.RMSprop()._slot_specs() == {"velocity": 0.0}
    assert O.RMSprop(momentum=0.5, centered=True)._slot_specs() == {
        "velocity": 0.0,
        "momentum": 0.0,
        "average_gradient": 0.0,
    }
    assert O.Adagrad(initial_accumulator_value=0.5)._slot_specs() == {"accumulator": 0.5}


def test_adagrad_starts_from_its_initial_accumulator() -> None:
    w = idist.Variable(np.zeros(3, np.float32))
    opt = O.Adagrad(1.0, initial_accumulator_value=3.0, epsilon=0.0)
    opt.apply_gradients([(np.array([1.0, 0.0, -1.0], np.float32), w)])
    # accumulator 3 + g^2 = 4: w -= g / sqrt(4)
    assert np.asarray(w).tolist() == [-0.5, 0.0, 0.5]
    assert opt._checkpoint_read_slots([w])[0]["accumulator"].tolist() == [4.0, 3.0, 4.0]


def test_float64_variables_keep_their_dtype() -> None:
    for make in MAKERS.values():
        w = idist.Variable(W0.astype(np.float64))
        opt = make()
        for g in GRADS:
            opt.apply_gradients([(g, w)])
        assert np.asarray(w).dtype == np.float64
        assert all(a.dtype == np.float64 for a in opt._checkpoint_read_slots([w])[0].values())


def test_build_makes_the_slots_first_and_keeps_them() -> None:
    w = idist.Variable(W0.copy())
    opt = O.Adagrad(0.1)
    opt.build([w])
    assert opt._checkpoint_read_slots([w])[0]["accumulator"].tolist() == [np.float32(0.1)] * 4
    for g in GRADS:
        opt.apply_gradients([(g, w)])
    opt.build([w])  # already there: kept
    np.testing.assert_array_equal(np.asarray(w), reference("adagrad")[0][3])
    np.testing.assert_array_equal(
        opt._checkpoint_read_slots([w])[0]["accumulator"], reference("adagrad")[1]["accumulator"]
    )
