"""CentralStorageStrategy keeps ONE copy of each variable, on the parameter device's worker.

The worker stores are inspected directly; values after updates and optimizer steps are
compared, bit for bit, with the same computation on one device.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import interdist as idist

CS = idist.experimental.CentralStorageStrategy
SUM, MEAN, FIRST = (idist.VariableAggregation.SUM, idist.VariableAggregation.MEAN,
                    idist.VariableAggregation.ONLY_FIRST_REPLICA)


@pytest.fixture(scope="module")
def cs2() -> Iterator[Any]:
    s = CS(["CPU:0", "CPU:1"], parameter_device="CPU:0")
    yield s
    s.close()


@pytest.fixture(scope="module")
def cs4() -> Iterator[Any]:
    s = CS(["CPU:0", "CPU:1", "CPU:2", "CPU:3"], parameter_device="CPU:0")
    yield s
    s.close()


@pytest.fixture(scope="module")
def cs2_holder1() -> Iterator[Any]:
    s = CS(["CPU:0", "CPU:1"], parameter_device="CPU:1")  # the holder is replica 1, not 0
    yield s
    s.close()


def worker_state(s: Any) -> dict[int, dict[str, Any]]:
    """What each replica's worker keeps for this strategy, by rank."""
    gid = s._group_id

    def look(dask_worker: Any) -> dict[str, Any]:
        from interdist.replica.central_variable import CentralReplicaVariable
        from interdist.worker.plugin import get_runtime

        rep = get_runtime(dask_worker).replicas[gid]
        state = getattr(rep, "central_state", None)
        return {
            "rank": rep.rank,
            "kinds": {i: type(v).__mro__[1].__name__ for i, v in rep.variables.items()},  # type(v): TF's name
            "values": {i: (None if not isinstance(v, CentralReplicaVariable) or v._value is None
                           else np.array(v._value)) for i, v in rep.variables.items()},
            "cache": sorted(state.cache) if state is not None else [],
            "history": {i: len(v._history) for i, v in rep.variables.items() if isinstance(v, CentralReplicaVariable)},
            "slots": {k: sorted(v) for k, v in rep.store.items() if k.startswith("optimizer:")},
            "reads": (state.reads_served, state.reads_from_history) if state is not None else (0, 0),
        }

    got = s.client.run(look, workers=s._lease.addresses)
    return {r["rank"]: r for r in got.values()}


def assert_one_copy(s: Any, variables: list[Any]) -> None:
    state = worker_state(s)
    holder = s._holder
    assert sorted(state) == list(range(s.num_replicas_in_sync))
    for v in variables:
        for rank, st in state.items():
            assert st["kinds"][v._var_id] == "CentralReplicaVariable"
            if rank == holder:
                assert np.array_equal(st["values"][v._var_id], np.asarray(v))
            else:
                assert st["values"][v._var_id] is None, f"replica {rank} keeps a copy of {v.name}"
    for rank, st in state.items():
        if rank != holder:
            assert st["cache"] == [], f"replica {rank} kept values read in its last step"
            assert all(not slots for slots in st["slots"].values()), f"replica {rank} keeps optimizer slots"


def ranks_sum(parts: list[np.ndarray]) -> np.ndarray:
    """A SUM as one device computes it: the replicas' parts added in rank order."""
    total = np.array(parts[0], copy=True)
    for p in parts[1:]:
        total = total + p
    return total


# -- where the value lives --------------------------------------------------------------

def test_holder_is_the_parameter_devices_worker(cs2: Any, cs2_holder1: Any) -> None:
    assert cs2._holder == 0 and cs2_holder1._holder == 1
    with cs2_holder1.scope():
        v = idist.Variable(np.arange(4, dtype=np.float32), name="h1")
    assert v.device == "/job:localhost/replica:0/task:0/device:CPU:1"
    state = worker_state(cs2_holder1)
    assert state[0]["values"][v._var_id] is None
    assert np.array_equal(state[1]["values"][v._var_id], np.arange(4, dtype=np.float32))


