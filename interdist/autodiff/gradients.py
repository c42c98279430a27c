"""TF's gradients where autograd's differ, installed over autograd's at the first tape.

``install`` is called once by ``boxes._autograd``; each rule says which TF gradient function it follows
(tensorflow/python/ops/math_grad.py, and the kernels of ``SqrtGrad``/``ReciprocalGrad``). It also gives a
tape's node class autograd's non-differentiable functions (comparisons, ``argmax``, ``floor``...): a tape
does not record them, and their results are plain arrays, as TF's carry no gradient. Part of
``interdist.autodiff``.
"""

from __future__ import annotations

from typing import Any

import numpy as np


def install(anp: Any, node_type: Any) -> None:
    """Register TF's rules with autograd, and autograd's non-differentiable functions for ``node_type``."""
    from autograd.core import VJPNode
    from autograd.extend import defvjp
    from autograd.numpy import numpy_wrapper
    from autograd.numpy.numpy_vjps import repeat_to_match_shape, unbroadcast_f
    from autograd.tracer import notrace_primitives

    # autograd registers its non-differentiable functions for VJPNode itself, and looks them up by the exact
    # type of a box's node; a tape's nodes are a subclass, so they get the same set. ``sign`` is recorded
    # instead: TF's gradient of sign is zeros (``_SignGrad``), not None.
    notrace_primitives[node_type] = set(notrace_primitives[VJPNode])
    notrace_primitives[node_type].discard(anp.sign)
    defvjp(anp.sign, lambda ans, x: lambda g: anp.zeros_like(x))

    def mean_vjp(ans: Any, x: Any, axis: Any = None, keepdims: bool = False, **kwargs: Any) -> Any:
        # mean's gradient keeps the input's dtype (autograd divides by a NumPy int64: float32 became float64)
        shape, dtype = anp.shape(x), anp.result_type(x)

        def vjp(g: Any) -> Any:
            repeated, reps = repeat_to_match_shape(g, shape, dtype, axis, keepdims)
            return repeated / (dtype.type(reps) if dtype.kind in "fc" else reps)

        return vjp

    defvjp(getattr(numpy_wrapper, "_primitive_mean", anp.mean), mean_vjp)  # anp.mean wraps it since 1.7

    # at a tie, maximum/minimum give the whole gradient to their first argument (TF's _MaximumMinimumGrad);
    # autograd splits it in halves
    for fn, first in ((anp.maximum, np.greater_equal), (anp.minimum, np.less_equal)):
        defvjp(
            fn,
            lambda ans, x, y, first=first: unbroadcast_f(x, lambda g: g * first(x, y)),
            lambda ans, x, y, first=first: unbroadcast_f(y, lambda g: g * ~first(x, y)),
        )

    def prod_vjp(ans: Any, x: Any, axis: Any = None, keepdims: bool = False, **kwargs: Any) -> Any:
        # TF's _ProdGrad: the product of the other elements (exclusive cumulative products from both ends),
        # where autograd divides the product by x (NaN where x is 0)
        shape, dtype = anp.shape(x), anp.result_type(x)
        others = _product_of_others(np.asarray(_getval(x)), axis)
        return lambda g: repeat_to_match_shape(g, shape, dtype, axis, keepdims)[0] * others

    defvjp(anp.prod, prod_vjp)

    # clip: TF's _ClipByValueGrad: x's gradient is cut only strictly outside [min, max] (the bounds count as
    # inside; autograd cut it at the bounds too); each bound gets the gradient where x is past it
    def clip_rule(which: int) -> Any:
        def maker(ans: Any, x: Any, a_min: Any = None, a_max: Any = None, **kwargs: Any) -> Any:
            below, above = _past(x, _bound(a_min, kwargs, "min"), _bound(a_max, kwargs, "max"))
            target = (x, a_min, a_max)[which]
            mask = (below | above, below, above)[which]

            def vjp(g: Any) -> Any:
                zeros = anp.zeros_like(g)
                return anp.where(mask, zeros, g) if which == 0 else anp.where(mask, g, zeros)

            return unbroadcast_f(target, vjp)

        return maker

    defvjp(anp.clip, clip_rule(0), clip_rule(1), clip_rule(2))

    # sqrt and reciprocal: TF's kernels (SqrtGrad, ReciprocalGrad) give 0 where the incoming gradient is 0,
    # whatever the output (autograd gives 0 * inf = NaN at x = 0); elsewhere 0.5 * g / y and -g * y * y
    def sqrt_vjp(ans: Any, x: Any) -> Any:
        def vjp(g: Any) -> Any:
            zero = g == 0
            with np.errstate(divide="ignore", invalid="ignore"):
                return anp.where(zero, anp.zeros_like(g), 0.5 * g / anp.where(zero, anp.ones_like(ans), ans))

        return vjp

    def reciprocal_vjp(ans: Any, x: Any) -> Any:
        def vjp(g: Any) -> Any:
            zero = g == 0
            y = anp.where(zero, anp.ones_like(ans), ans)
            with np.errstate(over="ignore"):
                return anp.where(zero, anp.zeros_like(g), -g * y * y)

        return vjp

    defvjp(anp.sqrt, sqrt_vjp)
    defvjp(anp.reciprocal, reciprocal_vjp)

    # power: the exponent's gradient is g * x**y * log(x) where x > 0 and 0 elsewhere (TF's _PowGrad; a
    # complex base: where x != 0); autograd gives NaN for a negative base. The base's gradient is autograd's.
    def power_y(ans: Any, x: Any, y: Any) -> Any:
        def vjp(g: Any) -> Any:
            mask = (x != 0) if np.iscomplexobj(_getval(x)) else (x > 0)
            log_x = anp.where(mask, anp.log(anp.where(mask, x, anp.ones_like(x))), anp.zeros_like(x))
            with np.errstate(invalid="ignore"):
                return g * ans * log_x

        return unbroadcast_f(y, vjp)

    def power_x(ans: Any, x: Any, y: Any) -> Any:
        def vjp(g: Any) -> Any:
            with np.errstate(divide="ignore", invalid="ignore"):  # inf or NaN at x = 0, silent as TF's
                return g * y * x ** anp.where(y, y - 1, 1.0)

        return unbroadcast_f(x, vjp)

    defvjp(anp.power, power_x, power_y)


