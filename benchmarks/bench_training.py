"""Training steps against TensorFlow in the same run (issue 16, target 1).

Two programs, written the same way for interdist and for TF 2.21's MirroredStrategy on
logical CPU devices (TF in a child process per replica count, before interdist's cluster
starts, so that neither competes with the other):

- **SGD step**: 1M float32 parameters, a per-replica gradient ``(0.01 * w + x) / n`` (one
  pass over the parameters), ``optimizer.apply_gradients`` (all-reduce of the gradient +
  the update). interdist: one ``strategy.run`` per step, and the fused loop (``run_steps``
  of 20 steps). TF: eager ``strategy.run``, and ``tf.function``.
- **MLP**: 784-256-10 with ReLU and softmax cross-entropy, hand-written gradients, global
  batch 256 (split across replicas), SGD; samples per second.

One line per figure: interdist, the TF baseline, the ratio (interdist / TF; < 1 is faster).
Without TF (``INTERDIST_TF_SITE`` may point at another environment's site-packages) only
interdist's figures print. Quote medians; the machine is noisy.
"""

from __future__ import annotations

import multiprocessing
import statistics
import time
from multiprocessing import shared_memory
from typing import Any

import numpy as np

import interdist as idist
from _common import median_time, tf_child

PARAMS = 1_000_000
FUSED = 20
REPLICAS = (1, 2, 4)
BATCH = 256


def _tf_child(n: int) -> dict[str, float]:
    """TF's figures for ``n`` replicas, measured in a child process (TF fixes its devices once per process)."""
    child = f"""
import json
import numpy as np, tensorflow as tf
from _common import median_time
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * {n})
n = {n}
ts = tf.distribute.MirroredStrategy([f"CPU:{{i}}" for i in range(n)])
rng = np.random.default_rng(0)
w0 = rng.normal(size={PARAMS}).astype(np.float32)
x0 = rng.normal(size={PARAMS}).astype(np.float32)
with ts.scope():
    w = tf.Variable(w0)
    x = tf.Variable(x0, trainable=False)
    opt = tf.keras.optimizers.SGD(0.1)
def step():
    g = (0.01 * w + x) / n
    opt.apply_gradients([(g, w)])
out = {{}}
out["sgd_eager"] = median_time(lambda: ts.run(step), repeat=20, warmup=3)
graph = tf.function(lambda: ts.run(step))
out["sgd_function"] = median_time(graph, repeat=20, warmup=3)
@tf.function
def loop():
    for _ in tf.range({FUSED}):
        ts.run(step)
out["sgd_function_loop"] = median_time(loop, repeat=10, warmup=2) / {FUSED}

# MLP 784-256-10, hand-written gradients, global batch {BATCH}
per = {BATCH} // n
with ts.scope():
    w1 = tf.Variable(rng.normal(scale=0.05, size=(784, 256)).astype(np.float32))
    b1 = tf.Variable(np.zeros(256, np.float32))
    w2 = tf.Variable(rng.normal(scale=0.05, size=(256, 10)).astype(np.float32))
    b2 = tf.Variable(np.zeros(10, np.float32))
    mopt = tf.keras.optimizers.SGD(0.01)
xb = tf.constant(rng.normal(size=(per, 784)).astype(np.float32))
yb = tf.one_hot(rng.integers(0, 10, size=per), 10)
def mlp_step():
    h = tf.nn.relu(xb @ w1 + b1)
    logits = h @ w2 + b2
    p = tf.nn.softmax(logits)
    d = (p - yb) / {BATCH}
    gw2 = tf.transpose(h) @ d
    gb2 = tf.reduce_sum(d, 0)
    dh = (d @ tf.transpose(w2)) * tf.cast(h > 0, tf.float32)
    gw1 = tf.transpose(xb) @ dh
    gb1 = tf.reduce_sum(dh, 0)
    mopt.apply_gradients([(gw1, w1), (gb1, b1), (gw2, w2), (gb2, b2)])
mlp = tf.function(lambda: ts.run(mlp_step))
out["mlp_function"] = median_time(mlp, repeat=30, warmup=3)
print("@@" + json.dumps(out))
"""
    return tf_child(child, f"{n} replicas")


