"""Which core a replica's thread runs on when its group's replicas on a host are as many as its cores or more.

Every replica is a worker pinned to one device; a CPU "device" was pinned to nothing, and the kernel moved the
replicas' threads between the cores as it pleased. Where the replicas are as many as the cores or more, each has
at most a core anyway, and moving them costs: two replicas on one core take turns at a spinning wait (they yield
to each other, ``collectives/mailbox.py``), where a third replica moved onto that core waits for both. Each
replica's thread is then pinned to one core of the worker's (``os.sched_setaffinity``), as MPI launchers bind
their ranks: the replicas of a host in rank order, round the cores in order. Measured on the 2-core development
machine, pinned against not in alternated rounds of one strategy (the old affinity put back between rounds),
medians: a 4 KB all-reduce 155 -> 127 us at 4 replicas (faster in 12 of 12 rounds, the rounds' spread 124-131
against 135-174 us), 89 -> 78 at 3 (8 of 8), 22.9 -> 21.6 at 2 (9 of 12); an empty ``run`` and a ``run`` with
one 4 KB all-reduce 0.97x at 2 replicas; the SGD step of 1M parameters, fused or a ``run`` per step, within
the noise (0.96-1.03x).

Only the replica's thread is pinned: threads the worker made before (its event loop, a BLAS pool made at import)
keep every core; threads the replica's program makes later inherit the pin (a library's pool made on first use:
with as many replicas as cores, each has one core's worth anyway). Fewer replicas than cores on the host, GPU
replicas, a platform without ``sched_setaffinity``, or ``interdist.replica.pin-threads: false``: nothing pinned.
Replicas are counted on a host by the host of their worker's address.
"""

from __future__ import annotations

import os

from distributed.comm.addressing import get_address_host

from interdist import config
from interdist.collectives.cost_model import owners_of_one_host


def core_for(rank: int, peers: list[str], cores: list[int]) -> int | None:
    """The core for replica ``rank`` of a group whose workers are at ``peers`` (by rank), given the cores this
    worker may use (``cores``, in order): ``None`` when its host holds fewer of the group's replicas than that.

    >>> core_for(2, ["tls://10.0.0.1:1", "tls://10.0.0.1:2", "tls://10.0.0.1:3"], [0, 1])
    0
    >>> core_for(0, ["tls://10.0.0.1:1", "tls://10.0.0.2:1"], [0, 1]) is None  # one replica on each host
    True
    """
    try:
        hosts = [get_address_host(p) for p in peers]
    except (ValueError, TypeError):  # an address of an unknown form: nothing to count by
        return None
    here = [r for r, host in enumerate(hosts) if host == hosts[rank]]
    if not cores or len(here) < len(cores):
        return None
    return cores[here.index(rank) % len(cores)]


def reduce_owners(peers: list[str], cores: list[int]) -> int:
    """How many ranks a group's large reduce-broadcast splits its sum between (``collectives/split.py``): one per
    core, ``len(cores)``, where every replica of the group is on this host and each core holds two of them or
    more (they are pinned round the cores); else 1 (the root alone). The same number on every rank of a host
    whose workers may use the same cores (ranks ``0 .. owners - 1`` are then on different cores).

    Measured on the 2-core development machine, the fused SGD step of 1M parameters in alternated processes
    (medians): 4 replicas 10.96 -> 9.97 ms split (faster in 4 of 5 pairs), 3 replicas 7.91 -> 8.48 ms (slower in
    4 of 7: the core holding one replica was the one waiting less), hence two replicas a core at least.

    >>> reduce_owners(["tcp://127.0.0.1:1", "tcp://127.0.0.1:2", "tcp://127.0.0.1:3", "tcp://127.0.0.1:4"], [0, 1])
    2
    >>> reduce_owners(["tcp://127.0.0.1:1", "tcp://127.0.0.1:2", "tcp://127.0.0.1:3"], [0, 1])  # a core holds one
    1
    """
    try:
        hosts = {get_address_host(p) for p in peers}
    except (ValueError, TypeError):
        return 1
    return 1 if len(hosts) != 1 else owners_of_one_host(len(peers), len(cores))


def replica_core(rank: int, peers: list[str], on_gpu: bool) -> int | None:
    """:func:`core_for` with this thread's cores (called on the worker's event loop, which is never pinned), or
    ``None`` where nothing is pinned (see the module's text)."""
    if on_gpu or not hasattr(os, "sched_setaffinity") or not config.get("replica.pin-threads"):
        return None
    return core_for(rank, peers, sorted(os.sched_getaffinity(0)))


def pinned_owners(peers: list[str]) -> int:
    """:func:`reduce_owners` with this thread's cores, for a group whose replica here was pinned (``replica_core``)."""
    return reduce_owners(peers, sorted(os.sched_getaffinity(0)))
