"""Two GPU replicas on one GPU: two worker processes that share GPU 0 (``local_gpu_cluster([0, 0])``).

Exact values of the cross-replica paths on CuPy values: all_reduce, all_gather,
merge_call, Strategy.reduce / gather, mirrored and sync-on-read variables.
"""

from __future__ import annotations

import collections
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

import interdist as idist
from interdist.client.gpus import local_gpu_cluster

DEV = ["/job:localhost/replica:0/task:0/device:GPU:0", "/job:localhost/replica:0/task:0/device:GPU:1"]


@pytest.fixture(scope="module")
def s2(gpu: dict[str, Any]) -> Iterator[idist.MirroredStrategy]:
    with local_gpu_cluster([0, 0]) as cluster:
        s = idist.MirroredStrategy(["GPU:0", "GPU:1"], cluster=cluster)
        yield s
        s.close()


def _rank() -> int:
    return int(idist.get_replica_context().replica_id_in_sync_group)


def _mod(x: Any) -> str:
    return type(x).__module__.split(".")[0]


def test_both_workers_use_gpu0(s2: idist.MirroredStrategy, gpu: dict[str, Any]) -> None:
    def where() -> Any:
        import os

        import cupy

        return cupy.cuda.Device(0).pci_bus_id, os.environ.get("CUDA_VISIBLE_DEVICES"), os.getpid()

    found = s2._lease.client.run(where, workers=s2._lease.addresses)
    assert {v[0] for v in found.values()} == {gpu["pci_bus_id"]}
    assert {v[1] for v in found.values()} == {"0"}
    assert len({v[2] for v in found.values()}) == 2  # two processes
    assert list(s2.extended.worker_devices) == DEV


def test_run_results_are_per_replica_gpu_values(s2: idist.MirroredStrategy) -> None:
    def fn(x: Any) -> Any:
        import cupy

        r = _rank()
        return x + r, cupy.full(1 << 18, r, dtype=cupy.float32), _mod(x)

    small, big, module = s2.run(fn, args=(np.arange(3, dtype=np.float32),))
    assert module == "cupy"
    for r, (a, b) in enumerate(zip(s2.experimental_local_results(small), s2.experimental_local_results(big))):
        assert a.device == b.device == DEV[r]
        np.testing.assert_array_equal(np.asarray(a), np.arange(3, dtype=np.float32) + r)
        np.testing.assert_array_equal(b.numpy(), np.full(1 << 18, r, np.float32))


def test_all_reduce_sum_and_mean_are_exact(s2: idist.MirroredStrategy) -> None:
    def fn() -> Any:
        import cupy

        ctx = idist.get_replica_context()
        r = _rank()
        x = cupy.arange(1000, dtype=cupy.float32) * (r + 1)
        big = cupy.full(1 << 20, r + 1, dtype=cupy.float32)  # 4 MB: out of band through shared memory
        ints = cupy.arange(4, dtype=cupy.int32) + r
        s, m, b, i = ctx.all_reduce("sum", x), ctx.all_reduce("mean", x), ctx.all_reduce("sum", big), \
            ctx.all_reduce("mean", ints)
        nested = ctx.all_reduce("sum", {"a": x[:3], "b": (cupy.float32(r),)})
        return s, m, b, i, nested, [_mod(v) for v in (s, m, b, i, nested["a"])]

    s, m, b, i, nested, modules = s2.run(fn)
    assert modules == ["cupy"] * 5
    base = np.arange(1000, dtype=np.float32)
    for r in range(2):
        np.testing.assert_array_equal(np.asarray(s2.experimental_local_results(s)[r]), base * 3)
        np.testing.assert_array_equal(np.asarray(s2.experimental_local_results(m)[r]), base * 1.5)
        np.testing.assert_array_equal(np.asarray(s2.experimental_local_results(b)[r]), np.full(1 << 20, 3, np.float32))
        got_i = np.asarray(s2.experimental_local_results(i)[r])
        assert got_i.dtype == np.float64
        np.testing.assert_array_equal(got_i, np.arange(4) + 0.5)
        np.testing.assert_array_equal(np.asarray(s2.experimental_local_results(nested["a"])[r]), base[:3] * 3)
        assert float(np.asarray(s2.experimental_local_results(nested["b"][0])[r])) == 1.0


