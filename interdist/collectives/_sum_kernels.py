"""The compiled rank-order sum of a large reduction (numba; imported at first use: ``reducing._blocked_sum``).

``out[j] = ((a0[j] + a1[j]) + a2[j]) + ...``: NumPy's additions on the same dtype, in the same order, one element
at a time (numba leaves floating-point reassociation and contraction off unless ``fastmath`` is set, and integers
wrap as NumPy's do), so every element has the bits of ``reduce_arrays``. One pass over memory with the running
total in a register, where NumPy's blocked sum writes and reads the block's total once per array: on the
development machine, 3 to 8 arrays of 512K elements in the cache, 0.5-0.7 of the blocked sum's time for float32,
float64 and int32 (``benchmarks`` figures in docs/performance.md, "The seventeenth run").

``parts`` is a tuple of 1-d C-contiguous arrays of one dtype (numba compiles one version per dtype and length,
kept on disk: ``cache=True``).
"""

from __future__ import annotations

from typing import Any

from numba import njit


@njit(nogil=True, boundscheck=False, cache=True)
def sum_into(out: Any, parts: Any) -> None:
    """``out[:] = ((parts[0] + parts[1]) + parts[2]) + ...`` elementwise (flat arrays of one dtype, 2 or more)."""
    first, second = parts[0], parts[1]
    for j in range(out.size):
        t = first[j] + second[j]
        for i in range(2, len(parts)):
            t = t + parts[i][j]
        out[j] = t
