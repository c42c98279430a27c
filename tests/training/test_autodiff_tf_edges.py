"""GradientTape at TF's edges: non-differentiable functions (comparisons, ``argmax``, ``sign``...) on recorded
values, and the gradients of ``prod``, ``clip``, ``sqrt``, ``reciprocal`` and ``power`` where autograd's differ
from TF's. Every expected value was recorded from TF 2.21 by the program at the end of this file (the same
computation with ``tf.Variable``, ``tf.GradientTape``, ``tf.reduce_*``)."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import interdist as idist

A = np.array([[1.0, -2.0], [0.5, -0.1]], np.float32)
INF, NAN = float("inf"), float("nan")


def assert_close(got: object, want: object) -> None:
    np.testing.assert_allclose(np.asarray(got, np.float64), np.asarray(want, np.float64), rtol=2e-6, atol=1e-6)


def grad(f: Callable[[Any], Any], x: object) -> Any:
    """The gradient of sum(f(v)) at v = x (a float32 variable), as the TF program's ``grad``."""
    v = idist.Variable(np.array(x, np.float32))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # NumPy's (and autograd's) inf and NaN at 0: TF is silent
        with idist.GradientTape() as t:
            y = np.sum(f(v))
        return t.gradient(y, v)


# -- non-differentiable functions: plain results, no gradient through them ----------------------------------


def test_comparisons_and_argmax_on_a_variable() -> None:
    v = idist.Variable(A)
    with idist.GradientTape():
        results = [v > 0, v == v, v >= v * 1.0, np.greater(v, 0), np.argmax(v, -1), np.sign(v)]
    for got in results[:5]:
        assert isinstance(got, np.ndarray) and not idist.autodiff.is_traced(got)  # plain: unrecorded
    assert results[0].tolist() == [[True, False], [True, False]] == results[3].tolist()
    assert results[1].tolist() == [[True, True], [True, True]] == results[2].tolist()
    assert results[4].tolist() == [0, 0]
    assert_close(results[5], [[1.0, -1.0], [1.0, -1.0]])


def test_gradient_flows_through_the_selected_branch() -> None:
    assert_close(grad(lambda v: np.where(v > 0, v, 0.0), A), [[1.0, 0.0], [1.0, 0.0]])
    assert_close(grad(lambda v: np.where(v > 0, v * v, v), A), [[2.0, 1.0], [1.0, 1.0]])
    assert_close(grad(lambda v: v * (v > 0).astype(np.float32), A), [[1.0, 0.0], [1.0, 0.0]])


def test_comparisons_and_argmax_on_computed_values() -> None:
    x = np.array([[1.0, 2.0], [3.0, -1.0]], np.float32)
    w = idist.Variable(np.array([[1.0, -1.0, 0.5], [0.2, 0.3, -0.4]], np.float32))
    acc = idist.metrics.SparseCategoricalAccuracy()
    with idist.GradientTape() as t:
        logits = x @ w
        mask, am = logits > 0, np.argmax(logits, -1)
        acc.update_state(np.array([1, 0]), logits)
        y = np.sum(np.where(mask, logits, 0.1 * logits))  # a leaky ReLU
    assert mask.tolist() == [[True, False, False], [True, False, True]] and am.tolist() == [0, 0]
    assert_close(t.gradient(y, w), [[4.0, 0.4000000059604645, 3.0999999046325684], [1.0, 0.10000000149011612, -0.8]])
    assert_close(acc.result(), 0.5)


def test_sign_has_a_zero_gradient_and_floor_none() -> None:
    assert_close(grad(np.sign, A), [[0.0, 0.0], [0.0, 0.0]])  # TF's _SignGrad: zeros, not None
    assert_close(grad(lambda v: np.sign(v) * v, A), [[1.0, -1.0], [1.0, -1.0]])
    for f in (np.floor, np.ceil, np.round, np.rint, lambda v: np.floor_divide(v, 0.3), np.zeros_like, np.ones_like):
        assert grad(f, A) is None


