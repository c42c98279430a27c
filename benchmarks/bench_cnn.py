"""The TF tutorial CNN's training step against TensorFlow and one NumPy process (issue 24, item 6).

The model of "Custom training with tf.distribute.Strategy": Conv2D(32, 3, relu) -> MaxPooling2D ->
Conv2D(64, 3, relu) -> MaxPooling2D -> Flatten -> Dense(64, relu) -> Dense(10), per-example
SparseCategoricalCrossentropy(from_logits=True) averaged with ``compute_average_loss``, Adam; 28x28x1
synthetic inputs, global batch 64. A step is ``strategy.run(train_step, args=(batch,))`` plus the
``strategy.reduce(SUM, ...)`` of the loss, timed from the notebook.

Variants, every one measured in the same run, their rounds interleaved (a round is a few steps of each, in
a rotating order), so that load from elsewhere on the machine falls on all of them alike:

- interdist ``MirroredStrategy()`` on 2 and 4 logical CPUs (both clusters up at once), the step written
  as a user would; and the 2-replica step again with ``time.perf_counter`` around the tape + gradient
  and around ``apply_gradients`` inside the replica function (where the time goes);
- the interdist model without a strategy in one plain Python process (the default strategy,
  ``train_step(batch)``): the floor of interdist's compute for the step. Its OpenBLAS runs one thread,
  as on interdist's workers; a second process with OpenBLAS's default threads shows what that costs;
- TF 2.21 (``INTERDIST_TF_SITE`` may name its site-packages): ``tf.function`` on 1 CPU (the baseline);
  ``tf.function`` on 2 logical CPUs, which fails at its first call in TF 2.21 unless the optimizer is
  built first (``optimizer.build(model.trainable_variables)`` in the scope: done here and said so);
  the tutorial's MirroredStrategy on 2 logical CPUs eagerly.

Everything but interdist's strategies runs in a child process that stays up across rounds and times
steps on request. Prints one table: median ms per step (median of the rounds' medians), the spread
(lowest-highest round median), the ratios to TF's ``tf.function`` and to the NumPy process.
``--profile`` also prints cProfile's top functions of one step in the NumPy process. ``--model mlp`` runs the
same comparison with a model too small for its compute to hide the per-step costs: Flatten -> Dense(64, relu) ->
Dense(10), the same loss, optimizer and batches (the step of a user's first experiments, where a framework's own
time per step is what shows).

    cd benchmarks && INTERDIST_TF_SITE=/path/to/site-packages ../.venv/bin/python bench_cnn.py [--model mlp]
"""

from __future__ import annotations

import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

GLOBAL_BATCH = 64
#: ``cnn`` (the tutorial's) or ``mlp`` (``--model mlp``: its dense layers alone); children get it from the environment.
MODEL = os.environ.get("BENCH_CNN_MODEL", "cnn")
SAMPLES = GLOBAL_BATCH * 8
ROUNDS = 8
WARMUP = 3


def data() -> tuple[Any, Any]:
    import numpy as np

    rng = np.random.default_rng(0)
    return rng.random((SAMPLES, 28, 28, 1), dtype=np.float32), rng.integers(0, 10, SAMPLES).astype(np.int64)


def build_idist(strategy: Any, timed: bool = False) -> Any:
    """The tutorial's model, optimizer, loss and ``train_step`` in interdist, made in ``strategy``'s scope.

    ``timed``: the step returns ``(loss, seconds in tape + gradient, seconds in apply_gradients)``."""
    import interdist as idist

    L = idist.layers
    with strategy.scope():
        convolutions = [L.Conv2D(32, 3, activation="relu"), L.MaxPooling2D(), L.Conv2D(64, 3, activation="relu"),
                        L.MaxPooling2D()] if MODEL == "cnn" else []  # fmt: skip
        model = L.Sequential(
            [L.Input(shape=(28, 28, 1)), *convolutions, L.Flatten(), L.Dense(64, activation="relu"), L.Dense(10)]
        )
        optimizer = idist.optimizers.Adam()
        loss_object = idist.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=None)

    def train_step(inputs: Any) -> Any:
        images, labels = inputs
        with idist.GradientTape() as tape:
            logits = model(images, training=True)
            loss = idist.nn.compute_average_loss(loss_object(labels, logits), global_batch_size=GLOBAL_BATCH)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))  # noqa: B905 (the tutorial's)
        return loss

    def timed_step(inputs: Any) -> Any:
        images, labels = inputs
        t0 = time.perf_counter()
        with idist.GradientTape() as tape:
            logits = model(images, training=True)
            loss = idist.nn.compute_average_loss(loss_object(labels, logits), global_batch_size=GLOBAL_BATCH)
        grads = tape.gradient(loss, model.trainable_variables)
        t1 = time.perf_counter()
        optimizer.apply_gradients(zip(grads, model.trainable_variables))  # noqa: B905 (the tutorial's)
        return loss, t1 - t0, time.perf_counter() - t1

    return timed_step if timed else train_step