def test_all_gather_and_merge_call(s2: idist.MirroredStrategy) -> None:
    def merge_fn(strategy: Any, x: Any) -> Any:
        return strategy.reduce("SUM", x, axis=None)

    def fn() -> Any:
        import cupy

        ctx = idist.get_replica_context()
        r = _rank()
        g = ctx.all_gather(cupy.full((2,), r, dtype=cupy.float32), axis=0)
        merged = ctx.merge_call(merge_fn, args=(cupy.arange(3, dtype=cupy.float32) + 10 * r,))
        return g, merged, _mod(g), _mod(merged)

    g, merged, mg, mm = s2.run(fn)
    assert (mg, mm) == ("cupy", "cupy")
    for r in range(2):
        np.testing.assert_array_equal(np.asarray(s2.experimental_local_results(g)[r]), [0, 0, 1, 1])
    np.testing.assert_array_equal(np.asarray(s2.experimental_local_results(merged)[0]),
                                  np.arange(3, dtype=np.float32) * 2 + 10)


@pytest.mark.parametrize("n", [3, 1000])  # small values come back inline; large ones are reduced on the workers
def test_strategy_reduce_and_gather(s2: idist.MirroredStrategy, n: int) -> None:
    def fn() -> Any:
        import cupy

        return cupy.arange(2 * n, dtype=cupy.float32).reshape(n, 2) + 100 * _rank()

    pr = s2.run(fn)
    one = np.arange(2 * n, dtype=np.float32).reshape(n, 2)
    total = s2.reduce("SUM", pr, axis=None)
    assert isinstance(total, idist.Tensor) and total.device.endswith("CPU:0")
    np.testing.assert_array_equal(np.asarray(total), one * 2 + 100)
    np.testing.assert_array_equal(np.asarray(s2.reduce("MEAN", pr, axis=None)), one + 50)
    np.testing.assert_array_equal(np.asarray(s2.reduce("MEAN", pr, axis=0)),
                                  np.concatenate([one, one + 100]).mean(axis=0, dtype=np.float32))
    np.testing.assert_array_equal(np.asarray(s2.gather(pr, axis=0)), np.concatenate([one, one + 100]))


def test_mirrored_and_sync_on_read_variables(s2: idist.MirroredStrategy) -> None:
    with s2.scope():
        w = idist.Variable(np.zeros(4, np.float32), name="w", aggregation=idist.VariableAggregation.MEAN)
        first = idist.Variable(np.zeros(2, np.float32), name="first",
                               aggregation=idist.VariableAggregation.ONLY_FIRST_REPLICA)
        seen = idist.Variable(np.float32(0.0), name="seen", synchronization=idist.VariableSynchronization.ON_READ,
                              aggregation=idist.VariableAggregation.SUM)

    def step(x: Any) -> Any:
        import cupy

        r = _rank()
        w.assign_add(x * (r + 1))  # MEAN across replicas: x * 1.5 on both
        first.assign(cupy.full(2, 7 + r, dtype=cupy.float32))  # replica 0's value on both
        seen.assign_add(np.float32(r + 1))  # each replica its own
        return [_mod(v.raw) for v in (w, first, seen)], w.read_value() * 2

    modules, doubled = s2.run(step, args=(np.ones(4, np.float32),))
    assert modules == ["cupy"] * 3
    for r in range(2):
        np.testing.assert_array_equal(np.asarray(s2.experimental_local_results(doubled)[r]), np.full(4, 3, np.float32))
    np.testing.assert_array_equal(np.asarray(w), np.full(4, 1.5, np.float32))
    assert [np.asarray(c).tolist() for c in w.values] == [[1.5] * 4, [1.5] * 4]
    np.testing.assert_array_equal(np.asarray(first), [7, 7])
    assert float(np.asarray(seen)) == 3.0  # SUM on read
    w.assign(np.arange(4, dtype=np.float32))  # cross-replica, from the notebook
    np.testing.assert_array_equal(np.asarray(w), np.arange(4, dtype=np.float32))
    np.testing.assert_array_equal(np.asarray(s2.reduce("MEAN", w, axis=None)), np.arange(4, dtype=np.float32))
    assert float(np.asarray(s2.reduce("SUM", w, axis=0))) == 12.0  # each copy summed, then added
    assert s2.run(lambda: _mod(w.raw)) == "cupy"


def test_inputs_from_the_notebook_move_to_the_device(s2: idist.MirroredStrategy) -> None:
    vals = s2.experimental_distribute_values_from_function(
        lambda ctx: np.full(2, ctx.replica_id_in_sync_group, np.float32))
    it = iter(s2.experimental_distribute_dataset(idist.data.Dataset.from_tensor_slices(
        np.arange(8, dtype=np.float32)).batch(4)))

    def fn(v: Any, batch: Any, scalar: Any) -> Any:
        return _mod(v), _mod(batch), type(scalar).__name__, v.sum() + batch.sum()

    mv, mb, ms, total = s2.run(fn, args=(vals, next(it), np.float32(2)))
    assert (mv, mb, ms) == ("cupy", "cupy", "float32")  # arrays moved; NumPy scalars stay host values
    assert [float(np.asarray(t)) for t in s2.experimental_local_results(total)] == [0 + 1.0, 2 + 5.0]


