"""all_reduce SUM inside run, float32, 1e3..4e6 elements, 2 and 4 replicas.

Prints the median time, bus bandwidth 2(n-1)/n * bytes / t, and ratios to an
in-process np.add of the same bytes and to a gather-to-notebook-and-broadcast baseline.
"""

from __future__ import annotations


import numpy as np

import interdist as idist
from _common import median_time
from _common import tf_all_reduce as tf_all_reduce_child


SIZES = (1_000, 100_000, 1_000_000, 4_000_000)


def _repeat(size: int) -> int:
    return 20 if size >= 1_000_000 else 50


def tf_all_reduce(n: int) -> dict[int, float]:
    """TF's medians per size (``_common.tf_all_reduce``), in a child process per n: TF reuses its collective
    group key across strategies of different sizes in one process ("joining a group with size 4, but that
    group has size 2")."""
    return tf_all_reduce_child(n, [(z, _repeat(z)) for z in SIZES])


def main() -> None:
    for n in (2, 4):
        tf_times = tf_all_reduce(n)  # before the cluster starts, so that neither competes with the other
        with idist.MirroredStrategy([f"CPU:{i}" for i in range(n)]) as s:
            for size in SIZES:
                nbytes = size * 4

                def make(ctx: object, size: int = size) -> np.ndarray:
                    return np.ones(size, np.float32)

                dv = s.run(lambda size=size: np.ones(size, np.float32))
                repeat = _repeat(size)
                t = median_time(lambda: s.run(lambda v: idist.get_replica_context().all_reduce("sum", v),
                                              args=(dv,)), repeat=repeat, warmup=2)
                a, b = np.ones(size, np.float32), np.ones(size, np.float32)
                t_add = median_time(lambda: np.add(a, b), repeat=repeat)

                def via_notebook() -> None:
                    total = sum(np.asarray(c) for c in s.experimental_local_results(
                        s.run(lambda v: v, args=(dv,))))
                    s.run(lambda t: t, args=(total,))

                # The relay through the notebook, two ways: over interdist's same-host sockets (the
                # default), and over Dask comms only (as before them, and as between hosts).
                t_nb = median_time(via_notebook, repeat=max(5, repeat // 4), warmup=1)
                idist.config.settings.local_control = False
                try:
                    t_nb_dask = median_time(via_notebook, repeat=max(5, repeat // 4), warmup=1)
                finally:
                    idist.config.settings.local_control = True
                busbw = 2 * (n - 1) / n * nbytes / t / 1e9
                t_tf = tf_times.get(size)
                vs_tf = f", TF {t_tf * 1e3:.3f} ms: ratio {t / t_tf:.2f}x" if t_tf is not None else ""
                print(f"n={n} {nbytes / 1e6:8.3f} MB: all_reduce {t * 1e3:8.3f} ms, bus bw {busbw:6.3f} GB/s, "
                      f"vs np.add {t / t_add:8.1f}x, notebook baseline / all_reduce {t_nb / t:5.2f}x "
                      f"(over Dask comms {t_nb_dask / t:5.2f}x){vs_tf}")


if __name__ == "__main__":
    main()
