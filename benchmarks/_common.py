"""Helpers for the benchmarks: medians of repeated timings, TF when installed."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any


def median_time(fn: Callable[[], object], repeat: int = 50, warmup: int = 5) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def have_tensorflow() -> bool:
    """Whether TF imports; ``INTERDIST_TF_SITE`` may name another environment's site-packages to take it from
    (appended to ``sys.path``, so this environment's NumPy and Dask still come first)."""
    site = os.environ.get("INTERDIST_TF_SITE")
    if site and site not in sys.path:
        sys.path.append(site)
    try:
        import tensorflow  # noqa: F401
    except ImportError:
        return False
    return True


def tf_child(program: str, what: str) -> dict[str, Any]:
    """Run a TF ``program`` in a child Python and return the JSON it prints after ``@@``; {} without TF.

    A child per replica count: TF fixes its logical devices once per process and reuses its collective
    group keys across strategies. The program is written to a file, not passed with ``-c``: AutoGraph
    reads a tf.function's source to convert its loops. It runs in this directory with this process's
    ``sys.path`` first (``from _common import median_time`` works there).
    """
    if not have_tensorflow():
        return {}
    head = f"import sys\nsys.path[:0] = {sys.path!r}\n"
    with tempfile.TemporaryDirectory() as tmp:
        script = os.path.join(tmp, "tf_baseline.py")
        with open(script, "w") as f:
            f.write(head + program)
        p = subprocess.run([sys.executable, script], capture_output=True, text=True, check=False,
                           cwd=os.path.dirname(os.path.abspath(__file__)))
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("@@")]
    if not lines:
        print(f"TF baseline ({what}) failed: {p.stderr[-600:]}")
        return {}
    return dict(json.loads(lines[0][2:]))


def tf_all_reduce(n: int, sizes: list[tuple[int, int]]) -> dict[int, float]:
    """TF's ``all_reduce`` SUM of ``size`` float32 inside a tf.function'd ``run`` on n logical CPUs:
    median seconds per size, for each ``(size, repeat)``; {} without TF."""
    program = f"""
import json
import tensorflow as tf
from _common import median_time
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * {n})
ts = tf.distribute.MirroredStrategy([f"CPU:{{i}}" for i in range({n})])

@tf.function
def step(v):
    return ts.run(lambda x: tf.distribute.get_replica_context().all_reduce("sum", x), args=(v,))

out = {{}}
for size, repeat in {sizes!r}:
    dv = ts.experimental_distribute_values_from_function(lambda ctx: tf.ones([size], tf.float32))
    out[size] = median_time(lambda: ts.experimental_local_results(step(dv))[0].numpy(), repeat=repeat, warmup=3)
print("@@" + json.dumps(out))
"""
    return {int(k): v for k, v in tf_child(program, f"all_reduce on {n} replicas").items()}