def _getval(x: Any) -> Any:
    from autograd.tracer import getval

    return getval(x)


def _bound(positional: Any, kwargs: dict[str, Any], name: str) -> Any:
    """A bound of ``np.clip``, given as ``a_min``/``a_max`` or (NumPy 2.1) ``min``/``max``; None if not."""
    value = positional if positional is not None else kwargs.get(name)
    return None if value is None or value is np._NoValue else value


def _past(x: Any, lo: Any, hi: Any) -> tuple[Any, Any]:
    """Where ``x`` is strictly below ``lo`` and strictly above ``hi`` (all False for a missing bound)."""
    xv = np.asarray(_getval(x))
    below = xv < np.asarray(_getval(lo)) if lo is not None else np.zeros(np.shape(xv), bool)
    above = xv > np.asarray(_getval(hi)) if hi is not None else np.zeros(np.shape(xv), bool)
    shape = np.broadcast_shapes(below.shape, above.shape)
    return np.broadcast_to(below, shape), np.broadcast_to(above, shape)


def _product_of_others(x: np.ndarray, axis: Any) -> np.ndarray:
    """For each element, the product of the other elements it is reduced with (as TF's ``_ProdGrad``: the
    exclusive cumulative products from the left and from the right, multiplied; no division)."""
    if x.size == 0 or x.ndim == 0:
        return np.ones_like(x)
    if axis is None:
        axes = list(range(x.ndim))
    else:
        axes = sorted({int(a) % x.ndim for a in (axis if isinstance(axis, (tuple, list)) else (axis,))})
    rest = [a for a in range(x.ndim) if a not in axes]
    moved = np.transpose(x, rest + axes)
    flat = moved.reshape((*moved.shape[: len(rest)], -1))
    ones = np.ones((*flat.shape[:-1], 1), x.dtype)
    left = np.cumprod(np.concatenate([ones, flat[..., :-1]], -1), -1)
    right = np.cumprod(np.concatenate([ones, flat[..., :0:-1]], -1), -1)[..., ::-1]
    return np.transpose((left * right).reshape(moved.shape), np.argsort(rest + axes))