def test_nested_tapes_and_stop_recording() -> None:
    u = idist.Variable(np.array([1.0, -2.0], np.float32))
    with idist.GradientTape() as outer:
        with idist.GradientTape() as inner:
            y = np.sum(np.where(u > 0, u * u, u)) + np.sum(np.sign(u))
        gi = inner.gradient(y, u)
        with outer.stop_recording():
            m = u > 0
    assert_close(gi, [2.0, 1.0])
    assert_close(outer.gradient(y, u), [2.0, 1.0])
    assert m.tolist() == [True, False]


# every function autograd lists as non-differentiable (autograd.numpy.numpy_vjps.nograd_functions), on a
# variable and on a computed value: NumPy's result on the plain value, unrecorded
NOGRAD: list[Callable[[Any], Any]] = [
    np.floor, np.ceil, np.round, np.rint, np.around, np.fix, np.trunc, np.all, np.any, np.argmax, np.argmin,
    lambda x: np.argpartition(x, 1), np.argsort, np.argwhere, np.nonzero, np.flatnonzero, np.count_nonzero,
    lambda x: np.searchsorted(np.sort(np.ravel(x)), 0.2), np.ndim, np.shape, lambda x: np.floor_divide(x, 0.3),
    lambda x: np.logical_and(x, x > 0), lambda x: np.logical_or(x, x), np.logical_not,
    lambda x: np.logical_xor(x, x), np.isfinite, np.isinf, np.isnan, np.isneginf, np.isposinf,
    lambda x: np.allclose(x, x), lambda x: np.isclose(x, 0.5), lambda x: np.array_equal(x, x),
    lambda x: np.array_equiv(x, x), lambda x: np.greater(x, 0), lambda x: np.greater_equal(x, 0),
    lambda x: np.less(x, 0), lambda x: np.less_equal(x, 0), lambda x: np.equal(x, 0.5),
    lambda x: np.not_equal(x, 0.5), np.iscomplexobj, np.iscomplex, np.size, np.isreal, np.zeros_like,
    np.ones_like, lambda x: np.full_like(x, 7.0), np.result_type,
]  # fmt: skip


@pytest.mark.parametrize("computed", [False, True], ids=["variable", "computed"])
@pytest.mark.parametrize("i", range(len(NOGRAD)))
def test_non_differentiable_functions_give_plain_results(i: int, computed: bool) -> None:
    f, v = NOGRAD[i], idist.Variable(A)
    with idist.GradientTape():
        got = f(v * 1.0 if computed else v)
    want = f(A)
    assert not any(idist.autodiff.is_traced(g) for g in (got if isinstance(got, tuple) else (got,)))
    if isinstance(want, tuple):
        assert all(np.array_equal(g, w) for g, w in zip(got, want, strict=True))
    else:
        assert np.array_equal(got, want) and np.asarray(got).dtype == np.asarray(want).dtype


def test_a_ufunc_without_a_gradient_is_named() -> None:
    v = idist.Variable(A)
    with idist.GradientTape(), pytest.raises(NotImplementedError, match="heaviside"):
        np.heaviside(v, 0.5)


# -- gradients as TF's ----------------------------------------------------------------------------------------


def test_prod_with_zeros() -> None:
    assert_close(grad(np.prod, [2.0, 0.0, 3.0]), [0.0, 6.0, 0.0])
    assert_close(grad(np.prod, [0.0, 0.0, 3.0]), [0.0, 0.0, 0.0])
    assert_close(grad(lambda v: np.prod(v, axis=1), [[2.0, 0.0, 3.0], [1.0, 2.0, 3.0]]), [[0, 6, 0], [6, 3, 2]])
    assert_close(grad(lambda v: np.prod(v, axis=0), [[2.0, 0.0], [0.0, 0.0], [3.0, 5.0]]), [[0, 0], [6, 0], [0, 0]])
    weighted = grad(lambda v: np.prod(v, axis=1, keepdims=True) * [[2.0], [3.0]], [[2.0, 0.0, 3.0], [1.0, 2.0, 3.0]])
    assert_close(weighted, [[0.0, 12.0, 0.0], [18.0, 9.0, 6.0]])
    x3 = [[[1.0, 2.0], [0.0, 3.0]], [[4.0, 0.0], [5.0, 6.0]]]
    assert_close(grad(lambda v: np.prod(v, axis=(0, 2)), x3), [[[0.0, 0.0], [90.0, 0.0]], [[0.0, 8.0], [0.0, 0.0]]])
    assert grad(np.prod, [2.0, 0.0, 3.0]).dtype == np.float32