def test_parameter_device_outside_the_compute_devices_is_held_by_replica_0() -> None:
    with CS(["CPU:1", "CPU:2", "CPU:3"], parameter_device="CPU:0") as s:
        assert s._holder == 0
        with s.scope():
            v = idist.Variable(np.array([1.0, 2.0], np.float32), aggregation=SUM)
        out = s.run(lambda: v.assign_add(np.full(2, idist.get_replica_context().replica_id_in_sync_group,
                                                 np.float32)).read_value())
        assert [np.asarray(x).tolist() for x in s.experimental_local_results(out)] == [[4.0, 5.0]] * 3
        assert v.device == "/job:localhost/replica:0/task:0/device:CPU:0"
        assert_one_copy(s, [v])


def test_other_workers_hold_no_copy_after_reads_updates_and_optimizer_steps(cs2: Any, cs4: Any) -> None:
    for s in (cs2, cs4):
        with s.scope():
            w = idist.Variable(np.linspace(-1, 1, 1000, dtype=np.float32), name="w")
            b = idist.Variable(np.float32(0.5), name="b", aggregation=MEAN)
            opt = idist.optimizers.Adam(0.01)

        def step(w: Any = w, b: Any = b, opt: Any = opt) -> Any:
            i = np.float32(idist.get_replica_context().replica_id_in_sync_group)
            g = np.asarray(w) * np.float32(0.1) + i
            b.assign_add(i)
            opt.apply_gradients([(g, w)])
            return np.float32(np.asarray(w)[0]) + b.read_value()

        for _ in range(3):
            s.run(step)
        assert_one_copy(s, [w, b])
        # the optimizer's slots (Adam's moments) live next to the one copy only
        state = worker_state(s)
        assert [k for k, slots in state[0]["slots"].items() if w._var_id in slots]


# -- reads at use -------------------------------------------------------------------------

def test_reads_in_run_see_the_current_value_on_every_replica(cs4: Any) -> None:
    with cs4.scope():
        v = idist.Variable(np.array([1.0, 2.0], np.float32), aggregation=SUM)
    for k in range(3):
        v.assign(np.array([k, 10 * k], np.float32))
        out = cs4.run(lambda: v.read_value())
        assert [np.asarray(x).tolist() for x in cs4.experimental_local_results(out)] == [[k, 10 * k]] * 4

    def fn() -> Any:
        i = np.float32(idist.get_replica_context().replica_id_in_sync_group)
        before = v.read_value()
        v.assign_add(np.array([i, 1.0], np.float32))  # summed onto the holder: [6, 4]
        return before, v.read_value(), np.asarray(v) * np.float32(2.0)

    before, after, twice = cs4.run(fn)
    assert [np.asarray(x).tolist() for x in cs4.experimental_local_results(before)] == [[2.0, 20.0]] * 4
    assert [np.asarray(x).tolist() for x in cs4.experimental_local_results(after)] == [[8.0, 24.0]] * 4
    assert [np.asarray(x).tolist() for x in cs4.experimental_local_results(twice)] == [[16.0, 48.0]] * 4
    assert np.asarray(v).tolist() == [8.0, 24.0]


def test_a_replica_behind_the_holder_reads_the_value_of_its_own_point(cs4: Any) -> None:
    """The holder updates inside merge_fn without waiting; a slower replica still reads the older value."""
    with cs4.scope():
        v = idist.Variable(np.float32(1.0))

    def fn() -> Any:
        rid = int(idist.get_replica_context().replica_id_in_sync_group)

        def merge_fn(s: Any) -> Any:
            if rid != 0:
                time.sleep(0.3)  # the holder (replica 0) runs ahead and applies the update first
            before = v.read_value()
            s.extended.update(v, lambda var: var.assign_add(np.float32(1.0)))
            mid = v.read_value()
            s.extended.update(v, lambda var: var.assign(var * np.float32(10.0)))
            return before, mid, v.read_value()

        # copies: each replica's own reads, not merge_call's one result
        return tuple(np.array(x, copy=True) for x in idist.get_replica_context().merge_call(merge_fn))

    reads_before = worker_state(cs4)[0]["reads"]
    out = cs4.run(fn)
    served, from_history = (a - b for a, b in zip(worker_state(cs4)[0]["reads"], reads_before))
    assert served >= 9 and from_history >= 3  # the slower replicas' first reads were of values already replaced
    for part, want in zip(out, (1.0, 2.0, 20.0)):
        assert [float(x) for x in cs4.experimental_local_results(part)] == [want] * 4
    assert float(np.asarray(v)) == 20.0
    assert_one_copy(cs4, [v])


