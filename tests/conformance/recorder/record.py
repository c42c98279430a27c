"""Record conformance cases from real TensorFlow.

Tooling only: nothing in the test suite imports this.

Each case pairs an interdist program (``code``, shipped in
``tests/conformance/tf_cases.json``, the file the tests load) with the same program written for
TensorFlow (``tf_code``, kept here). The TF side runs in a separate virtual
environment that has ``tensorflow-cpu==2.21.0``::

    python3 -m venv /work/tfvenv
    /work/tfvenv/bin/pip install tensorflow-cpu==2.21.0 numpy
    python3 tests/conformance/recorder/record.py            # record all
    python3 tests/conformance/recorder/record.py -k reduce  # ids containing "reduce"

Files here:

- ``record.py``: the runner and the ``case()`` helper (strategy keys ``M1``..``M4``,
  ``OD``, ``OD1``, ``CS2``, ``CS3`` wrap a body in the strategy's construction
  and, for interdist, ``try: ... finally: strategy.close()``);
- ``cases.py`` imports ``cases_*.py``, which hold the case definitions by topic
  (run/reduce/local results, replica context, variables, StrategyExtended,
  datasets and input, cluster resolvers/CentralStorage/OneDevice/errors/optimizer);
- ``tf_raw.json``: TF's raw outcome per case (value, or exception class, module
  and message) -- the evidence behind ``docs/tf_behaviour.md``;
- ``shim_check.py``: runs the interdist programs against TF through an alias
  module, to catch typos in the interdist side before interdist exists.

Every case runs in a fresh TF process with 4 logical CPU devices (``ndev``
changes that). What TF gave -- the value, or the exception class and message --
is cached in ``tf_raw.json`` beside this file, keyed by the hash of the TF
program, so a re-run only executes new or changed cases.

``expected`` is the JSON value TF gave, or ``{"raises": "ClassName"}``.
``tf.errors.InvalidArgumentError`` is recorded as ``ValueError`` (with
``"tf_raises": "InvalidArgumentError"``, as in ../seed_examples.json); any other
class as itself.
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import hashlib
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

HERE = Path(__file__).resolve().parent
OUT = HERE.parent / "tf_cases.json"  # what the tests load: review the git diff before committing
RAW = HERE / "tf_raw.json"
TF_PYTHON = os.environ.get("TF_PYTHON", "/work/tfvenv/bin/python")

# --------------------------------------------------------------------------
# The child: runs one TF program and prints its outcome as JSON.
# --------------------------------------------------------------------------
CHILD = r'''
import json, os, sys
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
import numpy as np
import tensorflow as tf
tf.get_logger().setLevel("ERROR")
spec = json.loads(sys.stdin.read())
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(
    cpu, [tf.config.LogicalDeviceConfiguration()] * spec["ndev"])
g = {"np": np, "tf": tf}
try:
    exec(compile(spec["tf_code"], "<tf_code>", "exec"), g)
    out = {"value": g["result"]}
except Exception as e:  # noqa: BLE001 -- every exception is an outcome
    out = {"exc": type(e).__name__, "module": type(e).__module__,
           "message": str(e)[:600]}
print("@@RESULT@@" + json.dumps(out))
'''

# Exceptions recorded under another name (the interdist equivalent).
EXC_MAP = {"InvalidArgumentError": "ValueError"}

STRATEGIES = {
    # key: (interdist constructor, tf constructor)
    "M1": ('idist.MirroredStrategy(["CPU:0"])', 'tf.distribute.MirroredStrategy(["CPU:0"])'),
    "M2": ('idist.MirroredStrategy(["CPU:0", "CPU:1"])',
           'tf.distribute.MirroredStrategy(["CPU:0", "CPU:1"])'),
    "M3": ('idist.MirroredStrategy(["CPU:0", "CPU:1", "CPU:2"])',
           'tf.distribute.MirroredStrategy(["CPU:0", "CPU:1", "CPU:2"])'),
    "M4": ('idist.MirroredStrategy(["CPU:0", "CPU:1", "CPU:2", "CPU:3"])',
           'tf.distribute.MirroredStrategy(["CPU:0", "CPU:1", "CPU:2", "CPU:3"])'),
    "OD": ('idist.OneDeviceStrategy("CPU:0")', 'tf.distribute.OneDeviceStrategy("CPU:0")'),
    "OD1": ('idist.OneDeviceStrategy("CPU:1")', 'tf.distribute.OneDeviceStrategy("CPU:1")'),
    "CS2": ('idist.experimental.CentralStorageStrategy(compute_devices=["CPU:0", "CPU:1"], '
            'parameter_device="CPU:0")',
            'tf.distribute.experimental.CentralStorageStrategy(compute_devices=["CPU:0", "CPU:1"], '
            'parameter_device="CPU:0")'),
    "CS3": ('idist.experimental.CentralStorageStrategy(compute_devices=["CPU:1", "CPU:2", "CPU:3"], '
            'parameter_device="CPU:0")',
            'tf.distribute.experimental.CentralStorageStrategy(compute_devices=["CPU:1", "CPU:2", "CPU:3"], '
            'parameter_device="CPU:0")'),
}

# Plain renames that turn an interdist body into a TF body, for the cases
# whose programs differ only in module names (``tf_code=AUTO``).
RENAMES = [
    ("idist.experimental.CentralStorageStrategy", "tf.distribute.experimental.CentralStorageStrategy"),
    ("idist.VariableAggregation", "tf.VariableAggregation"),
    ("idist.VariableSynchronization", "tf.VariableSynchronization"),
    ("idist.Variable(", "tf.Variable("),
    ("idist.data.Dataset", "tf.data.Dataset"),
    ("idist.optimizers.SGD", "tf.keras.optimizers.SGD"),
    ("idist.", "tf.distribute."),
]
AUTO = object()

CASES: list[dict] = []


def _wrap(body: str, strategy: str | None, which: int) -> str:
    body = textwrap.dedent(body).strip("\n") + "\n"
    if strategy is None:
        return body
    ctor = STRATEGIES[strategy][which]
    if which == 1:  # TF: no close()
        return f"strategy = {ctor}\n" + body
    return (f"strategy = {ctor}\ntry:\n" + textwrap.indent(body, "    ")
            + "finally:\n    strategy.close()\n")


def auto_tf(body: str) -> str:
    for a, b in RENAMES:
        body = body.replace(a, b)
    return body


def case(id: str, seed: str, what: str, code: str, tf_code=AUTO, strategy: str | None = "M2",
         ndev: int = 4, raw: bool = False) -> None:
    """Add a case. ``code``/``tf_code`` are bodies run with ``strategy`` made
    before them (and, for interdist, closed in a ``finally``); ``raw=True``
    takes both programs as they are."""
    if any(c["id"] == id for c in CASES):
        raise ValueError(f"duplicate case id {id}")
    if tf_code is AUTO:
        tf_code = auto_tf(textwrap.dedent(code))
    if raw:
        icode = textwrap.dedent(code).strip("\n") + "\n"
        tcode = textwrap.dedent(tf_code).strip("\n") + "\n"
    else:
        icode = _wrap(code, strategy, 0)
        tcode = _wrap(tf_code, strategy, 1)
    CASES.append({"id": id, "seed_file": seed, "what": what, "code": icode,
                  "tf_code": tcode, "ndev": ndev})


# --------------------------------------------------------------------------
# Runner
# --------------------------------------------------------------------------
def _key(c: dict) -> str:
    return hashlib.sha256((str(c["ndev"]) + "\n" + c["tf_code"]).encode()).hexdigest()[:16]


def run_tf(c: dict) -> dict:
    p = subprocess.run([TF_PYTHON, "-c", CHILD],
                       input=json.dumps({"tf_code": c["tf_code"], "ndev": c["ndev"]}),
                       capture_output=True, text=True, timeout=300)
    for line in p.stdout.splitlines():
        if line.startswith("@@RESULT@@"):
            return json.loads(line[len("@@RESULT@@"):])
    return {"crash": (p.stdout + p.stderr)[-3000:]}


def expected_of(outcome: dict) -> tuple[object, str | None]:
    if "exc" in outcome:
        name = outcome["exc"]
        mapped = EXC_MAP.get(name, name)
        return {"raises": mapped}, (name if mapped != name else None)
    return outcome["value"], None


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("-k", default="", help="only cases whose id contains this")
    ap.add_argument("-j", type=int, default=2, help="parallel TF processes")
    ap.add_argument("--fresh", action="store_true", help="ignore the cache")
    ap.add_argument("--show", action="store_true", help="print each selected outcome")
    ap.add_argument("--round2", action="store_true",
                    help="record the round-2 cases (cases2.py) into tf_cases_2.json / tf_raw_2.json")
    ap.add_argument("--round3", action="store_true",
                    help="record the round-3 cases (cases3.py) into tf_cases_3.json / tf_raw_3.json")
    ap.add_argument("--round", type=int, default=None,
                    help="record round N (casesN.py) into tf_cases_N.json / tf_raw_N.json")
    a = ap.parse_args()

    global OUT, RAW
    if a.round and a.round > 1:
        OUT = HERE.parent / f"tf_cases_{a.round}.json"
        RAW = HERE / f"tf_raw_{a.round}.json"
        __import__(f"cases{a.round}")  # fills CASES
    elif a.round3:
        OUT = HERE.parent / "tf_cases_3.json"
        RAW = HERE / "tf_raw_3.json"
        import cases3  # noqa: F401  (fills CASES)
    elif a.round2:
        OUT = HERE.parent / "tf_cases_2.json"
        RAW = HERE / "tf_raw_2.json"
        import cases2  # noqa: F401  (fills CASES)
    else:
        import cases  # noqa: F401  (fills CASES)

    raw = json.loads(RAW.read_text()) if RAW.exists() else {}
    sel = [c for c in CASES if a.k in c["id"]]
    todo = [c for c in sel if a.fresh or raw.get(c["id"], {}).get("key") != _key(c)]
    print(f"{len(CASES)} cases, {len(sel)} selected, {len(todo)} to run", file=sys.stderr)
    with cf.ThreadPoolExecutor(a.j) as ex:
        for c, out in zip(todo, ex.map(run_tf, todo)):
            raw[c["id"]] = {"key": _key(c), "outcome": out}
            if "crash" in out:
                print(f"CRASH {c['id']}:\n{out['crash']}", file=sys.stderr)
    ids = {c["id"] for c in CASES}
    raw = {k: v for k, v in sorted(raw.items()) if k in ids}
    RAW.write_text(json.dumps(raw, indent=1) + "\n")

    if a.show:
        for c in sel:
            print(f"{c['id']}: {json.dumps(raw[c['id']]['outcome'])[:400]}")

    recorded = []
    for c in CASES:
        out = raw.get(c["id"], {}).get("outcome")
        if out is None or "crash" in out:
            print(f"skipping {c['id']} (no outcome)", file=sys.stderr)
            continue
        exp, tf_raises = expected_of(out)
        item = {"id": c["id"], "seed_file": c["seed_file"], "what": c["what"],
                "code": c["code"], "expected": exp}
        if tf_raises:
            item["tf_raises"] = tf_raises
        recorded.append(item)
    OUT.write_text(json.dumps(recorded, indent=1) + "\n")
    print(f"wrote {len(recorded)} cases to {OUT}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(HERE))
    sys.modules.setdefault("record", sys.modules[__name__])
    raise SystemExit(main())