def test_clip_bounds_count_as_inside() -> None:
    assert_close(grad(lambda v: np.clip(v, 0.0, 1.0), [-1.0, 0.0, 0.5, 1.0, 2.0]), [0.0, 1.0, 1.0, 1.0, 0.0])
    lo, hi = np.array([0.0, 0.0, 1.0], np.float32), np.array([1.0, 0.0, 2.0], np.float32)
    assert_close(grad(lambda v: np.clip(v, lo, hi), [0.0, 0.0, 2.0]), [1.0, 1.0, 1.0])
    for x, lo0, want in (([-1.0, 0.0, 2.0], 0.0, ([1, 0, 0], [0, 0, 1])), ([0.0, 1.0, 0.7], 0.5, ([0] * 3, [0] * 3))):
        a, b = idist.Variable(np.array([0.0, 0.0, lo0], np.float32)), idist.Variable(np.ones(3, np.float32))
        with idist.GradientTape() as t:
            y = np.sum(np.clip(np.array(x, np.float32), a, b))
        ga, gb = t.gradient(y, [a, b])
        assert_close(ga, want[0])
        assert_close(gb, want[1])


@pytest.mark.parametrize(
    ("f", "masked", "whole"),
    [
        (np.sqrt, [0.0, 0.25], [INF, 0.25]),  # TF's SqrtGrad: 0 where the incoming gradient is 0
        (np.reciprocal, [0.0, -0.0625], [-INF, -0.0625]),  # ReciprocalGrad: the same
        (np.log, [NAN, 0.25], [INF, 0.25]),  # g / x: NaN in TF too
        (lambda v: 1.0 / v, [NAN, -0.0625], [-INF, -0.0625]),
        (lambda v: v**-0.5, [NAN, -0.0625], [-INF, -0.0625]),
        (lambda v: v**0.5, [NAN, 0.25], [INF, 0.25]),
        (lambda v: np.sqrt(v * v), [0.0, 1.0], [NAN, 1.0]),
    ],
    ids=["sqrt", "reciprocal", "log", "divide", "pow-0.5", "pow0.5", "sqrt-square"],
)
def test_singularity_at_zero(f: Callable[[Any], Any], masked: list[float], whole: list[float]) -> None:
    got = grad(lambda v: f(v) * np.array([0.0, 1.0], np.float32), [0.0, 4.0])  # no gradient comes into x = 0
    assert_close(got, masked)
    assert not np.signbit(got[0]) or np.isnan(got[0])  # 0.0, as TF's, not -0.0
    assert_close(grad(f, [0.0, 4.0]), whole)


def test_power_exponent_gradient_at_a_non_positive_base() -> None:
    e = idist.Variable(np.array([2.0, 2.0, 3.0], np.float32))
    with idist.GradientTape() as t:
        y = np.sum(np.power(np.array([0.0, -1.0, 2.0], np.float32), e))
    assert_close(t.gradient(y, e), [0.0, 0.0, 5.545177459716797])  # TF's _PowGrad: log(x) taken as 0 at x <= 0
    a = idist.Variable(np.array([0.0, 0.0, 2.0, -2.0], np.float32))
    b = idist.Variable(np.array([2.0, 0.5, 3.0, 2.0], np.float32))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        with idist.GradientTape() as t:
            y = np.sum(np.power(a, b))
        ga, gb = t.gradient(y, [a, b])
    assert_close(ga, [0.0, INF, 12.0, -4.0])
    assert_close(gb, [0.0, 0.0, 5.545177459716797, 0.0])