def test_reads_inside_an_update_see_its_own_writes(cs2: Any) -> None:
    with cs2.scope():
        v = idist.Variable(np.float32(3.0))
        u = idist.Variable(np.float32(0.0))

    def upd(var: Any) -> Any:
        var.assign_add(np.float32(1.0))
        u.assign(var * np.float32(2.0))  # reads v after its write in this same update
        return var.read_value()

    def fn() -> Any:
        return np.array(idist.get_replica_context().merge_call(lambda s: s.extended.update(v, upd)), copy=True)

    out = cs2.run(fn)
    assert [float(x) for x in cs2.experimental_local_results(out)] == [4.0, 4.0]
    assert float(np.asarray(v)) == 4.0 and float(np.asarray(u)) == 8.0


# -- updates: reduced onto the holder, applied once -----------------------------------

@pytest.mark.parametrize("agg", [SUM, MEAN, FIRST])
@pytest.mark.parametrize("op", ["assign", "assign_add", "assign_sub"])
def test_replica_context_updates_equal_one_device(cs2: Any, cs4: Any, cs2_holder1: Any, agg: Any, op: str) -> None:
    for s in (cs2, cs4, cs2_holder1):
        n = s.num_replicas_in_sync
        init = np.array([0.5, -1.25, 3.0], np.float32)
        with s.scope():
            v = idist.Variable(init, aggregation=agg)

        def fn(v: Any = v) -> Any:
            i = np.float32(idist.get_replica_context().replica_id_in_sync_group)
            getattr(v, op)(np.array([i, i * np.float32(0.1), np.float32(1.0) / (i + 1)], np.float32))
            return v.read_value()

        parts = [np.array([i, i * np.float32(0.1), np.float32(1.0) / (i + 1)], np.float32)
                 for i in map(np.float32, range(n))]
        expected = init.copy()
        for _ in range(2):
            out = s.run(fn)
            if agg == FIRST:
                reduced = parts[0]
            elif agg == SUM:
                reduced = ranks_sum(parts)
            else:
                reduced = ranks_sum(parts) / np.float32(n)
            expected = {"assign": reduced, "assign_add": expected + reduced, "assign_sub": expected - reduced}[op]
            assert np.asarray(v).tobytes() == expected.astype(np.float32).tobytes()
            assert all(np.asarray(x).tobytes() == expected.tobytes() for x in s.experimental_local_results(out))


def test_replica_context_update_errors_are_tfs(cs2: Any) -> None:
    with cs2.scope():
        v = idist.Variable(np.zeros(2, np.float32), aggregation=SUM)
        none = idist.Variable(np.float32(0.0))
        ints = idist.Variable(np.int32(1), aggregation=SUM)
    with pytest.raises(ValueError, match="incompatible"):
        cs2.run(lambda: v.assign_add(np.zeros(3, np.float32)))
    with pytest.raises(ValueError, match="aggregation method"):
        cs2.run(lambda: none.assign(np.float32(1.0)))
    with pytest.raises(ValueError, match="requested dtype int32"):  # as MirroredStrategy's variables
        cs2.run(lambda: ints.assign_add(np.float32(1.5)))
    # nothing was applied, and the strategy goes on
    assert np.asarray(v).tolist() == [0.0, 0.0] and int(np.asarray(ints)) == 1
    cs2.run(lambda: ints.assign_add(np.int32(2)))
    assert int(np.asarray(ints)) == 5


