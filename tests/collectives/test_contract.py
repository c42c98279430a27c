"""The collectives contract on the reference (in-process) transport: closed-form results, timeouts, aborts."""

from __future__ import annotations

import threading
import time
from typing import Any

import numpy as np
import pytest

from interdist.collectives.algorithms import Collectives
from interdist._reduction import reduce_arrays
from interdist.collectives.local import local_group
from interdist.errors import CollectiveAbortedError, CollectiveTimeoutError
from interdist.reduce_op import ReduceOp


def _run_ranks(world: int, body: Any, timeout: float = 5.0) -> list[Any]:
    transports = local_group(world)
    colls = [Collectives(t, lambda: timeout) for t in transports]
    out: list[Any] = [None] * world

    def go(r: int) -> None:
        try:
            out[r] = body(r, colls[r])
        except BaseException as e:  # noqa: BLE001 - returned to the test
            out[r] = e

    threads = [threading.Thread(target=go, args=(r,)) for r in range(world)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    return out


@pytest.mark.parametrize("world", [1, 2, 3, 4])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64])
@pytest.mark.parametrize("op", [ReduceOp.SUM, ReduceOp.MEAN])
def test_all_reduce_closed_form(world: int, dtype: Any, op: ReduceOp) -> None:
    # rank r contributes (r + 1) * [1, 2, 3]: the sum is n(n+1)/2 * [1, 2, 3]
    out = _run_ranks(world, lambda r, c: c.all_reduce(1, 1, [np.array([1, 2, 3], dtype) * (r + 1)], op, "t")[0])
    total = world * (world + 1) // 2 * np.array([1, 2, 3])
    expected = total if op == ReduceOp.SUM else total / world
    for r in range(world):
        assert np.allclose(out[r], expected)
        want_dtype = np.dtype(dtype) if op == ReduceOp.SUM or np.dtype(dtype).kind == "f" else np.float64
        assert out[r].dtype == want_dtype
    # every rank gets bitwise the same result (mirrored copies never drift)
    assert all(out[r].tobytes() == out[0].tobytes() for r in range(world))


def test_broadcast_from_root() -> None:
    out = _run_ranks(3, lambda r, c: c.broadcast(1, 1, {"rank": r}, root=2, what="b"))
    assert out == [{"rank": 2}] * 3


def test_exchange_orders_by_rank() -> None:
    out = _run_ranks(4, lambda r, c: c.exchange(1, 1, r * 10, "x"))
    assert out == [[0, 10, 20, 30]] * 4


def test_timeout_names_the_missing_rank() -> None:
    def body(r: int, c: Collectives) -> Any:
        if r == 1:
            return "absent"
        return c.exchange(1, 1, r, "all_reduce #1 of step 1")

    t0 = time.monotonic()
    out = _run_ranks(2, body, timeout=0.3)
    assert isinstance(out[0], CollectiveTimeoutError)
    assert "[1]" in str(out[0]) and "all_reduce #1 of step 1" in str(out[0])
    assert time.monotonic() - t0 < 5


def test_abort_releases_waiters_at_once() -> None:
    transports = local_group(3)
    colls = [Collectives(t, lambda: 30.0) for t in transports]
    errors: list[BaseException] = []

    def wait(r: int) -> None:
        try:
            colls[r].exchange(7, 1, r, "all_reduce")
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=wait, args=(r,)) for r in (0, 1)]
    for t in threads:
        t.start()
    time.sleep(0.1)
    t0 = time.monotonic()
    transports[2].abort_peers(7, "replica 2 raised ValueError: boom")
    for t in threads:
        t.join(5)
    assert time.monotonic() - t0 < 1.0
    assert len(errors) == 2 and all(isinstance(e, CollectiveAbortedError) for e in errors)
    assert "replica 2 raised ValueError: boom" in str(errors[0])


def test_reduce_arrays_rejects_shape_mismatch() -> None:
    with pytest.raises(ValueError, match="different shapes"):
        reduce_arrays([np.zeros(2), np.zeros(3)], ReduceOp.SUM)


def test_unknown_backend_lists_known() -> None:
    from interdist.collectives.registry import get_backend

    with pytest.raises(ValueError, match="known backends: dask, local, shm"):
        get_backend("carrier-pigeon")