# The TF 2.21 program that recorded the values above (tensorflow-cpu==2.21.0; not run by pytest):
#
# import numpy as np, tensorflow as tf
# L = lambda r: None if r is None else np.asarray(r).tolist()
# def grad(f, x):
#     v = tf.Variable(np.array(x, np.float32))
#     with tf.GradientTape() as t:
#         y = tf.reduce_sum(f(v))
#     return L(t.gradient(y, v))
# A = [[1.0, -2.0], [0.5, -0.1]]
# v = tf.Variable(np.array(A, np.float32))
# with tf.GradientTape() as t:
#     print(L(v > 0), L(v == v), L(v >= v * 1.0), L(tf.argmax(v, -1)), L(tf.sign(v)))
# for f in [lambda v: tf.where(v > 0, v, 0.0), lambda v: tf.where(v > 0, v * v, v),
#           lambda v: v * tf.cast(v > 0, tf.float32), tf.sign, lambda v: tf.sign(v) * v, tf.floor, tf.math.ceil,
#           tf.round, tf.math.rint, lambda v: tf.math.floordiv(v, 0.3), tf.zeros_like, tf.ones_like]:
#     print(grad(f, A))
# x = np.array([[1.0, 2.0], [3.0, -1.0]], np.float32)
# w = tf.Variable(np.array([[1.0, -1.0, 0.5], [0.2, 0.3, -0.4]], np.float32))
# with tf.GradientTape() as t:
#     logits = x @ w
#     y = tf.reduce_sum(tf.where(logits > 0, logits, 0.1 * logits))
#     print(L(logits > 0), L(tf.argmax(logits, -1)))
# print(L(t.gradient(y, w)))
# u = tf.Variable(np.array([1.0, -2.0], np.float32))
# with tf.GradientTape() as outer:
#     with tf.GradientTape() as inner:
#         y = tf.reduce_sum(tf.where(u > 0, u * u, u)) + tf.reduce_sum(tf.sign(u))
#     gi = inner.gradient(y, u)
# print(L(gi), L(outer.gradient(y, u)))
# print(grad(tf.reduce_prod, [2., 0., 3.]), grad(tf.reduce_prod, [0., 0., 3.]),
#       grad(lambda v: tf.reduce_prod(v, axis=1), [[2., 0., 3.], [1., 2., 3.]]),
#       grad(lambda v: tf.reduce_prod(v, axis=0), [[2., 0.], [0., 0.], [3., 5.]]),
#       grad(lambda v: tf.reduce_prod(v, axis=1, keepdims=True) * [[2.], [3.]], [[2., 0., 3.], [1., 2., 3.]]),
#       grad(lambda v: tf.reduce_prod(v, axis=[0, 2]), [[[1., 2.], [0., 3.]], [[4., 0.], [5., 6.]]]))
# print(grad(lambda v: tf.clip_by_value(v, 0., 1.), [-1., 0., .5, 1., 2.]),
#       grad(lambda v: tf.clip_by_value(v, [0., 0., 1.], [1., 0., 2.]), [0., 0., 2.]))
# for xs, lo0 in (([-1., 0., 2.], 0.), ([0., 1., 0.7], 0.5)):
#     lo, hi = tf.Variable([0., 0., lo0]), tf.Variable([1., 1., 1.])
#     with tf.GradientTape() as t:
#         y = tf.reduce_sum(tf.clip_by_value(tf.constant(xs), lo, hi))
#     print([L(g) for g in t.gradient(y, [lo, hi])])
# for f in [tf.sqrt, tf.math.reciprocal, tf.math.log, lambda v: 1.0 / v, lambda v: tf.pow(v, -0.5),
#           lambda v: tf.pow(v, 0.5), lambda v: tf.sqrt(v * v)]:
#     print(grad(lambda v: f(v) * [0., 1.], [0., 4.]), grad(f, [0., 4.]))
# e = tf.Variable(np.array([2., 2., 3.], np.float32))
# with tf.GradientTape() as t:
#     y = tf.reduce_sum(tf.pow(tf.constant([0., -1., 2.]), e))
# print(L(t.gradient(y, e)))
# a, b = tf.Variable([0., 0., 2., -2.]), tf.Variable([2., 0.5, 3., 2.])
# with tf.GradientTape() as t:
#     y = tf.reduce_sum(tf.pow(a, b))
# print([L(g) for g in t.gradient(y, [a, b])])