def test_extended_update_applies_once(cs4: Any) -> None:
    with cs4.scope():
        v = idist.Variable(np.float32(1.0))
    # from the notebook
    r = cs4.extended.update(v, lambda var, x: var.assign_add(x), args=(np.float32(2.0),))
    # TF returns the assign's result, a variable reading as the one copy (not the strategy's variable)
    assert r is not v and isinstance(r, idist.Variable) and float(np.asarray(r)) == float(np.asarray(v)) == 3.0
    r = cs4.extended.update(v, lambda var: var.read_value() * np.float32(2.0), group=False)
    assert isinstance(r, tuple) and len(r) == 1 and float(np.asarray(r[0])) == 6.0
    # in replica context: a merge_call, then one update on the holder (not one per replica)
    cs4.run(lambda: idist.get_strategy().extended.update(v, lambda var: var.assign_add(np.float32(1.0))))
    assert float(np.asarray(v)) == 4.0

    # inside merge_fn, with a reduce_to first (the usual optimizer shape)
    def fn() -> Any:
        i = np.float32(idist.get_replica_context().replica_id_in_sync_group)

        def merge_fn(s: Any, g: Any) -> Any:
            total = s.extended.reduce_to(idist.ReduceOp.SUM, g, v)
            return s.extended.update(v, lambda var, t: var.assign_sub(t), args=(total,))

        idist.get_replica_context().merge_call(merge_fn, args=(i + np.float32(0.5),))
        return v.read_value()

    out = cs4.run(fn)
    assert [float(x) for x in cs4.experimental_local_results(out)] == [-4.0] * 4  # 4 - (0.5+1.5+2.5+3.5)
    assert_one_copy(cs4, [v])


# -- optimizers ------------------------------------------------------------------------

def _one_device_reference(make_opt: Any, w0: np.ndarray, grads_per_step: list[list[np.ndarray]]) -> np.ndarray:
    """The same optimizer on one device, fed the replicas' gradients summed in rank order."""
    w = idist.Variable(w0.copy())
    opt = make_opt()
    for parts in grads_per_step:
        opt.apply_gradients([(ranks_sum(parts), w)])
    return np.asarray(w)


@pytest.mark.parametrize("make_opt", [lambda: idist.optimizers.SGD(0.05),
                                      lambda: idist.optimizers.SGD(0.05, momentum=0.9, nesterov=True),
                                      lambda: idist.optimizers.Adam(0.01)],
                         ids=["sgd", "nesterov", "adam"])
def test_optimizer_steps_equal_one_device(cs2: Any, cs4: Any, cs2_holder1: Any, make_opt: Any) -> None:
    rng = np.random.default_rng(7)
    w0 = rng.normal(size=64).astype(np.float32)
    for s in (cs2, cs4, cs2_holder1):
        n = s.num_replicas_in_sync
        data = rng.normal(size=(4, n, 64)).astype(np.float32)
        with s.scope():
            w = idist.Variable(w0.copy(), name="w")
            opt = make_opt()
        for k in range(4):
            s.run(lambda x, opt=opt, w=w: opt.apply_gradients([(np.asarray(x) * np.float32(0.5), w)]),
                  args=(idist.PerReplica([data[k, r] for r in range(n)]),))
        grads = [[data[k, r] * np.float32(0.5) for r in range(n)] for k in range(4)]
        expected = _one_device_reference(make_opt, w0, grads)
        assert np.asarray(w).tobytes() == expected.tobytes()
        assert int(np.asarray(opt.iterations)) == 4
        assert_one_copy(s, [w])


def test_optimizer_from_the_notebook_after_slots_exist(cs2: Any) -> None:
    with cs2.scope():
        w = idist.Variable(np.array([1.0, 2.0], np.float32))
        opt = idist.optimizers.SGD(0.1, momentum=0.5)
    g = np.array([1.0, -1.0], np.float32)
    cs2.run(lambda: opt.apply_gradients([(g, w)]))  # slots made in replica context (sum: 2g)
    opt.apply_gradients([(g, w)])  # then from the notebook: one update, on the holder
    expected = _one_device_reference(lambda: idist.optimizers.SGD(0.1, momentum=0.5),
                                     np.array([1.0, 2.0], np.float32), [[g, g], [g]])
    assert np.asarray(w).tobytes() == expected.tobytes()
    assert int(np.asarray(opt.iterations)) == 2
    assert_one_copy(cs2, [w])


