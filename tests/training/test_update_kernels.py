"""The compiled update kernels (replica/_update_kernels.py): NumPy's bits, in one pass.

SGD's update of a large copy runs ``w -= g * lr`` (one replica, or a reduce-broadcast's sum) or
``w -= (a + b) * lr`` compiled where numba is installed; every element must be what NumPy's two ufuncs give
(two roundings: no fused multiply-add), for both float dtypes, read-only inputs (views of a peer's shared
memory) included, and a replica without numba must get the same copy from the ufuncs tile by tile.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import interdist as idist
from interdist import _jit

pytestmark = pytest.mark.skipif(bool(_jit.unavailable_reason()), reason=_jit.unavailable_reason() or "numba")


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("n", [1, 7, (1 << 20) + 3])
def test_the_kernels_give_numpys_bits(n: int, dtype: Any) -> None:
    from interdist.replica import _update_kernels as k

    rng = np.random.default_rng(n)
    w, a, b = (rng.normal(size=n).astype(dtype) * 100 for _ in range(3))
    a.flags.writeable = False  # as a view of a peer's segment
    lr = dtype(0.37)
    one, two = w.copy(), w.copy()
    k.sub_scaled(one, a, lr)
    k.sub_sum_scaled(two, a, b, lr)
    assert np.array_equal(one, w - a * lr)
    assert np.array_equal(two, w - (a + b) * lr)
    assert not np.array_equal(two, w - (a + b) * np.float64(lr)) or dtype == np.float64  # (the check can fail)


def _no_numba(off: bool) -> int:
    """In the worker: the update takes NumPy's path (as without numba), or the compiled one again; how many
    times the compiled kernel ran so far (a counting spy on it)."""
    from interdist.replica import _update_kernels, fused_update

    fused_update.COMPILED_DTYPES = () if off else ("float32", "float64")
    real = getattr(_update_kernels, "real_sub_scaled", _update_kernels.sub_scaled)
    calls = getattr(_update_kernels, "calls", 0)

    def spy(*args: Any) -> None:
        _update_kernels.calls = getattr(_update_kernels, "calls", 0) + 1  # type: ignore[attr-defined]
        real(*args)

    _update_kernels.real_sub_scaled = real  # type: ignore[attr-defined]
    _update_kernels.sub_scaled = spy  # type: ignore[assignment]
    return int(calls)


@pytest.mark.filterwarnings("ignore:the replica function .* pickles to:UserWarning")  # (its arrays are the test)
def test_one_replicas_update_is_the_same_compiled_or_not() -> None:
    n = (1 << 20) // 4 + 12_345
    w0 = np.random.default_rng(5).normal(size=n).astype(np.float32)
    g = np.random.default_rng(6).normal(size=n).astype(np.float32)
    copies, calls = [], []
    with idist.MirroredStrategy(["CPU:0"]) as s:
        for off in (False, True):
            calls.append(int(s.run(_no_numba, args=(off,))))
            with s.scope():
                w = idist.Variable(w0, name=f"w_kernels_{off}")
                opt = idist.optimizers.SGD(0.1)
            for _ in range(3):
                s.run(lambda: opt.apply_gradients([(g, w)]))
            copies.append(np.asarray(s.experimental_local_results(w)[0]))
        calls.append(int(s.run(_no_numba, args=(False,))))
    assert calls == [0, 3, 3]  # compiled three times, then not at all (NumPy's tiles)
    expected = w0.copy()
    for _ in range(3):
        expected = expected - g * np.float32(0.1)
    assert np.array_equal(copies[0], expected)
    assert np.array_equal(copies[1], expected)
