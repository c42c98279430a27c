"""Where all_reduce's time goes, path against path, measured inside one strategy.run.

For each size, the replicas alternate two settings collective by collective (interleaved
A/B, so a busy machine slows both alike) and report medians: shared memory against
sockets (``SharedMemoryTransport.threshold``/``threshold_one_peer``: the peers' packets are read off
their channels, or over Dask comms between hosts), and all-gather-reduce (``shm``) against
reduce-scatter + all-gather (``shm+rs``) and reduce-broadcast (``shm+rb``), each forced through
``Collectives.algorithm``. The thresholds in interdist/collectives cite numbers from this script.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from typing import Any

import numpy as np

import interdist as idist
import interdist.collectives.algorithms as al

SIZES = tuple(int(s) for s in os.environ.get("BENCH_SIZES", "4096,16000,256000,1000000,4000000").split(","))


def _paths(v: Any, reps: int) -> dict[str, float]:
    rep = idist.get_replica_context()._replica  # type: ignore[union-attr]
    coll, transport = rep.collectives, rep.transport
    arrays = [np.asarray(v)]
    settings: dict[str, tuple[int, str]] = {  # (shm threshold, forced algorithm)
        "shm": (0, al.AG), "comms": (-1, al.AG), "shm+rs": (0, al.RS), "shm+rb": (0, al.RB)}
    times: dict[str, list[float]] = {k: [] for k in settings}
    saved = transport.threshold, transport.threshold_one_peer, coll.algorithm
    try:
        for i in range(reps):
            for j, (name, (threshold, algorithm)) in enumerate(settings.items()):
                transport.threshold = transport.threshold_one_peer = threshold
                coll.algorithm = algorithm
                t0 = time.perf_counter()
                coll.all_reduce(rep.step, 1000 + i * len(settings) + j, arrays, idist.ReduceOp.SUM, "bench")
                times[name].append(time.perf_counter() - t0)
    finally:
        transport.threshold, transport.threshold_one_peer, coll.algorithm = saved
    return {k: statistics.median(v) for k, v in times.items()}


def main() -> None:
    for n in [int(a) for a in sys.argv[1:]] or [2, 4]:
        with idist.MirroredStrategy([f"CPU:{i}" for i in range(n)]) as s:
            for size in SIZES:
                dv = s.run(lambda size=size: np.ones(size, np.float32))
                r = s.experimental_local_results(s.run(_paths, args=(dv, 20)))[0]
                print(f"n={n} {size * 4 / 1e6:7.3f} MB: " + ", ".join(f"{k} {t * 1e3:7.2f} ms" for k, t in r.items()),
                      flush=True)


if __name__ == "__main__":
    main()
