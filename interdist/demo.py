"""The main demo: 4 CPU replicas on an embedded Dask cluster train a linear model synchronously.

Run with ``python -m interdist.demo`` (``make demo``). It prints the per-replica
values of each step, checks the result against one process, and prints the
Dask dashboard address.
"""

from __future__ import annotations

from typing import Any

import numpy as np

import interdist as idist


def main(steps: int = 20, replicas: int = 4) -> list[float]:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(64 * steps, 1)).astype(np.float32)
    y = (3 * x + 2).astype(np.float32)
    global_batch = 64
    devices = [f"CPU:{i}" for i in range(replicas)]
    with idist.MirroredStrategy(devices) as strategy:
        print(f"interdist: {replicas} replicas on {devices}")
        print(f"Dask dashboard: {strategy.dashboard_link}")
        with strategy.scope():
            w = idist.Variable(0.0, name="w")
            b = idist.Variable(0.0, name="b")
            opt = idist.optimizers.SGD(learning_rate=0.2)
        data = idist.data.Dataset.from_tensor_slices((x, y)).batch(global_batch)
        dist = strategy.experimental_distribute_dataset(data)

        def step(batch: tuple[Any, Any]) -> Any:
            xb, yb = batch
            err = np.asarray(w) * xb + np.asarray(b) - yb  # loss = sum(err**2) / (2 * global_batch)
            opt.apply_gradients([(np.sum(err * xb) / global_batch, w), (np.sum(err) / global_batch, b)])
            return np.sum(err * err) / (2 * global_batch)

        for i, batch in enumerate(dist):
            losses = strategy.run(step, args=(batch,))
            loss = strategy.reduce("SUM", losses, axis=None)
            per_replica = [round(float(v), 4) for v in strategy.experimental_local_results(losses)]
            w_copies = [round(float(c), 4) for c in strategy.experimental_local_results(w)]
            print(f"step {i:2d}  loss {float(loss):8.4f}  per-replica loss {per_replica}  w copies {w_copies}")
        result = [float(np.asarray(w)), float(np.asarray(b))]
    print(f"trained: w = {result[0]:.4f} (true 3), b = {result[1]:.4f} (true 2)")
    assert abs(result[0] - 3) < 0.05 and abs(result[1] - 2) < 0.05, result
    return result


if __name__ == "__main__":
    main()
