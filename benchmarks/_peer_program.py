"""One rank of a peer system doing bench_peers.py's work: run by bench_peers.py, not by hand.

    mpiexec -n N python _peer_program.py mpi
    python _peer_program.py torch RANK N PORT     (one process per rank; gloo over loopback TCP)

Each rank does the same work as interdist's replicas in bench_peers.py, on NumPy arrays (torch
tensors share their memory: ``torch.from_numpy``), and rank 0 prints one JSON line after ``@@``
with the slowest rank's median of each figure (seconds):

- ``sgd``: the SGD step on 1M float32 parameters: ``g = (0.01*w + x)/n``, all-reduce SUM of ``g``
  in place, ``w -= 0.1*g``;
- ``ar_4KB``, ``ar_4MB``: one all-reduce SUM of 1,024 / 1,048,576 float32, in place, back to back;
- ``barrier``: an empty barrier.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np

PARAMS = 1_000_000


def measure(rank: int, n: int, all_reduce: Callable[[np.ndarray], None], barrier: Callable[[], None],
            slowest: Callable[[list[float]], list[float]]) -> dict[str, float] | None:
    """The figures of this rank, then the slowest rank's (a max all-reduce): rank 0 gets them, others None."""

    def chunks(body: Callable[[], None], per: int, repeat: int) -> float:
        body()  # warm up
        times = []
        for _ in range(repeat):
            barrier()
            t0 = time.perf_counter()
            for _ in range(per):
                body()
            times.append((time.perf_counter() - t0) / per)
        return statistics.median(times)

    rng = np.random.default_rng(rank)
    w = rng.normal(size=PARAMS).astype(np.float32)
    x = rng.normal(size=PARAMS).astype(np.float32)
    inv_n, lr, decay = np.float32(1 / n), np.float32(0.1), np.float32(0.01)

    def sgd() -> None:
        g = (decay * w + x) * inv_n
        all_reduce(g)
        w[:] -= lr * g

    small = np.ones(1024, np.float32)
    big = np.ones(PARAMS, np.float32)
    figures = {
        "sgd": chunks(sgd, 20, 9),
        "ar_4KB": chunks(lambda: all_reduce(small), 500, 9),
        "ar_4MB": chunks(lambda: all_reduce(big), 20, 9),
        "barrier": chunks(barrier, 500, 9),
    }
    worst = slowest(list(figures.values()))
    return dict(zip(figures, worst, strict=True)) if rank == 0 else None


def run_mpi() -> None:
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    rank, n = comm.Get_rank(), comm.Get_size()

    def slowest(values: list[float]) -> list[float]:
        out = np.zeros(len(values))
        comm.Allreduce(np.array(values), out, op=MPI.MAX)
        return [float(v) for v in out]

    res = measure(rank, n, lambda a: comm.Allreduce(MPI.IN_PLACE, a, op=MPI.SUM), comm.Barrier, slowest)
    if res is not None:
        res["library"] = MPI.Get_library_version().splitlines()[0].strip()  # type: ignore[assignment]
        print("@@" + json.dumps(res), flush=True)


def run_torch(rank: int, n: int, port: int) -> None:
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)  # one core per rank, as MPI's ranks and interdist's replicas
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=n)
    try:

        def all_reduce(a: np.ndarray) -> None:
            dist.all_reduce(torch.from_numpy(a))  # in place, in the array's own memory

        def slowest(values: list[float]) -> list[float]:
            t = torch.tensor(values, dtype=torch.float64)
            dist.all_reduce(t, op=dist.ReduceOp.MAX)
            return [float(v) for v in t]

        res: dict[str, Any] | None = measure(rank, n, all_reduce, dist.barrier, slowest)
        if res is not None:
            res["library"] = f"torch {torch.__version__} gloo"
            print("@@" + json.dumps(res), flush=True)
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    if sys.argv[1] == "mpi":
        run_mpi()
    else:
        run_torch(int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]))