# --- children: a program that warms up, says "@@ready", then times `k` steps per line "k" on its stdin ---

_SERVE = """
import json, sys, time
def serve(step, profile=None):
    for _ in range({warmup}):
        step()
    print("@@ready", flush=True)
    for line in sys.stdin:
        cmd = line.strip()
        if cmd == "quit":
            break
        if cmd == "profile":
            profile()
            print("@@done", flush=True)
            continue
        times = []
        try:
            for _ in range(int(cmd)):
                t0 = time.perf_counter()
                step()
                times.append(time.perf_counter() - t0)
            print("@@" + json.dumps(times), flush=True)
        except Exception as e:  # noqa: BLE001
            print("@@error " + json.dumps(f"{{type(e).__name__}}: {{str(e)[:300]}}"), flush=True)
            break
"""

_NUMPY_CHILD = """
import cProfile, io, pstats
import interdist as idist
from bench_cnn import GLOBAL_BATCH, build_idist, data
x, y = data()
train_step = build_idist(idist.get_strategy())
it = iter(idist.data.Dataset.from_tensor_slices((x, y)).repeat().batch(GLOBAL_BATCH))
def step():
    float(train_step(next(it)))
def profile():
    batch = next(it)
    pr = cProfile.Profile()
    pr.enable()
    train_step(batch)
    pr.disable()
    out = io.StringIO()
    pstats.Stats(pr, stream=out).sort_stats("cumulative").print_stats(10)
    print(out.getvalue(), flush=True)
serve(step, profile)
"""

_TF_CHILD = """
import numpy as np, tensorflow as tf
from bench_cnn import GLOBAL_BATCH, MODEL, data
n, graph, build = {n}, {graph}, {build}
if n > 1:
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * n)
strategy = tf.distribute.MirroredStrategy([f"CPU:{{i}}" for i in range(n)])
x, y = data()
with strategy.scope():
    L = tf.keras.layers
    convolutions = [L.Conv2D(32, 3, activation="relu"), L.MaxPooling2D(), L.Conv2D(64, 3, activation="relu"),
                    L.MaxPooling2D()] if MODEL == "cnn" else []
    model = tf.keras.Sequential(
        [L.Input(shape=(28, 28, 1)), *convolutions, L.Flatten(), L.Dense(64, activation="relu"), L.Dense(10)]
    )
    optimizer = tf.keras.optimizers.Adam()
    if build:
        optimizer.build(model.trainable_variables)
    loss_object = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=None)
def train_step(inputs):
    images, labels = inputs
    with tf.GradientTape() as tape:
        logits = model(images, training=True)
        loss = tf.nn.compute_average_loss(loss_object(labels, logits), global_batch_size=GLOBAL_BATCH)
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))  # noqa: B905 (the tutorial's)
    return loss
def distributed_train_step(batch):
    return strategy.reduce(tf.distribute.ReduceOp.SUM, strategy.run(train_step, args=(batch,)), axis=None)
if graph:
    distributed_train_step = tf.function(distributed_train_step)
ds = tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(GLOBAL_BATCH)
it = iter(strategy.experimental_distribute_dataset(ds))
def step():
    float(distributed_train_step(next(it)))
try:
    serve(step)
except Exception as e:
    print("@@error " + json.dumps(f"{{type(e).__name__}}: {{str(e).strip().splitlines()[0][:300]}}"), flush=True)
"""


