"""interdist against systems of its own shape, one process per replica, measured in one run (issue 27).

The peers do the same work on the same machine, one after the other (never side by side):

- **mpi4py + MPI** (``mpiexec -n N``; MPICH from PyPI: ``pip install mpi4py mpich``),
- **torch.distributed with gloo** (N processes over loopback TCP; ``torch`` CPU build),
- **TensorFlow 2.21** ``MirroredStrategy`` on N logical CPUs, ``tf.function`` (one process),
- **plain NumPy processes** through shared memory (bench_training's floor: the algorithm without any
  framework), and for the 4 KB all-reduce **bare Python lanes**: n processes that exchange the array
  through interdist's shared-memory rings and add it, with nothing else (the floor of any Python design).

The work (float32, medians; the slowest rank's for the peers):

- the **SGD step** on 1M parameters: ``g = (0.01*w + x)/n``, all-reduce SUM of ``g``, ``w -= 0.1*g``.
  interdist writes it as a user does, ``optimizer.apply_gradients`` inside ``strategy.run``: one run per
  step from the notebook, and fused (``run_steps``: the loop on the replicas, as the peers' loops are);
- **all-reduce** of 4 KB and 4 MB, back to back (interdist: inside one ``run``, (t(K) - t(0)) / K);
- the notebook↔replica path: an empty ``run`` and a ``run`` with one 4 KB all-reduce, against TF's
  ``tf.function``'d ``run``.

Each line prints interdist's figure, the peer's, and the ratio (interdist / peer; < 1 is faster), with
the issue's target where it has one. A peer that is not installed is skipped with the reason.

Usage: ``python bench_peers.py [n ...] [--rounds R] [--json PATH] [--only-interdist]`` (default: 2 4, three
rounds). Each round measures every peer and interdist once, peers first in one round and interdist first in the
next; a figure is the median of its rounds and a ratio the median of the rounds' ratios (printed with their
range), so a minute when the machine ran slow weighs on one round, not on one side. ``--json`` also writes
every figure to PATH (the medians, and each round's under ``rounds``): ``notebooks/data/peers.json`` is such a
file, which lesson 09 sets beside the cost model's predictions. ``--only-interdist`` measures interdist alone
(no peer, TF or floor run).
The peers may live in another environment:
``BENCH_PEERS_PYTHON`` names its interpreter (its ``mpiexec`` is taken from beside it);
``INTERDIST_TF_SITE`` names a site-packages with TF (see _common.py).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from _common import median_time, tf_all_reduce
from _lane_floor import lane_floor

import interdist as idist

HERE = Path(__file__).resolve().parent
PROGRAM = str(HERE / "_peer_program.py")
PARAMS = 1_000_000
FUSED = 20
SMALL = 1024


def peers_python() -> str:
    return os.environ.get("BENCH_PEERS_PYTHON") or sys.executable


def _imports(py: str, module: str) -> str:
    """"" when ``module`` imports in ``py``, else why not."""
    p = subprocess.run([py, "-c", f"import {module}"], capture_output=True, text=True, check=False)
    return "" if p.returncode == 0 else (p.stderr.strip().splitlines() or ["?"])[-1]


def _parse(out: str, err: str, what: str) -> dict[str, Any]:
    lines = [ln for ln in out.splitlines() if ln.startswith("@@")]
    if not lines:
        print(f"  {what} failed: {(err or out)[-800:]}")
        return {}
    return dict(json.loads(lines[0][2:]))


def mpi_figures(n: int) -> dict[str, Any]:
    py = peers_python()
    why = _imports(py, "mpi4py.MPI")
    mpiexec = shutil.which("mpiexec", path=str(Path(py).parent)) or shutil.which("mpiexec")
    if why or not mpiexec:
        print(f"  mpi4py: skipped ({why or 'no mpiexec beside ' + py + ' or on PATH'}; pip install mpi4py mpich)")
        return {}
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    p = subprocess.run([mpiexec, "-n", str(n), py, PROGRAM, "mpi"], capture_output=True, text=True,
                       check=False, timeout=600, env=env)
    return _parse(p.stdout, p.stderr, f"mpiexec -n {n}")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def torch_figures(n: int) -> dict[str, Any]:
    py = peers_python()
    why = _imports(py, "torch.distributed")
    if why:
        print(f"  torch.distributed: skipped ({why}; pip install torch, the CPU build)")
        return {}
    port = _free_port()
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    procs = [subprocess.Popen([py, PROGRAM, "torch", str(r), str(n), str(port)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=env) for r in range(n)]
    outs = [p.communicate(timeout=600) for p in procs]
    return _parse(outs[0][0], outs[0][1], f"torch gloo, {n} processes")


def tf_sgd(n: int) -> dict[str, float]:
    from bench_training import _tf_child

    return _tf_child(n)


def _all_reduce(v: Any) -> Any:
    return idist.get_replica_context().all_reduce("sum", v)


def interdist_figures(n: int) -> dict[str, float]:
    from bench_latency import per_collective

    rng = np.random.default_rng(0)
    out: dict[str, float] = {}
    with idist.MirroredStrategy([f"CPU:{i}" for i in range(n)]) as s:
        with s.scope():
            w = idist.Variable(rng.normal(size=PARAMS).astype(np.float32), name="w")
            x = idist.Variable(rng.normal(size=PARAMS).astype(np.float32), name="x", trainable=False)
            opt = idist.optimizers.SGD(0.1)

        def step(_: object = None) -> None:
            g = (np.float32(0.01) * np.asarray(w) + np.asarray(x)) * np.float32(1 / n)
            opt.apply_gradients([(g, w)])

        out["sgd_run"] = median_time(lambda: s.run(step), repeat=30, warmup=3)
        it = iter(s.experimental_distribute_dataset(idist.data.Dataset.range(1 << 30).batch(n)))
        out["sgd_fused"] = median_time(lambda: s.run_steps(step, it, steps=FUSED), repeat=9, warmup=2) / FUSED
        small = s.run(lambda: np.ones(SMALL, np.float32))
        big = s.run(lambda: np.ones(PARAMS, np.float32))
        out["ar_4KB"] = per_collective(s, small, "all_reduce", 500)
        out["ar_4MB"] = per_collective(s, big, "all_reduce", 20, repeat=5)
        out["barrier"] = per_collective(s, small, "barrier", 500)
        out["run_empty"] = median_time(lambda: s.run(lambda: None), repeat=300, warmup=20)
        out["run_ar_4KB"] = median_time(lambda: s.run(_all_reduce, args=(small,)), repeat=300, warmup=20)
    return out


def socket_round_trip(n: int, rounds: int = 3000) -> float:
    """The floor of a ``run`` from the notebook: a message to each of ``n`` processes over a Unix socket and
    one reply from each, nothing else (median seconds of a round, over 5 batches)."""
    pairs = [socket.socketpair() for _ in range(n)]
    pids = []
    for i, (_, child) in enumerate(pairs):
        pid = os.fork()
        if pid == 0:  # an echo process: what a replica does with an empty program, minus everything
            try:
                for j, (a, b) in enumerate(pairs):
                    if j != i:
                        b.close()
                    a.close()
                while (msg := child.recv(64)) and msg != b"q":
                    child.sendall(msg)
            finally:
                os._exit(0)
        pids.append(pid)
    try:
        batches = []
        for _ in range(5):
            t0 = time.perf_counter()
            for _ in range(rounds):
                for parent, _ in pairs:
                    parent.sendall(b"x")
                for parent, _ in pairs:
                    parent.recv(64)
            batches.append((time.perf_counter() - t0) / rounds)
        return statistics.median(batches)
    finally:
        for parent, child in pairs:
            parent.sendall(b"q")
            parent.close()
            child.close()
        for pid in pids:
            os.waitpid(pid, 0)


def python_lane_floor(n: int, rounds: int = 5000) -> float:
    """The floor of a 4 KB all-reduce SUM between ``n`` Python processes through interdist's lanes, nothing else
    (``_lane_floor.py``, all-gather): median seconds per all-reduce of rank 0, over 5 batches; NaN without lanes."""
    got = lane_floor(n, rounds)
    return float("nan") if got is None else statistics.median(got[0])


def _median(values: list[Any]) -> float | None:
    got = [v for v in values if isinstance(v, (int, float)) and v == v]  # (NaN: a floor that could not run)
    return statistics.median(got) if got else None


def _merge(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """The rounds' figures as one record of the same shape: each number the median of its rounds."""
    first = rounds[0]
    out: dict[str, Any] = {}
    for key, value in first.items():
        if isinstance(value, dict):
            out[key] = _merge([r.get(key) or {} for r in rounds]) if any(r.get(key) for r in rounds) else {}
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            out[key] = _median([r.get(key) for r in rounds])
        else:
            out[key] = value
    return out


