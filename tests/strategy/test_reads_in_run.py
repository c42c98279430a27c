"""Reading a variable inside ``strategy.run`` costs no copy, and a read keeps the value it saw.

``np.asarray(v)`` and ``v.read_value()`` are read-only views of the replica's copy (a TF tensor read
from a variable cannot be written either); a write while such a read is alive leaves the read as it
was (copy on write), as a TF tensor read before ``assign_add`` keeps the old value. ``np.array(v)``
and ``v.numpy()`` are writable copies of their own (NumPy's and TF's contracts).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import interdist as idist

FIRST = idist.VariableAggregation.ONLY_FIRST_REPLICA


def locals_of(strategy: Any, value: Any) -> list[np.ndarray]:
    return [np.asarray(x) for x in strategy.experimental_local_results(value)]


def test_a_read_held_across_a_write_keeps_the_value_it_saw(mirrored2: Any) -> None:
    with mirrored2.scope():
        v = idist.Variable(np.arange(4, dtype=np.float32), aggregation=FIRST)

    def step() -> Any:
        before = np.asarray(v)
        also = v.read_value()
        part = np.asarray(v)[1:3]  # a view of the copy's memory too
        v.assign_add(np.ones(4, np.float32))
        return before, also, part, np.asarray(v)

    before, also, part, after = step_results = mirrored2.run(step)
    del step_results
    for b, a, p, n in zip(*(locals_of(mirrored2, x) for x in (before, also, part, after)), strict=True):
        assert b.tolist() == [0.0, 1.0, 2.0, 3.0]
        assert a.tolist() == [0.0, 1.0, 2.0, 3.0]
        assert p.tolist() == [1.0, 2.0]
        assert n.tolist() == [1.0, 2.0, 3.0, 4.0]
    assert [c.tolist() for c in locals_of(mirrored2, v)] == [[1.0, 2.0, 3.0, 4.0]] * 2


def test_writes_in_place_then_reads_see_every_write(mirrored2: Any) -> None:
    with mirrored2.scope():
        v = idist.Variable(np.zeros(3, np.float32), aggregation=FIRST)

    def step() -> Any:
        for _ in range(5):
            v.assign_add(np.asarray(v) + 1)  # the read is an argument of the write: it must not alias it
        return np.asarray(v).tolist()

    # 0 -> 1 -> 3 -> 7 -> 15 -> 31: each write sees the value of the one before
    assert [list(x) for x in mirrored2.experimental_local_results(mirrored2.run(step))] == [[31.0] * 3] * 2


def test_asarray_is_read_only_array_and_numpy_are_writable_copies(mirrored2: Any) -> None:
    with mirrored2.scope():
        v = idist.Variable(np.array([1.0, 2.0], np.float32))

    def step() -> Any:
        out = []
        with pytest.raises(ValueError, match="read-only"):
            np.asarray(v)[0] = 9.0
        with pytest.raises(ValueError, match="read-only"):
            v.read_value()[0] = 9.0
        for copy in (np.array(v), v.numpy(), np.asarray(v, dtype=np.float64)):
            copy[0] = 9.0  # writable, and the variable does not see it
            out.append(float(copy[0]))
        out.append(np.asarray(v).tolist())
        return out

    for got in mirrored2.experimental_local_results(mirrored2.run(step)):
        assert got == [9.0, 9.0, 9.0, [1.0, 2.0]]


def test_a_result_returned_by_run_is_the_value_at_return(mirrored2: Any) -> None:
    """A read returned by ``run`` stays on the replica until fetched: later steps' writes must not reach it."""
    with mirrored2.scope():
        v = idist.Variable(np.float32(1.0), aggregation=FIRST)

    first = mirrored2.run(lambda: np.asarray(v))
    mirrored2.run(lambda: v.assign_add(np.float32(10.0)))
    assert [float(x) for x in locals_of(mirrored2, first)] == [1.0, 1.0]
    assert [float(x) for x in locals_of(mirrored2, v)] == [11.0, 11.0]


def test_a_write_with_no_read_alive_is_in_place_and_one_with_a_read_alive_is_not(mirrored2: Any) -> None:
    """Copy on write: the copy's memory is reused while nothing reads it (no 4 MB allocation per update)."""
    with mirrored2.scope():
        v = idist.Variable(np.zeros(1000, np.float32), aggregation=FIRST)

    def step() -> Any:
        start = v.raw.ctypes.data
        v.assign_add(np.ones(1000, np.float32))
        after_write = v.raw.ctypes.data
        held = np.asarray(v)
        v.assign_add(np.ones(1000, np.float32))
        after_held_write = v.raw.ctypes.data
        return [after_write == start, after_held_write != after_write, float(held[0]), float(np.asarray(v)[0])]

    v.assign(np.zeros(1000, np.float32))  # an assign from the notebook: the copy owns its memory
    for got in mirrored2.experimental_local_results(mirrored2.run(step)):
        assert got == [True, True, 1.0, 2.0]