class Child:
    """A persistent child Python that times steps on request (see ``_SERVE``)."""

    def __init__(self, name: str, replicas: int, program: str, python: str, env: dict[str, str] | None = None) -> None:
        self.name, self.replicas, self.error = name, replicas, ""
        here = os.path.dirname(os.path.abspath(__file__))
        self._tmp = tempfile.TemporaryDirectory()
        script = os.path.join(self._tmp.name, "child.py")
        with open(script, "w") as f:  # a file, not -c: AutoGraph reads a tf.function's source
            f.write(f"import sys\nsys.path[:0] = {sys.path!r}\n" + _SERVE.format(warmup=WARMUP) + program)
        self._err = open(os.path.join(self._tmp.name, "stderr"), "w+")  # noqa: SIM115
        self.proc = subprocess.Popen(
            [python, script],
            cwd=here,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._err,
            text=True,
            env={**os.environ, **(env or {})},
        )

    def _answer(self) -> str | None:
        assert self.proc.stdout is not None
        lines = []
        for line in self.proc.stdout:
            if line.startswith("@@"):
                return line[2:].strip()
            lines.append(line)
        self._err.seek(0)
        self.error = self.error or "exited: " + (self._err.read()[-400:] or "".join(lines)[-400:]).strip()
        return None

    def ready(self) -> bool:
        ans = self._answer()
        if ans is not None and ans.startswith("error"):
            self.error = json.loads(ans[5:])
        return ans == "ready"

    def steps(self, k: int) -> list[float]:
        if self.error:
            return []
        assert self.proc.stdin is not None
        self.proc.stdin.write(f"{k}\n")
        self.proc.stdin.flush()
        ans = self._answer()
        if ans is None or ans.startswith("error"):
            self.error = self.error or json.loads(ans[5:]) if ans else self.error
            return []
        return [float(t) for t in json.loads(ans)]

    def profile(self) -> str:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write("profile\n")
        self.proc.stdin.flush()
        out = []
        for line in self.proc.stdout:
            if line.startswith("@@done"):
                break
            out.append(line)
        return "".join(out)

    def close(self) -> None:
        if self.proc.poll() is None and self.proc.stdin is not None:
            with contextlib.suppress(OSError):
                self.proc.stdin.write("quit\n")
                self.proc.stdin.close()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self._err.close()
        self._tmp.cleanup()


def _tf_python() -> str | None:
    """The Python that imports TF: this one, or (``INTERDIST_TF_SITE``) this one with that site-packages
    appended (children get it through ``sys.path``, so this environment's NumPy comes first)."""
    from _common import have_tensorflow

    return sys.executable if have_tensorflow() else None


