"""Updates applied per second: ParameterServerStrategy (2 workers, 1 ps) against MirroredStrategy (2 replicas).

The same small model (linear regression, 64 features, batches of 32) and the same
step: compute the gradient of a batch, subtract ``lr * grad``. With parameter
servers every step is one update, applied as soon as its worker sends it; with
MirroredStrategy a step is one synchronous update of both replicas' copies (the
replicas' gradients averaged). Also prints the staleness distribution of the PS
run: for each applied step, how many other updates the ps applied between the
step's read and its apply.
"""

from __future__ import annotations

import collections
import logging
import time
from typing import Any

import numpy as np

import interdist as idist

FEATURES, BATCH, STEPS = 64, 32, 400


def _data(seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(BATCH, FEATURES)).astype(np.float32)
    return x, (x @ np.linspace(-1, 1, FEATURES).astype(np.float32)).astype(np.float32)


def _grad(w: np.ndarray, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    return (2.0 * x.T @ (x @ w - y) / len(y)).astype(np.float32)


def bench_ps() -> tuple[float, list[int]]:
    from distributed import LocalCluster, Nanny

    from interdist.experimental import ParameterServerStrategy, coordinator

    ClusterCoordinator = coordinator.ClusterCoordinator

    cluster = LocalCluster(n_workers=0, host="127.0.0.1", dashboard_address="127.0.0.1:0",
                           silence_logs=logging.ERROR)

    async def add(name: str) -> Any:
        n = Nanny(cluster.scheduler_address, name=name, nthreads=1, host="127.0.0.1", memory_limit=0,
                  silence_logs=logging.ERROR)
        await n
        return n

    nannies = [cluster.sync(add, n) for n in ("ps-0", "worker-0", "worker-1")]
    try:
        s = ParameterServerStrategy(cluster=cluster.scheduler_address)
        coord = ClusterCoordinator(s)
        with s.scope():
            w = idist.Variable(np.zeros(FEATURES, np.float32))

        def step(seed: int) -> None:
            x, y = _data(seed)
            w.assign_sub(np.float32(0.01) * _grad(np.asarray(w), x, y))

        for i in range(20):  # warm up both workers
            coord.schedule(step, args=(i,))
        coord.join()
        before = s._ps_stats()[0]["applied_count"]
        t0 = time.perf_counter()
        for i in range(STEPS):
            coord.schedule(step, args=(i,))
        coord.join()
        elapsed = time.perf_counter() - t0
        stats = s._ps_stats()[0]
        assert stats["applied_count"] - before == STEPS
        staleness = list(stats["staleness"])[-STEPS:]
        s.close()
        return STEPS / elapsed, staleness
    finally:
        for n in nannies:
            cluster.sync(n.close)
        cluster.close()


def bench_mirrored() -> float:
    with idist.MirroredStrategy(["CPU:0", "CPU:1"]) as s:
        with s.scope():
            w = idist.Variable(np.zeros(FEATURES, np.float32), aggregation=idist.VariableAggregation.MEAN)

        def step(seed: int) -> None:
            r = int(idist.get_replica_context().replica_id_in_sync_group)
            x, y = _data(seed * 2 + r)
            w.assign_sub(np.float32(0.01) * _grad(np.asarray(w), x, y))

        for i in range(20):
            s.run(step, args=(i,))
        t0 = time.perf_counter()
        for i in range(STEPS):
            s.run(step, args=(i,))
        return STEPS / (time.perf_counter() - t0)


def main() -> None:
    ps_rate, staleness = bench_ps()
    mirrored_rate = bench_mirrored()
    hist = collections.Counter(staleness)
    print(f"ParameterServerStrategy (2 workers, 1 ps): {ps_rate:.0f} updates/s over {STEPS} scheduled steps")
    print(f"MirroredStrategy (2 replicas):             {mirrored_rate:.0f} updates/s "
          f"({2 * mirrored_rate:.0f} replica-gradients/s) over {STEPS} steps")
    print(f"ratio PS / Mirrored updates/s: {ps_rate / mirrored_rate:.2f}x")
    print("PS staleness (updates applied between a step's read and its apply): "
          + ", ".join(f"{k}: {v}" for k, v in sorted(hist.items()))
          + f"; mean {np.mean(staleness):.2f}, max {max(staleness)}")


if __name__ == "__main__":
    main()
