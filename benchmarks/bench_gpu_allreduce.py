"""Host-staged all_reduce of CuPy arrays between two replicas that share GPU 0 (results: tests/gpu/gpu_run.md).

    cd benchmarks && python bench_gpu_allreduce.py

Prints the median time of one ``strategy.run`` whose replica function all-reduces
a float32 CuPy array (SUM), for a few sizes, and the same for NumPy arrays on the
same two workers, so the cost of staging through host memory shows. Without CuPy or
a GPU it says so and exits 0 (``make bench`` runs it on CPU machines too).
"""

from __future__ import annotations

import statistics
import time

import numpy as np

import interdist as idist
from interdist.client.gpus import local_gpu_cluster


def no_gpu_reason() -> str | None:
    """Why this machine cannot run the benchmark, or None."""
    try:
        import cupy

        count = int(cupy.cuda.runtime.getDeviceCount())
    except Exception as e:  # ImportError, or CUDA libraries/driver that fail to load
        return f"CuPy/CUDA not usable here ({type(e).__name__}: {e})"
    return None if count > 0 else "CUDA sees no GPU"


def main() -> None:
    reason = no_gpu_reason()
    if reason is not None:
        print(f"bench_gpu_allreduce: skipped, needs CuPy and an NVIDIA GPU: {reason}", flush=True)
        return
    with local_gpu_cluster([0, 0]) as cluster, \
            idist.MirroredStrategy(["GPU:0", "GPU:1"], cluster=cluster) as s:
        for mb in (1, 16, 64):
            n = mb * (1 << 20) // 4
            row = [f"{mb:>3} MB"]
            for kind in ("cupy", "numpy"):
                def step(kind: str = kind, n: int = n) -> float:
                    import cupy

                    xp = cupy if kind == "cupy" else np
                    x = xp.ones(n, dtype=xp.float32)
                    ctx = idist.get_replica_context()
                    if kind == "cupy":
                        cupy.cuda.Device().synchronize()
                    t0 = time.perf_counter()
                    y = ctx.all_reduce("sum", x)
                    if kind == "cupy":
                        cupy.cuda.Device().synchronize()
                    dt = time.perf_counter() - t0
                    assert float(y[0]) == 2.0 and float(y[-1]) == 2.0
                    return dt

                times = []
                for _ in range(7):
                    out = s.run(step)
                    times.append(max(float(np.asarray(v)) for v in s.experimental_local_results(out)))
                med = statistics.median(times[2:])
                row.append(f"{kind} {med * 1e3:7.2f} ms ({mb / 1024 / med:5.2f} GB/s)")
            print(" | ".join(row), flush=True)


if __name__ == "__main__":
    main()
