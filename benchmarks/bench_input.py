"""Distributed input: samples per second delivered to the replicas, and the step rate of a trivial loop.

For two pipelines over the same 65,536 rows of 256 float32 (64 MiB):

* ``slice``: ``from_tensor_slices(x).batch(256)``: no work per element (and again with
  global batches of 4096, where a step moves 4 MiB and the per-step cost matters less);
* ``spectrum``: ``.map(log-magnitude spectrum of the row)`` before ``batch(256)``: ~15 µs of
  NumPy per element, the kind of per-element decoding/feature work input pipelines do;

the rate of (a) a NumPy dataset split in the notebook (``experimental_distribute_dataset``),
(b) ``dataset_fn`` on the workers (``distribute_datasets_from_function``), (c) a Dask array
persisted on the cluster (``experimental_distribute_dataset`` of ``from_tensor_slices(dask)``),
each consumed by ``run_steps`` of a trivial step, as a ratio to iterating the same pipeline in
one process over the NumPy array (and, for (c), also over the same Dask array). Medians of 3 runs; making the dataset and its iterator is not timed (a worker
starts reading as soon as its iterator exists, as TF's prefetching does). Then the step rate of a trivial step over
``Dataset.range(100000).batch(64)`` on 2 replicas, step by step and fused.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from _common import have_tensorflow

import interdist as idist
from interdist.input import _dask

ROWS, WIDTH, BATCH, REPEATS = 65536, 256, 256, 3
Dataset = idist.data.Dataset


def spectrum(row: np.ndarray) -> np.ndarray:
    return np.log1p(np.abs(np.fft.rfft(row)[:128])).astype(np.float32)


def data() -> np.ndarray:
    return np.random.default_rng(0).normal(size=(ROWS, WIDTH)).astype(np.float32)


def pipeline(source: Any, mapped: bool, batch: int, epochs: int = 1) -> Any:
    ds = Dataset.from_tensor_slices(source)
    ds = (ds.map(spectrum) if mapped else ds).batch(batch)
    return ds.repeat(epochs) if epochs > 1 else ds


def median_rate(fn: Callable[[], int], setup: Callable[[], Any] | None = None) -> float:
    """Samples per second of ``fn(setup())``; ``setup`` (making the dataset and iterator) is not timed."""
    rates = []
    for _ in range(REPEATS):
        arg = setup() if setup is not None else None
        t0 = time.perf_counter()
        samples = fn(arg) if setup is not None else fn()
        rates.append(samples / (time.perf_counter() - t0))
    return statistics.median(rates)


def drain(strategy: Any, it: Any, epochs: int = 1) -> int:
    while True:
        try:
            strategy.run_steps(lambda b: np.float32(0.0), it, steps=64)
        except StopIteration:
            return ROWS * epochs


def main() -> None:
    import dask.array as da

    x = data()
    print(f"{ROWS} rows x {WIDTH} float32, global batch {BATCH}; samples/s, median of {REPEATS}")
    # Pipelines with little work per sample run several epochs, so that each timing spans many steps.
    for name, mapped, batch, epochs in (("slice", False, BATCH, 4), ("slice, batch 4096", False, 4096, 16),
                                        ("spectrum", True, BATCH, 1)):
        local = median_rate(lambda: sum(len(b) for b in pipeline(x, mapped, batch, epochs)))
        print(f"[{name}] one process: {local:,.0f} samples/s ({epochs} epoch(s))")
        for n in (2, 4):
            with idist.MirroredStrategy([f"CPU:{i}" for i in range(n)]) as s:
                a = median_rate(lambda it: drain(s, it, epochs),
                                lambda: iter(s.experimental_distribute_dataset(pipeline(x, mapped, batch, epochs))))

                def dataset_fn(ctx: Any, mapped: bool = mapped, batch: int = batch, epochs: int = epochs) -> Any:
                    return pipeline(data(), mapped, ctx.get_per_replica_batch_size(batch), epochs)

                b = median_rate(lambda it: drain(s, it, epochs),
                                lambda: iter(s.distribute_datasets_from_function(dataset_fn)))
                dx = s.client.persist(da.from_array(x, chunks=(4096, WIDTH)))
                c = median_rate(lambda it: drain(s, it, epochs),
                                lambda: iter(s.experimental_distribute_dataset(pipeline(dx, mapped, batch, epochs))))
                # The same Dask array iterated in one process (the notebook, reading through the client).
                with _dask.using_client(s.client):
                    c_local = median_rate(lambda: sum(len(b) for b in pipeline(dx, mapped, batch, epochs)))
                print(f"[{name}] {n} replicas: (a) notebook dataset {a:,.0f} = {a / local:.2f}x one process; "
                      f"(b) dataset_fn on workers {b:,.0f} = {b / local:.2f}x; "
                      f"(c) Dask array {c:,.0f} = {c / local:.2f}x, and {c / c_local:.2f}x one process reading "
                      f"the same Dask array ({c_local:,.0f})")
                del dx
    with idist.MirroredStrategy(["CPU:0", "CPU:1"]) as s:
        ds = s.experimental_distribute_dataset(Dataset.range(100000).batch(64))
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
