"""A closed strategy whose cluster was shut down leaves nothing of it in the notebook (issue 25, item 7).

Dask's own module-level caches kept every embedded scheduler ever started in this process, and with it
its HTTP server and Bokeh applications: about 0.4 MiB of notebook memory per cluster started and shut
down (``benchmarks/bench_memory.py``). ``cluster._shutdown`` drops those entries
(``cluster._forget_scheduler``).
"""

from __future__ import annotations

import gc
import time
import warnings
import weakref
from typing import Any

import numpy as np

import interdist as idist
from interdist.client import cluster


def _survivors(refs: dict[str, weakref.ref[Any]], bound: float = 30.0) -> list[str]:
    """The names of ``refs`` whose object is still alive, once they are all gone or after ``bound`` seconds
    (the cluster's event-loop thread may still hold a reference for a moment after its close returns)."""
    deadline = time.monotonic() + bound
    while True:
        gc.collect()
        alive = [name for name, ref in refs.items() if ref() is not None]
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.05)


def _use_and_close() -> dict[str, weakref.ref[Any]]:
    """A strategy used and closed (its cluster back in the pool); weak references to what it was made of."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the variable's aggregation NONE, updated in replica context
        with idist.MirroredStrategy(["CPU:0", "CPU:1"]) as s:
            with s.scope():
                v = idist.Variable(np.zeros(4, np.float32), name="v")
            s.run(lambda: v.assign_add(np.ones(4, np.float32)))
            lease = s._lease
            return {
                "strategy": weakref.ref(s),
                "lease": weakref.ref(lease),
                "group": weakref.ref(s._group),
                "client": weakref.ref(lease.client),
                "cluster": weakref.ref(lease.cluster),
                "scheduler": weakref.ref(lease.cluster.scheduler),
                **{f"worker {name}": weakref.ref(w) for name, w in lease.cluster.workers.items()},
            }


def test_a_shut_down_cluster_is_not_kept_alive() -> None:
    cluster.shutdown_all()  # a cluster of its own (not one pooled by an earlier test, which others may hold)
    refs = _use_and_close()
    cluster.shutdown_all()
    alive = _survivors(refs)
    assert not alive, f"still alive after the strategy's close and its cluster's shutdown: {alive}"
