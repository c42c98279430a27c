"""Step time with the dashboard attached vs without (target ratio <= 1.05).

Each round times a block of steps (an all_reduce and a variable update each, so
every step emits ~12 events) without a dashboard, then with one, on the same
strategy; rounds alternate so drift in the machine's speed hits both sides. The
median of the rounds' ratios is reported for:

- "model": a listener that feeds a ``DashboardModel`` on the step's own thread;
- "none": nothing attached, so the ratio shows the measurement's own noise;
- "inline": ``strategy.dashboard()`` as in a notebook (listener appends to a deque,
  a pump thread feeds the model and redraws the six Bokeh views five times a second).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np

import interdist as idist
from interdist.dashboard.model import DashboardModel


def block(s: Any, fn: Callable[[], Any], steps: int) -> float:
    """Median step time over ``steps`` steps."""
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        s.run(fn)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _attachment(s: Any, kind: str) -> tuple[Callable[[], None], Callable[[], None]]:
    """How to attach and detach each kind of dashboard ("none" measures the noise)."""
    if kind == "model":
        model = DashboardModel()
        return (lambda: s.events.listeners.append(model.feed)), (lambda: s.events.listeners.remove(model.feed))
    if kind == "inline":
        boxes: list[Any] = []
        return (lambda: boxes.append(s.dashboard())), (lambda: boxes[0].dashboard.close())
    return (lambda: None), (lambda: None)


def main(rounds: int = 9, steps: int = 40, replicas: int = 2) -> dict[str, float]:
    print(f"{replicas} replicas")
    with idist.MirroredStrategy([f"CPU:{i}" for i in range(replicas)]) as s:
        with s.scope():
            v = idist.Variable(np.zeros(1000, np.float32), name="v", aggregation=idist.VariableAggregation.MEAN)

        def step() -> Any:
            g = idist.get_replica_context().all_reduce("sum", np.ones(1000, np.float32))
            v.assign_add(g * 1e-3)
            return g[0]

        block(s, step, 20)  # warm up
        ratios: dict[str, list[float]] = {"none": [], "model": [], "inline": []}
        for _ in range(rounds):
            for kind, found in ratios.items():
                # ABBA order: a trend in the machine's speed cancels out within the round
                before = block(s, step, steps // 2)
                attach, detach = _attachment(s, kind)
                attach()
                attached = (block(s, step, steps // 2) + block(s, step, steps // 2)) / 2
                detach()
                after = block(s, step, steps // 2)
                found.append(attached / ((before + after) / 2))
        base = block(s, step, steps)
        evs = list(s.events.events)
    # The noise-free estimate: the model's cost per event times the events of one step.
    per_step = sum(1 for e in evs if e.step == evs[-1].step)
    t0 = time.perf_counter()
    model = DashboardModel()
    for _ in range(20):
        model.feed_many(evs)
    feed_s = (time.perf_counter() - t0) / (20 * len(evs))
    print(f"model.feed: {feed_s * 1e6:.1f} us per event x {per_step} events per step = "
          f"{feed_s * per_step / base * 100:.2f}% of a step")
    out = {k: statistics.median(r) for k, r in ratios.items()}
    print(f"step time without a dashboard: {base * 1e3:.3f} ms (median of {steps} steps)")
    for kind, ratio in out.items():
        print(f"{kind:>6} dashboard attached: median ratio {ratio:.3f} over {rounds} rounds "
              f"(target <= 1.05) {'OK' if ratio <= 1.05 else 'ABOVE TARGET'}")
    return out


if __name__ == "__main__":
    import sys

    for n in [int(a) for a in sys.argv[1:]] or [2, 4]:
        main(replicas=n)
