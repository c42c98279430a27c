"""Notebook memory over time (issue 25 item 7): the slope per cluster cycle and per 1,000 steps.

Two measurements, each a least-squares slope of the notebook's resident memory after warm-up (the
median of the per-interval growths is printed too: one page-in of a library is not a trend):

- **cluster cycles**: make a 2-replica strategy (a fresh embedded cluster), create a variable, run
  three steps, close it and shut its cluster down; ``--cycles`` times. ``--trace`` adds the ten
  tracemalloc sites that grew most between the first measured cycle and the last.
- **steps**: ``--steps`` steps of an all-reduce and a mirrored update on ``--replicas`` replicas,
  sampled every ``--every``; the event log's count and approximate bytes are printed with each sample
  (the log fills to its bound, then stays: its plateau is the notebook's largest growth by design).

    .venv/bin/python benchmarks/bench_memory.py [--cycles 16] [--steps 4000] [--replicas 4] [--trace]
"""

from __future__ import annotations

import argparse
import gc
import statistics
import time
import tracemalloc

import numpy as np
import psutil

import interdist as idist
from interdist.client import cluster

MIB = 1 << 20


def _rss() -> float:
    gc.collect()
    return float(psutil.Process().memory_info().rss) / MIB


def _slope(xs: list[float], ys: list[float]) -> float:
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    den = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / den if den else 0.0


def cycles(n: int, warmup: int, trace: bool) -> None:
    rss: list[float] = []
    snap = None
    for i in range(n):
        with idist.MirroredStrategy(["CPU:0", "CPU:1"]) as s:
            with s.scope():
                v = idist.Variable(np.zeros(16, np.float32), name="v")
            for _ in range(3):
                s.run(lambda: v.assign_add(np.ones(16, np.float32)))
        cluster.shutdown_all()
        if trace and i == warmup:
            # before the measurement: the snapshot itself holds tens of MiB (it made a step of the slope)
            snap = tracemalloc.take_snapshot()
        rss.append(_rss())
        print(f"cycle {i + 1}: notebook RSS {rss[-1]:.1f} MiB", flush=True)
    xs = list(range(warmup, n))
    growth = [b - a for a, b in zip(rss[warmup:], rss[warmup + 1 :], strict=False)]
    print(
        f"cluster cycles: {n} (the first {warmup} are warm-up): slope {_slope([float(x) for x in xs], rss[warmup:]):+.3f} "
        f"MiB per cycle, median growth {statistics.median(growth):+.3f} MiB, "
        f"{rss[warmup]:.1f} -> {rss[-1]:.1f} MiB",
        flush=True,
    )
    if trace and snap is None:
        print(f"tracemalloc: no sites (the snapshot is taken after cycle {warmup + 1}: use more --cycles)", flush=True)
    if snap is not None:
        # flushed: piped into a file or `tail`, unflushed lines were lost when the run was cut short
        top = tracemalloc.take_snapshot().compare_to(snap, "lineno")[:10]
        print("tracemalloc, the sites that grew most over the measured cycles:")
        for stat in top:
            print(f"  {stat.size_diff / 1024:+.1f} KiB in {stat.count_diff:+d} blocks: {stat.traceback[0]}")
        print(flush=True)


def steps(n: int, replicas: int, every: int) -> None:
    with idist.MirroredStrategy([f"CPU:{i}" for i in range(replicas)]) as s:
        with s.scope():
            w = idist.Variable(np.zeros(1024, np.float32))

        def step() -> None:
            ctx = idist.get_replica_context()
            w.assign_add(ctx.all_reduce("SUM", np.ones(1024, np.float32)) * 1e-6)

        xs: list[float] = []
        rss: list[float] = []
        t0 = time.perf_counter()
        for i in range(1, n + 1):
            s.run(step)
            if i % every == 0:
                log = s.events
                kept = len(log.events)
                xs.append(float(i))
                rss.append(_rss())
                print(
                    f"step {i}: notebook RSS {rss[-1]:.1f} MiB, event log {kept} events, "
                    f"{log.nbytes / MIB:.1f} MiB (bound {log.max_bytes / MIB:.0f} MiB, {log.events.maxlen} events), "
                    f"{every / (time.perf_counter() - t0):.0f} steps/s",
                    flush=True,
                )
                t0 = time.perf_counter()
        full = [k for k, x in enumerate(xs) if k > 0]  # the first sample includes warm-up
        print(
            f"steps: {n} on {replicas} replicas: slope {1000 * _slope([xs[k] for k in full], [rss[k] for k in full]):+.2f} "
            f"MiB per 1,000 steps, {rss[full[0]]:.1f} -> {rss[-1]:.1f} MiB; event log at the end "
            f"{len(s.events.events)} events, {s.events.nbytes / MIB:.1f} MiB"
        )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cycles", type=int, default=16)
    ap.add_argument("--warmup", type=int, default=4)
    ap.add_argument("--steps", type=int, default=4000)
    ap.add_argument("--replicas", type=int, default=4)
    ap.add_argument("--every", type=int, default=500)
    ap.add_argument("--trace", action="store_true")
    a = ap.parse_args()
    if a.trace:
        tracemalloc.start(4)
    if a.cycles:
        cycles(a.cycles, a.warmup, a.trace)
    if a.steps:
        steps(a.steps, a.replicas, a.every)


if __name__ == "__main__":
    main()
