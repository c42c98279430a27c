"""The collectives contract, run against every available backend of the registry.

One grid (backend x world size x dtype x op) with closed-form results, plus broadcast,
exchange order, bitwise-equal results on every rank under every algorithm, timeout and
abort. ``local`` and ``shm`` run their ranks as threads of this process; ``dask`` runs
them as replicas on a real 4-worker cluster, inside ``strategy.run`` (``_harness.py``).
A registered backend that is not available here is skipped with its reason; one that is
available but has no harness fails.
"""

from __future__ import annotations

import glob
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import cloudpickle
import numpy as np
import pytest

import interdist as idist
from interdist import events
from interdist._reduction import reduce_arrays
from interdist.collectives import algorithms
from interdist.collectives.base import BackendUnavailableError, Transport
from interdist.collectives.registry import available_backends, backend_names, get_backend, load_backend
from interdist.collectives.shared_memory import PREFIX
from interdist.config import settings
from interdist.errors import CollectiveAbortedError, CollectiveTimeoutError
from interdist.reduce_op import ReduceOp

from ._harness import IN_PROCESS, Ops, ReplicaGroup, ThreadGroup

cloudpickle.register_pickle_by_value(sys.modules[__name__])  # test bodies run on the Dask workers

WORLDS = [1, 2, 3, 4]
BASE = np.array([1, 2, 3])
TILES = 3000  # the large array: 9000 int64 (72 KB), out of band (>= base.INBAND_MAX): shared memory on shm and dask


class _DaskGroups:
    """Replica groups of 1..4 replicas on the workers of one 4-worker cluster, made on first use."""

    def __init__(self) -> None:
        self._all: Any = None
        self._groups: dict[int, ReplicaGroup] = {}

    def client(self) -> Any:
        if self._all is None:
            self._all = idist.MirroredStrategy([f"CPU:{i}" for i in range(max(WORLDS))])
        return self._all._lease.client

    def get(self, world: int) -> ReplicaGroup:
        if world not in self._groups:
            self._groups[world] = ReplicaGroup(self.client(), world)
        return self._groups[world]

    def close(self) -> None:
        for g in self._groups.values():
            g.close()
        if self._all is not None:
            self._all.close()


@pytest.fixture(scope="module")
def dask_groups() -> Iterator[_DaskGroups]:
    groups = _DaskGroups()
    yield groups
    groups.close()


@pytest.fixture(scope="module", params=backend_names())
def backend(request: pytest.FixtureRequest) -> str:
    name = str(request.param)
    cls = load_backend(name)
    if not cls.is_available():
        pytest.skip(f"collectives backend {name!r} is not available: {cls.unavailable_reason()}")
    if name not in IN_PROCESS and name != "dask":
        pytest.fail(f"collectives backend {name!r} is available but has no contract harness (tests/collectives)")
    return name


def _segments() -> set[str]:
    # (not the probes any process makes for a moment to see whether /dev/shm works)
    return {p for p in glob.glob(f"/dev/shm/{PREFIX}*") if "-probe-" not in p}


@pytest.fixture
def make_group(backend: str, dask_groups: _DaskGroups) -> Iterator[Callable[[int], Any]]:
    """``make_group(world)``: a group of ``world`` ranks over ``backend`` (dask groups are shared)."""
    made: list[ThreadGroup] = []
    before = _segments()

    def make(world: int) -> Any:
        if backend == "dask":
            return dask_groups.get(world)
        group = ThreadGroup(backend, world)
        made.append(group)
        return group

    yield make
    for g in made:
        g.close()
    if made:
        assert _segments() - before == set(), "a shared-memory segment outlived its group"


def _ok(out: list[Any]) -> list[Any]:
    for r, o in enumerate(out):
        assert not isinstance(o, BaseException), f"rank {r}: {o!r}"
    return out


