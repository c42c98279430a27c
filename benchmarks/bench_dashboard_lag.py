"""How long after a replica's event the dashboard shows it: idle machine, and loaded by other processes.

The issue's target: the views reach the replicas' state within 1 s of the event on an idle machine,
and catch up without loss when the machine is busy. Two measurements, each on an idle machine and
with every core kept busy by other processes (``LOADS``: spinning Python processes per core):

- **lag**: replica 1 holds back 1.5 s before an ``all_reduce``; replica 0 enters it at ``t`` (its
  ``CollectiveEntered`` event's time). The inline dashboard's status strip (its Bokeh document, what
  goes to the browser) and the Dask status page's model (the scheduler's, fed in 250 ms batches; the
  page redraws every 250 ms on top) are polled every 5 ms until they say "waiting in all_reduce ...
  for [1]": the lag is that moment minus ``t``. Medians and maxima over ``ROUNDS`` steps.
- **catch-up**: ``STEPS`` quick steps with the dashboard open; after the loop, how long until the views
  show every one of them (the model's finished steps, the progress plot's rows), and whether any was
  lost (they must equal the number run).

Run: ``python benchmarks/bench_dashboard_lag.py``. Numbers depend on the machine: quote medians.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

import interdist as idist

ROUNDS = 8
STEPS = 300
HOLD_S = 1.5
LOADS = (1, 3)  # spinning processes per core while "loaded"


@contextmanager
def loaded(per_core: int) -> Iterator[None]:
    """Other processes keeping every core busy (at the same priority as the notebook and the workers)."""
    spin = [sys.executable, "-c", "while True: pass"]
    procs = [subprocess.Popen(spin) for _ in range(per_core * (os.cpu_count() or 1))]
    try:
        time.sleep(0.5)
        yield
    finally:
        for p in procs:
            p.kill()
            p.wait()


def held_back() -> Any:
    ctx = idist.get_replica_context()
    if ctx.replica_id_in_sync_group == 1:
        time.sleep(HOLD_S)
    return ctx.all_reduce("SUM", np.float32(1.0))


def quick() -> Any:
    return idist.get_replica_context().all_reduce("SUM", np.float32(1.0))


def _until(check: Callable[[], bool], timeout: float) -> float | None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if check():
            return time.time()
        time.sleep(0.005)
    return None


def _scheduler_says_waiting(dask_scheduler: Any = None) -> bool:
    from interdist.dashboard.pages import ensure_plugin

    # what an open Dask page reads (the plugin is added with the first page opened: here, at the first ask)
    return bool(ensure_plugin(dask_scheduler).model().status(0).kind == "waiting")


def lags(s: Any, dash: Any) -> tuple[list[float], list[float]]:
    """(inline lags, scheduler-model lags) in seconds over ``ROUNDS`` held-back steps."""
    import threading

    client = s._lease.client
    strip = dash.views["status"]
    inline, dask = [], []
    for _ in range(ROUNDS):
        s.run(quick)  # everyone "done" first, as both views show, so that a "waiting" seen is this round's
        _until(lambda: list(strip.source.data["kind"])[:1] == ["done"], 10)
        _until(lambda: not client.run_on_scheduler(_scheduler_says_waiting), 10)
        before = len(s.events.events)
        seen: dict[str, float | None] = {}

        def watch_inline(seen: dict[str, float | None] = seen) -> None:
            seen["inline"] = _until(lambda: "waiting" in list(strip.source.data["kind"])[:1], 10)

        def watch_dask(seen: dict[str, float | None] = seen) -> None:
            seen["dask"] = _until(lambda: bool(client.run_on_scheduler(_scheduler_says_waiting)), 10)

        watchers = [threading.Thread(target=watch_inline), threading.Thread(target=watch_dask)]
        for w in watchers:
            w.start()
        s.run(held_back)
        for w in watchers:
            w.join()
        entered = [e.time for e in list(s.events.events)[before:]
                   if e.kind == "collective-entered" and e.replica == 0]
        if entered and seen.get("inline"):
            inline.append(seen["inline"] - entered[0])  # type: ignore[operator]
        if entered and seen.get("dask"):
            dask.append(seen["dask"] - entered[0])  # type: ignore[operator]
    return inline, dask


def catch_up(s: Any, dash: Any) -> tuple[float, int, int]:
    """Seconds after a loop of ``STEPS`` steps until the dashboard shows them all; (that, shown, run)."""
    dash.drain()
    start = dash.model.steps_finished
    for _ in range(STEPS):
        s.run(quick)
    t_end = time.time()
    progress = dash.views["progress"]
    done = _until(lambda: dash.model.steps_finished - start >= STEPS, 30)
    dash.drain()  # what the end of the cell does
    rows = len(progress.source.data["step"])
    return ((done or time.time()) - t_end, dash.model.steps_finished - start, min(rows, STEPS))


def fmt(xs: list[float]) -> str:
    if not xs:
        return "none seen"
    return f"median {statistics.median(xs) * 1e3:.0f} ms, max {max(xs) * 1e3:.0f} ms ({len(xs)} steps)"


def main() -> None:
    with idist.MirroredStrategy(["CPU:0", "CPU:1"]) as s:
        dash = s.dashboard().dashboard
        try:
            s.run(quick)
            conditions = [("idle", None), *[(f"loaded ({k} spinning process(es) per core)", loaded(k)) for k in LOADS]]
            for label, ctx in conditions:
                if ctx is not None:
                    ctx.__enter__()
                try:
                    inline, dask = lags(s, dash)
                    took, shown, run = catch_up(s, dash)
                finally:
                    if ctx is not None:
                        ctx.__exit__(None, None, None)
                print(f"[{label}] event -> status strip (inline document): {fmt(inline)}")
                print(f"[{label}] event -> Dask page's model (scheduler):  {fmt(dask)}")
                print(f"[{label}] {STEPS} steps: the dashboard showed {shown} of {run} run, "
                      f"{took * 1e3:.0f} ms after the loop ended ({'no loss' if shown == run else 'LOST'})")
        finally:
            dash.close()


if __name__ == "__main__":
    main()
