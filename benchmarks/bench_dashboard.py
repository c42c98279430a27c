"""Step time with the dashboard attached vs without (target ratio <= 1.05).

Each round times a block of steps (an all_reduce and a variable update each, so
every step emits ~12 events) without a dashboard, then with one, on the same
strategy; rounds alternate so drift in the machine's speed hits both sides. The
median of the rounds' ratios is reported for:

- "none": nothing attached, so the ratio shows the measurement's own noise;
- "model": a thread that reads the new events (``strategy.events.since``) and feeds a
  ``DashboardModel`` five times a second: the dashboard without its Bokeh views;
- "inline": ``strategy.dashboard()`` as in a notebook, live feed on (its pump thread reads
  the events, feeds the model and redraws the views five times a second, sending new rows).

A synchronous listener (``strategy.events.listeners``) runs on the step's own thread; its
cost per step is printed apart (the model's cost per event times the events of a step).
"""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np

import interdist as idist
from interdist.dashboard.model import DashboardModel


def block(s: Any, fn: Callable[[], Any], steps: int) -> tuple[float, float]:
    """Median step time over ``steps`` steps, and their total time."""
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        s.run(fn)
        times.append(time.perf_counter() - t0)
    return statistics.median(times), sum(times)


class Attached:
    """One kind of dashboard on ``s`` while in the ``with`` block; ``cpu_s``: the CPU time its own
    thread spent (reading events, feeding the model, redrawing), measured by that thread."""

    def __init__(self, s: Any, kind: str) -> None:
        self.s, self.kind, self.box, self.cpu = s, kind, None, 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._pump, daemon=True)

    def _pump(self) -> None:  # "model": the dashboard's pump without its Bokeh views
        model = DashboardModel()
        position = self.s.events.since(0)[1]
        while not self._stop.wait(0.2):
            t = time.thread_time()
            new, position = self.s.events.since(position)
            model.feed_many(new)
            self.cpu += time.thread_time() - t

    @property
    def cpu_s(self) -> float:
        return self.box.dashboard.cpu_s if self.box is not None else self.cpu

    def __enter__(self) -> Attached:
        if self.kind == "model":
            self._thread.start()
        elif self.kind == "inline":
            self.box = self.s.dashboard()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.box is not None:
            self.box.dashboard.close()
        if self._thread.is_alive():
            self._stop.set()
            self._thread.join()


def main(rounds: int = 9, steps: int = 400, replicas: int = 2) -> dict[str, float]:
    print(f"{replicas} replicas")
    with idist.MirroredStrategy([f"CPU:{i}" for i in range(replicas)]) as s:
        with s.scope():
            v = idist.Variable(np.zeros(1000, np.float32), name="v", aggregation=idist.VariableAggregation.MEAN)

        def step() -> Any:
            g = idist.get_replica_context().all_reduce("sum", np.ones(1000, np.float32))
            v.assign_add(g * 1e-3)
            return g[0]

        block(s, step, 20)  # warm up
        kinds = ["none", "model", "inline"]
        ratios: dict[str, list[float]] = {k: [] for k in kinds}
        shares: dict[str, list[float]] = {k: [] for k in kinds}  # the dashboard thread's CPU, per step time
        for _ in range(rounds):
            for kind in kinds:
                # ABBA order: a trend in the machine's speed cancels out within the round
                before = block(s, step, steps // 2)
                with Attached(s, kind) as attached:
                    cpu0 = attached.cpu_s
                    a, b = block(s, step, steps // 2), block(s, step, steps // 2)
                    shares[kind].append((attached.cpu_s - cpu0) / (a[1] + b[1]))
                after = block(s, step, steps // 2)
                ratios[kind].append((a[0] + b[0]) / (before[0] + after[0]))
        base = block(s, step, steps)[0]
        evs = list(s.events.events)
    # The noise-free estimate: the model's cost per event times the events of one step.
    per_step = sum(1 for e in evs if e.step == evs[-1].step)
    t0 = time.perf_counter()
    model = DashboardModel()
    for _ in range(20):
        model.feed_many(evs)
    feed_s = (time.perf_counter() - t0) / (20 * len(evs))
    print(f"a synchronous listener feeding the model: {feed_s * 1e6:.1f} us per event x {per_step} events "
          f"per step = {feed_s * per_step / base * 100:.2f}% of a step")
    out = {k: statistics.median(r) for k, r in ratios.items()}
    print(f"step time without a dashboard: {base * 1e3:.3f} ms (median of {steps} steps)")
    for kind, ratio in out.items():
        q = statistics.quantiles(ratios[kind], n=4)
        share = statistics.median(shares[kind])
        print(f"{kind:>6} attached: step time ratio {ratio:.3f} (quartiles {q[0]:.3f}-{q[2]:.3f}, {rounds} rounds); "
              f"its thread's CPU {share * 100:.1f}% of the step time (targets <= 1.05, <= 5%) "
              f"{'OK' if ratio <= 1.05 else 'RATIO ABOVE TARGET'}")
    return out


if __name__ == "__main__":
    import sys

    for n in [int(a) for a in sys.argv[1:]] or [2, 4]:
        main(replicas=n)
