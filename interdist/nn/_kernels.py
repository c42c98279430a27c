"""The NumPy kernels of ``nn``'s autograd primitives (``relu``, ``conv2d``, ``max_pool2d``, the softmax
cross-entropies) with their gradients written as TF's kernels compute them, and the geometry of windows (NHWC
inputs, HWIO filters).

A cross-entropy is one primitive, as in TF (one fused kernel): written with NumPy's functions, the tape
recorded ten operations for it (the shift, exp, sum, log, the pick, the reshapes...), more than a small model's
layers, and its bookkeeping cost more than their arithmetic (docs/performance.md, "The twenty-first run")."""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from interdist import autodiff


def _relu_raw(x: Any) -> Any:
    return np.maximum(x, np.asarray(x).dtype.type(0))


def _relu_vjp(ans: Any, x: Any) -> Any:
    return lambda g: g * (x > 0)  # TF's ReluGrad: 0 where the input is 0


def _pads(size: int, k: int, stride: int, padding: str) -> tuple[int, int, int]:
    """(output size, pad before, pad after) of one spatial axis, as TF computes them."""
    if padding == "VALID":
        return (size - k) // stride + 1, 0, 0
    out = -(-size // stride)
    total = max((out - 1) * stride + k - size, 0)
    return out, total // 2, total - total // 2


def _padding(padding: Any) -> str:
    p = str(padding).upper()
    if p not in ("VALID", "SAME"):
        raise ValueError(f"padding must be 'VALID' or 'SAME', got {padding!r}")
    return p


def _conv_geometry(x: np.ndarray, kh: int, kw: int, strides: tuple[int, int], padding: str) -> Any:
    _n, h, w, _c = x.shape
    oh, pt, pb = _pads(h, kh, strides[0], padding)
    ow, pl, pr = _pads(w, kw, strides[1], padding)
    return oh, ow, ((0, 0), (pt, pb), (pl, pr), (0, 0))


def _patches(x: np.ndarray, kh: int, kw: int, strides: tuple[int, int], padding: str) -> tuple[np.ndarray, Any]:
    """im2col: every output position's input window as one row, (N*OH*OW, KH*KW*C), and the geometry."""
    oh, ow, pads = _conv_geometry(x, kh, kw, strides, padding)
    xp = np.pad(x, pads) if any(p != (0, 0) for p in pads) else x
    win = np.lib.stride_tricks.sliding_window_view(xp, (kh, kw), axis=(1, 2))  # (N, H', W', C, KH, KW)
    win = win[:, : strides[0] * (oh - 1) + 1 : strides[0], : strides[1] * (ow - 1) + 1 : strides[1]]
    cols = np.ascontiguousarray(win.transpose(0, 1, 2, 4, 5, 3)).reshape(-1, kh * kw * x.shape[3])
    return cols, (oh, ow, pads, xp.shape)


def _conv2d_raw(x: np.ndarray, f: np.ndarray, strides: tuple[int, int], padding: str) -> np.ndarray:
    kh, kw, c, o = f.shape
    cols, (oh, ow, _, _) = _patches(x, kh, kw, strides, padding)
    out: np.ndarray = (cols @ f.reshape(kh * kw * c, o)).reshape(x.shape[0], oh, ow, o)  # one matrix product
    return out


def _conv2d_vjp_x(ans: Any, x: np.ndarray, f: np.ndarray, strides: tuple[int, int], padding: str) -> Any:
    def vjp(g: np.ndarray) -> np.ndarray:
        kh, kw, c, o = f.shape
        oh, ow, pads = _conv_geometry(x, kh, kw, strides, padding)
        sh, sw = strides
        n = x.shape[0]
        gcols = (g.reshape(-1, o) @ f.reshape(kh * kw * c, o).T).reshape(n, oh, ow, kh, kw, c)
        gx = np.zeros((n, x.shape[1] + pads[1][0] + pads[1][1], x.shape[2] + pads[2][0] + pads[2][1], c), g.dtype)
        for i in range(kh):  # col2im: each tap's share added back where it was read
            for j in range(kw):
                gx[:, i : i + sh * (oh - 1) + 1 : sh, j : j + sw * (ow - 1) + 1 : sw, :] += gcols[:, :, :, i, j, :]
        return gx[:, pads[1][0] : gx.shape[1] - pads[1][1], pads[2][0] : gx.shape[2] - pads[2][1], :]

    return vjp


def _conv2d_vjp_f(ans: Any, x: np.ndarray, f: np.ndarray, strides: tuple[int, int], padding: str) -> Any:
    def vjp(g: np.ndarray) -> np.ndarray:
        kh, kw, c, o = f.shape
        cols, _ = _patches(x, kh, kw, strides, padding)
        gf: np.ndarray = (cols.T @ g.reshape(-1, o)).reshape(kh, kw, c, o)
        return gf

    return vjp


def _windows(x: np.ndarray, k: tuple[int, int], strides: tuple[int, int], padding: str) -> Any:
    """Pooling windows of x (padded with -inf for SAME) as (N, OH, OW, C, KH*KW), and the padding."""
    oh, ow, pads = _conv_geometry(x, k[0], k[1], strides, padding)
    xp = np.pad(x, pads, constant_values=-np.inf) if any(p != (0, 0) for p in pads) else x
    win = np.lib.stride_tricks.sliding_window_view(xp, k, axis=(1, 2))[:, :: strides[0], :: strides[1]]
    win = win[:, :oh, :ow]
    return win.reshape(*win.shape[:4], k[0] * k[1]), pads, xp.shape


def _tiles(x: np.ndarray, k: tuple[int, int]) -> np.ndarray:
    """Non-overlapping k windows of x (Keras' default pooling) as a (N, OH, KH, OW, KW, C) view: no copy."""
    n, h, w, c = x.shape
    oh, ow = h // k[0], w // k[1]
    return x[:, : oh * k[0], : ow * k[1]].reshape(n, oh, k[0], ow, k[1], c)


def _max_pool_raw(x: np.ndarray, k: tuple[int, int], strides: tuple[int, int], padding: str) -> np.ndarray:
    if padding == "VALID" and tuple(strides) == tuple(k):  # Keras' default pooling: tiles, by a reshape
        return np.asarray(_tiles(x, k).max(axis=(2, 4)))
    win, _, _ = _windows(x, k, strides, padding)
    return np.asarray(win.max(axis=-1))


def _max_pool_vjp(ans: Any, x: np.ndarray, k: tuple[int, int], strides: tuple[int, int], padding: str) -> Any:
    def vjp(g: np.ndarray) -> np.ndarray:
        if padding == "VALID" and tuple(strides) == tuple(k):
            t = _tiles(x, k)
            hit = t == t.max(axis=(2, 4), keepdims=True)
            # TF gives a window's gradient to its first maximum (row-major): the first hit in its row,
            # in the first row that has one
            first = np.empty_like(hit)
            taken = np.zeros(hit[:, :, 0, :, 0, :].shape, bool)
            for i in range(k[0]):
                for j in range(k[1]):
                    first[:, :, i, :, j, :] = hit[:, :, i, :, j, :] & ~taken
                    taken |= hit[:, :, i, :, j, :]
            n, oh, _, ow, _, c = t.shape
            gx = np.zeros(x.shape, g.dtype)
            gx[:, : oh * k[0], : ow * k[1]] = (first * g[:, :, None, :, None, :]).reshape(n, oh * k[0], ow * k[1], c)
            return gx
        win, pads, padded = _windows(x, k, strides, padding)
        first = win.argmax(axis=-1)  # TF routes a window's gradient to its first maximum
        n, oh, ow, c = first.shape
        di, dj = np.divmod(first, k[1])
        rows = np.arange(oh)[None, :, None, None] * strides[0] + di
        cols = np.arange(ow)[None, None, :, None] * strides[1] + dj
        gxp = np.zeros(padded, g.dtype)
        np.add.at(gxp, (np.arange(n)[:, None, None, None], rows, cols, np.arange(c)[None, None, None, :]), g)
        return gxp[:, pads[1][0] : padded[1] - pads[1][1], pads[2][0] : padded[2] - pads[2][1], :]

    return vjp


def _softmax_of(x: Any, axis: int) -> Any:
    z = x - np.max(np.asarray(x), axis=axis, keepdims=True)
    e = np.exp(z)
    return e / np.sum(e, axis=axis, keepdims=True)


def _sparse_xent_raw(logits: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """Per example ``-log_softmax(logits)[label]`` (labels: valid class indices, ``logits.ndim - 1`` axes), as TF's
    kernel: ``log(sum(exp(z))) - z[label]`` with ``z = logits - max`` (``+0.0`` where it is zero, as TF)."""
    z = logits - np.max(logits, axis=-1, keepdims=True)
    lse = np.log(np.sum(np.exp(z), axis=-1, keepdims=True))
    return np.asarray((lse - np.take_along_axis(z, labels[..., None], axis=-1))[..., 0])


def _sparse_xent_vjp(ans: Any, logits: Any, labels: np.ndarray) -> Any:
    # TF's kernel: softmax - one_hot(labels), times each example's incoming gradient. Written with NumPy's
    # functions on ``logits``, so that an outer tape records it (TF's second derivative: the softmax's).
    def vjp(g: Any) -> Any:
        value = np.asarray(logits)
        one_hot = (np.arange(value.shape[-1]) == labels[..., None]).astype(value.dtype)
        return (_softmax_of(logits, -1) - one_hot) * g[..., None]

    return vjp


def _neg_log_softmax(x: Any, axis: int) -> Any:
    """``-log_softmax(x)`` as TF's kernel writes it, ``log(sum(exp(z))) - z`` (the same values as ``log_softmax``'s
    negated, and ``+0.0`` where they are zero)."""
    z = x - np.max(np.asarray(x), axis=axis, keepdims=True)
    return np.log(np.sum(np.exp(z), axis=axis, keepdims=True)) - z


def _xent_raw(labels: Any, logits: Any, axis: int) -> Any:
    """Per example ``sum(labels * -log_softmax(logits))`` along ``axis``, as TF's kernel."""
    return np.sum(labels * _neg_log_softmax(logits, axis), axis=axis)


def _xent_vjp_labels(ans: Any, labels: Any, logits: Any, axis: int) -> Any:
    return lambda g: _neg_log_softmax(logits, axis) * np.expand_dims(g, axis)


def _xent_vjp_logits(ans: Any, labels: Any, logits: Any, axis: int) -> Any:
    # TF's kernel: softmax - labels, whatever the labels sum to (not softmax * sum(labels) - labels, the
    # derivative of the formula): TF 2.21 gives that gradient.
    return lambda g: (_softmax_of(logits, axis) - labels) * np.expand_dims(g, axis)


def _dense_raw(x: Any, w: Any, b: Any, relu: bool) -> Any:
    """``Dense``'s ``relu?(x @ w + b)`` (``b`` may be None), the same operations as the layer made one by one."""
    y = x @ w
    if b is not None:
        y = y + b
    return _relu_raw(y) if relu else y


def _dense_vjp(argnums: Any, ans: Any, args: tuple[Any, ...], kwargs: Any) -> Any:
    """The gradients of ``_dense_raw`` for the arguments the tape asks (``argnums``): each one as the tape computed
    it when the layer's matmul, bias add and relu were three operations (autograd's adjoints, its sums over
    broadcast axes, TF's ReluGrad), from one masked incoming gradient. ``x`` has two axes or more."""
    x, w, _b, relu = args

    def vjp(g: Any) -> tuple[Any, ...]:
        if relu:
            g = g * (ans > 0)  # (ans > 0 exactly where the pre-activation is: relu's own rule)
        out = []
        for argnum in argnums:
            if argnum == 0:
                out.append(np.matmul(g, np.swapaxes(w, -1, -2)))
            elif argnum == 1:
                gw = np.matmul(np.swapaxes(x, -1, -2), g)
                while np.ndim(gw) > 2:
                    gw = np.sum(gw, axis=0)
                out.append(gw)
            else:
                gb = g
                while np.ndim(gb) > 1:
                    gb = np.sum(gb, axis=0)
                out.append(gb)
        return tuple(out)

    return vjp


@functools.cache
def _primitives() -> Any:
    """The autograd primitives, made once (autograd is imported at the first use, not with interdist)."""
    import types

    from autograd.extend import defvjp, defvjp_argnums, primitive

    autodiff._autograd()  # boxes of NumPy arrays are interdist's Traced (see autodiff)
    ns = types.SimpleNamespace(
        relu=primitive(_relu_raw),
        conv2d=primitive(_conv2d_raw),
        max_pool=primitive(_max_pool_raw),
        sparse_xent=primitive(_sparse_xent_raw),
        xent=primitive(_xent_raw),
        dense=primitive(_dense_raw),
    )
    defvjp(ns.relu, _relu_vjp)
    defvjp(ns.sparse_xent, _sparse_xent_vjp)  # (labels: class indices, no gradient)
    defvjp(ns.xent, _xent_vjp_labels, _xent_vjp_logits)
    defvjp_argnums(ns.dense, _dense_vjp)
    defvjp(ns.conv2d, _conv2d_vjp_x, _conv2d_vjp_f)
    defvjp(ns.max_pool, _max_pool_vjp)
    return ns


def _pair(v: Any, name: str) -> tuple[int, int]:
    if isinstance(v, (int, np.integer)):
        return int(v), int(v)
    t = tuple(int(i) for i in v)
    if len(t) == 4:  # TF's [1, s, s, 1]
        t = t[1:3]
    if len(t) != 2 or min(t) < 1:
        raise ValueError(f"{name} must be a positive int or a pair of them, got {v!r}")
    return t[0], t[1]
