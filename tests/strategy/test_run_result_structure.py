"""A ``run`` whose replicas return containers that differ: TF 2.21's ``regroup`` raises ``AssertionError`` (recorded
with a ``MirroredStrategy`` of two logical CPUs; the messages below are TF's, with the replicas named after them).
Replica 0's structure leads: where it returned a leaf and another replica a container, TF wraps the two as they
are. The strategy goes on."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import interdist as idist


def _by_replica(first: Any, others: Any) -> Any:
    def fn() -> Any:
        return first if int(idist.get_replica_context().replica_id_in_sync_group) == 0 else others

    return fn


def test_dicts_with_other_keys(mirrored2: Any) -> None:
    with pytest.raises(AssertionError, match=r"^v\[0\].keys: \{'a'\}  v\[i\].keys: \{'[ab]', '[ab]'\} "
                                             r"\(replica 0 and replica 1\)$"):  # fmt: skip
        mirrored2.run(_by_replica({"a": 1.0}, {"a": 1.0, "b": 2.0}))


def test_tuples_and_lists_of_other_lengths(mirrored2: Any) -> None:
    lengths = r"Values to regroup had different lengths: len\(v\) == 2, len\(v0\) == 1 \(replica 1 against replica 0"
    with pytest.raises(AssertionError, match=lengths + r"\)$"):
        mirrored2.run(_by_replica((1.0,), (1.0, 2.0)))
    with pytest.raises(AssertionError, match=lengths + r", at \['x'\]\[1\]\)$"):  # where, inside the result
        mirrored2.run(_by_replica({"x": (0.0, [1.0])}, {"x": (0.0, [1.0, 2.0])}))


def test_a_container_where_replica_0_returned_another_kind(mirrored2: Any) -> None:
    with pytest.raises(AssertionError, match=r"^replica 0 returned a dict where replica 1 returned a list$"):
        mirrored2.run(_by_replica({"a": 1.0}, [1.0]))


def test_the_strategy_goes_on(mirrored2: Any) -> None:
    with pytest.raises(AssertionError):
        mirrored2.run(_by_replica([1.0], [1.0, 2.0]))
    got = mirrored2.run(_by_replica({"a": np.float32(1)}, {"a": np.float32(2)}))
    assert [float(v) for v in mirrored2.experimental_local_results(got["a"])] == [1.0, 2.0]


def test_a_leaf_of_replica_0_where_another_returned_a_container(mirrored2: Any) -> None:
    """Recorded from TF 2.21: ``PerReplica:{0: 1.0, 1: (1.0, 2.0)}``, ``PerReplica:{0: None, 1: (1.0,)}``, and
    inside a nest ``(PerReplica:{0: 1.0, 1: (1.0, 3.0)}, 2.0)``: the values as each replica returned them."""
    got = mirrored2.run(_by_replica(1.0, (1.0, 2.0)))
    assert isinstance(got, idist.PerReplica)
    assert list(mirrored2.experimental_local_results(got)) == [1.0, (1.0, 2.0)]
    got = mirrored2.run(_by_replica(None, (1.0,)))
    assert isinstance(got, idist.PerReplica) and list(mirrored2.experimental_local_results(got)) == [None, (1.0,)]
    # (TF's recording returned the constant 2.0 where this returns "b": one object from TF's replica threads, so
    # one value; across processes interdist counts only what CPython shares so, as equal strings: same_object_across)
    got = mirrored2.run(_by_replica((1.0, "b"), ((1.0, 3.0), "b")))
    assert type(got) is tuple and len(got) == 2 and got[1] == "b"
    assert list(mirrored2.experimental_local_results(got[0])) == [1.0, (1.0, 3.0)]
    # arrays too, each replica's its own: replica 1's list holds its two values
    got = mirrored2.run(_by_replica(np.float32(1), {"a": [np.float32(2), np.float32(3)]}))
    first, second = mirrored2.experimental_local_results(got)
    assert float(first) == 1.0 and list(second) == ["a"] and [float(x) for x in second["a"]] == [2.0, 3.0]


def test_a_container_of_replica_0_where_another_returned_a_leaf(mirrored2: Any) -> None:
    # TF 2.21: AssertionError (with no message); here it says which replicas
    with pytest.raises(AssertionError, match=r"^replica 0 returned a tuple where replica 1 returned a float$"):
        mirrored2.run(_by_replica((1.0,), 1.0))
    with pytest.raises(
        AssertionError, match=r"^replica 0 returned a tuple where replica 1 returned a float, at \[0\]$"
    ):
        mirrored2.run(_by_replica(((1.0, 3.0), 2.0), (1.0, 2.0)))
    with pytest.raises(AssertionError, match=r"^replica 0 returned a list where replica 1 returned an array of "
                                             r"shape \(2,\) float32$"):  # fmt: skip
        mirrored2.run(_by_replica([1.0, 2.0], np.ones(2, np.float32)))
