"""Reduce-broadcast with its sum split between owners (collectives/split.py) against the root alone, and the cost
model's predictions for both (``cost_model.predict(..., owners=k)``).

Inside one ``strategy.run`` of n local replicas, every replica times ``all_reduce`` SUM of float32 batches from
64 KB to 16 MB under ``AUTO`` (reduce-broadcast at every size at 4 replicas on 2 cores; at 3, from 1 MB), with the
group's ``Collectives.owners`` set to 1 (the root sums alone) and to ``k`` in turn, interleaved in both orders, so
that a busy machine slows both alike (the split forced at every size: ``split.SPLIT_MIN_ELEMENTS``; whether the
model would split there, ``cost_model.split_pays``, is printed beside). Each figure is the median over calls of the
slowest replica's time. The strategy's replicas are pinned round the cores as any strategy's are; the owners the
join chose are printed (``k`` where the split runs by itself: each core holds two replicas or more).

    python benchmarks/bench_split.py [--replicas 3 4] [--owners 2] [--reps 15] [--json PATH]

``--json`` writes what notebooks/09_scaling_model.ipynb reads (``notebooks/data/split.json``).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import time
from typing import Any

import numpy as np
from bench_latency import memcpy_bandwidth

import interdist as idist
from interdist.collectives import cost_model as cm
from interdist.collectives import split

SIZES = (64 << 10, 256 << 10, 1 << 20, 2 << 20, 4 << 20, 16 << 20)


def _times(_: Any, sizes: list[int], owners: int, reps: int) -> dict[str, Any]:
    """On every replica: seconds of each all_reduce, sizes x repeats x (1, ``owners``) interleaved."""
    rep = idist.get_replica_context()._replica  # type: ignore[union-attr]
    coll = rep.collectives
    joined, threshold = coll.owners, split.SPLIT_MIN_ELEMENTS
    out: dict[str, Any] = {"joined": joined, "algorithm": {}, "times": {}, "model_splits": {}}
    seq = 1 << 20  # far above the step's own collectives
    try:
        split.SPLIT_MIN_ELEMENTS = 1  # split at every size (not only where the model says it pays)
        for nbytes in sizes:
            arrays = [np.ones(nbytes // 4, np.float32)]
            out["algorithm"][nbytes] = coll.choose(nbytes // 4)
            out["model_splits"][nbytes] = cm.split_pays(nbytes // 4, coll.world_size, owners)
            t: dict[int, list[float]] = {1: [], owners: []}
            for i in range(reps + 2):  # (the first two of each: warm-up)
                for k in (1, owners) if i % 2 else (owners, 1):  # in both orders: the second of a pair may differ
                    coll.owners = k
                    seq += 1
                    t0 = time.perf_counter()
                    coll.all_reduce(rep.step, seq, arrays, idist.ReduceOp.SUM, "bench_split")
                    t[k].append(time.perf_counter() - t0)
            out["times"][nbytes] = {k: v[2:] for k, v in t.items()}
    finally:
        coll.owners, split.SPLIT_MIN_ELEMENTS = joined, threshold
    return out


def measure(n: int, owners: int, reps: int) -> dict[str, Any]:
    with idist.MirroredStrategy([f"CPU:{i}" for i in range(n)]) as s:
        got = list(s.experimental_local_results(s.run(_times, args=(0, list(SIZES), owners, reps))))
    run: dict[str, Any] = {"n": n, "owners": owners, "joined": got[0]["joined"], "sizes": {}}
    for nbytes in SIZES:
        medians = {}
        for k in (1, owners):
            calls = [max(g["times"][nbytes][k][i] for g in got) for i in range(reps)]
            medians[str(k)] = statistics.median(calls)
        run["sizes"][str(nbytes)] = {
            "algorithm": got[0]["algorithm"][nbytes],
            "model_splits": got[0]["model_splits"][nbytes],
            "seconds": medians,
        }
    return run


def _memcpy_16mb() -> float:
    """Seconds of an in-process copy of 16 MB (``bench_latency.memcpy_bandwidth``): the machine's speed that day."""
    return (16 << 20) / memcpy_bandwidth(16 << 20)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--replicas", type=int, nargs="+", default=[3, 4])
    ap.add_argument("--owners", type=int, default=2)
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--json", metavar="PATH")
    args = ap.parse_args()
    cores = len(os.sched_getaffinity(0))
    print(f"{cores} cores, load {os.getloadavg()[0]:.2f}, memcpy of 16 MB {_memcpy_16mb() * 1e3:.2f} ms", flush=True)
    runs = []
    for n in args.replicas:
        run = measure(n, args.owners, args.reps)
        runs.append(run)
        print(f"-- {n} replicas: the join set {run['joined']} owner(s); timed 1 and {args.owners} --", flush=True)
        for nbytes, row in run["sizes"].items():
            t1, tk = row["seconds"]["1"], row["seconds"][str(args.owners)]
            p1 = cm.predict(cm.RB, int(nbytes), n)
            pk = cm.predict(cm.RB, int(nbytes), n, owners=args.owners)
            print(
                f"{int(nbytes) >> 10:6d} KB {row['algorithm']:17s} root alone {t1 * 1e3:7.3f} ms "
                f"(model {p1 * 1e3:7.3f}), split {tk * 1e3:7.3f} ms (model {pk * 1e3:7.3f}); "
                f"split/root measured {tk / t1:5.2f}, model {pk / p1:5.2f}"
                + (" (AUTO splits)" if row["model_splits"] and row["algorithm"] == cm.RB and run["joined"] > 1 else ""),
                flush=True,
            )
    if args.json:
        data = {
            "measured": datetime.date.today().isoformat(),
            "cores": cores,
            "load": round(os.getloadavg()[0], 2),
            "memcpy_16MB": _memcpy_16mb(),
            "runs": runs,
        }
        with open(args.json, "w") as f:
            json.dump(data, f, indent=1)
            f.write("\n")
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
