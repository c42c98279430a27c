"""Distributed input: batches per second to the replicas, and the step rate of a trivial loop.

(a) a NumPy dataset split in the notebook, (b) dataset_fn on the workers; each as a ratio to
iterating the same data in one process. Then ``Dataset.range(100000).batch(64)`` on 2 replicas,
step by step and fused (``run_steps``), and TF's MirroredStrategy when installed.
"""

from __future__ import annotations

import time

import numpy as np

import interdist as idist
from _common import have_tensorflow


def rate(n: int, seconds: float) -> float:
    return n / seconds if seconds else float("inf")


def main() -> None:
    x = np.random.default_rng(0).normal(size=(64 * 400, 32)).astype(np.float32)
    t0 = time.perf_counter()
    n_local = sum(1 for _ in idist.data.Dataset.from_tensor_slices(x).batch(64))
    local = rate(n_local * 64, time.perf_counter() - t0)
    print(f"one process: {local:,.0f} samples/s")
    for n in (2, 4):
        with idist.MirroredStrategy([f"CPU:{i}" for i in range(n)]) as s:
            dd = s.experimental_distribute_dataset(idist.data.Dataset.from_tensor_slices(x).batch(64))
            it = iter(dd)
            t0 = time.perf_counter()
            steps = 0
            while True:
                try:
                    s.run_steps(lambda b: np.float32(b.shape[0]), it, steps=50)
                except StopIteration:
                    break
                steps += 50
            a = rate(n_local * 64, time.perf_counter() - t0)

            def dataset_fn(ctx: object, rows: int = x.shape[0]) -> object:
                data = np.random.default_rng(0).normal(size=(rows, 32)).astype(np.float32)
                return idist.data.Dataset.from_tensor_slices(data).batch(64 // n)

            it2 = iter(s.distribute_datasets_from_function(dataset_fn))
            t0 = time.perf_counter()
            while True:
                try:
                    s.run_steps(lambda b: np.float32(b.shape[0]), it2, steps=50)
                except StopIteration:
                    break
            b = rate(x.shape[0], time.perf_counter() - t0)
            print(f"{n} replicas: (a) notebook dataset {a:,.0f} samples/s = {a / local:.2f}x one process; "
                  f"(b) dataset_fn on workers {b:,.0f} samples/s = {b / local:.2f}x")
    with idist.MirroredStrategy(["CPU:0", "CPU:1"]) as s:
        ds = s.experimental_distribute_dataset(idist.data.Dataset.range(100000).batch(64))
        it = iter(ds)
        t0 = time.perf_counter()
        for _ in range(200):
            s.run(lambda b: b, args=(next(it),))
        step = 200 / (time.perf_counter() - t0)
        t0 = time.perf_counter()
        for _ in range(10):
            s.run_steps(lambda b: b, it, steps=100)
        fused = 1000 / (time.perf_counter() - t0)
        print(f"trivial step, 2 replicas: step by step {step:,.0f} steps/s, fused {fused:,.0f} steps/s "
              "(TF measured here: ~440 eager, ~3400 whole loop in tf.function)")
    if not have_tensorflow():
        print("TensorFlow not installed: the TF baseline is skipped")


if __name__ == "__main__":
    main()
