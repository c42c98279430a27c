"""All-reduce of CuPy arrays between GPU replicas: host-staged against device-resident (issue 27).

    cd benchmarks && python bench_gpu_allreduce.py [--quick]

1. Host-staged (the ``dask`` backend): the median time of one float32 SUM all-reduce inside
   ``strategy.run`` between two replicas sharing GPU 0, CuPy values against NumPy values on the
   same workers (the first results are in tests/gpu/gpu_run.md).
2. Device-resident on one GPU (``cuda_ipc``, 2 and 4 replicas sharing GPU 0): the all-reduce's bus
   bandwidth (NCCL's convention: size / time x 2(n-1)/n) against a device-to-device ``cudaMemcpy``
   of the same size on the same GPU, timed in the same worker.
3. The 16 MB all-reduce: device-resident against host-staged, side by side.
4. ``nccl`` between GPUs 0 and 1, where there are two.
5. Small batches (4-256 KB): device-resident against host-staged (and NumPy on the same workers), the
   cost model's ``gpu`` choice.
6. An SGD step of 1M float32 parameters (``g = (0.01*w + x)/n``, ``apply_gradients``) on 2 replicas
   sharing GPU 0, backend by backend (``dask`` stages through the host, ``cuda_ipc``, ``gpu``).

Every time is the slowest replica's, the GPU synchronized before and after. Without CuPy or a GPU
it says so and exits 0 (``make bench`` runs it on CPU machines too). Where ``Collectives.all_reduce``
has no device hook yet, the device paths are called through the replica's transport directly (the
output says which).
"""

from __future__ import annotations

import contextlib
import inspect
import statistics
import sys
import time
from collections.abc import Iterator
from typing import Any

import numpy as np

import interdist as idist
from interdist.client.gpus import local_gpu_cluster
from interdist.collectives.algorithms import Collectives
from interdist.config import settings
from interdist.reduce_op import ReduceOp

KB, MB = 1 << 10, 1 << 20
HOOKED = "device_all_reduce" in inspect.getsource(Collectives.all_reduce)


def no_gpu_reason() -> str | None:
    """Why this machine cannot run the benchmark, or None."""
    try:
        import cupy

        count = int(cupy.cuda.runtime.getDeviceCount())
    except Exception as e:  # ImportError, or CUDA libraries/driver that fail to load
        return f"CuPy/CUDA not usable here ({type(e).__name__}: {e})"
    return None if count > 0 else "CUDA sees no GPU"


def _step(kind: str, n: int, device: bool, direct: bool) -> Any:
    """In a replica: seconds of one SUM all-reduce of ``n`` float32 ones (CuPy or NumPy), and of its parts
    (waiting for the peers' hellos or data, the rest) as the collective timed them."""
    import cupy

    xp = cupy if kind == "cupy" else np
    x = xp.ones(n, dtype=xp.float32)
    ctx = idist.get_replica_context()
    replica = ctx._replica
    cupy.cuda.Device().synchronize()
    t0 = time.perf_counter()
    if device and direct:
        y = replica.collective(
            "all_reduce",
            x.nbytes,
            lambda s, q, w: replica.transport.device_all_reduce(replica.collectives, s, q, [x], ReduceOp.SUM, w),
        )[0]
    else:
        y = ctx.all_reduce("sum", x)
    cupy.cuda.Device().synchronize()
    dt = time.perf_counter() - t0
    world = int(ctx.num_replicas_in_sync)
    assert float(y[0]) == world and float(y[-1]) == world
    if device:
        used = replica.collectives.last_timing.algorithm
        assert used.startswith(("cuda-ipc", "nccl")), f"the device path was not taken ({used})"
    timing = replica.collectives.last_timing
    return np.array([dt, timing.wait_s, timing.transfer_s])


