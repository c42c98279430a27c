"""The floor of a small all-reduce between Python processes that each spend ``W`` microseconds of CPU on it.

``bench_peers.py``'s "bare Python lanes" floor has each process publish its 4 KB array in a shared-memory lane
(``interdist.collectives.lanes``) to every other, spin (yielding its core between looks, as interdist's mailbox
does) until every peer's came, and add them: nothing else. A replica does more per collective (the checks and
events of ``ReplicaContext.all_reduce``, the plan, the frames: its ``W``), and with more processes than cores
each microsecond of it is paid by everyone waiting. This adds ``W`` of busy CPU to each process's collective,
all-gather (every process sends to every other) or reduce-broadcast (rank 0 sums and sends the result back),
so that interdist's figure can be set against the floor for its own ``W`` (docs/performance.md, "The twelfth
run"). Prints the median time per all-reduce of rank 0 over 5 batches, and its CPU per all-reduce.

    python benchmarks/bench_lane_floor_work.py [n] [W_us ...]     # e.g. 4 0 10 20 30
"""

from __future__ import annotations

import os
import statistics
import sys
import time

import numpy as np

from interdist.collectives import lanes

ROUNDS = 3000
SMALL = 1024


def floor(n: int, work_s: float, mode: str) -> tuple[float, float]:
    """(median seconds per all-reduce, median CPU seconds per all-reduce) of rank 0."""
    made: dict[tuple[int, int], lanes.Lane] = {}
    for key in [(i, j) for i in range(n) for j in range(n) if i != j]:
        lane = lanes.Lane.create()
        if lane is None:
            raise SystemExit("no shared-memory segment can be made here")
        lane.words[lanes._ATTACHED] = 1  # (a fork shares the mapping: no attach)
        made[key] = lane

    def busy() -> None:
        end = time.thread_time() + work_s
        while time.thread_time() < end:
            pass

    def rank(me: int) -> tuple[list[float], list[float]]:
        outs = {j: made[(me, j)] for j in range(n) if j != me}
        ins = {j: made[(j, me)] for j in range(n) if j != me}
        mine = np.full(SMALL, me + 1.0, np.float32)
        early: dict[int, list[tuple[int, int, int, bytes, bytes]]] = {j: [] for j in ins}

        def put(j: int, batch: int, i: int, data: bytes) -> None:
            while not outs[j].put(batch, i, me, data, b""):
                os.sched_yield()

        def get(j: int) -> bytes:
            got, lane = early[j], ins[j]
            while not got:
                if lane.ready():
                    got.extend(lane.take())
                else:
                    os.sched_yield()
            return got.pop(0)[3]

        walls, cpus = [], []
        for batch in range(6):
            t0, c0 = time.perf_counter(), time.thread_time()
            for i in range(ROUNDS):
                busy()
                if mode == "ag" or me != 0:
                    for j in outs if mode == "ag" else [0]:
                        put(j, batch, i, mine.tobytes())
                if mode == "ag" or me == 0:
                    total = mine.copy()
                    for j in ins:
                        np.add(total, np.frombuffer(get(j), np.float32), out=total)
                    if mode == "rb":
                        for j in outs:
                            put(j, batch, i, total.tobytes())
                else:
                    total = np.frombuffer(get(0), np.float32)
            walls.append((time.perf_counter() - t0) / ROUNDS)
            cpus.append((time.thread_time() - c0) / ROUNDS)
        assert float(total[0]) == n * (n + 1) / 2, total[:3]
        return walls[1:], cpus[1:]  # the first batch warms up

    pids = []
    for me in range(1, n):
        pid = os.fork()
        if pid == 0:
            try:
                rank(me)
            finally:
                os._exit(0)
        pids.append(pid)
    try:
        walls, cpus = rank(0)
    finally:
        for pid in pids:
            os.waitpid(pid, 0)
        for lane in made.values():
            lane.close()
    return statistics.median(walls), statistics.median(cpus)


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 4
    works = [float(w) for w in sys.argv[2:]] or [0.0, 10.0, 20.0, 30.0]
    if not lanes.available():
        raise SystemExit("shared-memory lanes are not available here")
    print(f"{n} processes on {len(os.sched_getaffinity(0))} cores, 4 KB all-reduce SUM, {ROUNDS} per batch")
    for w in works:
        for mode in ("ag", "rb"):
            wall, cpu = floor(n, w * 1e-6, mode)
            print(f"  W {w:5.1f} us, {mode}: {wall * 1e6:7.1f} us per all-reduce, rank 0's CPU {cpu * 1e6:6.1f} us")


if __name__ == "__main__":
    main()
