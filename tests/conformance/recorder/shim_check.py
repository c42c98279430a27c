"""Sanity check for the interdist side of the recorded cases (tooling only).

Runs every case's interdist ``code`` against TensorFlow through a thin alias
module (``idist`` -> ``tf.distribute`` and friends), in the TF virtual
environment. It cannot prove that a case is right -- NumPy values flow where
TF code would have tensors, and TF cannot ``np.asarray`` a distributed
variable -- but it catches typos, NameErrors and structural mistakes in the
interdist programs. It prints the cases whose outcome differs from the
recorded expectation, for a person to read.

    /work/tfvenv/bin/python tests/conformance/recorder/shim_check.py [-k SUBSTRING]
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
CASES = HERE.parent / "tf_cases.json"

CHILD = r'''
import json, os, sys, types
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
import numpy as np
import tensorflow as tf
from tensorflow.python.distribute import values as _values
tf.get_logger().setLevel("ERROR")
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 4)
tf.distribute.Strategy.close = lambda self: None
idist = types.ModuleType("idist")
for k in dir(tf.distribute):
    if not k.startswith("_"):
        setattr(idist, k, getattr(tf.distribute, k))
idist.Variable = tf.Variable
idist.VariableAggregation = tf.VariableAggregation
idist.VariableSynchronization = tf.VariableSynchronization
idist.data = tf.data
idist.optimizers = types.SimpleNamespace(SGD=tf.keras.optimizers.SGD)
idist.PerReplica = _values.PerReplica
idist.Mirrored = _values.Mirrored
idist.cluster_resolver = types.SimpleNamespace(
    TFConfigClusterResolver=tf.distribute.cluster_resolver.TFConfigClusterResolver,
    SimpleClusterResolver=tf.distribute.cluster_resolver.SimpleClusterResolver,
    ClusterSpec=tf.train.ClusterSpec)
code = sys.stdin.read()
g = {"np": np, "idist": idist}
try:
    exec(compile(code, "<code>", "exec"), g)
    out = {"value": json.loads(json.dumps(g["result"], default=lambda o: repr(o)))}
except Exception as e:
    out = {"exc": type(e).__name__, "message": str(e)[:300]}
print("@@RESULT@@" + json.dumps(out))
'''


def same(a, b) -> bool:
    import math
    if isinstance(a, bool) or isinstance(b, bool):
        return a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return math.isclose(a, b, rel_tol=1e-5, abs_tol=1e-6)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    return a == b


def main() -> int:
    k = sys.argv[sys.argv.index("-k") + 1] if "-k" in sys.argv else ""
    cases = [c for c in json.loads(CASES.read_text()) if k in c["id"]]
    for c in cases:
        compile(c["code"], c["id"], "exec")  # syntax first

    def run(c):
        p = subprocess.run([sys.executable, "-c", CHILD], input=c["code"], capture_output=True, text=True)
        line = [ln for ln in p.stdout.splitlines() if ln.startswith("@@RESULT@@")]
        return json.loads(line[0][10:]) if line else {"crash": p.stderr[-500:]}

    import concurrent.futures as cf
    with cf.ThreadPoolExecutor(int(os.environ.get("JOBS", "2"))) as ex:
        outs = list(ex.map(run, cases))
    bad = 0
    for c, out in zip(cases, outs):
        exp = c["expected"]
        if isinstance(exp, dict) and "raises" in exp:
            ok = out.get("exc") in (exp["raises"], c.get("tf_raises"))
        else:
            ok = "value" in out and same(out["value"], exp)
        if not ok:
            bad += 1
            print(f"DIFF {c['id']}\n  expected {json.dumps(exp)[:300]}\n  shim     {json.dumps(out)[:300]}")
    print(f"{len(cases) - bad} same, {bad} different")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