def _get(record: dict[str, Any], path: str) -> Any:
    for part in path.split("/"):
        record = record.get(part) if isinstance(record, dict) else None  # type: ignore[assignment]
    return record


def _line(rounds: list[dict[str, Any]], what: str, ours: str, theirs: str, peer: str, target: str = "") -> bool:
    """interdist's median figure, the peer's, and their ratio: the median of the rounds' ratios (each round
    measures both within a minute or two), with its range when there are several rounds. Prints nothing (and
    says so) when either figure is missing."""
    mine = _median([_get(r, ours) for r in rounds])
    other = _median([_get(r, theirs) for r in rounds])
    ratios = [a / b for r in rounds if (a := _get(r, ours)) and (b := _get(r, theirs)) and a == a and b == b]
    if mine is None or not other or not ratios:
        return False
    unit, scale = ("ms", 1e3) if mine >= 1e-3 else ("us", 1e6)
    head = f"  {what}: interdist {mine * scale:8.3f} {unit}; {peer} {other * scale:8.3f} {unit}: ratio "
    head += f"{statistics.median(ratios):5.2f}x"
    if len(ratios) > 1:
        head += f" (rounds {min(ratios):.2f}-{max(ratios):.2f})"
    if target:
        head += f" (target {target})"
    print(head)
    return True


