"""Soak: 10,000 steps with an all-reduce and a mirrored-variable update on 4 replicas.

Does anything grow or slow down over a long session? Samples, every 1,000 steps: the resident memory
of the notebook process and of each worker process, the length of the strategy's event log, and the
steps per second of the last window. Prints one line per figure with its baseline (the first sample
after warm-up) and the ratio, e.g. ``worker RSS growth``: targets are flat memory (growth under
5 MiB per 10,000 steps after warm-up), a bounded event log, and no slow-down (last window at >= 0.9x
the first).

    .venv/bin/python benchmarks/bench_soak.py [--steps 10000] [--replicas 4]

What grows and where it stops (measured with tracemalloc in a worker): the notebook's event log
fills to its bound (100,000 events: 5,000 steps of 4 replicas, ~50 MiB) and stays there; each
worker's Dask ``BatchedSend`` keeps its last 1,000 messages to the scheduler for debugging
(``distributed.admin.low-level-log-length``), our event batches among them, ~2 MiB per 3,000 steps
until it is full. No interdist object accumulates per step (a census of the worker's objects over
2,000 steps is flat).
"""

from __future__ import annotations

import argparse
import gc
import statistics
import time

import numpy as np
import psutil

import interdist as idist

MIB = 1 << 20


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=10_000)
    ap.add_argument("--replicas", type=int, default=4)
    ap.add_argument("--every", type=int, default=1_000)
    a = ap.parse_args()
    me = psutil.Process()
    with idist.MirroredStrategy([f"CPU:{i}" for i in range(a.replicas)]) as s:
        with s.scope():
            w = idist.Variable(np.zeros(1024, np.float32))

        def step() -> object:
            ctx = idist.get_replica_context()
            g = np.full(1024, ctx.replica_id_in_sync_group + 1, np.float32)
            total = ctx.all_reduce("SUM", g)
            w.assign_add(total * 1e-6)
            return total[0]

        workers = [psutil.Process(p.pid) for p in s._lease.cluster.workers.values()]
        samples: list[dict[str, float]] = []
        t_window = time.perf_counter()
        for i in range(1, a.steps + 1):
            s.run(step)
            if i % a.every == 0:
                now = time.perf_counter()
                gc.collect()
                samples.append(
                    {
                        "step": i,
                        "steps_per_s": a.every / (now - t_window),
                        "notebook_rss": me.memory_info().rss / MIB,
                        "worker_rss": statistics.mean(p.memory_info().rss for p in workers) / MIB,
                        "worker_rss_max": max(p.memory_info().rss for p in workers) / MIB,
                        "events": len(s.events.events),
                    }
                )
                t_window = time.perf_counter()
                print(
                    " ".join(f"{k}={v:.1f}" if isinstance(v, float) else f"{k}={v}" for k, v in samples[-1].items()),
                    flush=True,
                )
        expected = sum(range(1, a.replicas + 1)) * 1e-6 * a.steps
        copies = [float(np.asarray(c)[0]) for c in s.experimental_local_results(w)]
    base, last = samples[min(1, len(samples) - 1)], samples[-1]  # the first window includes warm-up
    steps = last["step"] - base["step"]
    print(f"soak {a.steps} steps, {a.replicas} replicas; baseline = the sample at step {base['step']}")
    print(
        f"notebook RSS: {base['notebook_rss']:.1f} -> {last['notebook_rss']:.1f} MiB, growth "
        f"{last['notebook_rss'] - base['notebook_rss']:+.1f} MiB over {steps} steps (target < 5)"
    )
    print(
        f"worker RSS (mean of {a.replicas}): {base['worker_rss']:.1f} -> {last['worker_rss']:.1f} MiB, growth "
        f"{last['worker_rss'] - base['worker_rss']:+.1f} MiB over {steps} steps (target < 5); "
        f"largest worker {last['worker_rss_max']:.1f} MiB"
    )
    print(f"event log: {last['events']} events kept (bounded at {s.events.events.maxlen})")
    print(
        f"steps/s: first window {base['steps_per_s']:.0f}, last {last['steps_per_s']:.0f}, "
        f"ratio last/first = {last['steps_per_s'] / base['steps_per_s']:.2f}x (target >= 0.9)"
    )
    print(f"variable copies equal: {len(set(copies)) == 1}; value {copies[0]:.4f}, expected {expected:.4f}")


if __name__ == "__main__":
    main()