# -- all_reduce: the grid -------------------------------------------------------------------------
@pytest.mark.parametrize("world", WORLDS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64])
@pytest.mark.parametrize("op", [ReduceOp.SUM, ReduceOp.MEAN])
def test_all_reduce_closed_form(make_group: Callable[[int], Any], world: int, dtype: Any, op: ReduceOp) -> None:
    # rank r contributes (r + 1) * [1, 2, 3] (and the same tiled, large): the sum is n(n+1)/2 * [1, 2, 3]
    def body(ops: Ops) -> list[np.ndarray]:
        small = (BASE * (ops.rank + 1)).astype(dtype)
        return ops.all_reduce([small, np.tile(small, TILES)], op)

    out = _ok(make_group(world).run(body))
    total = world * (world + 1) // 2 * BASE
    expected = total if op == ReduceOp.SUM else total / world
    # MEAN as TF: floats keep their dtype, integers become float64
    want_dtype = np.dtype(dtype) if op == ReduceOp.SUM or np.dtype(dtype).kind == "f" else np.dtype(np.float64)
    for r in range(world):
        small, large = out[r]
        assert small.dtype == want_dtype and large.dtype == want_dtype
        assert small.shape == (3,) and large.shape == (3 * TILES,)
        np.testing.assert_allclose(small, expected, rtol=1e-6)
        np.testing.assert_allclose(large, np.tile(expected, TILES), rtol=1e-6)
        # every rank gets bitwise the same result (mirrored copies never drift)
        assert small.tobytes() == out[0][0].tobytes() and large.tobytes() == out[0][1].tobytes()


def _rounding_data(rank: int) -> list[np.ndarray]:
    """Values whose sum depends on the order of additions; odd sizes (not divisible by the world size)."""
    rng = np.random.default_rng(rank)
    scale = np.float32(10.0) ** rng.integers(-3, 4, 40_001).astype(np.float32)
    return [
        rng.standard_normal(1).astype(np.float32),
        (rng.standard_normal(40_001).astype(np.float32) * scale).astype(np.float32),
        rng.standard_normal((3, 5, 7)),
    ]


@pytest.mark.parametrize("world", [2, 3, 4])
@pytest.mark.parametrize("algorithm", [algorithms.AUTO, algorithms.AG, algorithms.RS, algorithms.RB])
def test_same_bits_on_every_rank_in_every_algorithm(
    make_group: Callable[[int], Any], world: int, algorithm: str
) -> None:
    def body(ops: Ops) -> Any:
        data = _rounding_data(ops.rank)
        return ops.all_reduce(data, ReduceOp.SUM, algorithm), ops.all_reduce(data, ReduceOp.MEAN, algorithm)

    out = _ok(make_group(world).run(body))
    data = [_rounding_data(r) for r in range(world)]
    for k, op in enumerate((ReduceOp.SUM, ReduceOp.MEAN)):
        for i in range(len(data[0])):
            want = reduce_arrays([d[i] for d in data], op)  # rank-order additions
            for r in range(world):
                got = out[r][k][i]
                assert got.dtype == want.dtype and got.shape == want.shape
                assert got.tobytes() == want.tobytes(), f"rank {r}, array {i}, {op}"


# -- broadcast, exchange ----------------------------------------------------------------------
@pytest.mark.parametrize("world", WORLDS)
def test_broadcast_from_root(make_group: Callable[[int], Any], world: int) -> None:
    root = world - 1
    def body(ops: Ops) -> Any:
        return ops.broadcast({"rank": ops.rank, "data": np.full(20_000, ops.rank * 1.0)}, root)

    out = _ok(make_group(world).run(body))
    for o in out:
        assert o["rank"] == root and o["data"].shape == (20_000,) and np.all(o["data"] == root)
        assert o["data"].flags.writeable  # a private copy, even where it came through shared memory


@pytest.mark.parametrize("world", WORLDS)
def test_exchange_orders_by_rank(make_group: Callable[[int], Any], world: int) -> None:
    out = _ok(make_group(world).run(lambda ops: ops.exchange((ops.rank * 10, np.full(5_000, ops.rank)))))
    for o in out:
        assert [v for v, _ in o] == [r * 10 for r in range(world)]
        assert [int(a[0]) for _, a in o] == list(range(world))


# -- failures -------------------------------------------------------------------------------
def test_timeout_names_the_missing_rank(make_group: Callable[[int], Any]) -> None:
    def body(ops: Ops) -> Any:
        if ops.rank == 1:
            return "absent"
        t0 = time.monotonic()
        try:
            ops.all_reduce([np.ones(50_000)], ReduceOp.SUM)
        except CollectiveTimeoutError as e:
            return e, time.monotonic() - t0
        return "no timeout"

    out = make_group(2).run(body, timeout=0.3)
    assert out[1] == "absent"
    error, waited = out[0]
    assert isinstance(error, CollectiveTimeoutError)
    assert "[1]" in str(error) and "all_reduce #1 of step" in str(error)
    assert 0.25 < waited < 3


