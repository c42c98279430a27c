"""The floor of a 4 KB all-reduce SUM between Python processes through interdist's shared-memory lanes.

Each of ``n`` forked processes publishes its array in a lane (``interdist.collectives.lanes``, a shared-memory ring)
to every other (all-gather, ``"ag"``) or to rank 0, which sums and sends the result back (reduce-broadcast,
``"rb"``); it spins, yielding its core between looks as interdist's mailbox does, until what it waits for has come,
and adds; nothing else (no framework, no checks, no events). ``work_s`` adds that much busy CPU to each process's
collective, where a replica spends its own Python. ``bench_peers.py`` (its "bare Python lanes" floor) and
``bench_lane_floor_work.py`` measure with it.
"""

from __future__ import annotations

import os
import time
from typing import Any

import numpy as np

SMALL = 1024  # float32 elements: 4 KB


def lane_floor(n: int, rounds: int, work_s: float = 0.0, mode: str = "ag") -> tuple[list[float], list[float]] | None:
    """Rank 0's seconds and CPU seconds per all-reduce, a figure for each of 5 batches of ``rounds`` (a sixth,
    first, warms up); ``None`` where no lanes can be made here (or ``n < 2``)."""
    from interdist.collectives import lanes

    if n < 2 or not lanes.available():
        return None
    made: dict[tuple[int, int], lanes.Lane] = {}  # (i, j): the lane i writes and j reads
    for key in [(i, j) for i in range(n) for j in range(n) if i != j]:
        lane = lanes.Lane.create()
        if lane is None:  # no segment can be made here: nothing to measure, and none left behind
            for made_lane in made.values():
                made_lane.close()
            return None
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
        header = mine.tobytes()
        early: dict[int, list[Any]] = {j: [] for j in ins}  # packets of the next round, taken with this one's

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
            data: bytes = got.pop(0)[3]
            return data

        walls, cpus = [], []
        for batch in range(6):
            t0, c0 = time.perf_counter(), time.thread_time()
            for i in range(rounds):
                if work_s > 0:
                    busy()
                if mode == "ag" or me != 0:
                    for j in outs if mode == "ag" else [0]:
                        put(j, batch, i, header)
                if mode == "ag" or me == 0:
                    total = mine.copy()
                    for j in ins:
                        np.add(total, np.frombuffer(get(j), np.float32), out=total)
                    if mode == "rb":
                        for j in outs:
                            put(j, batch, i, total.tobytes())
                else:
                    total = np.frombuffer(get(0), np.float32)
            walls.append((time.perf_counter() - t0) / rounds)
            cpus.append((time.thread_time() - c0) / rounds)
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
        return rank(0)
    finally:
        for pid in pids:
            os.waitpid(pid, 0)
        for lane in made.values():
            lane.close()
