"""A ``run`` whose replicas return containers that differ: TF 2.21's ``regroup`` raises ``AssertionError`` (recorded
with a ``MirroredStrategy`` of two logical CPUs; the messages below are TF's, with the replicas named after them).
Replica 0's structure leads; the strategy goes on."""

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
