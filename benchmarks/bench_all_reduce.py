"""all_reduce SUM inside run, float32, 1e3..4e6 elements, 2 and 4 replicas.

Prints the median time, bus bandwidth 2(n-1)/n * bytes / t, and ratios to an
in-process np.add of the same bytes and to a gather-to-notebook-and-broadcast baseline.
"""

from __future__ import annotations

import numpy as np

import interdist as idist
from _common import median_time


def main() -> None:
    for n in (2, 4):
        with idist.MirroredStrategy([f"CPU:{i}" for i in range(n)]) as s:
            for size in (1_000, 100_000, 1_000_000, 4_000_000):
                nbytes = size * 4

                def make(ctx: object, size: int = size) -> np.ndarray:
                    return np.ones(size, np.float32)

                dv = s.run(lambda size=size: np.ones(size, np.float32))
                repeat = 20 if size >= 1_000_000 else 50
                t = median_time(lambda: s.run(lambda v: idist.get_replica_context().all_reduce("sum", v),
                                              args=(dv,)), repeat=repeat, warmup=2)
                a, b = np.ones(size, np.float32), np.ones(size, np.float32)
                t_add = median_time(lambda: np.add(a, b), repeat=repeat)

                def via_notebook() -> None:
                    total = sum(np.asarray(c) for c in s.experimental_local_results(
                        s.run(lambda v: v, args=(dv,))))
                    s.run(lambda t: t, args=(total,))

                t_nb = median_time(via_notebook, repeat=max(5, repeat // 4), warmup=1)
                busbw = 2 * (n - 1) / n * nbytes / t / 1e9
                print(f"n={n} {nbytes / 1e6:8.3f} MB: all_reduce {t * 1e3:8.3f} ms, bus bw {busbw:6.3f} GB/s, "
                      f"vs np.add {t / t_add:8.1f}x, notebook baseline / all_reduce {t_nb / t:5.2f}x")


if __name__ == "__main__":
    main()