def _lines(rounds: list[dict[str, Any]], what: str, ours: str, peers: list[tuple[str, str, str]]) -> None:
    """``_line`` against each of ``peers`` ((figure, name, target)); interdist's figure alone, once, when no peer's
    figure is there (``--only-interdist``, or peers that could not run)."""
    shown = [_line(rounds, what, ours, theirs, peer, target) for theirs, peer, target in peers]
    mine = _median([_get(r, ours) for r in rounds])
    if not any(shown) and mine is not None:
        unit, scale = ("ms", 1e3) if mine >= 1e-3 else ("us", 1e6)
        print(f"  {what}: interdist {mine * scale:8.3f} {unit}")


def one_round(n: int, only: bool, peers_first: bool) -> dict[str, Any]:
    """Every figure of ``n`` replicas once: the peers' and interdist's, in the order given (alternated from one
    round to the next, so that neither side always runs in the same minutes of a drifting machine)."""
    from bench_training import numpy_processes_floor

    def peers() -> dict[str, Any]:
        if only:
            return {"mpi4py": {}, "torch_gloo": {}, "tf": {}, "numpy_floor": None,
                    "python_lane_floor_4KB": None}
        mpi, gloo, tf = mpi_figures(n), torch_figures(n), tf_sgd(n)
        tf_ar = tf_all_reduce(n, [(SMALL, 200)]) if n > 1 else {}  # one logical device: TF refuses it here
        return {"mpi4py": mpi, "torch_gloo": gloo, "tf": {**tf, "run_ar_4KB": tf_ar.get(SMALL)},
                "numpy_floor": numpy_processes_floor(n),
                "python_lane_floor_4KB": python_lane_floor(n) if n > 1 else None}

    if peers_first:
        theirs = peers()
        ours = interdist_figures(n)
    else:
        ours = interdist_figures(n)
        theirs = peers()
    return {"n": n, "interdist": ours, **theirs, "socket_round_trip": socket_round_trip(n),
            "load": os.getloadavg()[0]}


