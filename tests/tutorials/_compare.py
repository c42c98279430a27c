"""Comparing a port's numbers with TF's recording, and the tolerances used."""

from __future__ import annotations

from typing import Any

import numpy as np

#: float32 over a few steps: TF and interdist do the same float32 operations, but not in the same order
#: (oneDNN's convolutions and matmuls, NumPy's pairwise sums), so each step can differ in the last bits
#: and training carries that on. The figures each test needs are in its docstring.
RTOL = 1e-5


def assert_close(actual: Any, expected: Any, rtol: float = RTOL, atol: float = 0.0, path: str = "") -> None:
    """``np.testing.assert_allclose`` over nested dicts/lists of numbers; other leaves must be equal."""
    if isinstance(expected, dict):
        assert isinstance(actual, dict), f"{path}: expected a dict, got {type(actual).__name__}"
        assert sorted(actual) == sorted(expected), f"{path}: keys {sorted(actual)} != {sorted(expected)}"
        for k in expected:
            assert_close(actual[k], expected[k], rtol, atol, f"{path}/{k}")
    elif isinstance(expected, float) or _array(expected):
        a, e = np.asarray(actual, np.float64), np.asarray(expected, np.float64)
        assert a.shape == e.shape, f"{path}: shape {a.shape} != {e.shape}"
        np.testing.assert_allclose(a, e, rtol=rtol, atol=atol, err_msg=path)
    elif isinstance(expected, list):
        assert isinstance(actual, list | tuple), f"{path}: expected a list, got {type(actual).__name__}"
        assert len(actual) == len(expected), f"{path}: {len(actual)} items != {len(expected)}"
        for i, (a, e) in enumerate(zip(actual, expected, strict=True)):
            assert_close(a, e, rtol, atol, f"{path}/{i}")
    else:
        assert actual == expected, f"{path}: {actual!r} != {expected!r}"


def _array(x: Any) -> bool:
    """A non-empty list that makes a rectangular array of numbers."""
    if not (isinstance(x, list) and x and _numeric(x)):
        return False
    try:
        np.asarray(x, np.float64)
    except ValueError:  # ragged
        return False
    return True


def _numeric(x: Any) -> bool:
    if isinstance(x, list):
        return all(_numeric(i) for i in x)
    return isinstance(x, int | float) and not isinstance(x, bool)


def max_rel_diff(actual: Any, expected: Any) -> float:
    """The largest ``|a - e| / |e|`` over the numbers of two nests (what a tolerance must allow)."""
    if isinstance(expected, dict):
        return max((max_rel_diff(actual[k], expected[k]) for k in expected), default=0.0)
    if isinstance(expected, list) and not _array(expected):
        return max((max_rel_diff(a, e) for a, e in zip(actual, expected, strict=True)), default=0.0)
    if isinstance(expected, float | list):
        a, e = np.asarray(actual, np.float64), np.asarray(expected, np.float64)
        if a.size == 0:
            return 0.0
        with np.errstate(divide="ignore", invalid="ignore"):
            r = np.abs(a - e) / np.abs(e)
        r = np.where(np.abs(a - e) == 0, 0.0, r)
        return float(np.max(r))
    return 0.0
