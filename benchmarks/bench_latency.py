"""Collective latency and bandwidth against the machine's floors, measured in the same run.

One line per figure, each with its baseline and the ratio:

- the floor: a pipe ping-pong between two processes (one-way time = round trip / 2), and
  in-process memory-copy bandwidth (``np.copyto`` of 16 MB);
- per collective, inside one ``strategy.run`` doing K of them: (t(K) - t(0)) / K, for an empty
  barrier, a 1-element all_reduce and a 4 KB all_reduce (against the pipe's one-way time);
- a 4 KB all_reduce in ``run`` against TF's ``tf.function`` MirroredStrategy all_reduce on as
  many logical CPUs (when TF imports: ``INTERDIST_TF_SITE``, see _common.py);
- a 4 MB all_reduce inside a run (mpi4py's figure on this machine beside it);
- a 16 MB all_reduce (inside a run, and a run with one) as bus bandwidth 2(n-1)/n * bytes / t,
  against the memory-copy bandwidth.

Usage: ``python bench_latency.py [n ...]`` (default: 2 4). ``BENCH_K`` sets K (default 200).
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from typing import Any

import numpy as np
from _common import median_time, tf_all_reduce

import interdist as idist

K = int(os.environ.get("BENCH_K", "200"))
SMALL = 1024  # float32 elements: 4 KB
MID = 1 << 20  # float32 elements: 4 MB
LARGE = 4 << 20  # float32 elements: 16 MB


def pipe_ping_pong(rounds: int = 2000) -> float:
    """Median-of-5 one-way time of a 1-byte message between two processes over pipes (seconds)."""
    a_r, a_w = os.pipe()
    b_r, b_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the echo process
        try:
            while True:
                b = os.read(a_r, 1)
                if not b or b == b"q":
                    break
                os.write(b_w, b)
        finally:
            os._exit(0)
    try:
        runs = []
        for _ in range(5):
            t0 = time.perf_counter()
            for _ in range(rounds):
                os.write(a_w, b"x")
                os.read(b_r, 1)
            runs.append((time.perf_counter() - t0) / rounds / 2)
        return statistics.median(runs)
    finally:
        os.write(a_w, b"q")
        os.waitpid(pid, 0)
        for fd in (a_r, a_w, b_r, b_w):
            os.close(fd)


def memcpy_bandwidth(nbytes: int = LARGE * 4) -> float:
    """In-process copy bandwidth (bytes/s) of ``nbytes`` with np.copyto (read + write counted once)."""
    src = np.ones(nbytes, np.uint8)
    dst = np.empty_like(src)
    return nbytes / median_time(lambda: np.copyto(dst, src), repeat=30)


def tf_figures(n: int) -> dict[str, float]:
    """TF's tf.function'd ``run`` with an all_reduce SUM of 4 KB and 16 MB on n logical CPUs (median s)."""
    t = tf_all_reduce(n, [(SMALL, 200), (LARGE, 20)])
    return {"small": t[SMALL], "large": t[LARGE]} if t else {}


def _all_reduce(v: Any) -> Any:
    return idist.get_replica_context().all_reduce("sum", v)


def _loop(v: Any, kind: str, k: int) -> float:
    """Inside a replica: k collectives of one kind back to back; seconds taken."""
    ctx = idist.get_replica_context()
    rep = ctx._replica  # type: ignore[union-attr]
    t0 = time.perf_counter()
    if kind == "barrier":
        for _ in range(k):
            rep.collective("barrier", 0, lambda s, q, w: rep.collectives.barrier(s, q, w))
    else:
        for _ in range(k):
            ctx.all_reduce("sum", v)
    return time.perf_counter() - t0


def per_collective(s: Any, dv: Any, kind: str, k: int, repeat: int = 5) -> float:
    """(t(k) - t(0)) / k, medians of ``repeat`` runs each, seen from the notebook (seconds)."""

    def timed(kk: int) -> float:
        t0 = time.perf_counter()
        s.run(_loop, args=(dv, kind, kk))
        return time.perf_counter() - t0

    timed(min(k, 20))  # warm up
    t0 = statistics.median(timed(0) for _ in range(repeat))
    tk = statistics.median(timed(k) for _ in range(repeat))
    return max(tk - t0, 0.0) / k


def main() -> None:
    ns = [int(a) for a in sys.argv[1:]] or [2, 4]
    print(f"load: {os.getloadavg()[0]:.2f} (1 min), {os.cpu_count()} cores; K={K}")
    one_way = pipe_ping_pong()
    copy_bw = memcpy_bandwidth()
    print(f"floor: pipe ping-pong one-way {one_way * 1e6:.1f} us (round trip {2 * one_way * 1e6:.1f} us)")
    print(f"floor: memcpy 16 MB in one process {copy_bw / 1e9:.2f} GB/s")
    for n in ns:
        tf = tf_figures(n)  # before the cluster starts, so that neither competes with the other
        with idist.MirroredStrategy([f"CPU:{i}" for i in range(n)]) as s:
            small = s.run(lambda: np.ones(SMALL, np.float32))
            one = s.run(lambda: np.ones(1, np.float32))
            large = s.run(lambda: np.ones(LARGE, np.float32))
            for name, dv, kind in (
                ("barrier (empty)", one, "barrier"),
                ("all_reduce 4 B", one, "all_reduce"),
                ("all_reduce 4 KB", small, "all_reduce"),
            ):
                t = per_collective(s, dv, kind, K)
                print(
                    f"n={n} {name} per collective inside run: {t * 1e6:7.1f} us; pipe one-way "
                    f"{one_way * 1e6:.1f} us: ratio {t / one_way:5.1f}x (target <= 100 us)"
                )
            t_run = median_time(lambda v=small: s.run(_all_reduce, args=(v,)), repeat=200, warmup=10)
            t_tf = tf.get("small")
            base = (
                f"TF tf.function {t_tf * 1e3:.3f} ms: ratio {t_run / t_tf:.2f}x (target <= 1.0)"
                if t_tf
                else "TF not importable (INTERDIST_TF_SITE)"
            )
            print(f"n={n} run with all_reduce 4 KB: {t_run * 1e3:.3f} ms; {base}")
            mid = s.run(lambda: np.ones(MID, np.float32))
            t_mid = per_collective(s, mid, "all_reduce", 30, repeat=3)
            print(f"n={n} all_reduce 4 MB per collective inside run: {t_mid * 1e3:.2f} ms (mpi4py+MPICH, 2 ranks: ~1.9 ms)")
            nbytes, factor = LARGE * 4, 2 * (n - 1) / n
            t_in = per_collective(s, large, "all_reduce", 10, repeat=3)
            print(
                f"n={n} all_reduce 16 MB per collective inside run: {t_in * 1e3:.2f} ms, bus bw "
                f"{factor * nbytes / t_in / 1e9:.2f} GB/s; memcpy {copy_bw / 1e9:.2f} GB/s: ratio "
                f"{factor * nbytes / t_in / copy_bw:.2f} (target >= 0.5)"
            )
            t_big = median_time(lambda v=large: s.run(_all_reduce, args=(v,)), repeat=20, warmup=2)
            t_tf = tf.get("large")
            vs_tf = f"; TF tf.function {t_tf * 1e3:.2f} ms: ratio {t_big / t_tf:.2f}x" if t_tf else ""
            print(
                f"n={n} run with all_reduce 16 MB: {t_big * 1e3:.2f} ms, bus bw "
                f"{factor * nbytes / t_big / 1e9:.2f} GB/s; memcpy {copy_bw / 1e9:.2f} GB/s: ratio "
                f"{factor * nbytes / t_big / copy_bw:.2f}{vs_tf}"
            )
    print(f"load: {os.getloadavg()[0]:.2f} (1 min)")


if __name__ == "__main__":
    main()
