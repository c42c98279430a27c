"""``DistributedIterator.get_next_as_optional``, ``get_next`` at the end, and where ``dataset_fn`` runs.

TF 2.21 (recorded in tests/conformance/tf_cases_6.json): the Optional's ``has_value()`` is a boolean
tensor, ``get_value()`` of an empty one raises InvalidArgumentError (``ValueError`` here), a partial
final batch is still a value (trailing replicas get empty batches), ``get_next()`` past the end raises
``OutOfRangeError`` while ``next()`` raises ``StopIteration``, and ``distribute_datasets_from_function``
calls ``dataset_fn`` once, in the caller's process, with ``InputContext(1, 0, N)``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import interdist as idist
from interdist.errors import OutOfRangeError
from interdist.input.optional import Optional


def local(s: Any, x: Any) -> list[Any]:
    return [np.asarray(c).tolist() for c in s.experimental_local_results(x)]


def test_optional_over_a_partial_final_batch(mirrored2: Any) -> None:
    s = mirrored2
    it = iter(s.experimental_distribute_dataset(idist.data.Dataset.range(5).batch(4)))
    o1, o2, o3 = (it.get_next_as_optional() for _ in range(3))
    assert isinstance(o1, Optional) and bool(o1.has_value()) and bool(o2.has_value())
    assert isinstance(o1.get_value(), idist.PerReplica)
    assert local(s, o1.get_value()) == [[0, 1], [2, 3]]
    assert local(s, o2.get_value()) == [[4], []]
    assert o3.has_value().dtype == np.bool_ and not bool(o3.has_value())
    with pytest.raises(ValueError, match="does not have a value"):
        o3.get_value()
    assert o1.element_spec == it.element_spec


@pytest.mark.parametrize("drop_remainder", [True, False])
def test_optional_pads_the_partial_step_of_a_dataset_fn_whatever_the_spec(mirrored2: Any, drop_remainder: bool) -> None:
    """TF 2.21 pads a step some replicas lack in ``get_next_as_optional`` always, also with static element shapes
    (``batch(1, drop_remainder=True)``), where ``next`` ends the data instead: True, True, True ([4] and []),
    then False (recorded on 2 logical CPUs, MirroredStrategy and CentralStorageStrategy alike)."""
    s = mirrored2
    dist = s.distribute_datasets_from_function(
        lambda ctx: idist.data.Dataset.range(5).batch(1, drop_remainder=drop_remainder)
    )
    it = iter(dist)
    got = [it.get_next_as_optional() for _ in range(4)]
    assert [bool(o.has_value()) for o in got] == [True, True, True, False]
    assert [local(s, o.get_value()) for o in got[:3]] == [[[0], [1]], [[2], [3]], [[4], []]]
    if drop_remainder:  # next ends the data at the step replica 1 lacks (TF: its spec is static)
        assert [local(s, b) for b in iter(dist)] == [[[0], [1]], [[2], [3]]]


def test_get_next_at_the_end_is_out_of_range(mirrored2: Any) -> None:
    s = mirrored2
    it = iter(s.experimental_distribute_dataset(idist.data.Dataset.range(4).batch(4)))
    it.get_next()
    with pytest.raises(OutOfRangeError, match="End of sequence") as info:
        it.get_next()
    assert not isinstance(info.value, StopIteration)
    with pytest.raises(StopIteration):
        next(it)


def test_dataset_fn_runs_once_in_the_notebook(mirrored2: Any) -> None:
    s = mirrored2
    calls: list[tuple[int, int, int]] = []

    def dataset_fn(ctx: Any) -> Any:
        calls.append((ctx.num_input_pipelines, ctx.input_pipeline_id, ctx.num_replicas_in_sync))
        return idist.data.Dataset.range(8).batch(2)

    dd = s.distribute_datasets_from_function(dataset_fn)
    assert [local(s, x) for x in dd] == [[[0, 1], [2, 3]], [[4, 5], [6, 7]]]
    assert calls == [(1, 0, 2)]
    it = iter(dd)
    steps = []
    while (o := it.get_next_as_optional()).has_value():
        steps.append(local(s, o.get_value()))
    assert len(steps) == 2
    with pytest.raises(OutOfRangeError):
        it.get_next()

    calls.clear()
    opts = idist.InputOptions(experimental_replication_mode=idist.InputReplicationMode.PER_REPLICA)
    s.distribute_datasets_from_function(dataset_fn, options=opts)
    assert calls == [(2, 0, 2), (2, 1, 2)]
