"""An alpha-beta cost model of ``all_reduce``: which algorithm to run, and what scale would cost.

Every algorithm is a few *phases*. In a phase each busy replica waits ``rounds`` message
latencies (``alpha``), handles ``msgs`` messages (``overhead`` each: packing, a socket write,
a wake-up), moves ``moved`` bytes over a link (``beta`` seconds per byte) and adds ``reduced``
bytes into a running total (``gamma`` seconds per byte). Two effects make replicas that run
at once slower than one alone, and the model keeps both:

- *contention*: ``k`` busy replicas on a host with ``cores`` cores run ``max(1, k / cores)``
  times slower (CPU work and memory traffic: messages, copies, additions);
- *a shared network link*: the replicas of one host that cross to other hosts at once share
  that host's link, so their bytes add up on it.

Links: ``intra`` between replicas of one host (interdist: shared memory, one write per message
however many local peers read it; NCCL: NVLink), ``inter`` between hosts (interdist: Dask comms
over TCP, one send per peer; NCCL: InfiniBand). The time of an algorithm is the sum of its
phases (the slowest replica of each phase). Every term is linear in the parameters
``(intra.alpha, intra.overhead, intra.beta, inter.alpha, inter.overhead, inter.beta, gamma)``,
so :func:`fit` is a (non-negative, relative-error weighted) linear least squares on measured
times; ``cores`` is a property of the machine and is not fitted.

Algorithms, for ``n`` replicas of ``b`` bytes each on ``h`` hosts (``g = ceil(n / h)`` per host):

- interdist's own (``algorithms.py``), as implemented; across hosts every message counts on ``inter``:

  - all-gather-reduce (``AG``): one round; each replica sends its ``b`` bytes to every peer
    (shared memory: written once) and adds the ``n - 1`` others itself.
  - reduce-scatter + all-gather (``RS``): two rounds; each replica moves and adds ``1/n`` of
    the data to and from every peer.
  - reduce-broadcast (``RB``): every replica sends to a root, which adds once and sends the
    result back; the root works alone in the middle (or ``owners`` ranks split it: ``split.py``).
  - the pair ring (``PAIR_RING``, 2 replicas of one host, ``ring.py``): a hello each way, then each
    copies its ``b`` bytes into the ring as it adds the peer's; the two overlap (the longer counts).
    :func:`runtime_path` says which of these ``AUTO`` runs.
- at scale, the textbook algorithms (Thakur, Rabenseifner & Gropp, "Optimization of collective
  communication operations in MPICH", IJHPCA 19(1), 2005; NCCL's ring and double binary trees,
  Jeaugey, "Massively scale your deep learning training with NCCL 2.4", NVIDIA blog, 2019):

  - ``RING``: ``2(n-1)`` steps, each replica moves ``2(n-1)/n * b`` and adds ``(n-1)/n * b``;
    one replica per host crosses to the next host in each step.
  - ``TREE``: a pipelined (double) binary tree, reduce up then broadcast down: ``2 log2 n``
    latencies, ``2 b`` moved and ``b`` added per replica.
  - ``HIERARCHICAL``: ring reduce-scatter inside each host, ring all-reduce of each replica's
    ``b/g`` shard across the ``h`` hosts (the ``g`` shards of a host share its link), ring
    all-gather inside the host.

``PRESETS["shm"]`` and ``PRESETS["tcp"]`` were fitted by ``benchmarks/bench_cost_model.py`` on this kind of
machine (``docs/performance.md``), ``PRESETS["nccl"]`` is published figures (its ``source``); all are in
``cost_params.py``. ``interdist.collectives.cost-model`` may name a JSON file the benchmark wrote (``--save``):
its sets replace the presets of the same name, so ``AUTO`` chooses by what was measured on the machine at hand.

GPU replicas (CuPy arrays): :func:`device_choice` weighs host staging against the device paths
(``cuda_ipc`` between replicas on one GPU, ``nccl`` between GPUs) with ``PRESETS["cuda_ipc"]`` and
``PRESETS["nccl-device"]``, assumed figures until measured on a GPU (``cost_params.py``).

The formulas (each algorithm's phases and their cost) are in ``cost_phases.py``.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Sequence

from interdist.collectives import ring
from interdist.collectives.cost_fit import Measurement, features, fit, nnls
from interdist.collectives.cost_params import (
    PARAMETERS,
    PRESETS,
    STAGING_BYTES_PER_S,
    STAGING_LATENCY_S,
    STAGING_LATENCY_SHARED_S,
    Link,
    Params,
    load,
    preset,
    save,
)
from interdist.collectives.cost_phases import (
    AG,
    HIERARCHICAL,
    IMPLEMENTED,
    MODELLED,
    PAIR_RING,
    RB,
    RING,
    RS,
    TREE,
    _cost,
    phases,
)

# The parameter sets (``Link``, ``Params``, ``PRESETS``, ``load``, ``save``) live in ``cost_params.py``,
# the algorithms' names and phases (``AG``... ``MODELLED``, ``phases``) in ``cost_phases.py``.


def predict(
    algorithm: str,
    nbytes: float,
    world_size: int,
    hosts: int = 1,
    transport: str = "shm",
    params: Params | None = None,
    owners: int = 1,
) -> float:
    """Predicted seconds of one ``all_reduce`` of ``nbytes`` per replica.

    ``transport`` names a parameter set of ``PRESETS`` (``params`` overrides it). ``owners``: reduce-broadcast
    on one host with its sum split between that many ranks (``split.py``; where ``AUTO`` picks reduce-broadcast
    and each core holds two replicas or more, one owner per core: ``worker/affinity.py``'s ``reduce_owners``).
    """
    p = params if params is not None else preset(transport)
    return _cost(p, phases(algorithm, nbytes, world_size, hosts, p.shared, owners))


def best_algorithm(
    nbytes: float,
    world_size: int,
    hosts: int = 1,
    transport: str = "shm",
    candidates: Sequence[str] = IMPLEMENTED,
    params: Params | None = None,
    margin: float = 0.0,
) -> str:
    """The fastest of ``candidates`` by the model (a pure function of its arguments, so every rank
    that passes the same arguments chooses the same). The first candidate is the default: another
    is chosen only when predicted at least ``margin`` (a fraction) faster; exact ties go to the
    earliest."""
    if not candidates:
        raise ValueError("no candidate algorithms")
    if not 0 <= margin < 1:
        raise ValueError(f"margin must be in [0, 1), got {margin}")
    p = params if params is not None else preset(transport)
    t = {a: _cost(p, phases(a, nbytes, world_size, hosts, p.shared)) for a in candidates}
    best = min(candidates, key=lambda a: (t[a], candidates.index(a)))
    return best if t[best] < (1 - margin) * t[candidates[0]] or margin == 0 else candidates[0]


#: The algorithms ``AUTO`` weighs, the default (one round of messages) first: on one host
#: reduce-scatter + all-gather never clearly won a measurement (its second round costs more than the
#: model's bytes say: docs/performance.md), and across hosts reduce-broadcast funnels every byte
#: through one host's link.
AUTO_CANDIDATES_ONE_HOST = (AG, RB)
AUTO_CANDIDATES_HOSTS = (AG, RS)
#: ``AUTO`` leaves all-gather-reduce only for an algorithm predicted this much faster: the model's
#: errors are larger than that (docs/performance.md), so a near tie keeps the default.
AUTO_MARGIN = 0.05


@functools.lru_cache(maxsize=4096)
def auto_choice(elements: int, world_size: int, spans_hosts: bool) -> str:
    """``Collectives``' ``AUTO`` choice for a batch of ``elements`` among ``world_size`` replicas.

    A pure function of shapes and topology, so every rank chooses the same: the bytes are counted
    as 4 per element whatever the dtype (a dtype mismatch between replicas still picks one algorithm
    and raises the same error everywhere), and a group that spans hosts is modelled as one replica
    per host (how many hosts is not known alike on every rank; whether the group spans them is).
    The parameters are ``PRESETS["shm"]``.
    """
    if spans_hosts:
        return best_algorithm(4 * elements, world_size, world_size, "shm", AUTO_CANDIDATES_HOSTS, margin=AUTO_MARGIN)
    return best_algorithm(4 * elements, world_size, 1, "shm", AUTO_CANDIDATES_ONE_HOST, margin=AUTO_MARGIN)


@functools.lru_cache(maxsize=4096)
def split_pays(elements: int, world_size: int, owners: int) -> bool:
    """Whether ``AUTO``'s reduce-broadcast of a batch of ``elements`` among ``world_size`` replicas of one host
    splits its sum between ``owners`` ranks (``split.py``): where the model predicts it faster than the root
    alone. Counted as :func:`auto_choice` counts (4 bytes per element, ``PRESETS["shm"]``), so every rank of
    the group, whose owners are the group's, decides alike. Each owner adds a share at once, but every rank
    sends a message to each owner: measured at 4 replicas on 2 cores (``benchmarks/bench_split.py``, two runs),
    the split took 1.44-1.46x the root's time at 64 KB, 1.12-1.30x at 1 MB, 0.98-1.10x at 2 MB and 0.88-0.90x
    at 4 MB; the model says 1.51, 1.17, 1.03 and 0.91, its crossover at about 2.5 MB."""
    if owners < 2:
        return False
    p = preset("shm")
    split = _cost(p, phases(RB, 4 * elements, world_size, 1, p.shared, owners))
    return split < _cost(p, phases(RB, 4 * elements, world_size, 1, p.shared))


def owners_of_one_host(world_size: int, cores: int) -> int:
    """How many ranks a large reduce-broadcast of ``world_size`` replicas of one host with ``cores`` cores splits its
    sum between (``split.py``): one per core where each core holds two replicas or more, else 1 (the root alone).
    ``worker/affinity.py``'s ``reduce_owners`` applies it to a group whose replicas are all on one host."""
    return cores if cores >= 2 and world_size >= 2 * cores else 1


def runtime_path(nbytes: int, world_size: int, cores: int, ring_runs: bool = True) -> tuple[str, int]:
    """(algorithm, owners): what ``AUTO`` runs for an all-reduce of ``nbytes`` of float32 per replica among
    ``world_size`` replicas of one host with ``cores`` cores, for :func:`predict`. Its choice
    (:func:`auto_choice`); then, for 2 replicas, the pair ring from ``ring.MIN_BYTES`` where it runs
    (``ring_runs``: numba is installed); for reduce-broadcast, its sum split between one owner a core where each
    core holds two replicas or more (:func:`owners_of_one_host`) and :func:`split_pays`."""
    algorithm = auto_choice(nbytes // 4, world_size, False)
    if algorithm == AG and world_size == 2 and ring_runs and nbytes >= ring.MIN_BYTES:
        return PAIR_RING, 1
    owners = owners_of_one_host(world_size, cores)
    if algorithm == RB and owners > 1 and split_pays(nbytes // 4, world_size, owners):
        return RB, owners
    return algorithm, 1


# -- GPU replicas: where a batch of CuPy arrays is reduced ----------------------------------------
#: The paths of a GPU replicas' all_reduce: through host memory (the host algorithms above), CUDA IPC
#: between replicas that share one GPU, NCCL between replicas on distinct GPUs.
HOST = "host"
CUDA_IPC = "cuda_ipc"
NCCL = "nccl"
DEVICE_PATHS = (HOST, CUDA_IPC, NCCL)
#: The parameter set and the algorithm (phases) of each device path (``cost_params.py``: assumed).
DEVICE_MODEL = {CUDA_IPC: ("cuda_ipc", AG), NCCL: ("nccl-device", RS)}


def device_path_time(path: str, nbytes: float, world_size: int, hosts: int = 1, shared_gpu: bool = True) -> float:
    """Predicted seconds of one all_reduce of ``nbytes`` per GPU replica along ``path``.

    ``host``: each replica copies its batch to the host and the result back (``STAGING_BYTES_PER_S``;
    the replicas on one GPU, ``shared_gpu``, share its link and wait longer for each copy), the host
    algorithm ``AUTO`` picks in between (``PRESETS["shm"]``). ``cuda_ipc`` and ``nccl``: the phases of
    their algorithm with their parameter set (``DEVICE_MODEL``)."""
    if path == HOST:
        copies = 2 * (world_size if shared_gpu else 1)
        latency = STAGING_LATENCY_SHARED_S if shared_gpu and world_size > 1 else STAGING_LATENCY_S
        staged = copies * (nbytes / STAGING_BYTES_PER_S + latency)
        host = auto_choice(max(1, int(nbytes) // 4), world_size, hosts > 1)
        return staged + predict(host, nbytes, world_size, hosts, "shm")
    try:
        name, algorithm = DEVICE_MODEL[path]
    except KeyError:
        raise ValueError(f"unknown device path {path!r}; known: {', '.join(DEVICE_PATHS)}") from None
    p = preset(name)
    if not shared_gpu:
        p = dataclasses.replace(p, cores=math.inf)  # each replica has a GPU of its own
    return _cost(p, phases(algorithm, nbytes, world_size, hosts, p.shared))


def device_choice(
    nbytes: float, world_size: int, candidates: Sequence[str], hosts: int = 1, shared_gpu: bool = True
) -> str:
    """The fastest of ``candidates`` (paths of ``DEVICE_PATHS`` the group can take) by the model; exact
    ties go to the earliest. A pure function of its arguments: every rank that passes the same (the
    group's agreed topology, the batch's size in bytes) chooses the same."""
    if not candidates:
        raise ValueError("no candidate device paths")
    t = {c: device_path_time(c, nbytes, world_size, hosts, shared_gpu) for c in candidates}
    return min(candidates, key=lambda c: (t[c], list(candidates).index(c)))


# -- scaling --------------------------------------------------------------------------------
def step_time(
    compute_s: float,
    grad_bytes: float,
    world_size: int,
    per_host: int,
    algorithm: str,
    transport: str = "nccl",
    overlap: float = 0.0,
    params: Params | None = None,
) -> float:
    """Seconds per synchronous data-parallel step: ``compute_s`` of work per replica, then one
    all-reduce of ``grad_bytes``, of which the fraction ``overlap`` hides behind the compute
    (backpropagation sends early layers' gradients while later ones are computed)."""
    if not 0 <= overlap <= 1:
        raise ValueError(f"overlap must be in [0, 1], got {overlap}")
    hosts = max(1, math.ceil(world_size / per_host))
    comm = predict(algorithm, grad_bytes, world_size, hosts, transport, params)
    return compute_s + max(comm - overlap * compute_s, 0.0) if world_size > 1 else compute_s


def scaling_efficiency(
    compute_s: float,
    grad_bytes: float,
    world_size: int,
    per_host: int,
    algorithm: str,
    transport: str = "nccl",
    overlap: float = 0.0,
    params: Params | None = None,
) -> float:
    """Weak scaling efficiency: throughput of ``world_size`` replicas over ``world_size`` times one's."""
    one = step_time(compute_s, grad_bytes, 1, per_host, algorithm, transport, overlap, params)
    return one / step_time(compute_s, grad_bytes, world_size, per_host, algorithm, transport, overlap, params)


__all__ = [
    "AG",
    "AUTO_CANDIDATES_HOSTS",
    "AUTO_CANDIDATES_ONE_HOST",
    "AUTO_MARGIN",
    "CUDA_IPC",
    "DEVICE_MODEL",
    "DEVICE_PATHS",
    "HIERARCHICAL",
    "HOST",
    "IMPLEMENTED",
    "MODELLED",
    "NCCL",
    "PAIR_RING",
    "PARAMETERS",
    "PRESETS",
    "RB",
    "RING",
    "RS",
    "STAGING_BYTES_PER_S",
    "STAGING_LATENCY_S",
    "STAGING_LATENCY_SHARED_S",
    "TREE",
    "Link",
    "Measurement",
    "Params",
    "auto_choice",
    "best_algorithm",
    "device_choice",
    "device_path_time",
    "features",
    "fit",
    "load",
    "nnls",
    "owners_of_one_host",
    "phases",
    "predict",
    "preset",
    "runtime_path",
    "save",
    "scaling_efficiency",
    "split_pays",
    "step_time",
]
