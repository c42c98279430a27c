"""Float64 (and float16) variables: each optimizer's result equals TF 2.21 / Keras 3's, bit for bit.

Keras 3 on TF brings a hyperparameter into the variable's dtype one of two ways: what it passes to ``ops.cast`` (the
learning rate, a float32 variable; SGD's momentum; Adam's betas in their powers; Adagrad's initial
accumulator, through ``initializers.Constant``) goes through a float32 tensor first, so a float64 variable
sees the float32-rounded value; a Python float used as an operand (epsilon, RMSprop's rho and momentum,
``1 - beta``) goes straight into float64, exactly. A float16 variable sees every Python float through
float32 (TF converts a Python float to half by way of float), which differs from NumPy's direct rounding
for values such as ``H`` below.

The expected values were recorded with TF 2.21.0 / Keras 3.15.1, eagerly on one CPU, by this program::

    W0, G0, G1, H, CASES = <as below>
    for dt, cases in CASES.items():
        for name, kw in cases:
            w = tf.Variable(np.array(W0, dt))
            opt = getattr(keras.optimizers, name)(**kw)
            for a, b in zip(G0, G1):
                opt.apply_gradients([(tf.constant(np.array(a, dt) + np.array(b, dt)), w)])
            print(dt, name, kw, [float(x).hex() for x in w.numpy()])
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import interdist as idist
from interdist.optimizers import rules

from .test_fused_update import WAYS, _way, _with_spy

W0 = [0.3, -1.7, 2.25, 0.05]
G0 = [[0.21, -0.43, 0.37, -0.05], [-0.12, 0.58, 0.09, 0.41], [0.33, 0.02, -0.27, -0.66]]  # replica 0, steps 1-3
G1 = [[-0.07, 0.19, 0.5, 0.13], [0.24, -0.31, 0.11, -0.08], [0.05, 0.46, -0.15, 0.22]]  # replica 1
H = 0.5 + 2**-12 + 2**-41  # float16: 0.5 through float32 (a tie, to even), 0.50048828125 rounded directly

F64: list[tuple[str, dict[str, Any], list[str]]] = [
    ("SGD", {"learning_rate": 0.1},
     ["0x1.e353f7ae147aep-3", "-0x1.c041893a8f5c2p+0", "0x1.17ae1478ccccdp+1", "0x1.b22d0e5c28f5ep-5"]),
    ("SGD", {"learning_rate": 0.03, "momentum": 0.9},
     ["0x1.14ddf87fe5d9ep-2", "-0x1.b5d4c76d51090p+0", "0x1.17199bb9db77bp+1", "0x1.365cb3baea316p-5"]),
    ("SGD", {"learning_rate": 0.1, "momentum": 0.7, "nesterov": True},
     ["0x1.63a6ce26605eep-3", "-0x1.c7aa044f00f77p+0", "0x1.075347a84bab6p+1", "0x1.0852b520ce0bcp-5"]),
    ("Adam", {"learning_rate": 0.01},
     ["0x1.1579eed3b061fp-2", "-0x1.b25d3b470f95ep+0", "0x1.1d4903ecb92bap+1", "0x1.06e0ba6c8be3bp-5"]),
    ("Adam", {"learning_rate": 0.003, "beta_1": 0.8, "beta_2": 0.99, "epsilon": 1e-5},
     ["0x1.2a2f478b6a97dp-2", "-0x1.b30db13696348p+0", "0x1.1f3af706c35c6p+1", "0x1.6e9c83f8ea6a2p-5"]),
    ("RMSprop", {"learning_rate": 0.01},
     ["0x1.bf17e70c6f06dp-3", "-0x1.b7ee73caa46d2p+0", "0x1.1cdec2d45e594p+1", "0x1.ad51bbf1e8ae8p-7"]),
    ("RMSprop", {"learning_rate": 0.01, "rho": 0.8, "momentum": 0.3, "epsilon": 1e-6},
     ["0x1.d32b34edd939ep-3", "-0x1.b5e23f26a686ap+0", "0x1.1c8a23b5fd605p+1", "0x1.25898d9379cc1p-7"]),
    ("RMSprop", {"learning_rate": 0.01, "centered": True},
     ["0x1.af74819a8e5ebp-3", "-0x1.b7ca0a12201d8p+0", "0x1.1c9ae6f129586p+1", "0x1.2673321ba3526p-7"]),
    ("RMSprop", {"learning_rate": 0.01, "momentum": 0.5, "centered": True},
     ["0x1.642723da9fdd7p-3", "-0x1.b47cbc5714a4bp+0", "0x1.18e4963ef077ep+1", "-0x1.0b5cd45f33b6ep-5"]),
    ("Adagrad", {"learning_rate": 0.1},
     ["0x1.3cdc5c4986880p-3", "-0x1.c43867c52f46fp+0", "0x1.1674c1f4e1469p+1", "0x1.7b81aa2b3716cp-6"]),
    ("Adagrad", {"learning_rate": 0.3, "initial_accumulator_value": 0.3, "epsilon": 1e-5},
     ["-0x1.6f0c1281a3380p-10", "-0x1.e1537a23ed00fp+0", "0x1.0676b21750bd7p+1", "0x1.6b6fb0958a938p-6"]),
]  # fmt: skip
F16: list[tuple[str, dict[str, Any], list[str]]] = [
    ("SGD", {"learning_rate": H, "momentum": H}, ["-0x1.a38p-4", "-0x1.eecp+0", "0x1.8c8p+0", "-0x1.83p-5"]),
    ("Adam", {"learning_rate": H, "beta_1": H, "beta_2": H, "epsilon": H},
     ["-0x1.1ep-5", "-0x1.cd8p+0", "0x1.dp+0", "-0x1.0ep-4"]),
    ("RMSprop", {"learning_rate": H, "rho": H, "momentum": H, "epsilon": H},
     ["-0x1.fap-3", "-0x1.fcp+0", "0x1.828p+0", "-0x1.a3p-4"]),
    ("Adagrad", {"learning_rate": H, "initial_accumulator_value": H, "epsilon": H},
     ["-0x1.dp-9", "-0x1.eacp+0", "0x1.ff4p+0", "0x1.7cp-5"]),
]  # fmt: skip


def _ids(cases: list[tuple[str, dict[str, Any], list[str]]]) -> list[str]:
    return [f"{name}-" + "-".join(f"{k}={v:g}" for k, v in kw.items()) for name, kw, _ in cases]


def _expected(hexes: list[str], dtype: Any) -> np.ndarray:
    return np.array([float.fromhex(h) for h in hexes], dtype)


def _apply_plainly(name: str, kw: dict[str, Any], dtype: Any) -> np.ndarray:
    w = idist.Variable(np.array(W0, dtype))
    opt = getattr(idist.optimizers, name)(**kw)
    for a, b in zip(G0, G1, strict=True):
        opt.apply_gradients([(np.array(a, dtype) + np.array(b, dtype), w)])
    got = np.asarray(w)
    assert got.dtype == dtype
    return got


@pytest.mark.parametrize(("name", "kw", "hexes"), F64, ids=_ids(F64))
def test_float64_without_a_strategy_equals_keras(name: str, kw: dict[str, Any], hexes: list[str]) -> None:
    got = _apply_plainly(name, kw, np.float64)
    assert [float(x).hex() for x in got] == [float.fromhex(h).hex() for h in hexes]


@pytest.mark.parametrize(("name", "kw", "hexes"), F16, ids=_ids(F16))
def test_float16_without_a_strategy_equals_keras(name: str, kw: dict[str, Any], hexes: list[str]) -> None:
    got = _apply_plainly(name, kw, np.float16)
    assert got.tobytes() == _expected(hexes, np.float16).tobytes(), [float(x).hex() for x in got]


@pytest.mark.parametrize(("name", "kw", "hexes"), F64, ids=_ids(F64))
def test_float64_on_two_replicas_equals_keras(mirrored2: Any, name: str, kw: dict[str, Any], hexes: list[str]) -> None:
    with mirrored2.scope():
        w = idist.Variable(np.array(W0, np.float64))
        opt = getattr(idist.optimizers, name)(**kw)
    for a, b in zip(G0, G1, strict=True):
        grads = [np.array(a, np.float64), np.array(b, np.float64)]
        per_replica = mirrored2.experimental_distribute_values_from_function(
            lambda ctx, grads=grads: grads[ctx.replica_id_in_sync_group]
        )
        mirrored2.run(lambda g: opt.apply_gradients([(g, w)]), args=(per_replica,))
    expected = _expected(hexes, np.float64)
    for copy in mirrored2.experimental_local_results(w):
        assert np.asarray(copy).tobytes() == expected.tobytes(), [float(x).hex() for x in np.asarray(copy)]


@pytest.mark.parametrize("way", WAYS)
def test_fused_sgd_of_a_large_float64_variable_equals_keras(mirrored2: Any, way: str) -> None:
    # Element-wise rules: the 4 recorded values, repeated, are Keras' result for the repeated inputs (1.28 MB:
    # above fused_update.MIN_BYTES, so the update is fused with the all-reduce or written by the ring).
    reps = 40_000
    with mirrored2.scope():
        w = idist.Variable(np.tile(np.array(W0, np.float64), reps), name=f"w_f64_{way}")
        opt = idist.optimizers.SGD(learning_rate=0.1)

    def step(g: Any) -> Any:
        return _with_spy(lambda: opt.apply_gradients([(g, w)]))[1]

    with _way(mirrored2, way) as fused:
        for a, b in zip(G0, G1, strict=True):
            grads = [np.tile(np.array(a, np.float64), reps), np.tile(np.array(b, np.float64), reps)]
            per_replica = mirrored2.experimental_distribute_values_from_function(
                lambda ctx, grads=grads: grads[ctx.replica_id_in_sync_group]
            )
            paths = mirrored2.experimental_local_results(mirrored2.run(step, args=(per_replica,)))
            assert [list(p) for p in paths] == [[fused], [fused]]
    expected = np.tile(_expected(F64[0][2], np.float64), reps)
    for copy in mirrored2.experimental_local_results(w):
        assert np.array_equal(np.asarray(copy), expected)


def test_hyperparameters_enter_the_dtype_as_keras_does() -> None:
    # ops.cast(0.1, float64): through a float32 tensor; 0.1 as an operand of a float64 tensor: exact.
    assert rules._cast(0.1, np.float64) == float(np.float32(0.1)) != 0.1
    assert rules._operand(0.1, np.float64) == 0.1
    # float32: both ways the float32 value (what float32 variables always got)
    assert rules._cast(0.1, np.float32) == rules._operand(0.1, np.float32) == np.float32(0.1)
    # float16: both ways through float32
    assert rules._cast(H, np.float16) == rules._operand(H, np.float16) == 0.5 != np.float16(H)
    # Adagrad's accumulators start at Constant(value): ops.cast, through float32
    assert idist.optimizers.Adagrad()._slot_specs() == {"accumulator": float(np.float32(0.1))}
    assert idist.optimizers.Adagrad().initial_accumulator_value == 0.1
    # Adam's beta powers in float16: C's powf, rounded to half (Eigen computes half's pow in float)
    assert rules._power(np.float16(0.5), 3) == np.float16(0.125)
    assert rules._power(np.float16(0.5), 3).dtype == np.float16
