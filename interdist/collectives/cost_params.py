"""The cost model's parameter sets (``cost_model.py`` holds the formulas and re-exports all of this).

A :class:`Params` is one kind of machine and how its replicas talk: two :class:`Link` s (``intra``
between replicas of one host, ``inter`` between hosts), ``gamma`` (seconds per byte added),
``cores`` (replicas a host runs at once without sharing) and ``shared`` (one write per message to
the replicas of a host, as through shared memory). ``PRESETS`` holds the built-in sets by name,
replaced by those of the JSON file ``interdist.collectives.cost-model`` names (:func:`load`,
:func:`save`).

- ``shm``, ``tcp``: fitted on this kind of machine by ``benchmarks/bench_cost_model.py``.
- ``nccl``: published NVLink/InfiniBand figures, for predictions at scale (``step_time``).
- ``cuda_ipc``, ``nccl-device``: the device-resident paths of GPU replicas (``cuda_ipc.py``,
  ``nccl.py``), which ``cost_model.device_choice`` weighs against host staging. ``cuda_ipc`` and host
  staging are **fitted** to ``benchmarks/bench_gpu_allreduce.py`` on one H200 (2026-11-29, 2 and 4
  replicas sharing it; ``tests/gpu/gpu_run.md``); ``nccl-device`` is still **assumed** (data-sheet
  bandwidths: the machines lent so far had one GPU).
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from interdist import config

#: The order of the parameters in :meth:`Params.vector` (and of the columns ``cost_model.fit`` solves for).
PARAMETERS = ("intra.alpha", "intra.overhead", "intra.beta", "inter.alpha", "inter.overhead", "inter.beta", "gamma")


@dataclass(frozen=True)
class Link:
    """One kind of link between replicas."""

    alpha: float  #: seconds of latency per round of messages on the critical path
    overhead: float  #: seconds a replica spends per message it sends or receives
    beta: float  #: seconds per byte a replica moves over the link (1 / bandwidth)


@dataclass(frozen=True)
class Params:
    """One parameter set: a kind of machine and how its replicas talk (JSON: :meth:`to_json`)."""

    name: str
    intra: Link  #: between replicas on one host
    inter: Link  #: between hosts
    gamma: float  #: seconds per byte added into a running total
    cores: float  #: replicas a host runs at once without sharing a core (``inf``: never shared)
    shared: bool = True  #: one write per message to replicas of one host (shared memory), else one per peer
    source: str = ""  #: where the figures come from

    def vector(self) -> np.ndarray:
        """The fitted parameters, in the order of ``PARAMETERS``."""
        i, o = self.intra, self.inter
        return np.array([i.alpha, i.overhead, i.beta, o.alpha, o.overhead, o.beta, self.gamma], dtype=np.float64)

    def with_vector(self, v: Sequence[float] | np.ndarray, source: str | None = None) -> Params:
        """A copy with the parameters of ``v`` (in the order of ``PARAMETERS``)."""
        x = [float(a) for a in v]
        if len(x) != len(PARAMETERS):
            raise ValueError(f"expected {len(PARAMETERS)} parameters ({', '.join(PARAMETERS)}), got {len(x)}")
        return dataclasses.replace(
            self,
            intra=Link(x[0], x[1], x[2]),
            inter=Link(x[3], x[4], x[5]),
            gamma=x[6],
            source=self.source if source is None else source,
        )

    def to_json(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["cores"] = None if math.isinf(self.cores) else self.cores
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Params:
        cores = d.get("cores")
        return cls(
            name=str(d["name"]),
            intra=Link(**{k: float(v) for k, v in d["intra"].items()}),
            inter=Link(**{k: float(v) for k, v in d["inter"].items()}),
            gamma=float(d["gamma"]),
            cores=math.inf if cores is None else float(cores),
            shared=bool(d.get("shared", True)),
            source=str(d.get("source", "")),
        )


# -- parameter sets -------------------------------------------------------------------------
# "shm": this class of machine (2 cores, loopback), replicas on one host through shared memory,
# between hosts through Dask comms over TCP. Fitted by benchmarks/bench_cost_model.py
# (docs/performance.md has the run: predicted vs measured, load).
_SHM = Params(
    name="shm",
    intra=Link(alpha=0.0, overhead=1.28e-4, beta=8.45e-11),
    inter=Link(alpha=9.5e-5, overhead=1.17e-4, beta=3.29e-10),
    gamma=2.01e-10,
    cores=2.0,
    source="fitted by benchmarks/bench_cost_model.py on a 2-core VM (docs/performance.md)",
)
# "tcp": every message over Dask comms, also between replicas of one host (no shared memory).
_TCP = dataclasses.replace(
    _SHM,
    name="tcp",
    intra=_SHM.inter,
    shared=False,
    source="fitted by benchmarks/bench_cost_model.py on a 2-core VM, Dask comms over loopback (docs/performance.md)",
)
# "nccl": GPUs, NVLink inside a host and InfiniBand between hosts. Published figures (``beta`` is
# per byte sent *or* received, so a link of B bytes/s each way has beta = 1 / (2 B), and a ring's
# time 2(n-1)/n b / busbw gives beta = 1 / (2 busbw)):
# - NVLink: NCCL's all_reduce_perf reaches a bus bandwidth of ~230 GB/s on the 8 A100s of a DGX
#   A100 (NVIDIA's NCCL tests and DGX A100 performance notes).
# - InfiniBand: a DGX A100 has 8 x 200 Gb/s HDR adapters, 200 GB/s per host each way, which NCCL
#   drives with several rings (channels) at once; ~190 GB/s bus bandwidth across nodes is reported.
# - latency: a few microseconds per step inside a node, ~5-10 us across nodes (Jeaugey, "Massively
#   scale your deep learning training with NCCL 2.4", NVIDIA blog, 2019: ring latency grows with n,
#   tree latency with log2 n); here 5 us and 10 us per round, 1 us per message.
# - gamma: a GPU adds at memory speed (~1.5 TB/s of HBM2e, 3 accesses per element added).
_NCCL = Params(
    name="nccl",
    intra=Link(alpha=5e-6, overhead=1e-6, beta=1 / (2 * 230e9)),
    inter=Link(alpha=1e-5, overhead=1e-6, beta=1 / (2 * 190e9)),
    gamma=3 / 1.5e12,
    cores=math.inf,
    shared=False,
    source="published figures: NCCL tests bus bandwidth on DGX A100 (NVLink ~230 GB/s, 8 x HDR InfiniBand "
    "~190 GB/s), NCCL 2.4 latencies (Jeaugey 2019); see docs/performance.md",
)

# -- the device-resident paths of GPU replicas (ASSUMPTIONS until measured on a GPU) -------------
# HBM: ~3 TB/s achieved of the 3.35 TB/s of an H100 SXM (an H200 has 4.8 TB/s): a copy reads and
# writes each byte (2 accesses), an addition reads two and writes one (3 accesses).
_HBM_BYTES_PER_S = 3.0e12
# One round of small control messages between two Dask workers over the inner transport costs what
# the "shm" fit charges all-gather-reduce's two messages (2 x 128 us): the device paths send the
# same kind of message, so host and device paths pay it alike.
_CONTROL_ROUND_S = 2 * _SHM.intra.overhead
_CONTROL_ROUND_HOSTS_S = _SHM.inter.alpha + 2 * _SHM.inter.overhead  # the same between hosts (Dask comms)
# "cuda_ipc": replicas that share one GPU. Each writes its batch once into an exchange buffer that
# every peer reads in place (``shared``: the all-gather-reduce phases of shared memory), and adds the
# peers' batches itself; all of them use the one GPU at once (``cores`` = 1: n replicas' copies and
# additions take n times as long, and their processes' GPU contexts take turns). Least-squares fit of
# ``ctx.all_reduce``'s median time in bench_gpu_allreduce.py on one H200 (2026-11-29), 1 to 256 MB of
# float32 at 2 and 4 replicas, each point the median of four calls (the fit is within 16% of all 8,
# of 4 replicas' within 1%; the calls themselves differed by up to 60% at 1-16 MB): ``alpha`` 0.53 ms
# is the per-call cost (a hello round through Dask comms and the Python of the path), ``overhead``
# 29 us per peer and replica (events, buffer views), 1/beta ~460 GB/s, 1/gamma ~900 GB/s per replica
# working alone (HBM3e, with every replica sharing it). The points: tests/collectives/test_cost_model.py.
_CUDA_IPC = Params(
    name="cuda_ipc",
    intra=Link(alpha=5.31e-4, overhead=2.89e-5, beta=2.15e-12),
    inter=_NCCL.inter,  # never used: CUDA IPC does not cross hosts
    gamma=1.11e-12,
    cores=1.0,
    shared=True,
    source="fitted to bench_gpu_allreduce.py on one NVIDIA H200 (2026-11-29), 2 and 4 replicas sharing it, "
    "1-256 MB; see cost_params.py",
)
# "nccl-device": replicas on distinct GPUs, NCCL point to point (reduce-scatter then all-gather, as
# ``nccl.py`` runs it; each round is a control or NCCL round trip). NVLink 4: 450 GB/s each way per
# H100, of which ~300 GB/s assumed for point-to-point sends; InfiniBand between hosts as "nccl".
_NCCL_DEVICE = Params(
    name="nccl-device",
    intra=Link(alpha=_CONTROL_ROUND_S / 2 + 2e-5, overhead=2e-6, beta=1 / (2 * 300e9)),
    inter=Link(alpha=_CONTROL_ROUND_HOSTS_S / 2 + 2e-5, overhead=2e-6, beta=_NCCL.inter.beta),
    gamma=3 / _HBM_BYTES_PER_S,
    cores=math.inf,
    shared=False,
    source="ASSUMED (not measured): NVLink 4 ~300 GB/s each way for NCCL send/recv, H100 HBM ~3 TB/s, "
    "InfiniBand as the 'nccl' set; see cost_params.py",
)
#: Host staging of a GPU replica's batch (device to host, then host to device): bytes per second
#: through one GPU's host link, and seconds per copy. Two replicas sharing one GPU, CuPy against NumPy
#: values on the same workers (bench_gpu_allreduce.py): 16 MB took 18.6 ms against 8.5 ms on an H100
#: (2026-11-22) and 19.1-20.2 ms against 9.1-9.3 ms on an H200 (2026-11-29), ~10 ms for 4 copies of
#: 16 MB: 6.4 GB/s (pageable host memory; 64 MB gives 7.5-8.7 GB/s). The latency of a copy from a GPU of
#: the replica's own is assumed (a synchronizing cudaMemcpy of a few bytes); from a GPU that several
#: replicas' processes share it is the H200's 4 KB all-reduce of CuPy values (0.52 ms, warmed up, 13
#: runs; 0.65 ms in an earlier, shorter run) less the host path's model, over its 4 copies: ~66 us
#: each (their GPU contexts take turns). The model then stages up to ~128 KB for 2 replicas on a
#: shared GPU, as that run measured (4-64 KB: 0.47-0.54 ms staged against 0.59-0.74 through CUDA IPC;
#: at 256 KB a tie).
STAGING_BYTES_PER_S = 6.4e9
STAGING_LATENCY_S = 2e-5
STAGING_LATENCY_SHARED_S = 6.6e-5
_BUILTIN: dict[str, Params] = {p.name: p for p in (_SHM, _TCP, _NCCL, _CUDA_IPC, _NCCL_DEVICE)}


def _load_presets() -> dict[str, Params]:
    presets = dict(_BUILTIN)
    path = config.get("collectives.cost-model")  # read once, when this module is imported
    if path:
        presets.update(load(path))
    return presets


def load(path: str) -> dict[str, Params]:
    """Parameter sets from a JSON file written by :func:`save` (a list of :meth:`Params.to_json`)."""
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    if not isinstance(data, list):
        raise ValueError(f"{path}: expected a JSON list of parameter sets, got {type(data).__name__}")
    return {p.name: p for p in (Params.from_json(d) for d in data)}


def save(path: str, params: Iterable[Params]) -> None:
    """Write parameter sets as JSON (read back by :func:`load` and ``interdist.collectives.cost-model``)."""
    with open(path, "w", encoding="utf-8") as f:
        json.dump([p.to_json() for p in params], f, indent=1)
        f.write("\n")


#: The parameter sets by transport name: ``"shm"`` (interdist on this kind of machine: shared
#: memory on a host, Dask comms between hosts), ``"tcp"`` (Dask comms everywhere), ``"nccl"``
#: (GPUs at scale), ``"cuda_ipc"`` (fitted on an H200) and ``"nccl-device"`` (assumed): GPU replicas' device paths.
PRESETS: dict[str, Params] = _load_presets()


def preset(transport: str) -> Params:
    try:
        return PRESETS[transport]
    except KeyError:
        raise ValueError(f"no cost model parameters for transport {transport!r}; known: {', '.join(PRESETS)}") from None


__all__ = [
    "PARAMETERS",
    "PRESETS",
    "STAGING_BYTES_PER_S",
    "STAGING_LATENCY_S",
    "STAGING_LATENCY_SHARED_S",
    "Link",
    "Params",
    "load",
    "preset",
    "save",
]
