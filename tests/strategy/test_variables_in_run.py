"""Variables created inside ``strategy.run``: what TF 2.21's eager MirroredStrategy does (checked on 2 logical CPUs)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import interdist as idist


def copies(strategy: Any, v: Any) -> list[float]:
    return [float(np.asarray(c)) for c in strategy.experimental_local_results(v)]


def make(strategy: Any) -> Any:
    def fn() -> Any:
        r = idist.get_replica_context().replica_id_in_sync_group
        return idist.Variable(np.float32(r) * 10 + 1)

    return strategy.run(fn)


def test_one_mirrored_variable_from_replica_0(mirrored2: Any) -> None:
    v = make(mirrored2)
    assert isinstance(v, idist.MirroredVariable)  # not a PerReplica of two variables
    assert copies(mirrored2, v) == [1.0, 1.0]  # TF: [1.0, 1.0], replica 1's 11.0 is ignored
    assert v.device == "/job:localhost/replica:0/task:0/device:CPU:0"
    assert make(mirrored2) is not v  # every call makes a new variable (TF: `v2 is v` is False)


def test_usable_afterwards_and_by_later_steps(mirrored2: Any) -> None:
    def fn() -> Any:
        v = idist.Variable(np.float32(2.0), aggregation=idist.VariableAggregation.SUM)
        v.assign_add(np.float32(idist.get_replica_context().replica_id_in_sync_group + 1))
        return v.read_value(), v

    read, v = mirrored2.run(fn)
    assert [float(np.asarray(x)) for x in mirrored2.experimental_local_results(read)] == [5.0, 5.0]
    mirrored2.run(lambda: v.assign_add(np.float32(1.0)))
    assert copies(mirrored2, v) == [7.0, 7.0]
    v.assign(np.float32(0.5))
    assert copies(mirrored2, v) == [0.5, 0.5]
    assert any(h is v for h in mirrored2._live_variables())  # checkpoints see it


def test_sync_on_read_created_in_run(mirrored2: Any) -> None:
    def fn() -> Any:
        r = idist.get_replica_context().replica_id_in_sync_group
        return idist.Variable(np.float32(r) + 5, synchronization=idist.VariableSynchronization.ON_READ,
                              aggregation=idist.VariableAggregation.SUM)

    w = mirrored2.run(fn)
    assert isinstance(w, idist.SyncOnReadVariable)
    assert copies(mirrored2, w) == [5.0, 5.0]
    assert float(np.asarray(w.read_value())) == 10.0  # TF: 10.0


def test_none_synchronization_is_refused(mirrored2: Any) -> None:
    with pytest.raises(ValueError, match="`NONE` variable synchronization mode is not supported"):
        mirrored2.run(lambda: idist.Variable(1.0, synchronization=idist.VariableSynchronization.NONE))
    assert float(np.asarray(mirrored2.experimental_local_results(mirrored2.run(lambda: np.float32(1.0)))[0])) == 1.0


def test_created_in_merge_fn(mirrored2: Any) -> None:
    def fn() -> Any:
        return idist.get_replica_context().merge_call(lambda strategy: idist.Variable(3.0))

    u = mirrored2.run(fn)
    assert isinstance(u, idist.MirroredVariable)  # TF: MirroredVariable
    assert copies(mirrored2, u) == [3.0, 3.0]


def test_one_device_strategy() -> None:
    with idist.OneDeviceStrategy("CPU:0") as s:
        v = s.run(lambda: idist.Variable(np.arange(3, dtype=np.float32)))
        assert np.asarray(v).tolist() == [0.0, 1.0, 2.0]


def _held(replica: Any, var_id: int) -> bool:
    return var_id in replica.variables


def test_copies_go_with_the_handle(mirrored2: Any) -> None:
    import gc

    with mirrored2.scope():
        kept = idist.Variable(1.0)
        dropped = idist.Variable(2.0)
    made_in_run = mirrored2.run(lambda: idist.Variable(3.0))
    ids = [kept._var_id, dropped._var_id, made_in_run._var_id]
    assert [[r.value for r in mirrored2._system(_held, i)] for i in ids] == [[True, True]] * 3
    del dropped, made_in_run
    gc.collect()
    mirrored2.run(lambda: None)  # the next program carries the releases
    assert [[r.value for r in mirrored2._system(_held, i)] for i in ids] == [[True, True], [False, False],
                                                                            [False, False]]
    assert copies(mirrored2, kept) == [1.0, 1.0]


def test_unreturned_variable_made_in_run_is_freed(mirrored2: Any) -> None:
    import gc

    def fn() -> Any:
        idist.Variable(5.0)  # made, not returned: nothing in the notebook holds it
        return np.float32(1.0)

    mirrored2.run(fn)
    gc.collect()
    mirrored2.run(lambda: None)
    held = mirrored2._system(lambda replica: len([v for v in replica.variables if v >= 1 << 40]))
    assert [r.value for r in held] == [0, 0]


def test_components_inside_run_write_only_their_own_copy(mirrored2: Any) -> None:
    """``v.values[r]`` inside run: replica r writes its own copy (TF: that copy only); another replica's
    copy lives in another process, so writing it there raises NotImplementedError naming the way out."""
    with mirrored2.scope():
        v = idist.Variable(np.float32(1.0), name="w")

    def other() -> Any:
        r = idist.get_replica_context().replica_id_in_sync_group
        v.values[1 - r].assign(np.float32(0.0))

    with pytest.raises(NotImplementedError, match="lives in replica"):
        mirrored2.run(other)
    assert copies(mirrored2, v) == [1.0, 1.0]

    def own() -> Any:
        r = idist.get_replica_context().replica_id_in_sync_group
        v.values[r].assign(np.float32(r) + 5)
        return [float(np.asarray(c)) for c in v.values]  # every replica reads every copy (a collective)

    out = mirrored2.experimental_local_results(mirrored2.run(own))
    assert [list(o) for o in out] == [[5.0, 6.0], [5.0, 6.0]]
    assert copies(mirrored2, v) == [5.0, 6.0]
    assert mirrored2.run(lambda: type(v).__name__) == "MirroredVariable"
