"""Helpers for the benchmarks: medians of repeated timings, TF when installed."""

from __future__ import annotations

import os
import statistics
import sys
import time
from collections.abc import Callable


def median_time(fn: Callable[[], object], repeat: int = 50, warmup: int = 5) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def have_tensorflow() -> bool:
    """Whether TF imports; ``INTERDIST_TF_SITE`` may name another environment's site-packages to take it from
    (appended to ``sys.path``, so this environment's NumPy and Dask still come first)."""
    site = os.environ.get("INTERDIST_TF_SITE")
    if site and site not in sys.path:
        sys.path.append(site)
    try:
        import tensorflow  # noqa: F401
    except ImportError:
        return False
    return True