def _memcpy(nbytes: int) -> float:
    """In a replica: seconds of one device-to-device copy of ``nbytes`` on its GPU (CUDA events)."""
    import cupy

    src = cupy.ones(nbytes // 4, dtype=cupy.float32)
    dst = cupy.empty_like(src)
    times = []
    for _ in range(7):
        start, end = cupy.cuda.Event(), cupy.cuda.Event()
        start.record()
        dst.data.copy_from_device_async(src.data, src.nbytes)
        end.record()
        end.synchronize()
        times.append(cupy.cuda.get_elapsed_time(start, end) / 1e3)
    return statistics.median(times[2:])


def _median(s: Any, fn: Any, *args: Any, runs: int = 7) -> float:
    return float(_medians(s, fn, *args, runs=runs)[0])


def _medians(s: Any, fn: Any, *args: Any, runs: int = 7) -> np.ndarray:
    """The medians (after 2 warm-up runs) of the slowest replica's figures (``fn`` returns one or several)."""
    rows = []
    for _ in range(runs):
        out = s.run(fn, args=args)
        per = [np.atleast_1d(np.asarray(v, dtype=np.float64)) for v in s.experimental_local_results(out)]
        rows.append(per[int(np.argmax([p[0] for p in per]))])
    return np.median(np.stack(rows[2:]), axis=0)


@contextlib.contextmanager
def _strategy(backend: str, gpus: list[int]) -> Iterator[Any]:
    settings.collectives_backend = backend
    with (
        local_gpu_cluster(gpus) as cluster,
        idist.MirroredStrategy([f"GPU:{i}" for i in range(len(gpus))], cluster=cluster) as s,
    ):
        yield s


def host_staged(sizes: list[int]) -> dict[int, float]:
    print("## host-staged (backend 'dask'), 2 replicas sharing GPU 0", flush=True)
    out = {}
    with _strategy("dask", [0, 0]) as s:
        for mb in sizes:
            n = mb * MB // 4
            row = [f"{mb:>4} MB"]
            for kind in ("cupy", "numpy"):
                med = float(_medians(s, _step, kind, n, False, False)[0])
                if kind == "cupy":
                    out[mb] = med
                row.append(f"{kind} {med * 1e3:8.2f} ms ({mb / 1024 / med:6.2f} GB/s)")
            print(" | ".join(row), flush=True)
    return out


def device_resident(backend: str, gpus: list[int], sizes: list[int]) -> dict[int, float]:
    n = len(gpus)
    how = "ctx.all_reduce" if HOOKED else "the transport's device_all_reduce (no hook in Collectives yet)"
    print(f"## device-resident (backend {backend!r}), {n} replicas on GPUs {gpus}, through {how}", flush=True)
    out = {}
    with _strategy(backend, gpus) as s:
        for mb in sizes:
            t, wait, work = _medians(s, _step, "cupy", mb * MB // 4, True, not HOOKED)
            copy = _median(s, _memcpy, mb * MB, runs=3)
            busbw = mb * MB / t * 2 * (n - 1) / n / 1e9
            copy_bw = mb * MB / copy / 1e9
            out[mb] = t
            print(
                f"{mb:>4} MB | all-reduce {t * 1e3:8.3f} ms (hellos {wait * 1e3:6.3f}, device {work * 1e3:6.3f}), "
                f"bus bandwidth {busbw:8.1f} GB/s | memcpy D2D {copy * 1e3:7.3f} ms, {copy_bw:8.1f} GB/s | "
                f"bus/memcpy {busbw / copy_bw:5.2f}",
                flush=True,
            )
    return out


def _algorithm() -> str:
    return str(idist.get_replica_context()._replica.collectives.last_timing.algorithm)


def small_batches(sizes: list[int], runs: int = 15) -> None:
    """Small all-reduces on 2 replicas sharing GPU 0, backend by backend: CuPy values (and, on ``dask``, NumPy
    values on the same workers, the host path alone). Every size is warmed up first (a buffer's first IPC
    opening, CuPy's first kernels), then each is timed ``runs`` times."""
    print(f"## small all-reduces, 2 replicas sharing GPU 0 (median ms of {runs - 2}; the path each took)", flush=True)
    for backend in ("dask", "cuda_ipc", "gpu"):
        with _strategy(backend, [0, 0]) as s:
            for kind in ("cupy", "numpy") if backend == "dask" else ("cupy",):
                for nbytes in sizes:
                    _median(s, _step, kind, nbytes // 4, False, False, runs=3)
                row = [f"{backend:>8} {kind:>5}"]
                for nbytes in sizes:
                    t = _median(s, _step, kind, nbytes // 4, False, False, runs=runs)
                    used = s.experimental_local_results(s.run(_algorithm))[0]
                    row.append(f"{nbytes // KB:>3} KB {t * 1e3:7.3f} ms ({used})")
                print(" | ".join(row), flush=True)


def sgd_steps(n: int = 1 << 20) -> dict[str, float]:
    """The same SGD step of ``n`` float32 parameters on 2 replicas sharing GPU 0, backend by backend."""
    print(f"## SGD step, {n} float32 parameters, 2 replicas sharing GPU 0 (median ms, slowest replica)", flush=True)
    out = {}
    for backend in ("dask", "cuda_ipc", "gpu"):
        with _strategy(backend, [0, 0]) as s:
            with s.scope():
                w = idist.Variable(np.zeros(n, np.float32))
            opt = idist.optimizers.SGD(0.1)

            def step(w: Any = w, opt: Any = opt) -> float:
                """Seconds of one step in this replica, the GPU synchronized around it."""
                import cupy

                ctx = idist.get_replica_context()
                store = ctx._replica.store
                if "bench-x" not in store:
                    store["bench-x"] = cupy.full(n, int(ctx.replica_id_in_sync_group) + 1, cupy.float32)
                x = store["bench-x"]
                cupy.cuda.Device().synchronize()
                t0 = time.perf_counter()
                g = (cupy.float32(0.01) * w.read_value() + x) / cupy.float32(ctx.num_replicas_in_sync)
                opt.apply_gradients([(g, w)])
                cupy.cuda.Device().synchronize()
                return time.perf_counter() - t0

            t = _median(s, step, runs=9)
            out[backend] = t
            w0 = float(np.asarray(s.experimental_local_results(w)[0])[0])
            print(f"{backend:>8} | {t * 1e3:8.3f} ms | w[0] after 9 steps: {w0:.6g}", flush=True)
    return out


def main() -> None:
    reason = no_gpu_reason()
    if reason is not None:
        print(f"bench_gpu_allreduce: skipped, needs CuPy and an NVIDIA GPU: {reason}", flush=True)
        return
    import cupy

    quick = "--quick" in sys.argv
    before = settings.collectives_backend
    try:
        staged = host_staged([16] if quick else [1, 16, 64])
        sizes = [16] if quick else [1, 16, 64, 256]
        ipc2 = device_resident("cuda_ipc", [0, 0], sizes)
        if not quick:
            device_resident("cuda_ipc", [0, 0, 0, 0], sizes)
        print(
            f"## 16 MB all-reduce, 2 replicas on one GPU: device-resident {ipc2[16] * 1e3:.3f} ms against "
            f"host-staged {staged[16] * 1e3:.2f} ms ({staged[16] / ipc2[16]:.1f}x)",
            flush=True,
        )
        small_batches([4 * KB, 16 * KB, 64 * KB, 256 * KB])
        steps = sgd_steps()
        print(f"## SGD step: cuda_ipc {steps['dask'] / steps['cuda_ipc']:.1f}x faster than host-staged", flush=True)
        if int(cupy.cuda.runtime.getDeviceCount()) >= 2:
            device_resident("nccl", [0, 1], sizes)
        else:
            print("## nccl: skipped, needs 2 GPUs (NCCL refuses two ranks on one GPU)", flush=True)
    finally:
        settings.collectives_backend = before


if __name__ == "__main__":
    main()
