"""The floor of a small all-reduce between Python processes that each spend ``W`` microseconds of CPU on it.

``bench_peers.py``'s "bare Python lanes" floor (``_lane_floor.py``) has each process publish its 4 KB array in
a shared-memory lane (``interdist.collectives.lanes``) to every other, spin (yielding its core between looks, as
interdist's mailbox does) until every peer's came, and add them: nothing else. A replica does more per
collective (the checks and events of ``ReplicaContext.all_reduce``, the plan, the frames: its ``W``), and with
more processes than cores each microsecond of it is paid by everyone waiting. This adds ``W`` of busy CPU to each
process's collective, all-gather (every process sends to every other) or reduce-broadcast (rank 0 sums and sends
the result back), so that interdist's figure can be set against the floor for its own ``W``
(docs/performance.md, "The twelfth run"). Prints the median time per all-reduce of rank 0 over 5 batches, and
its CPU per all-reduce.

    python benchmarks/bench_lane_floor_work.py [n] [W_us ...]     # e.g. 4 0 10 20 30
"""

from __future__ import annotations

import os
import statistics
import sys

from _lane_floor import lane_floor

from interdist.collectives import lanes

ROUNDS = 3000


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 4
    works = [float(w) for w in sys.argv[2:]] or [0.0, 10.0, 20.0, 30.0]
    if not lanes.available():
        raise SystemExit("shared-memory lanes are not available here")
    print(f"{n} processes on {len(os.sched_getaffinity(0))} cores, 4 KB all-reduce SUM, {ROUNDS} per batch")
    for w in works:
        for mode in ("ag", "rb"):
            got = lane_floor(n, ROUNDS, w * 1e-6, mode)
            if got is None:  # (lanes are available: no segment could be made)
                raise SystemExit("no shared-memory segment can be made here")
            wall, cpu = statistics.median(got[0]), statistics.median(got[1])
            print(f"  W {w:5.1f} us, {mode}: {wall * 1e6:7.1f} us per all-reduce, rank 0's CPU {cpu * 1e6:6.1f} us")


if __name__ == "__main__":
    main()
