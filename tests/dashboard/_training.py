"""A short synchronous training run, shared by the recorder, the browser test and the notebook test."""

from __future__ import annotations

from typing import Any

import numpy as np

import interdist as idist


def train(strategy: Any, steps: int = 6, global_batch: int = 16) -> dict[str, Any]:
    """Fit y = 3x + 2 with SGD; every step all-reduces the gradients (one collective per variable)."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(global_batch * steps, 1)).astype(np.float32)
    y = (3 * x + 2).astype(np.float32)
    with strategy.scope():
        w = idist.Variable(0.0, name="w")
        b = idist.Variable(0.0, name="b")
        opt = idist.optimizers.SGD(learning_rate=0.2)
    dist = strategy.experimental_distribute_dataset(
        idist.data.Dataset.from_tensor_slices((x, y)).batch(global_batch))

    def step(batch: Any) -> Any:
        xb, yb = batch
        err = np.asarray(w) * xb + np.asarray(b) - yb
        opt.apply_gradients([(np.sum(err * xb) / global_batch, w), (np.sum(err) / global_batch, b)])
        loss = np.sum(err * err) / (2 * global_batch)
        return idist.get_replica_context().all_reduce("sum", loss)  # every replica sees the global loss

    loss = None
    for batch in dist:
        loss = strategy.experimental_local_results(strategy.run(step, args=(batch,)))[0]
    return {"w": w, "b": b, "loss": float(np.asarray(loss))}
