"""How long an in-process ParameterServer cluster takes to start: interdist against TF (issue 26).

The cluster of TF's "Parameter server training" tutorial (``create_in_process_cluster``): ``--workers``
worker tasks and ``--ps`` ps tasks (default 3 and 2: five tasks), one ``Server`` per task in this process,
then a ``SimpleClusterResolver``, a ``ParameterServerStrategy`` and a ``ClusterCoordinator``. Timed:

- **start**: from the first ``Server(...)`` to the coordinator being ready (what the issue measured);
- **first step**: one ``schedule`` of a step that updates a variable, fetched.

Each try runs in a fresh Python (nothing pooled or cached from an earlier try; imports are not timed),
``--repeat`` times (default 3); the medians are printed. TF's run needs an interpreter with TensorFlow:
``INTERDIST_TF_PYTHON=/path/to/python`` (e.g. ``/tmp/tfenv/bin/python``), or ``INTERDIST_TF_SITE`` naming
its site-packages (``_common.have_tensorflow``); without either, only interdist is measured.

    .venv/bin/python benchmarks/bench_ps_start.py [--workers 3] [--ps 2] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

import _common

_PORTS = """
import socket, time

def _port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]

cluster_dict = {{"worker": [f"127.0.0.1:{{_port()}}" for _ in range({workers})],
                 "ps": [f"127.0.0.1:{{_port()}}" for _ in range({ps})]}}
"""

_INTERDIST = (
    _PORTS
    + """
import numpy as np
import interdist as idist

t0 = time.perf_counter()
servers = [idist.Server(cluster_dict, job_name="worker", task_index=i) for i in range({workers})]
servers += [idist.Server(cluster_dict, job_name="ps", task_index=i) for i in range({ps})]
resolver = idist.cluster_resolver.SimpleClusterResolver(idist.cluster_resolver.ClusterSpec(cluster_dict),
                                                        rpc_layer="grpc")
strategy = idist.experimental.ParameterServerStrategy(resolver)
coordinator = idist.experimental.coordinator.ClusterCoordinator(strategy)
t1 = time.perf_counter()
with strategy.scope():
    v = idist.Variable(np.zeros(4, np.float32))

def step():
    v.assign_add(np.ones(4, np.float32))
    return 1.0

coordinator.schedule(step).fetch()
t2 = time.perf_counter()
print("@@" + json.dumps({{"start": t1 - t0, "first_step": t2 - t1}}), flush=True)
strategy.close()
for s in servers:
    s.stop()
"""
)

_TF = (
    _PORTS
    + """
import os
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import tensorflow as tf

t0 = time.perf_counter()
cluster_spec = tf.train.ClusterSpec(cluster_dict)
worker_config = tf.compat.v1.ConfigProto()
worker_config.inter_op_parallelism_threads = {workers} + 1
servers = [tf.distribute.Server(cluster_spec, job_name="worker", task_index=i, config=worker_config,
                                protocol="grpc") for i in range({workers})]
servers += [tf.distribute.Server(cluster_spec, job_name="ps", task_index=i, protocol="grpc")
            for i in range({ps})]
resolver = tf.distribute.cluster_resolver.SimpleClusterResolver(cluster_spec, rpc_layer="grpc")
strategy = tf.distribute.experimental.ParameterServerStrategy(resolver)
coordinator = tf.distribute.experimental.coordinator.ClusterCoordinator(strategy)
t1 = time.perf_counter()
with strategy.scope():
    v = tf.Variable(tf.zeros([4]))

@tf.function
def step():
    v.assign_add(tf.ones([4]))
    return 1.0

coordinator.schedule(step).fetch()
t2 = time.perf_counter()
print("@@" + json.dumps({{"start": t1 - t0, "first_step": t2 - t1}}), flush=True)
os._exit(0)  # TF's in-process servers cannot be stopped (tf.distribute.Server has no stop in TF 2)
"""
)


def _tf_python() -> list[str] | None:
    """The command that runs a TF program, or None when no TF is at hand."""
    given = os.environ.get("INTERDIST_TF_PYTHON")
    if given:
        return [given]
    if _common.have_tensorflow():
        site = os.environ.get("INTERDIST_TF_SITE", "")
        return [sys.executable, "-c", f"import sys; sys.path.append({site!r}); exec(open(sys.argv[1]).read())"]
    return None


def _try(command: list[str], program: str, timeout: float) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        script = os.path.join(tmp, "ps_start.py")
        with open(script, "w") as f:
            f.write("import json\n" + program)
        p = subprocess.run([*command, script], capture_output=True, text=True, timeout=timeout, check=False, cwd=tmp)
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("@@")]
    if not lines:
        raise RuntimeError(f"the try failed (exit {p.returncode}): {p.stderr[-1500:]}")
    return dict(json.loads(lines[0][2:]))


def _medians(name: str, command: list[str], program: str, repeat: int) -> None:
    tries = [_try(command, program, timeout=300) for _ in range(repeat)]
    start = [t["start"] for t in tries]
    step = [t["first_step"] for t in tries]
    print(
        f"{name:>9}: start {statistics.median(start):6.2f} s (tries {', '.join(f'{s:.2f}' for s in start)}); "
        f"first step {statistics.median(step):5.2f} s",
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--ps", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    print(f"in-process ParameterServer cluster: {args.workers} workers + {args.ps} ps, median of {args.repeat}")
    fill = {"workers": args.workers, "ps": args.ps}
    _medians("interdist", [sys.executable], _INTERDIST.format(**fill), args.repeat)
    tf = _tf_python()
    if tf is None:
        print("       TF: not measured (set INTERDIST_TF_PYTHON or INTERDIST_TF_SITE)")
    else:
        _medians("TF", tf, _TF.format(**fill), args.repeat)


if __name__ == "__main__":
    main()
