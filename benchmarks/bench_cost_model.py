"""Fit the all_reduce cost model (interdist/collectives/cost_model.py) on this machine and check it.

1. Inside one ``strategy.run`` per group size (1-4 local replicas), every replica times
   ``all_reduce`` of float32 batches from 4 KB to 16 MB with each algorithm forced in turn
   (``Collectives.algorithm``, interleaved so that a busy machine slows all alike; median of the
   slowest replica per call), through shared memory and through Dask comms only (TCP on loopback).
2. Fits the parameters on the training sizes (4 KB, 64 KB, 1 MB, 16 MB) and prints, for every
   point, predicted vs measured and their ratio; then the same on the held-out sizes (16 KB,
   256 KB, 4 MB), and whether the model's AUTO choice is the measured fastest (with the time
   lost when it is not).
3. Step times: ``strategy.run`` of one all_reduce with the algorithm forced through the
   strategy's ``cross_device_ops`` (as a user would), against the model's prediction plus the
   measured time of an empty step.
4. ``--two-hosts``: the same all_reduce between two network namespaces joined by a veth pair
   (as tests/multi_worker/test_two_hosts.py; needs root and iproute2), 1+1 and 2+2 replicas
   over Dask comms, predicted by the loopback fit.

Every figure is one line: predicted, measured and the ratio predicted / measured (the baseline is
the measurement). ``--save PATH`` writes the fitted parameter sets as JSON, which
``interdist.collectives.cost-model: PATH`` (``DASK_INTERDIST__COLLECTIVES__COST_MODEL``) makes the ones ``AUTO``
uses. ``--quick``: fewer repeats.

    python benchmarks/bench_cost_model.py [--quick] [--two-hosts] [--save params.json]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import random
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import dask
import numpy as np
from _common import median_time

import interdist as idist
from interdist.collectives import cost_model as cm
from interdist.collectives import ring

TRAIN = (4 << 10, 64 << 10, 1 << 20, 16 << 20)
HELD_OUT = (16 << 10, 256 << 10, 4 << 20)
ALGS = (cm.AG, cm.RS, cm.RB)
RING = "ring"  #: the ring of two replicas (an all-gather-reduce pipelined through the caches: the model's PAIR_RING)
SHORT = {cm.AG: "AG", cm.RS: "RS", cm.RB: "RB"}
HERE = Path(__file__).resolve().parent


def _load() -> str:
    return f"load {os.getloadavg()[0]:.2f}"


def _times(_: Any, sizes: list[int], reps: int, comms_only: bool) -> dict[int, dict[str, list[float]]]:
    """On every replica: seconds of each all_reduce, sizes x repeats x algorithms interleaved.

    The ring of two replicas (collectives/ring.py) is off while the algorithms are timed, so that a forced
    all-gather-reduce is one (the model's terms); where it can run (2 replicas, shared memory, from its
    1 MB), it is timed too, interleaved, as ``RING`` (not fitted: compared with the model's ``PAIR_RING``)."""
    rep = idist.get_replica_context()._replica  # type: ignore[union-attr]
    coll, transport = rep.collectives, rep.transport
    saved_alg, saved_threshold = coll.algorithm, getattr(transport, "threshold", None)
    out: dict[int, dict[str, list[float]]] = {}
    seq = 1 << 20  # far above the step's own collectives
    ring_possible = not comms_only and coll.world_size == 2 and not ring.unavailable_reason()
    try:
        if comms_only and saved_threshold is not None:
            transport.threshold = -1  # every packet over Dask comms (SharedMemoryTransport)
        for nbytes in sizes:
            arrays = [np.ones(nbytes // 4, np.float32)]
            timed = ALGS + ((RING,) if ring_possible and nbytes >= ring.MIN_BYTES else ())
            t: dict[str, list[float]] = {a: [] for a in timed}
            for _i in range(reps):
                for a in timed:
                    coll.algorithm = cm.AG if a == RING else a
                    seq += 1
                    coll.barrier(rep.step, seq, "bench_cost_model")  # every call starts with the ranks in step
                    seq += 1
                    with dask.config.set({"interdist.collectives.ring": a == RING}):
                        t0 = time.perf_counter()
                        coll.all_reduce(rep.step, seq, arrays, idist.ReduceOp.SUM, "bench_cost_model")
                        t[a].append(time.perf_counter() - t0)
            out[nbytes] = t
    finally:
        coll.algorithm = saved_alg
        if saved_threshold is not None:
            transport.threshold = saved_threshold
    return out


def _medians(per_replica: list[Any], n: int, hosts: int) -> list[cm.Measurement]:
    """Median over repeats of the slowest replica's time of each call (``RING``'s left to ``_ring_medians``)."""
    out = []
    first = per_replica[0]
    for nbytes in first:
        for a in ALGS:
            calls = [max(p[nbytes][a][i] for p in per_replica) for i in range(len(first[nbytes][a]))]
            out.append(cm.Measurement(a, nbytes, n, hosts, statistics.median(calls)))
    return out


def _ring_medians(per_replica: list[Any]) -> dict[int, float]:
    """``RING``'s medians (as ``_medians``), by batch size."""
    first = per_replica[0]
    return {
        nbytes: statistics.median(max(p[nbytes][RING][i] for p in per_replica) for i in range(len(t[RING])))
        for nbytes, t in first.items()
        if RING in t
    }


def measure_local(ns: list[int], reps: int) -> tuple[dict[str, list[cm.Measurement]], dict[int, float]]:
    """The algorithms' measurements by link, and the ring's medians by batch size (2 replicas)."""
    got: dict[str, list[cm.Measurement]] = {"shm": [], "tcp": []}
    rings: dict[int, float] = {}
    sizes = sorted(TRAIN + HELD_OUT)
    for n in ns:
        with idist.MirroredStrategy([f"CPU:{i}" for i in range(n)]) as s:
            for mode in ("shm", "tcp"):
                res = s.run(_times, args=(0, sizes, reps if n > 1 else 3, mode == "tcp"))
                per_replica = list(s.experimental_local_results(res))
                got[mode] += _medians(per_replica, n, 1)
                rings.update(_ring_medians(per_replica))
    return got, rings


def _line(m: cm.Measurement, p: cm.Params, what: str) -> float:
    pred = cm.predict(m.algorithm, m.nbytes, m.world_size, m.hosts, params=p)
    ratio = pred / m.seconds if m.seconds > 0 else float("nan")
    print(
        f"{what} {p.name:4s} n={m.world_size} hosts={m.hosts} {m.nbytes / 1e6:8.4f} MB {SHORT[m.algorithm]}: "
        f"predicted {pred * 1e3:8.3f} ms, measured {m.seconds * 1e3:8.3f} ms, ratio {ratio:5.2f}",
        flush=True,
    )
    return ratio


def _summary(ratios: list[float], what: str) -> None:
    logs = [abs(math.log(r)) for r in ratios if r > 0 and math.isfinite(r)]
    if logs:
        print(
            f"{what}: {len(logs)} points, median |predicted/measured - 1| "
            f"{math.exp(statistics.median(logs)) - 1:.0%}, worst {math.exp(max(logs)) - 1:.0%}",
            flush=True,
        )


def check_choices(ms: list[cm.Measurement], p: cm.Params, candidates: tuple[str, ...]) -> None:
    """Whether the model's choice among ``candidates`` is the fastest measured (time lost if not). Among
    ``AUTO``'s candidates, by ``AUTO``'s rule (``cm.AUTO_MARGIN``: the default unless another is clearly faster)."""
    margin = cm.AUTO_MARGIN if candidates == cm.AUTO_CANDIDATES_ONE_HOST else 0.0
    by: dict[tuple[int, float], dict[str, float]] = {}
    for m in ms:
        if m.world_size > 1 and m.algorithm in candidates:
            by.setdefault((m.world_size, m.nbytes), {})[m.algorithm] = m.seconds
    agree = 0
    for (n, nbytes), t in sorted(by.items()):
        chosen = cm.best_algorithm(nbytes, n, 1, candidates=candidates, params=p, margin=margin)
        fastest = min(t, key=lambda a: t[a])
        agree += chosen == fastest
        print(
            f"choice {p.name:4s} n={n} {nbytes / 1e6:8.4f} MB: model {SHORT[chosen]} {t[chosen] * 1e3:7.3f} ms, "
            f"fastest measured {SHORT[fastest]} {t[fastest] * 1e3:7.3f} ms, ratio {t[chosen] / t[fastest]:5.2f}"
        )
    print(f"choice {p.name}: model picks the fastest measured in {agree} of {len(by)} cases", flush=True)


def _forced(algorithm: str) -> idist.CrossDeviceOps:
    """A ``cross_device_ops`` that forces one all_reduce algorithm (the group spec carries its ``.algorithm``;
    a ``CrossDeviceOps`` subclass of another name would be refused as TF refuses unknown kinds)."""
    ops = idist.CrossDeviceOps()
    ops.algorithm = algorithm
    return ops


def step_times(ns: list[int], sizes: tuple[int, ...], p: cm.Params, reps: int) -> list[float]:
    """``strategy.run`` of one all_reduce, each algorithm forced through ``cross_device_ops`` (the ring of two
    replicas off, as in the fit: the replicas read the notebook's setting when they join)."""
    ratios = []
    for n in ns:
        for a in ALGS if n > 1 else (cm.AG,):
            with (
                dask.config.set({"interdist.collectives.ring": False}),
                idist.MirroredStrategy([f"CPU:{i}" for i in range(n)], cross_device_ops=_forced(a)) as s,
            ):
                for nbytes in sizes:
                    dv = s.run(lambda nbytes=nbytes: np.ones(nbytes // 4, np.float32))

                    def step(dv: Any = dv) -> None:
                        s.run(lambda v: idist.get_replica_context().all_reduce("sum", v), args=(dv,))

                    def empty_step(dv: Any = dv) -> None:  # the same step without the all_reduce
                        s.run(lambda v: v, args=(dv,))

                    empty = median_time(empty_step, repeat=reps, warmup=3)
                    t = median_time(step, repeat=reps, warmup=3)
                    pred = empty + cm.predict(a, nbytes, n, 1, params=p)
                    ratios.append(pred / t)
                    print(
                        f"step shm  n={n} {nbytes / 1e6:8.4f} MB {SHORT[a]}: predicted {pred * 1e3:8.3f} ms "
                        f"(empty step {empty * 1e3:.3f} ms + model), measured {t * 1e3:8.3f} ms, "
                        f"ratio {pred / t:5.2f} ({_load()})",
                        flush=True,
                    )
    return ratios


# -- two hosts: network namespaces -----------------------------------------------------------
def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=10)


def measure_two_hosts(per_host: int, sizes: list[int], reps: int) -> list[cm.Measurement] | str:
    """All_reduce between two namespaces, ``per_host`` replicas in each; or why it cannot run."""
    if shutil.which("ip") is None or os.geteuid() != 0:
        return "needs root and iproute2 (ip netns)"
    tag = f"{os.getpid() % 100000}"
    a, b = f"cmA{tag}", f"cmB{tag}"
    procs: list[subprocess.Popen[str]] = []
    try:
        try:
            _ip("netns", "add", a)
        except (subprocess.CalledProcessError, FileNotFoundError, PermissionError) as e:
            return f"network namespaces cannot be created here ({e})"
        _ip("netns", "add", b)
        _ip("link", "add", f"cA{tag}", "type", "veth", "peer", "name", f"cB{tag}")
        for ns, dev, addr in ((a, f"cA{tag}", "10.98.0.1/24"), (b, f"cB{tag}", "10.98.0.2/24")):
            _ip("link", "set", dev, "netns", ns)
            _ip("-n", ns, "addr", "add", addr, "dev", dev)
            _ip("-n", ns, "link", "set", dev, "up")
            _ip("-n", ns, "link", "set", "lo", "up")
        port = random.randint(20000, 29000)
        tasks = [("chief", 0, a, "10.98.0.1")] + [("worker", i, a, "10.98.0.1") for i in range(per_host - 1)]
        tasks += [("worker", per_host - 1 + i, b, "10.98.0.2") for i in range(per_host)]
        cluster: dict[str, list[str]] = {"chief": [], "worker": []}
        for k, (kind, _i, _ns, host) in enumerate(tasks):
            cluster[kind].append(f"{host}:{port + k}")

        def env(kind: str, index: int) -> dict[str, str]:
            return dict(os.environ, TF_CONFIG=json.dumps({"cluster": cluster, "task": {"type": kind, "index": index}}))

        server = [sys.executable, "-m", "interdist.server", "--timeout", "60"]
        for kind, index, ns, _host in reversed(tasks):
            procs.append(
                subprocess.Popen(
                    ["ip", "netns", "exec", ns, *server],
                    env=env(kind, index),
                    text=True,
                    stdout=subprocess.PIPE if kind == "chief" else subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            )
        assert procs[-1].stdout is not None
        procs[-1].stdout.readline()  # the chief's line: the scheduler is up
        out = subprocess.run(
            [
                "ip",
                "netns",
                "exec",
                a,
                sys.executable,
                str(Path(__file__).resolve()),
                "--driver",
                json.dumps({"sizes": sizes, "reps": reps}),
            ],
            env=env("chief", 0),
            check=False,
            capture_output=True,
            text=True,
            timeout=600,
        )
        lines = [ln for ln in out.stdout.splitlines() if ln.startswith("@@")]
        if out.returncode != 0 or not lines:
            return f"the driver failed: {out.stderr[-1500:]}"
        rows = json.loads(lines[-1][2:])
        return [cm.Measurement(r["algorithm"], r["nbytes"], r["world_size"], 2, r["seconds"]) for r in rows]
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
        for ns in (a, b):
            subprocess.run(["ip", "netns", "del", ns], check=False, capture_output=True, timeout=10)


def driver(arg: str) -> None:
    """Inside the first namespace: a MultiWorkerMirroredStrategy over both; prints the medians as JSON."""
    from interdist.experimental import CommunicationOptions

    cfg = json.loads(arg)
    s = idist.MultiWorkerMirroredStrategy(communication_options=CommunicationOptions(timeout_seconds=60))
    try:
        n = s.num_replicas_in_sync
        res = s.run(_times, args=(0, cfg["sizes"], cfg["reps"], True))
        ms = _medians(list(s.experimental_local_results(res)), n, 2)
        print(
            "@@"
            + json.dumps(
                [{"algorithm": m.algorithm, "nbytes": m.nbytes, "world_size": n, "seconds": m.seconds} for m in ms]
            ),
            flush=True,
        )
    finally:
        s.close()


def fit_local(fitted: dict[str, cm.Params], reps: int) -> None:
    """Measure 1-4 local replicas, fit ``fitted["shm"]`` and ``fitted["tcp"]``, print every figure."""
    got, rings = measure_local([1, 2, 3, 4], reps)
    # The parameters interdist ships, on the same measurements: how far they drifted as the code got faster,
    # and what AUTO picks with them (against what it would pick with the new fit, below).
    shipped = cm.preset("shm")
    _summary([_line(m, shipped, "shipped") for m in got["shm"] if m.world_size > 1], "the shipped shm preset")
    print("-- AUTO's choices with the shipped preset --", flush=True)
    check_choices(got["shm"], shipped, cm.AUTO_CANDIDATES_ONE_HOST)
    print("-- with the fit --", flush=True)
    for mode in ("shm", "tcp"):
        train = [m for m in got[mode] if m.nbytes in TRAIN and m.world_size > 1]
        held = [m for m in got[mode] if m.nbytes in HELD_OUT or m.world_size == 1]
        p = fitted[mode] = cm.fit(train, cm.preset(mode), source=f"fitted by bench_cost_model.py, {_load()}")
        print(
            f"fitted {mode}: "
            + ", ".join(
                f"{k} {v:.3g}"
                for k, v in zip(cm.PARAMETERS, p.vector(), strict=True)
                if (k.startswith("intra") or k == "gamma")
            ),
            flush=True,
        )
        _summary([_line(m, p, "train") for m in train], f"train {mode}")
        _summary([_line(m, p, "held-out") for m in held], f"held-out {mode} (n=1: a copy of the batch)")
    # this machine's inter-host link: TCP as measured over loopback (checked between namespaces below)
    fitted["shm"] = dataclasses.replace(fitted["shm"], inter=fitted["tcp"].intra)
    for nbytes, seconds in sorted(rings.items()):  # what AUTO's all-gather-reduce runs as at 2 replicas
        for p in (cm.preset("shm"), fitted["shm"]):
            pred = cm.predict(cm.PAIR_RING, nbytes, 2, 1, params=p)
            print(
                f"ring shm  n=2 hosts=1 {nbytes / 1e6:8.4f} MB (not fitted): measured {seconds * 1e3:8.3f} ms, "
                f"the {'shipped' if p is not fitted['shm'] else 'fitted'} model's pair ring {pred * 1e3:8.3f} ms, "
                f"ratio {pred / seconds:5.2f}",
                flush=True,
            )
    check_choices(got["shm"], fitted["shm"], cm.AUTO_CANDIDATES_ONE_HOST)
    check_choices(got["shm"], fitted["shm"], cm.IMPLEMENTED)
    _summary(step_times([1, 2, 4], (64 << 10, 1 << 20, 4 << 20), fitted["shm"], max(5, reps)), "step times")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--two-hosts", action="store_true")
    ap.add_argument("--save", metavar="PATH")
    ap.add_argument("--two-hosts-only", action="store_true", help="skip the local fit; predict with the presets")
    ap.add_argument("--driver", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.driver:
        driver(args.driver)
        return
    reps = 7 if args.quick else 15
    print(f"cost model fit on {os.cpu_count()} cores ({_load()})", flush=True)
    fitted: dict[str, cm.Params] = {"shm": cm.preset("shm"), "tcp": cm.preset("tcp")}
    if not args.two_hosts_only:
        fit_local(fitted, reps)
    if args.two_hosts or args.two_hosts_only:
        two: list[cm.Measurement] = []
        for per_host in (1, 2):
            got = measure_two_hosts(per_host, [4 << 10, 64 << 10, 1 << 20, 4 << 20], reps)
            if isinstance(got, str):
                print(f"two hosts: not run: {got}")
                break
            two += got
            _summary(
                [_line(m, fitted["shm"], "two-hosts") for m in got],
                f"two hosts, {per_host} replica(s) each, inter link as fitted on loopback",
            )
        if two:
            # the inter link fitted between the namespaces (one of 3 sizes held out per group)
            train = [m for m in two if m.nbytes != 64 << 10]
            p = fitted["shm"] = cm.fit(
                train,
                fitted["shm"],
                free=("inter.alpha", "inter.overhead", "inter.beta"),
                source=fitted["shm"].source + "; inter link fitted between two namespaces",
            )
            print(
                "fitted inter link between namespaces: "
                + ", ".join(f"{k} {v:.3g}" for k, v in zip(cm.PARAMETERS, p.vector(), strict=True) if "inter" in k)
            )
            _summary([_line(m, p, "two-hosts fitted") for m in train], "two hosts, train")
            _summary([_line(m, p, "two-hosts held-out") for m in two if m not in train], "two hosts, held-out")
            for n in sorted({m.world_size for m in two}):
                check_choices_hosts([m for m in two if m.world_size == n], p)
    if args.save:
        cm.save(args.save, fitted.values())
        print(f"saved {', '.join(fitted)} to {args.save}")


def check_choices_hosts(ms: list[cm.Measurement], p: cm.Params) -> None:
    for nbytes in sorted({m.nbytes for m in ms}):
        t = {m.algorithm: m.seconds for m in ms if m.nbytes == nbytes}
        n = ms[0].world_size
        chosen = cm.best_algorithm(nbytes, n, n, candidates=cm.AUTO_CANDIDATES_HOSTS, params=p)
        fastest = min(t, key=lambda a: t[a])
        print(
            f"choice two-hosts n={n} {nbytes / 1e6:8.4f} MB: model {SHORT[chosen]} {t[chosen] * 1e3:7.3f} ms, "
            f"fastest measured {SHORT[fastest]} {t[fastest] * 1e3:7.3f} ms, ratio {t[chosen] / t[fastest]:5.2f}"
        )


if __name__ == "__main__":
    main()