def test_replica_failure_on_gpu_is_reported(s2: idist.MirroredStrategy) -> None:
    def fn() -> Any:
        import cupy

        if _rank() == 1:
            raise RuntimeError("boom on the GPU replica")
        return idist.get_replica_context().all_reduce("sum", cupy.ones(3, dtype=cupy.float32))

    with pytest.raises(RuntimeError, match="boom on the GPU replica") as info:
        s2.run(fn)
    assert type(info.value) is RuntimeError  # the replica's own exception, not a ReplicaError/abort wrapper
    out = s2.run(lambda: idist.get_replica_context().all_reduce("sum", __import__("cupy").ones(2)))
    assert [np.asarray(v).tolist() for v in s2.experimental_local_results(out)] == [[2.0, 2.0]] * 2


def _through_merge_call(make: Any) -> Any:
    """The optimizer ``make()`` gives, with a ``_distributed_apply`` of its own: ``apply_gradients`` then takes
    the ``merge_call`` path (skeleton exchange, ``batch_reduce_to``), not the in-replica all-reduce."""

    def made() -> Any:
        opt = make()

        class Merged(type(opt)):  # type: ignore[misc]
            def _distributed_apply(self, *args: Any, **kwargs: Any) -> None:
                super()._distributed_apply(*args, **kwargs)

        opt.__class__ = Merged
        return opt

    return made


_SGD_MOMENTUM = lambda: idist.optimizers.SGD(0.1, momentum=0.9)
_ADAM = lambda: idist.optimizers.Adam(0.01)
_SGD = lambda: idist.optimizers.SGD(0.1)


@pytest.mark.parametrize(
    ("make_opt", "path"),
    [(_SGD_MOMENTUM, "all_reduce"), (_ADAM, "all_reduce"), (_SGD, "all_reduce"),
     (_through_merge_call(_SGD_MOMENTUM), "merge_call"), (_through_merge_call(_ADAM), "merge_call")],
    ids=["sgd_momentum", "adam", "sgd", "sgd_momentum-merge_call", "adam-merge_call"],
)
def test_optimizer_steps_on_gpu_match_numpy(s2: idist.MirroredStrategy, make_opt: Any, path: str) -> None:
    """apply_gradients on CuPy gradients: what the same optimizer gives on two CPU replicas, through either path
    (the in-replica all-reduce of the gradients, or a merge_call), as the collectives the steps ran show."""
    x = np.linspace(-1, 1, 32, dtype=np.float32).reshape(16, 2)
    y = (x @ np.array([1.5, -0.5], np.float32)).astype(np.float32)

    def train(strategy: Any, n: int) -> np.ndarray:
        opt = make_opt()
        with strategy.scope():
            w = idist.Variable(np.zeros(2, np.float32))

        def step(xb: Any, yb: Any) -> None:
            xp = __import__("cupy") if _mod(xb) == "cupy" else np
            err = xb @ w.read_value() - yb
            grad = (xb.T @ err) * np.float32(2.0 / 16)  # this replica's share of the global mean's gradient
            opt.apply_gradients([(grad.astype(xp.float32), w)])

        for _ in range(3):
            parts = [(x[r::n], y[r::n]) for r in range(n)]
            strategy.run(step, args=(
                strategy.experimental_distribute_values_from_function(lambda ctx: parts[ctx.replica_id_in_sync_group][0]),
                strategy.experimental_distribute_values_from_function(lambda ctx: parts[ctx.replica_id_in_sync_group][1])))
        return np.asarray(w)

    def ops() -> collections.Counter[str]:
        return collections.Counter(e.op for e in s2.events.events if e.kind == "collective-exited")

    before = ops()
    on_gpu = train(s2, 2)
    ran = ops() - before
    assert ran[path] >= 3, ran  # one per step
    if path == "all_reduce":
        assert ran["merge_call"] == 0, ran
    with idist.MirroredStrategy(["CPU:0", "CPU:1"]) as cpu:
        on_cpu = train(cpu, 2)
    np.testing.assert_allclose(on_gpu, on_cpu, rtol=1e-6)
    assert np.abs(on_gpu).sum() > 0


def test_variable_created_inside_run_lives_on_the_gpu(s2: idist.MirroredStrategy) -> None:
    def fn() -> Any:
        v = idist.Variable(np.full(3, _rank() + 1.0, np.float32))
        return v, _mod(v.read_value())

    v, module = s2.run(fn)
    assert isinstance(v, idist.MirroredVariable)
    assert all(m == "cupy" for m in s2.experimental_local_results(module))
    assert [np.asarray(c).tolist() for c in s2.experimental_local_results(v)] == [[1.0] * 3, [1.0] * 3]