def main() -> None:
    args = sys.argv[1:]
    save = None
    if "--json" in args:  # every replica count's figures, as the @@ lines print them, in one file
        i = args.index("--json")
        save, args = args[i + 1], args[:i] + args[i + 2 :]
    n_rounds = 3
    if "--rounds" in args:
        i = args.index("--rounds")
        n_rounds, args = int(args[i + 1]), args[:i] + args[i + 2 :]
        if n_rounds < 1:
            raise SystemExit("--rounds needs at least 1")
    only = "--only-interdist" in args  # interdist's figures alone (lesson 09's 1-4 replicas), no peer run
    args = [a for a in args if a != "--only-interdist"]
    ns = [int(a) for a in args] or [2, 4]
    records: list[dict[str, Any]] = []
    print(f"load {os.getloadavg()[0]:.2f} (1 min), {os.cpu_count()} cores; peers' Python: {peers_python()}; "
          f"{n_rounds} round(s) per replica count")
    src, dst = np.ones(16 << 20, np.uint8), np.empty(16 << 20, np.uint8)
    print(f"floor: memcpy 16 MB {median_time(lambda: np.copyto(dst, src), repeat=30) * 1e3:.2f} ms")
    for n in ns:
        print(f"\n== {n} replicas / ranks / processes ==")
        rounds = [one_round(n, only, peers_first=k % 2 == 0) for k in range(n_rounds)]
        for name, key in (("mpi4py", "mpi4py"), ("torch gloo", "torch_gloo")):
            library = rounds[0][key].get("library")
            if library:
                print(f"  {name}: {library}")
        for what, key in (("SGD step, one run per step", "sgd_run"), (f"SGD step, fused run_steps({FUSED})",
                                                                      "sgd_fused")):
            _lines(rounds, what, f"interdist/{key}", [("mpi4py/sgd", "mpi4py", "<= 1.25x"),
                                                      ("torch_gloo/sgd", "torch gloo", "<= 1.0x"),
                                                      ("tf/sgd_function", "TF tf.function", ""),
                                                      ("numpy_floor", "NumPy processes' floor", "")])
        for what, key, target in (("all-reduce 4 KB", "ar_4KB", "<= 3x" if n == 2 else ""),
                                  ("all-reduce 4 MB", "ar_4MB", ""), ("barrier", "barrier", "")):
            _lines(rounds, what, f"interdist/{key}", [(f"mpi4py/{key}", "mpi4py", target),
                                                      (f"torch_gloo/{key}", "torch gloo", "")])
        merged = _merge(rounds)
        ours = merged["interdist"]
        each_4kb = ", ".join(f"{r['interdist']['ar_4KB'] * 1e6:.0f}" for r in rounds)
        each_empty = ", ".join(f"{r['interdist']['run_empty'] * 1e3:.3f}" for r in rounds)
        if n > 2:
            print(f"  all-reduce 4 KB: interdist {ours['ar_4KB'] * 1e6:.1f} us (target <= 150 us on 2 cores; "
                  f"rounds {each_4kb})")
        _line(rounds, "all-reduce 4 KB", "interdist/ar_4KB", "python_lane_floor_4KB",
              "bare Python lanes (the floor from Python)")
        print(f"  empty run: interdist {ours['run_empty'] * 1e3:.3f} ms (target <= 0.3 ms at 2 replicas; rounds "
              f"{each_empty}); the floor, a byte to "
              f"each of {n} processes over Unix sockets and one back: {merged['socket_round_trip'] * 1e6:.1f} us")
        _lines(rounds, "run with one 4 KB all-reduce", "interdist/run_ar_4KB",
               [("tf/run_ar_4KB", "TF tf.function", "<= 1.0x")])
        records.append({**merged, "rounds": rounds})
        print("@@" + json.dumps(merged))
    if save:
        Path(save).write_text(json.dumps({"measured": time.strftime("%Y-%m-%d"), "cores": os.cpu_count(),
                                          "runs": records}, indent=1) + "\n")
    print(f"\nload {os.getloadavg()[0]:.2f} (1 min)")


if __name__ == "__main__":
    main()