def main() -> None:
    global MODEL
    profile = "--profile" in sys.argv[1:]
    if "--model" in sys.argv[1:]:
        MODEL = sys.argv[sys.argv.index("--model") + 1]
        if MODEL not in ("cnn", "mlp"):
            raise SystemExit(f"--model: cnn or mlp, not {MODEL!r}")
        os.environ["BENCH_CNN_MODEL"] = MODEL  # (the children's)
    print(f"model: {MODEL}")
    one_thread = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    unset = [k for k in one_thread if k not in os.environ]
    children = [Child("NumPy process (OpenBLAS 1 thread)", 1, _NUMPY_CHILD, sys.executable, one_thread)]
    if unset == list(one_thread):  # OpenBLAS's default threads, unless the caller fixed them
        children.append(Child("NumPy process (OpenBLAS default threads)", 1, _NUMPY_CHILD, sys.executable))
    tf_python = _tf_python()
    if tf_python:
        for name, n, graph, build in (
            ("TF tf.function", 1, True, False),
            ("TF tf.function, optimizer built first", 2, True, True),
            ("TF eager MirroredStrategy", 2, False, False),
        ):
            children.append(Child(name, n, _TF_CHILD.format(n=n, graph=graph, build=build), tf_python))
    else:
        print("TF not importable (INTERDIST_TF_SITE may name its site-packages): no TF rows")
    for c in children:
        if not c.ready():
            print(f"{c.name}: failed: {c.error}")

    import numpy as np

    import interdist as idist

    x, y = data()
    rows: dict[str, dict[str, Any]] = {}
    per_round = 10 if MODEL == "mlp" else 1  # (the small model's steps are ~10x shorter)
    for c in children:  # steps per round: ~0.3 s of each variant
        k = (10 if "function" in c.name else 3) * per_round
        rows[c.name] = {"replicas": c.replicas, "k": k, "measure": c.steps, "rounds": [], "error": c.error}
    inner: dict[str, list[float]] = {"fb": [], "opt": []}
    with contextlib.ExitStack() as stack:
        for n in (2, 4):
            idist.config.set_logical_cpu_devices(n)
            s = stack.enter_context(idist.MirroredStrategy())
            ds = idist.data.Dataset.from_tensor_slices((x, y)).repeat().batch(GLOBAL_BATCH)
            for timed in (False, True) if n == 2 else (False,):
                step_fn = build_idist(s, timed)
                it = iter(s.experimental_distribute_dataset(ds))

                def one(s: Any = s, step_fn: Any = step_fn, it: Any = it, timed: bool = timed) -> None:
                    out = s.run(step_fn, args=(next(it),))
                    if timed:
                        for _, fb, opt in s.experimental_local_results(out):
                            inner["fb"].append(float(np.asarray(fb)))
                            inner["opt"].append(float(np.asarray(opt)))
                        out = out[0]
                    float(np.asarray(s.reduce(idist.ReduceOp.SUM, out, axis=None)))

                def measure(k: int, one: Any = one) -> list[float]:
                    times = []
                    for _ in range(k):
                        t0 = time.perf_counter()
                        one()
                        times.append(time.perf_counter() - t0)
                    return times

                name = f"interdist MirroredStrategy{', timed inside' if timed else ''}"
                for _ in range(WARMUP):
                    one()
                inner["fb"].clear()
                inner["opt"].clear()
                rows[f"{name} ({n})"] = {
                    "replicas": n,
                    "k": 3 * per_round,
                    "measure": measure,
                    "rounds": [],
                    "error": "",
                }
        names = list(rows)
        t_start = time.perf_counter()
        for r in range(ROUNDS):
            for name in names[r % len(names) :] + names[: r % len(names)]:  # a rotating order
                row = rows[name]
                if not row["error"]:
                    times = row["measure"](row["k"])
                    if times:
                        row["rounds"].append(statistics.median(times))
        for c in children:
            rows[c.name]["error"] = rows[c.name]["error"] or c.error
        if profile:
            print("cProfile, one step in the NumPy process (OpenBLAS 1 thread), by cumulative time:")
            print(children[0].profile())
    for c in children:
        c.close()
    print(f"{ROUNDS} rounds in {time.perf_counter() - t_start:.0f} s; the step's median over rounds' medians")

    def med(name: str) -> float | None:
        rs = rows.get(name, {}).get("rounds")
        return statistics.median(rs) if rs else None

    tf_base, np_base = med("TF tf.function"), med("NumPy process (OpenBLAS 1 thread)")
    print("| variant | replicas | ms/step | spread (round medians) | x TF tf.function | x NumPy process |")
    print("|---|---|---|---|---|---|")
    for name, row in rows.items():
        m = med(name)
        if m is None:
            print(f"| {name} | {row['replicas']} | failed: {row['error']} | | | |")
            continue
        lo, hi = min(row["rounds"]), max(row["rounds"])
        ratio_tf = f"{m / tf_base:.1f}" if tf_base else "-"
        ratio_np = f"{m / np_base:.2f}" if np_base else "-"
        spread = f"{_ms(lo)}-{_ms(hi)}"
        print(f"| {name} | {row['replicas']} | {_ms(m)} | {spread} | {ratio_tf} | {ratio_np} |")
    if inner["fb"]:
        fb, opt = statistics.median(inner["fb"]), statistics.median(inner["opt"])
        step = med("interdist MirroredStrategy, timed inside (2)") or float("nan")
        print(
            f"2 replicas, inside a replica (medians of {len(inner['fb'])}): forward+backward {_ms(fb)} ms "
            f"({fb / step:.0%} of the step), apply_gradients (all-reduce + Adam) {_ms(opt)} ms "
            f"({opt / step:.0%}), the rest (dispatch, the batch, the loss's reduce) "
            f"{_ms(step - fb - opt)} ms"
        )


def _ms(seconds: float) -> str:
    """Milliseconds, with two decimals below 10 ms (the small model's steps)."""
    return f"{seconds * 1e3:.2f}" if seconds < 0.01 else f"{seconds * 1e3:.0f}"


if __name__ == "__main__":
    main()
