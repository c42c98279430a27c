"""Optimizer steps per second for a model of 1M float32 parameters on 1, 2 and 4 replicas.

The step time is split by measuring three programs in the same run: compute only,
compute + all-reduce of the gradients (what batch_reduce_to moves), and the full
apply_gradients (compute + reduce + update). Ratio: the same loop in one NumPy process.
"""

from __future__ import annotations

import numpy as np

import interdist as idist
from _common import median_time

PARAMS = 1_000_000


def main() -> None:
    rng = np.random.default_rng(0)
    w0 = rng.normal(size=PARAMS).astype(np.float32)
    x = rng.normal(size=PARAMS).astype(np.float32)

    w_local = w0.copy()

    def numpy_step() -> None:
        g = 0.01 * w_local + x  # a stand-in gradient with the cost of one pass over the parameters
        w_local[:] -= 0.1 * g

    t_np = median_time(numpy_step, repeat=20)
    print(f"one NumPy process: {t_np * 1e3:.2f} ms/step ({1 / t_np:.0f} steps/s)")
    for n in (1, 2, 4):
        with idist.MirroredStrategy([f"CPU:{i}" for i in range(n)]) as s:
            with s.scope():
                w = idist.Variable(w0, name="w")
                opt = idist.optimizers.SGD(0.1)

            # The data lives on the workers (a run result passed back in never travels).
            xs = s.run(lambda: np.random.default_rng(0).normal(size=PARAMS).astype(np.float32))

            def grad(xr: np.ndarray) -> np.ndarray:
                return (0.01 * np.asarray(w) + xr) / n

            t_compute = median_time(lambda: s.run(grad, args=(xs,)), repeat=10, warmup=2)
            t_reduce = median_time(lambda: s.run(
                lambda xr: idist.get_replica_context().all_reduce("sum", grad(xr)), args=(xs,)), repeat=10, warmup=2)
            t_full = median_time(lambda: s.run(lambda xr: opt.apply_gradients([(grad(xr), w)]), args=(xs,)),
                                 repeat=10, warmup=2)
            print(f"{n} replica(s): {t_full * 1e3:.1f} ms/step ({1 / t_full:.1f} steps/s) = compute "
                  f"{t_compute * 1e3:.1f} + batch_reduce_to {max(t_reduce - t_compute, 0) * 1e3:.1f} + update "
                  f"{max(t_full - t_reduce, 0) * 1e3:.1f} ms; {t_full / t_np:.1f}x one NumPy process")


if __name__ == "__main__":
    main()
