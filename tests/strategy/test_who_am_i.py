"""Round 4 (issue 15): who am I inside replica code, reduce_op kinds, axis tuples, structures (as TF 2.21)."""

from __future__ import annotations

import enum
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

import interdist as idist


@pytest.fixture(scope="module")
def od() -> Iterator[Any]:
    s = idist.OneDeviceStrategy("CPU:0")
    yield s
    s.close()


class MyStrategy(idist.MirroredStrategy):
    """A subclass in an importable module (this test module): the replicas import it by name."""


def _flags(g: Any, s: Any) -> tuple[bool, ...]:
    return (
        isinstance(g, idist.MirroredStrategy),
        isinstance(g, idist.OneDeviceStrategy),
        isinstance(g, idist.Strategy),
        g is s,
        type(g).__name__ == type(s).__name__,
        isinstance(g.extended, idist.StrategyExtended),
    )


def test_get_strategy_in_run_merge_fn_and_update_is_the_strategys_class(mirrored2: Any) -> None:
    s = mirrored2
    out = s.run(lambda: (_flags(idist.get_strategy(), s), _flags(idist.get_replica_context().strategy, s)))
    assert out == ((True, False, True, True, True, True),) * 2
    merged = s.run(lambda: idist.get_replica_context().merge_call(lambda st: _flags(st, s)))
    assert merged == (True, False, True, True, True, True)
    with s.scope():
        v = idist.Variable(1.0)
    upd = s.extended.update(
        v, lambda var: np.float32(_flags(idist.get_strategy(), s) == (True, False, True, True, True, True))
    )
    assert [float(x) for x in s.experimental_local_results(upd)] == [1.0, 1.0]


def test_one_device_is_not_mirrored_inside_run(od: Any) -> None:
    assert od.run(lambda: _flags(idist.get_strategy(), od)) == (False, True, True, True, True, True)


def test_importable_subclass_is_reported_as_itself() -> None:
    with MyStrategy(["CPU:0", "CPU:1"]) as s:
        out = s.run(lambda: (isinstance(idist.get_strategy(), MyStrategy), type(idist.get_strategy()).__name__))
        assert out == (True, "MyStrategy")


def test_default_strategy_is_a_strategy() -> None:
    d = idist.get_strategy()
    assert isinstance(d, idist.Strategy) and not isinstance(d, idist.MirroredStrategy)
    assert d.run(lambda: isinstance(idist.get_strategy(), idist.Strategy)) is True


def test_replica_context_made_directly(mirrored2: Any) -> None:
    s = mirrored2
    rc = idist.ReplicaContext(s, replica_id_in_sync_group=1)
    assert int(rc.replica_id_in_sync_group) == 1 and rc.num_replicas_in_sync == 2 and rc.strategy is s
    with pytest.raises(RuntimeError):
        rc.merge_call(lambda st: 1)  # not the current context
    with rc as bound:
        assert bound is None  # as TF's `with ctx as c`
        assert idist.get_replica_context() is rc and idist.get_strategy() is s
        assert not idist.in_cross_replica_context()
        assert rc.merge_call(lambda st, x: (st is s, idist.in_cross_replica_context(), x), args=(4,)) == (True, True, 4)
        with pytest.raises(RuntimeError):
            s.run(lambda: 1)
        with pytest.raises(RuntimeError), s.scope():
            pass
    assert idist.get_replica_context() is not rc
    for bad in ("a", 1.5):
        with pytest.raises(ValueError, match="can only be an integer"):
            idist.ReplicaContext(s, bad)
    with pytest.raises(TypeError):
        idist.ReplicaContext(s)  # type: ignore[call-arg]


class _E(enum.Enum):
    SUM = "SUM"


@pytest.mark.parametrize("op", [1, None, object(), _E.SUM, idist.VariableAggregation.SUM])
def test_reduce_op_that_is_not_a_reduce_op(mirrored2: Any, od: Any, op: Any) -> None:
    s = mirrored2
    pr = s.experimental_distribute_values_from_function(lambda c: np.float32(c.replica_id_in_sync_group + 1))
    for call in (
        lambda: s.reduce(op, pr, axis=None),
        lambda: s.extended.reduce_to(op, pr, pr),
        lambda: s.extended.batch_reduce_to(op, [(pr, pr)]),
        lambda: s.run(lambda: idist.get_replica_context().all_reduce(op, np.float32(1.0))),
    ):
        with pytest.raises(AssertionError, match="reduce_op must be"):
            call()
    with pytest.raises(AssertionError):
        od.run(lambda: idist.get_replica_context().all_reduce(op, np.float32(1.0)))
    with pytest.raises(ValueError, match="'BOGUS' is not a valid ReduceOp"):
        s.reduce("BOGUS", pr, axis=None)
    assert float(s.reduce("sum", pr, axis=None)) == 3.0