def _floor_worker(rank: int, n: int, names: list[str], barrier: Any, steps: int, out: Any) -> None:
    """One of ``n`` plain NumPy processes doing the SGD step, the all-reduce a copy into shared memory and
    a sum of every rank's copy in rank order (what interdist's all-gather-reduce does, without interdist)."""
    shms = [shared_memory.SharedMemory(name=name) for name in names]
    try:
        slots = [np.ndarray((PARAMS,), np.float32, m.buf) for m in shms]
        rng = np.random.default_rng(rank)
        w = rng.normal(size=PARAMS).astype(np.float32)
        x = rng.normal(size=PARAMS).astype(np.float32)
        times = []
        for _ in range(steps):
            t0 = time.perf_counter()
            g = (np.float32(0.01) * w + x) / np.float32(n)
            if n > 1:
                np.copyto(slots[rank], g)
                barrier.wait()
                total = np.add(slots[0] if rank else g, g if rank == 1 else slots[1])
                for r in range(2, n):
                    np.add(total, g if r == rank else slots[r], out=total)
                barrier.wait()  # every rank has read the others' copies: they may be written again
                g = total
            w -= np.float32(0.1) * g
            times.append(time.perf_counter() - t0)
        out.put(statistics.median(times[steps // 5 :]))
    finally:
        for m in shms:
            m.close()


def numpy_processes_floor(n: int, steps: int = 300) -> float:
    """Median step time of ``n`` plain NumPy processes doing the same SGD step through shared memory:
    the floor of this algorithm on this machine (memory traffic and cores), without interdist."""
    ctx = multiprocessing.get_context("spawn")
    shms = [shared_memory.SharedMemory(create=True, size=PARAMS * 4) for _ in range(n)]
    try:
        barrier, out = ctx.Barrier(n), ctx.Queue()
        procs = [
            ctx.Process(target=_floor_worker, args=(r, n, [m.name for m in shms], barrier, steps, out))
            for r in range(n)
        ]
        for p in procs:
            p.start()
        medians = [out.get(timeout=300) for _ in procs]
        for p in procs:
            p.join()
        return max(medians)
    finally:
        for m in shms:
            m.close()
            m.unlink()


def _line(what: str, t: float, base: float | None, base_name: str) -> None:
    ratio = f"{t / base:.2f}x {base_name} ({base * 1e3:.2f} ms)" if base else "(no TF baseline)"
    print(f"{what}: {t * 1e3:.2f} ms; {ratio}")


def main() -> None:
    rng = np.random.default_rng(0)
    w0 = rng.normal(size=PARAMS).astype(np.float32)
    x0 = rng.normal(size=PARAMS).astype(np.float32)
    wl = w0.copy()

    def numpy_step() -> None:
        g = 0.01 * wl + x0
        wl[:] -= np.float32(0.1) * g

    t_np = median_time(numpy_step, repeat=20)
    print(f"one NumPy process, the same SGD step: {t_np * 1e3:.2f} ms")
    for n in REPLICAS:
        tf = _tf_child(n)
        floor = numpy_processes_floor(n)
        print(f"floor: the SGD step in {n} plain NumPy process(es), all-reduce through shared memory: "
              f"{floor * 1e3:.2f} ms")
        with idist.MirroredStrategy([f"CPU:{i}" for i in range(n)]) as s:
            with s.scope():
                w = idist.Variable(w0, name="w")
                x = idist.Variable(x0, name="x", trainable=False)
                opt = idist.optimizers.SGD(0.1)

            def step(_: object = None, n: int = n) -> None:
                g = (np.float32(0.01) * np.asarray(w) + np.asarray(x)) / np.float32(n)
                opt.apply_gradients([(g, w)])

            t_step = median_time(lambda: s.run(step), repeat=20, warmup=3)
            base = tf.get("sgd_eager" if n == 1 else "sgd_function")
            _line(f"SGD step, {n} replica(s), one run per step", t_step, base,
                  "TF eager" if n == 1 else "TF tf.function")
            if n == 1 and tf:
                _line("SGD step, 1 replica(s), one run per step", t_step, tf.get("sgd_function"), "TF tf.function")
            elif tf:
                _line(f"SGD step, {n} replica(s), one run per step", t_step, tf.get("sgd_eager"), "TF eager")
            ds = idist.data.Dataset.range(1 << 30).batch(n)
            it = iter(s.experimental_distribute_dataset(ds))
            t_fused = median_time(lambda: s.run_steps(step, it, steps=FUSED), repeat=10, warmup=2) / FUSED
            _line(f"SGD step, {n} replica(s), fused run_steps({FUSED})", t_fused, tf.get("sgd_function_loop"),
                  "TF tf.function loop")
            print(f"  ({t_step / t_np:.1f}x / {t_fused / t_np:.1f}x one NumPy process; "
                  f"{t_step / floor:.2f}x / {t_fused / floor:.2f}x the {n} NumPy processes' floor)")

            per = BATCH // n
            with s.scope():
                w1 = idist.Variable(rng.normal(scale=0.05, size=(784, 256)).astype(np.float32), name="w1")
                b1 = idist.Variable(np.zeros(256, np.float32), name="b1")
                w2 = idist.Variable(rng.normal(scale=0.05, size=(256, 10)).astype(np.float32), name="w2")
                b2 = idist.Variable(np.zeros(10, np.float32), name="b2")
                mopt = idist.optimizers.SGD(0.01)
                # the batch lives on the replicas (a captured array would travel with every step)
                xv = idist.Variable(rng.normal(size=(per, 784)).astype(np.float32), name="xb", trainable=False)
                yv = idist.Variable(np.eye(10, dtype=np.float32)[rng.integers(0, 10, size=per)], name="yb",
                                    trainable=False)

            def mlp_step(_: object = None) -> None:
                xb, yb = np.asarray(xv), np.asarray(yv)
                h = np.maximum(xb @ np.asarray(w1) + np.asarray(b1), 0)
                logits = h @ np.asarray(w2) + np.asarray(b2)
                e = np.exp(logits - logits.max(axis=1, keepdims=True))
                d = (e / e.sum(axis=1, keepdims=True) - yb) / np.float32(BATCH)
                gw2, gb2 = h.T @ d, d.sum(0)
                dh = (d @ np.asarray(w2).T) * (h > 0)
                mopt.apply_gradients([(xb.T @ dh, w1), (dh.sum(0), b1), (gw2, w2), (gb2, b2)])

            t_mlp = median_time(lambda: s.run(mlp_step), repeat=30, warmup=3)
            t_mlp_fused = median_time(lambda: s.run_steps(mlp_step, it, steps=FUSED), repeat=5, warmup=1) / FUSED
            tf_mlp = tf.get("mlp_function")
            for what, t in (("one run per step", t_mlp), (f"fused run_steps({FUSED})", t_mlp_fused)):
                ratio = f"; {tf_mlp / t:.2f}x TF tf.function's {BATCH / tf_mlp:.0f} samples/s" if tf_mlp else ""
                print(f"MLP 784-256-10, batch {BATCH}, {n} replica(s), {what}: {BATCH / t:.0f} samples/s{ratio}")


if __name__ == "__main__":
    main()
