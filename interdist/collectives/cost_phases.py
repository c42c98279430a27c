"""The cost model's formulas: each ``all_reduce`` algorithm as *phases*, and what phases cost.

What a phase counts, and how each algorithm's phases are made, is described in ``cost_model.py``, which
holds what uses them (predictions, choices, the fit) and re-exports all of this; the parameters a cost
is taken with are in ``cost_params.py``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from interdist.collectives.cost_params import Params

# The names ``algorithms.py`` uses for its all_reduce algorithms (kept equal to its constants;
# this module imports nothing from there, which imports from here).
AG = "all-gather-reduce"
RS = "reduce-scatter-all-gather"
RB = "reduce-broadcast"
RING = "ring"
TREE = "tree"
HIERARCHICAL = "hierarchical"
#: The all-gather-reduce of two replicas of one host pipelined through a ring of shared memory (``ring.py``):
#: what runs where ``AUTO`` picks the all-gather-reduce for a large float batch of 2 replicas (``runtime_path``).
PAIR_RING = "pair-ring"
#: The algorithms interdist runs (``best_algorithm`` chooses among these by default).
IMPLEMENTED = (AG, RS, RB)
#: The algorithms the model knows: interdist's and, for predictions at scale, the textbook ones.
MODELLED = (AG, RS, RB, PAIR_RING, RING, TREE, HIERARCHICAL)


# -- the formulas -------------------------------------------------------------------------
@dataclass(frozen=True)
class _Phase:
    inter: bool  # over the inter-host link (else intra)
    rounds: float
    msgs: float
    moved: float  # bytes per replica
    reduced: float  # bytes per replica
    busy: float  # replicas of one host working at once (contention)
    link_share: float = 1.0  # replicas whose bytes cross the host's inter link at once
    overlap: bool = False  # pipelined: the bytes moved and the additions overlap (the longer of the two counts)


def _cost(p: Params, phases: Iterable[_Phase]) -> float:
    total = 0.0
    for ph in phases:
        link = p.inter if ph.inter else p.intra
        slow = max(1.0, ph.busy / p.cores)
        share = ph.link_share if ph.inter else slow  # memory bandwidth is shared like the cores
        moved, reduced = ph.moved * link.beta * share, ph.reduced * p.gamma * slow
        total += ph.rounds * link.alpha + ph.msgs * link.overhead * slow
        total += max(moved, reduced) if ph.overlap else moved + reduced
    return total


def _log2(n: int) -> float:
    return float(math.ceil(math.log2(n))) if n > 1 else 0.0


def phases(
    algorithm: str, nbytes: float, world_size: int, hosts: int = 1, shared: bool = True, owners: int = 1
) -> list[_Phase]:
    """The phases of ``algorithm`` for ``world_size`` replicas of ``nbytes`` each on ``hosts`` hosts.

    ``shared``: a message to several replicas of one host is written once, and read in place
    (interdist's shared memory); else every peer gets its own copy (point to point). ``owners``:
    reduce-broadcast's sum split between that many ranks of one host (``split.py``; 1, the root alone).
    """
    n, h, b = world_size, hosts, float(nbytes)
    if n < 1 or h < 1 or h > n:
        raise ValueError(f"need 1 <= hosts <= world_size, got world_size={n}, hosts={h}")
    if b < 0:
        raise ValueError(f"nbytes must be >= 0, got {nbytes}")
    if algorithm not in MODELLED:
        raise ValueError(f"unknown all_reduce algorithm {algorithm!r}; modelled: {', '.join(MODELLED)}")
    if not 1 <= owners <= n:
        raise ValueError(f"need 1 <= owners <= world_size, got owners={owners}, world_size={n}")
    if owners > 1 and (algorithm != RB or h > 1):
        raise ValueError(
            f"only reduce-broadcast on one host splits its sum between owners, not {algorithm!r} on {h} host(s)"
        )
    if algorithm == PAIR_RING and (n != 2 or h != 1 or not shared):
        raise ValueError(
            f"the pair ring runs between 2 replicas of one host through shared memory, not {n} replicas on {h} "
            f"host(s){'' if shared else ' point to point'}"
        )
    if owners > 1:
        return _split(b, n, owners, shared)
    if n == 1:
        return [_Phase(False, 0, 0, b, 0, 1)]  # the result is a copy of the replica's own batch
    g = math.ceil(n / h)
    x = h > 1  # messages cross hosts: counted on the inter link, point to point
    # replicas of one host busy at once, and sharing the inter link (on one host: all n, no inter link)
    busy, share = (g, g) if x else (n, 1)
    shm = shared and not x
    # ``moved`` counts the bytes a replica sends plus those it receives (both cost it CPU time or
    # link time); through shared memory, writing a message once and copying it out count.
    if algorithm == AG:  # send to every peer (shared memory: written once), add the n-1 others in place
        return [_Phase(x, 1, 2 * (n - 1), b if shm else 2 * (n - 1) * b, (n - 1) * b, busy, share)]
    if algorithm == PAIR_RING:
        # a hello each way, then each rank copies its chunks into the ring while it adds the peer's chunks (in the
        # caches) into its result: the copy of one chunk overlaps the addition of another
        return [_Phase(False, 1, 2, b, b, 2, overlap=True)]
    if algorithm == RS:
        part = b / n
        # round 1: chunk j to replica j, add the n chunks received; round 2: own reduced chunk to every
        # peer (shared memory: written once) and every peer's chunk copied into place in a fresh array
        if shm:
            return [
                _Phase(x, 1, 2 * (n - 1), (n - 1) * part, (n - 1) * part, busy, share),
                _Phase(x, 1, 2 * (n - 1), b, 0, busy, share),
            ]
        assembly = 0.0 if x else b  # over loopback the copy into place competes with the sockets for the cores
        return [
            _Phase(x, 1, 2 * (n - 1), 2 * (n - 1) * part, (n - 1) * part, busy, share),
            _Phase(x, 1, 2 * (n - 1), 2 * (n - 1) * part + assembly, 0, busy, share),
        ]
    if algorithm == RB:
        if shm:  # peers write to the root; the root adds alone and writes once; the peers copy out
            return [
                _Phase(False, 1, 1, b, 0, n - 1),
                _Phase(False, 1, 2 * (n - 1), b, (n - 1) * b, 1),
                _Phase(False, 0, 1, b, 0, n - 1),
            ]
        # the root takes every peer's bytes in, adds alone, and sends the result to every peer
        return [
            _Phase(x, 1, n - 1, (n - 1) * b, 0, 1),
            _Phase(x, 0, 0, 0, (n - 1) * b, 1),
            _Phase(x, 1, n - 1, (n - 1) * b, 0, 1),
        ]
    if algorithm == RING:  # across hosts one replica of each host sends to the next host per step
        return [_Phase(x, 2 * (n - 1), 4 * (n - 1), 4 * (n - 1) / n * b, (n - 1) / n * b, busy, 1)]
    if algorithm == TREE:  # pipelined: each replica sends and receives about 2b in all
        lg = _log2(n)
        return [_Phase(x, 2 * lg, 4 * lg, 4 * b, b, busy, 1)]
    # HIERARCHICAL: ring reduce-scatter inside the host, ring all-reduce of the shards across hosts, all-gather
    out = []
    if g > 1:
        out.append(_Phase(False, 2 * (g - 1), 4 * (g - 1), 4 * (g - 1) / g * b, (g - 1) / g * b, g))
    if h > 1:
        shard = b / g
        out.append(_Phase(True, 2 * (h - 1), 4 * (h - 1), 4 * (h - 1) / h * shard, (h - 1) / h * shard, g, g))
    return out


def _split(b: float, n: int, k: int, shm: bool) -> list[_Phase]:
    """Reduce-broadcast on one host with the sum split between ``k`` owners (``split.py``): every rank sends
    chunk ``j`` (``b/k`` bytes) to owner ``j``; each owner, ``k`` of them at once, takes the ``n - 1`` others'
    chunks, adds them and sends its sum's chunk to every rank (shared memory: written once, straight into
    the segment the peers read); every rank reads the ``k`` chunks of the sum."""
    if shm:
        return [
            _Phase(False, 1, k, b, 0, n),
            _Phase(False, 1, 2 * (n - 1), b / k, (n - 1) * b / k, k),
            _Phase(False, 0, k, b, 0, n),
        ]
    return [  # point to point: an owner takes in and sends out (n - 1) chunks
        _Phase(False, 1, k, b, 0, n),
        _Phase(False, 1, 2 * (n - 1), 2 * (n - 1) * b / k, (n - 1) * b / k, k),
        _Phase(False, 0, k, b, 0, n),
    ]
