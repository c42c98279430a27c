"""CentralStorageStrategy against MirroredStrategy: ms per optimizer step, same model, same run.

A model of 1M float32 parameters, SGD, on 2 and 4 replicas. Both strategies exist at
once and their rounds alternate, so both see the same machine load; medians.

- ``step``: gradient (reads w) + ``apply_gradients``. Mirrored: all-reduce, every
  replica updates its copy. Central: the gradients are summed onto the holder, which
  updates the one copy; the others fetch w from the holder when the next step reads it.
- ``read``: a step that only reads w (mirrored: local; central: a fetch from the holder
  on every replica but the holder).
- ``ship``: the alternative to reading at use: the notebook fetches w from the holder and
  ships it with the program to every replica.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import numpy as np

import interdist as idist

PARAMS = 1_000_000


def timed(fn: Callable[[], object]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def main(rounds: int = 15) -> None:
    rng = np.random.default_rng(0)
    w0 = rng.normal(size=PARAMS).astype(np.float32)
    for n in (2, 4):
        devices = [f"CPU:{i}" for i in range(n)]
        strategies = {"mirrored": idist.MirroredStrategy(devices),
                      "central": idist.experimental.CentralStorageStrategy(devices, parameter_device="CPU:0")}
        cases: dict[str, Callable[[], object]] = {}
        for name, s in strategies.items():
            with s.scope():
                w = idist.Variable(w0, name="w")
                opt = idist.optimizers.SGD(0.1)
            xs = s.run(lambda: np.random.default_rng(0).normal(size=PARAMS).astype(np.float32))

            def step(xr: np.ndarray, w: object = w, opt: object = opt, n: int = n) -> object:
                g = (np.float32(0.01) * np.asarray(w) + xr) / np.float32(n)
                opt.apply_gradients([(g, w)])  # type: ignore[attr-defined]
                return None

            cases[f"{name} step"] = lambda s=s, step=step, xs=xs: s.run(step, args=(xs,))
            cases[f"{name} read"] = lambda s=s, w=w: s.run(lambda: np.float32(np.asarray(w)[0]))
            if name == "central":
                cases["central ship"] = lambda s=s, w=w: s.run(lambda a: np.float32(a[0]), args=(np.asarray(w),))
        times: dict[str, list[float]] = {k: [] for k in cases}
        for k, fn in cases.items():  # warm up
            for _ in range(3):
                fn()
        for _ in range(rounds):
            for k, fn in cases.items():
                times[k].append(timed(fn))
        med = {k: statistics.median(v) * 1e3 for k, v in times.items()}
        print(f"{n} replicas, {PARAMS:,} float32 parameters, median of {rounds} (ms):")
        for k, v in med.items():
            print(f"  {k:<14} {v:7.1f}")
        print(f"  central/mirrored per optimizer step: {med['central step'] / med['mirrored step']:.2f}x")
        for s in strategies.values():
            s.close()


if __name__ == "__main__":
    main()