def test_reduce_over_a_tuple_of_axes(mirrored2: Any) -> None:
    s = mirrored2
    pr = s.experimental_distribute_values_from_function(
        lambda c: np.arange(6, dtype=np.float32).reshape(2, 3) + np.float32(10 * c.replica_id_in_sync_group)
    )
    assert float(s.reduce("SUM", pr, axis=(0, 1))) == 90.0
    assert float(s.reduce("MEAN", pr, axis=(1, -2))) == 7.5
    assert np.asarray(s.reduce("MEAN", pr, axis=(1,))).tolist() == [6.0, 9.0]
    assert np.asarray(s.reduce("SUM", pr, axis=())).tolist() == np.asarray(s.reduce("SUM", pr, axis=None)).tolist()
    with pytest.raises(TypeError):
        s.reduce("SUM", pr, axis=[0, 1])
    with pytest.raises(ValueError):
        s.reduce("SUM", pr, axis=(0, 0))
    with pytest.raises(ValueError):
        s.reduce("SUM", pr, axis=(0, 5))
    ints = s.experimental_distribute_values_from_function(lambda c: np.arange(6, dtype=np.int32).reshape(2, 3))
    m = np.asarray(s.reduce("MEAN", ints, axis=(0, 1)))
    assert m.dtype == np.float64 and float(m) == 2.5


def test_merge_fn_python_value_is_one_value(mirrored2: Any) -> None:
    out = mirrored2.run(lambda: idist.get_replica_context().merge_call(lambda st: {"f": 2.5, "s": "x"}))
    assert out == {"f": 2.5, "s": "x"}


def test_merge_fn_local_results_and_reduce_of_nests(mirrored2: Any) -> None:
    def merge_fn(s: Any, x: Any) -> Any:
        local = s.experimental_local_results({"a": x, "b": 1.0})
        r = s.reduce("SUM", {"a": x, "b": [x]}, axis=None)
        return (len(local), type(local[0]).__name__, float(np.asarray(r["a"])), float(np.asarray(r["b"][0])))

    def fn() -> Any:
        c = idist.get_replica_context()
        with c as bound:  # TF binds None, also for a replica's own context
            assert bound is None
        return c.merge_call(merge_fn, args=(np.float32(c.replica_id_in_sync_group),))

    assert mirrored2.run(fn) == (2, "dict", 1.0, 1.0)


def test_values_from_function_nests(mirrored2: Any, od: Any) -> None:
    s = mirrored2
    v = s.experimental_distribute_values_from_function(
        lambda c: {"a": np.float32(c.replica_id_in_sync_group), "b": (np.float32(1.0), [np.float32(2.0)])}
    )
    assert isinstance(v, dict) and isinstance(v["a"], idist.PerReplica) and isinstance(v["b"], tuple)
    assert isinstance(v["b"][1], list) and isinstance(v["b"][1][0], idist.PerReplica)
    assert [float(x) for x in v["a"].values] == [0.0, 1.0]
    seen = s.run(lambda x: isinstance(x["a"], idist.DistributedValues), args=(v,))
    assert seen is False
    local = s.experimental_local_results(v)
    assert [float(d["a"]) for d in local] == [0.0, 1.0]
    w = od.experimental_distribute_values_from_function(lambda c: {"a": np.float32(3.0)})
    assert isinstance(w, dict) and not isinstance(w["a"], idist.DistributedValues)
    for bad in (
        lambda c: {"a": 1} if c.replica_id_in_sync_group == 0 else (1,),
        lambda c: {"a": 1} if c.replica_id_in_sync_group == 0 else {"b": 1},
        lambda c: [1] * (1 + c.replica_id_in_sync_group),
        lambda c: (1,) if c.replica_id_in_sync_group == 0 else [1],
    ):
        with pytest.raises(AssertionError):
            s.experimental_distribute_values_from_function(bad)


@pytest.mark.parametrize("args", [1.0, np.ones(2), {"x": 1}, "ab", None, {1}])
def test_run_args_not_a_list_or_tuple(mirrored2: Any, args: Any) -> None:
    with pytest.raises(ValueError, match="positional args must be a list or tuple"):
        mirrored2.run(lambda *a: a, args=args)
    with pytest.raises(ValueError, match="positional args must be a list or tuple"):
        idist.get_strategy().run(lambda *a: a, args=args)


def test_run_kwargs_not_a_mapping(mirrored2: Any) -> None:
    with pytest.raises(TypeError, match="argument after \\*\\* must be a mapping, not list"):
        mirrored2.run(lambda **k: 1, kwargs=[("x", 1)])
    assert mirrored2.run(lambda **k: len(k), kwargs=None) == 0
