"""The in-place reductions of all_reduce give the bits of ``reduce_arrays`` (rank-order additions)."""

from __future__ import annotations

import numpy as np
import pytest

from interdist._reduction import reduce_arrays
from interdist.collectives.algorithms import _BLOCK, _reduce_owned
from interdist.reduce_op import ReduceOp


@pytest.mark.parametrize("n", [2, 3, 4, 7])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.complex64])
@pytest.mark.parametrize("shape", [(5,), (_BLOCK * 3 + 17,), (300, 700)])
@pytest.mark.parametrize("op", [ReduceOp.SUM, ReduceOp.MEAN])
def test_same_bits_as_reduce_arrays(n: int, dtype: type, shape: tuple[int, ...], op: ReduceOp) -> None:
    rng = np.random.default_rng(n)
    arrays = [(rng.normal(size=shape) * 1e3).astype(dtype) for _ in range(n)]
    got, want = _reduce_owned(arrays, op), reduce_arrays(arrays, op)
    assert got.dtype == want.dtype and got.shape == want.shape
    assert got.tobytes() == want.tobytes()


def test_non_contiguous_inputs() -> None:
    base = np.arange(4 * _BLOCK * 2, dtype=np.float32).reshape(-1, 2)
    arrays = [base[:, 0] * (r + 1) for r in range(4)]  # strided views
    assert _reduce_owned(arrays, ReduceOp.SUM).tobytes() == reduce_arrays(arrays, ReduceOp.SUM).tobytes()


numba = pytest.importorskip("numba")  # the compiled sum (the ``fast`` extra); what follows needs it


@pytest.mark.parametrize("n", [3, 4, 8])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64])
def test_the_compiled_sum_runs_and_gives_numpys_bits(n: int, dtype: type, monkeypatch: pytest.MonkeyPatch) -> None:
    """Three arrays or more of a compiled dtype go through ``_sum_kernels.sum_into`` (one pass), with the bits of
    ``reduce_arrays``' rank-order additions, non-finite values, integer wrap-around and read-only inputs (an owner's
    chunks lie in its peers' read-only segments) included."""
    from interdist.collectives import reducing

    kernels = reducing._sum_kernels()
    calls: list[int] = []

    def counted(out: np.ndarray, parts: tuple[np.ndarray, ...]) -> None:
        calls.append(len(parts))
        kernels.sum_into(out, parts)

    monkeypatch.setattr(reducing, "_sum_kernels", lambda: type("K", (), {"sum_into": staticmethod(counted)}))
    rng = np.random.default_rng(n)
    size = _BLOCK + 5
    if np.dtype(dtype).kind == "f":
        arrays = [(rng.normal(size=size) * 1e30).astype(dtype) for _ in range(n)]
        arrays[0][:3] = [np.inf, -np.inf, np.nan]  # inf + -inf is nan, nan stays nan: NumPy's rules
        arrays[1][:3] = [1.0, np.inf, 0.0]
    else:
        info = np.iinfo(dtype)
        arrays = [rng.integers(info.min // 2, info.max // 2, size=size, dtype=dtype) for _ in range(n)]
        arrays[0][:2] = [info.max, info.min]  # overflow wraps, as NumPy's add does
        arrays[1][:2] = [info.max, info.min]
    arrays[-1].flags.writeable = False
    with np.errstate(all="ignore"):  # (NumPy's reference warns of inf - inf and overflow; the kernel does not)
        got, want = _reduce_owned(arrays, ReduceOp.SUM), reduce_arrays(arrays, ReduceOp.SUM)
    assert calls == [n]
    assert got.dtype == want.dtype and got.tobytes() == want.tobytes()


def test_without_numba_the_sum_is_numpys(monkeypatch: pytest.MonkeyPatch) -> None:
    """No compiled kernel where numba is absent (``_jit.unavailable_reason``): the blocked NumPy sum, the same bits."""
    from interdist import _jit
    from interdist.collectives import reducing

    monkeypatch.setattr(_jit, "unavailable_reason", lambda: "numba is not installed")
    monkeypatch.setattr(reducing, "_sum_kernels", lambda: pytest.fail("the kernel ran without numba"))
    arrays = [np.full(_BLOCK * 2, r + 0.1, np.float32) for r in range(4)]
    assert _reduce_owned(arrays, ReduceOp.SUM).tobytes() == reduce_arrays(arrays, ReduceOp.SUM).tobytes()
