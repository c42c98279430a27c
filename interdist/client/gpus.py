"""GPUs on the notebook's machine: how many there are, and workers that each see one of them.

GPU devices get one worker per GPU, each seeing its GPU first in
``CUDA_VISIBLE_DEVICES`` (so as CUDA device 0): through ``dask_cuda.LocalCUDACluster``
when dask-cuda imports, else through :func:`local_gpu_cluster`
(the Dask config key ``interdist.gpu.cluster``: ``auto|dask-cuda|builtin``, chooses). Every GPU worker is
checked (CuPy imports, CUDA sees a device) before a strategy uses it; a machine
without a usable GPU gets ``NoGPUError`` saying why. See docs/gpu.md.

The pool in ``cluster.py`` leases and reuses the clusters started here, as it does CPU ones.
"""

from __future__ import annotations

import importlib.util
import logging
import os
from typing import Any

from interdist import config
from interdist._gpu import probe_worker
from interdist.client.worker_process import WorkerProcess
from interdist.errors import NoGPUError
from interdist.lab.dashboard_auth import token_cluster_class, token_scheduler


def visible_gpus() -> int:
    """How many GPUs this machine shows (0 without NVIDIA's driver); never raises."""
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env is not None:
        return len([d for d in env.split(",") if d.strip() and d.strip() != "-1"])
    import shutil
    import subprocess

    if shutil.which("nvidia-smi") is None:
        return 0
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=10)
        return sum(1 for line in out.stdout.splitlines() if line.startswith("GPU "))
    except Exception:  # noqa: BLE001 - never raises (documented): no usable nvidia-smi means no GPU
        return 0


def start_cluster(indices: list[int], dashboard_token: str | None = None) -> Any:
    """A local cluster with one worker per GPU device asked for (``GPU:k`` is the k-th GPU this process sees).

    ``NoGPUError`` says why there cannot be one. The workers are not checked yet: see :func:`check_gpu_workers`.
    With ``dashboard_token``, its dashboard answers only requests that show it (``dashboard_auth.py``).
    """
    n = len(indices)
    asked = ", ".join(f"GPU:{i}" for i in indices)
    n_gpus = visible_gpus()
    if n_gpus == 0:
        raise NoGPUError(
            f"{asked} asked for, but this machine shows no NVIDIA GPU (no nvidia-smi, or CUDA_VISIBLE_DEVICES "
            f"hides every GPU: {os.environ.get('CUDA_VISIBLE_DEVICES')!r}). Use CPU devices (e.g. "
            "MirroredStrategy(['CPU:0', 'CPU:1'])), or pass cluster= with GPU workers."
        )
    missing = [i for i in indices if i >= n_gpus]
    if missing:
        raise NoGPUError(
            f"{asked} asked for, but this machine shows {n_gpus} GPU(s) (GPU:0..GPU:{n_gpus - 1}). To run several "
            "replicas on one GPU, pass a cluster whose workers share it: "
            f"cluster=interdist.client.gpus.local_gpu_cluster(gpus={[0] * n})"
        )
    if importlib.util.find_spec("cupy") is None:
        raise NoGPUError(
            "GPU replicas need CuPy: pip install 'interdist[gpu]' (or the cupy-cuda12x / cupy-cuda13x "
            "wheel that matches the NVIDIA driver)"
        )
    physical = _physical_gpu_ids(n_gpus)
    try:
        ids = [physical[i] for i in indices]
        cluster = _start_dask_cuda(ids, dashboard_token) if _use_dask_cuda() else None
        if cluster is None:
            cluster = local_gpu_cluster(list[int | str](ids), dashboard_token=dashboard_token)
    except NoGPUError:
        raise
    except Exception as e:
        raise NoGPUError(
            f"could not start a GPU worker for each of {asked}: no usable GPU here ({type(e).__name__}: {e})"
        ) from e
    return cluster


def _physical_gpu_ids(n_gpus: int) -> list[str]:
    """The ids to put in a worker's ``CUDA_VISIBLE_DEVICES`` for this process's GPU:0, GPU:1, ..."""
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env is not None and env.strip():
        return [d.strip() for d in env.split(",") if d.strip() and d.strip() != "-1"]
    return [str(i) for i in range(n_gpus)]


def _use_dask_cuda() -> bool:
    """``interdist.gpu.cluster``: ``auto`` (dask-cuda when it imports), ``dask-cuda``, or ``builtin``."""
    choice = str(config.get("gpu.cluster") or "auto").strip().lower()
    if choice == "builtin":
        return False
    if choice not in ("auto", "dask-cuda", "dask_cuda"):
        raise ValueError(
            f"interdist.gpu.cluster (INTERDIST_GPU_CLUSTER) must be auto, dask-cuda or builtin, but is {choice!r}"
        )
    try:
        import dask_cuda  # noqa: F401 - optional, GPU only
    except Exception as e:
        if choice != "auto":
            raise NoGPUError(
                f"interdist.gpu.cluster is {choice} but dask-cuda cannot be imported: {type(e).__name__}: {e}"
            ) from e
        logging.getLogger("interdist").info("dask-cuda not usable (%s); starting GPU workers without it", e)
        return False
    return True