def test_run_steps_equal_step_by_step(cs2: Any) -> None:
    xs = np.arange(16, dtype=np.float32).reshape(8, 2) / np.float32(8.0)
    results = []
    for fused in (False, True):
        with cs2.scope():
            w = idist.Variable(np.array([0.5, -0.5], np.float32))
            opt = idist.optimizers.SGD(0.1, momentum=0.9)
        it = iter(cs2.experimental_distribute_dataset(idist.data.Dataset.from_tensor_slices(xs).batch(2)))

        def step(x: Any, w: Any = w, opt: Any = opt) -> Any:
            x = np.asarray(x)
            opt.apply_gradients([(np.sum(x * np.asarray(w), axis=0), w)])
            return w.read_value()

        if fused:
            cs2.run_steps(step, it, steps=4)
        else:
            for _ in range(4):
                cs2.run(step, args=(next(it),))
        results.append(np.asarray(w))
        assert_one_copy(cs2, [w])
    assert results[0].tobytes() == results[1].tobytes()


# -- the notebook's view, checkpoints, debug ------------------------------------------

def test_cross_replica_reads_checkpoint_and_debug(cs4: Any, tmp_path: Path) -> None:
    with cs4.scope():
        v = idist.Variable(np.array([1.0, 2.0, 3.0], np.float32), name="ck", aggregation=MEAN)
    v.assign_add(np.ones(3, np.float32))
    assert np.asarray(v).tolist() == [2.0, 3.0, 4.0]
    assert v.numpy().tolist() == [2.0, 3.0, 4.0]
    (local,) = cs4.experimental_local_results(v)
    assert local is v and np.asarray(local).tolist() == [2.0, 3.0, 4.0]
    assert [c.tolist() for c in idist.debug.replica_values(cs4, v)] == [[2.0, 3.0, 4.0]]
    assert idist.debug.replica_divergence(cs4, [v])["ck"].max_abs_diff == 0.0
    ck = idist.Checkpoint(v=v)
    path = ck.save(tmp_path / "ckpt")
    cs4.run(lambda: v.assign(np.zeros(3, np.float32)))
    assert np.asarray(v).tolist() == [0.0, 0.0, 0.0]
    ck.restore(path)
    assert np.asarray(v).tolist() == [2.0, 3.0, 4.0]
    out = cs4.run(lambda: v.read_value())
    assert [np.asarray(x).tolist() for x in cs4.experimental_local_results(out)] == [[2.0, 3.0, 4.0]] * 4
    assert_one_copy(cs4, [v])


# -- failures ------------------------------------------------------------------------

def test_holder_failure_releases_the_readers_and_the_strategy_goes_on(cs2: Any) -> None:
    with cs2.scope():
        v = idist.Variable(np.float32(1.0), aggregation=SUM)

    def fn() -> Any:
        if int(idist.get_replica_context().replica_id_in_sync_group) == 0:
            raise KeyError("the holder fails")
        v.assign_add(np.float32(1.0))  # sent to the holder, which never applies it
        return v.read_value()  # waits for that update: released when the holder fails

    t0 = time.monotonic()
    with pytest.raises(KeyError, match="the holder fails"):
        cs2.run(fn)
    assert time.monotonic() - t0 < 5.0
    assert float(np.asarray(v)) == 1.0
    out = cs2.run(lambda: v.assign_add(np.float32(1.0)).read_value())
    assert [float(x) for x in cs2.experimental_local_results(out)] == [3.0, 3.0]
    assert_one_copy(cs2, [v])


def test_large_values_and_gradients(cs4: Any) -> None:
    """Past the shared-memory threshold: reads answered through segments, gradients summed from them."""
    rng = np.random.default_rng(3)
    w0 = rng.normal(size=300_000).astype(np.float32)
    with cs4.scope():
        w = idist.Variable(w0.copy(), name="big")
        opt = idist.optimizers.SGD(0.01)

    def step() -> Any:
        i = np.float32(idist.get_replica_context().replica_id_in_sync_group)
        g = np.asarray(w) * (i + np.float32(1.0))
        opt.apply_gradients([(g, w)])
        return np.float32(np.asarray(w)[:: 1000].sum())

    expected = w0.copy()
    for _ in range(2):
        out = cs4.run(step)
        g = ranks_sum([expected * (np.float32(i) + np.float32(1.0)) for i in range(4)])
        expected = expected - np.float32(0.01) * g
        sums = {float(x) for x in cs4.experimental_local_results(out)}
        assert sums == {float(np.float32(expected[::1000].sum()))}
    assert np.asarray(w).tobytes() == expected.tobytes()
    assert_one_copy(cs4, [w])
