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
