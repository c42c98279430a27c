"""The Python one small all-reduce costs a replica above its transport, on one thread, with no peer to wait for.

At 4 replicas on 2 cores a 4 KB all-reduce is CPU-bound (docs/performance.md, "The eleventh run"): each replica's
microsecond of Python costs the collective several. Measured between processes, a microsecond is lost in the noise of
the scheduler; measured here it is not. Rank 0 of a group of two runs ``ReplicaContext.all_reduce`` in a loop (the
context's checks, the replica's events, the small path's plan, framing and sum, the mailbox), over the in-process
transport, and every packet it sends comes straight back into its own mailbox as rank 1's: the take never waits.
What the shared-memory lanes and the spin add between processes is not in it (``bench_peers.py`` has the whole).

Prints the time per all-reduce over ``REPEATS`` batches of ``K`` calls: the minimum (the figure to compare
commits by) and the median.

    python benchmarks/bench_collective_python.py [K]
"""

from __future__ import annotations

import statistics
import sys
import time
from typing import Any

import numpy as np

import interdist as idist
from interdist import _context
from interdist.collectives.base import Packet
from interdist.collectives.local import local_group
from interdist.replica.replica import Replica

REPEATS = 15
DEVICES = [f"/job:localhost/replica:0/task:0/device:CPU:{i}" for i in range(2)]


def main() -> None:
    k = int(sys.argv[1]) if len(sys.argv) > 1 else 10_000
    transports = local_group(2)
    spec: Any = {"world_size": 2, "devices": DEVICES, "kind": "mirrored", "timeout": 60.0}
    replica = Replica("bench", 0, spec, transports[0], lambda msg: None, lambda step, why: None)
    box = transports[0].mailbox

    def send_back(dsts: list[int], step: int, seq: int, packet: Packet, *args: Any, **kwargs: Any) -> None:
        box.put(step, seq, 1, Packet(packet.header))  # rank 1's contribution: the same frame

    transports[0].send_packet = send_back  # type: ignore[method-assign]
    value = np.ones(1024, np.float32)
    times = []
    with _context.enter(replica.view, replica.context):
        ctx = idist.get_replica_context()
        for step in range(REPEATS + 1):
            replica.step, replica.seq = step, 0
            box.begin_step(step)
            replica._rows.clear()
            t0 = time.perf_counter()
            for _ in range(k):
                out = ctx.all_reduce("sum", value)
            if step:  # the first batch warms up
                times.append((time.perf_counter() - t0) / k)
    assert float(out[0]) == 2.0, out[:3]
    print(
        f"4 KB all_reduce, rank 0 of 2, the peer's packet already there: min {min(times) * 1e6:.2f} us, "
        f"median {statistics.median(times) * 1e6:.2f} us per call ({REPEATS} x {k})"
    )


if __name__ == "__main__":
    main()