def test_abort_releases_waiters_at_once(make_group: Callable[[int], Any]) -> None:
    def body(ops: Ops) -> Any:
        if ops.rank == 2:
            time.sleep(0.2)
            ops.abort_peers("replica 2 raised ValueError: boom")
            return "aborted"
        t0 = time.monotonic()
        try:  # large: waits with segments pending on shm
            ops.all_reduce([np.ones(50_000) * ops.rank], ReduceOp.SUM)
        except CollectiveAbortedError as e:
            return e, time.monotonic() - t0
        return "not aborted"

    group = make_group(3)
    out = group.run(body, timeout=30.0)
    assert out[2] == "aborted"
    for error, waited in out[:2]:
        assert isinstance(error, CollectiveAbortedError) and "replica 2 raised ValueError: boom" in str(error)
        assert waited < 0.2 + 1.5  # released by the abort, not by the 30 s timeout
    # the group stays usable after the aborted step
    again = _ok(group.run(lambda ops: ops.all_reduce([np.ones(50_000) * ops.rank], ReduceOp.SUM)[0]))
    assert all(np.all(o == 3.0) for o in again)


# -- the registry ---------------------------------------------------------------------------
def test_every_registered_backend_is_reachable() -> None:
    assert {"local", "shm", "dask", "nccl"} <= set(backend_names())
    for name in backend_names():
        cls = load_backend(name)
        assert issubclass(cls, Transport) and cls.name == name
        if cls.is_available():
            assert cls.unavailable_reason() == "" and get_backend(name) is cls
        else:
            reason = cls.unavailable_reason()
            assert reason
            with pytest.raises(RuntimeError) as info:
                get_backend(name)
            assert reason in str(info.value) and repr(name) in str(info.value)
    assert available_backends() == [n for n in backend_names() if load_backend(n).is_available()]
    assert {"local", "shm", "dask"} <= set(available_backends())
    try:
        import cupy  # noqa: F401
    except ImportError:  # without CuPy the device backends are known but cannot run
        assert not {"nccl", "cuda_ipc", "gpu"} & set(available_backends())


def test_unknown_backend_lists_known() -> None:
    known = "unknown collectives backend 'carrier-pigeon'; known backends: cuda_ipc, dask, gpu, local, nccl, shm"
    with pytest.raises(ValueError, match=known):
        get_backend("carrier-pigeon")


def test_the_device_backends_say_what_they_need_where_they_cannot_run() -> None:
    for name in ("nccl", "cuda_ipc", "gpu"):
        cls = load_backend(name)
        if cls.is_available():
            continue  # a GPU machine with CuPy: tests/gpu covers them
        why = f"collectives backend '{name}' is not available here: "
        with pytest.raises(BackendUnavailableError, match=why) as info:
            get_backend(name)
        try:
            import cupy  # noqa: F401
        except ImportError:
            assert "pip install 'interdist[gpu]'" in str(info.value)


def test_reduce_arrays_rejects_shape_mismatch() -> None:
    with pytest.raises(ValueError, match="different shapes"):
        reduce_arrays([np.zeros(2), np.zeros(3)], ReduceOp.SUM)


# -- the worker takes its transport from the registry ----------------------------------------
def _backends_used(s: Any) -> set[str]:
    return {e.backend for e in s.events.events if isinstance(e, events.CollectiveExited) and e.group == s._group_id}


def test_workers_use_the_configured_backend(dask_groups: _DaskGroups, monkeypatch: pytest.MonkeyPatch) -> None:
    client = dask_groups.client()
    two = ReplicaGroup(client, 2)
    try:
        _ok(two.run(lambda ops: ops.all_reduce([np.ones(3)], ReduceOp.SUM)))
        assert _backends_used(two.strategy) == {"dask"}  # the default
    finally:
        two.close()
    monkeypatch.setattr(settings, "collectives_backend", "local")
    one = ReplicaGroup(client, 1)  # 'local' serves a group of one replica on a worker
    try:
        assert _ok(one.run(lambda ops: ops.all_reduce([np.ones(3)], ReduceOp.SUM)[0].tolist())) == [[1.0, 1.0, 1.0]]
        assert _backends_used(one.strategy) == {"local"}
    finally:
        one.close()
    with pytest.raises(ValueError, match="'local' collectives backend connects ranks inside one process"):
        ReplicaGroup(client, 2)
    monkeypatch.setattr(settings, "collectives_backend", "nccl")
    if not load_backend("nccl").is_available():
        with pytest.raises(BackendUnavailableError, match="collectives backend 'nccl' is not available here: "):
            idist.MirroredStrategy(["CPU:0", "CPU:1"], cluster=client)  # refused before any worker is taken
    monkeypatch.setattr(settings, "collectives_backend", "carrier-pigeon")
    with pytest.raises(ValueError, match="known backends: cuda_ipc, dask, gpu, local, nccl, shm"):
        idist.MirroredStrategy(["CPU:0", "CPU:1"], cluster=client)
