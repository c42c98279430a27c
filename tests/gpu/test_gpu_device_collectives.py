"""Device-resident all_reduce between GPU replicas (issue 27): ``cuda_ipc`` on one GPU, ``nccl`` between GPUs.

Needs a GPU (the ``gpu`` fixture skips otherwise). Written without one: none of these has run yet
(docs/gpu.md). What they check:

- ``cuda_ipc`` at 2 and 4 replicas sharing GPU 0: every replica's result has the host path's bits
  (``reduce_arrays`` in rank order on NumPy copies of the same data), SUM and MEAN, odd sizes, a
  0-d array, float16/float32/float64/int32; called straight through the transport (so it runs even
  where ``Collectives.all_reduce`` has no device hook yet) and through ``ctx.all_reduce`` (skipped
  without the hook);
- a replica that fails or is late: the others are released (abort) or time out, and the next step
  works (fresh exchange buffers);
- the ``gpu`` backend picks ``cuda_ipc`` for replicas on one GPU (the cost model);
- ``nccl`` between 2 GPUs (skipped with fewer).
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

import interdist as idist
from interdist._reduction import reduce_arrays
from interdist.client.gpus import local_gpu_cluster
from interdist.collectives.algorithms import Collectives
from interdist.config import settings
from interdist.reduce_op import ReduceOp

HOOKED = "device_all_reduce" in inspect.getsource(Collectives.all_reduce)
NEEDS_HOOK = pytest.mark.skipif(not HOOKED, reason="Collectives.all_reduce has no device hook yet (docs/gpu.md)")


def _data(rank: int) -> list[np.ndarray]:
    rng = np.random.default_rng(rank)
    scale = np.float32(10.0) ** rng.integers(-3, 4, 40_001).astype(np.float32)
    return [
        np.asarray(rng.standard_normal(), np.float32),
        (rng.standard_normal(40_001).astype(np.float32) * scale).astype(np.float32),
        rng.standard_normal((3, 5, 7)),
        rng.integers(-1000, 1000, 11).astype(np.int32),
        rng.standard_normal(1 << 20).astype(np.float16),
    ]


@contextlib.contextmanager
def _strategy(backend: str, gpus: list[int], monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    monkeypatch.setattr(settings, "collectives_backend", backend)
    with local_gpu_cluster(gpus) as cluster:
        s = idist.MirroredStrategy([f"GPU:{i}" for i in range(len(gpus))], cluster=cluster)
        try:
            yield s
        finally:
            s.close()


def _device_all_reduce(op: ReduceOp, direct: bool) -> Any:
    """In a replica: its ``_data`` on the GPU, all-reduced; the results to the host, and the algorithm."""
    import cupy

    ctx = idist.get_replica_context()
    replica = ctx._replica
    arrays = [cupy.asarray(a) for a in _data(int(ctx.replica_id_in_sync_group))]
    if direct:
        out = replica.collective("all_reduce", 0, lambda s, q, w: replica.transport.device_all_reduce(
            replica.collectives, s, q, arrays, op, w))
    else:
        out = ctx.all_reduce(op, arrays)
    assert out is not None, "the device path was not taken"
    assert all(isinstance(o, cupy.ndarray) for o in out)
    cupy.cuda.get_current_stream().synchronize()
    return [cupy.asnumpy(o) for o in out], replica.collectives.last_timing.algorithm


def _check(s: Any, n: int, op: ReduceOp, direct: bool, algorithm: str) -> None:
    got, used = s.run(_device_all_reduce, args=(op, direct))
    assert set(s.experimental_local_results(used)) == {algorithm}
    data = [_data(r) for r in range(n)]
    for i in range(len(data[0])):
        want = reduce_arrays([d[i] for d in data], op)  # the host path's bits
        per_replica = s.experimental_local_results(got[i])
        assert len(per_replica) == n
        for r, v in enumerate(per_replica):
            g = np.asarray(v)
            assert g.dtype == want.dtype and g.shape == want.shape
            assert g.tobytes() == want.tobytes(), f"replica {r}, array {i}, {op}"


@pytest.mark.parametrize("n", [2, 4])
def test_cuda_ipc_is_bit_exact_on_one_gpu(gpu: dict[str, Any], monkeypatch: pytest.MonkeyPatch, n: int) -> None:
    # _check asserts the algorithm each replica used and every result's dtype, shape and bits against the host path's
    with _strategy("cuda_ipc", [0] * n, monkeypatch) as s:
        for op in (ReduceOp.SUM, ReduceOp.MEAN):
            _check(s, n, op, True, "cuda-ipc-all-gather-reduce")
            _check(s, n, op, True, "cuda-ipc-all-gather-reduce")  # again: the other exchange buffer
        if HOOKED:
            _check(s, n, ReduceOp.SUM, False, "cuda-ipc-all-gather-reduce")


@NEEDS_HOOK
def test_the_gpu_backend_takes_cuda_ipc_on_one_gpu(gpu: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    with _strategy("gpu", [0, 0], monkeypatch) as s:
        _check(s, 2, ReduceOp.SUM, False, "cuda-ipc-all-gather-reduce")
        assert {e.backend for e in s.events.events if e.kind == "collective-exited"} == {"gpu"}


def test_cuda_ipc_failure_then_recovery(gpu: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    with _strategy("cuda_ipc", [0, 0], monkeypatch) as s:
        _check(s, 2, ReduceOp.SUM, True, "cuda-ipc-all-gather-reduce")

        def fails(op: ReduceOp) -> Any:
            if idist.get_replica_context().replica_id_in_sync_group == 1:
                raise RuntimeError("boom on the GPU replica")
            return _device_all_reduce(op, True)

        with pytest.raises(RuntimeError, match="boom on the GPU replica"):
            s.run(fails, args=(ReduceOp.SUM,))
        _check(s, 2, ReduceOp.SUM, True, "cuda-ipc-all-gather-reduce")  # fresh buffers, same bits

        def late(op: ReduceOp) -> Any:
            import time

            if idist.get_replica_context().replica_id_in_sync_group == 1:
                time.sleep(3)
                return "late"
            return _device_all_reduce(op, True)

        monkeypatch.setattr(settings, "collective_timeout", 1.0)
        with pytest.raises(Exception, match="timed out after 1 s"):
            s.run(late, args=(ReduceOp.SUM,))
        monkeypatch.setattr(settings, "collective_timeout", 60.0)
        _check(s, 2, ReduceOp.MEAN, True, "cuda-ipc-all-gather-reduce")


def test_nccl_between_two_gpus(gpu: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    if gpu["devices"] < 2:
        pytest.skip(f"needs 2 GPUs (NCCL refuses two ranks on one GPU); this machine has {gpu['devices']}")
    # _check (above) asserts the algorithm used and every result's bits against the host path's
    from interdist.collectives.nccl import NcclTransport

    if not NcclTransport.is_available():
        pytest.skip(f"NCCL is not usable here: {NcclTransport.unavailable_reason()}")
    with _strategy("nccl", [0, 1], monkeypatch) as s:
        for op in (ReduceOp.SUM, ReduceOp.MEAN):
            _check(s, 2, op, True, "nccl-reduce-scatter-all-gather")