def _start_dask_cuda(gpu_ids: list[str], dashboard_token: str | None = None) -> Any:
    from dask_cuda import LocalCUDACluster

    from interdist.dashboard.pages import register_pages

    register_pages()
    return token_cluster_class(LocalCUDACluster)(
        CUDA_VISIBLE_DEVICES=gpu_ids,
        n_workers=len(gpu_ids),
        threads_per_worker=1,
        host="127.0.0.1",
        dashboard_address="127.0.0.1:0",
        silence_logs=logging.ERROR,
        memory_limit=0,
        scheduler_kwargs={"dashboard_token": dashboard_token} if dashboard_token else None,
    )


_WORKER_ENV = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def _rotated(gpu_ids: list[str], i: int) -> str:
    """``CUDA_VISIBLE_DEVICES`` for worker ``i``: its GPU first, then the others (dask-cuda's rule)."""
    mine = gpu_ids[i]
    others = [g for g in dict.fromkeys(gpu_ids) if g != mine]
    return ",".join([mine, *others])


def local_gpu_cluster(
    gpus: list[int | str],
    scheduler_host: str = "127.0.0.1",
    asynchronous: bool = False,
    dashboard_token: str | None = None,
) -> Any:
    """A local Dask cluster with one single-threaded worker process per entry of ``gpus``.

    Its workers are ``WorkerProcess``es, as an embedded CPU cluster's (``worker_process.py``).

    Worker ``i`` sees GPU ``gpus[i]`` as its CUDA device 0 (``CUDA_VISIBLE_DEVICES``
    lists it first), which is where its replica keeps its CuPy arrays. Entries may
    repeat: ``local_gpu_cluster([0, 0])`` gives two workers that share GPU 0, the
    supported way to run a multi-replica GPU strategy on a machine with one GPU
    (replicas then take turns on that GPU; their all-reduces go through CUDA IPC on it: docs/gpu.md)::

        cluster = local_gpu_cluster([0, 0])
        strategy = interdist.MirroredStrategy(["GPU:0", "GPU:1"], cluster=cluster)

    Needs neither dask-cuda nor a GPU in the calling process. The caller closes it
    (``cluster.close()``, or use it as a context manager). Its dashboard is open, as Dask's, unless
    ``dashboard_token`` is given: then it answers only requests that show it (``dashboard_auth.py``;
    embedded GPU clusters get one).
    """
    from distributed import Scheduler, SpecCluster

    from interdist.dashboard.pages import register_pages

    ids = [str(g) for g in gpus]
    if not ids:
        raise ValueError("local_gpu_cluster needs at least one GPU id")
    register_pages()
    workers = {
        i: {
            "cls": WorkerProcess,  # not a Nanny: see worker_process.py (scripts need no guard, Interrupt is safe)
            "options": {
                "nthreads": 1,
                "name": i,
                "host": scheduler_host,
                "memory_limit": 0,
                "silence_logs": logging.ERROR,
                "env": {**_WORKER_ENV, "CUDA_VISIBLE_DEVICES": _rotated(ids, i), "INTERDIST_GPU": ids[i]},
            },
        }
        for i in range(len(ids))
    }
    scheduler: dict[str, Any] = {
        "cls": Scheduler,
        "options": {"host": scheduler_host, "dashboard_address": f"{scheduler_host}:0"},
    }
    if dashboard_token:
        scheduler = {"cls": token_scheduler(), "options": {**scheduler["options"], "dashboard_token": dashboard_token}}
    return SpecCluster(  # type: ignore[no-untyped-call]  # distributed is untyped
        workers=workers,
        scheduler=scheduler,
        asynchronous=asynchronous,
        silence_logs=logging.ERROR,
        name="interdist-gpu",
    )


def check_gpu_workers(client: Any, addresses: list[str]) -> list[dict[str, Any]]:
    """Check that each worker can use a GPU through CuPy; ``NoGPUError`` naming the ones that cannot."""

    try:
        found = client.run(probe_worker, workers=list(addresses))
    except Exception as e:
        raise NoGPUError(f"could not check the GPU of the workers {addresses}: {type(e).__name__}: {e}") from e
    bad = {a: r.get("error") for a, r in found.items() if not r.get("ok")}
    if bad:
        lines = "; ".join(f"{a}: {err}" for a, err in bad.items())
        raise NoGPUError(
            f"GPU devices asked for, but {len(bad)} of {len(addresses)} worker(s) cannot use a GPU: {lines}"
        )
    return [found[a] for a in addresses]
