"""A closed strategy refuses every use with one clear error, never a ``KeyError`` from its workers (issue 25,
item 7: "use after close raises KeyError"). TF has no ``close``; the error is TF's kind for a misuse at run
time, a ``RuntimeError``, and says what to do."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest

import interdist as idist

CLOSED = r"^the strategy was closed \(strategy\.close\(\)\); create a new one"


@pytest.fixture(scope="module")
def closed() -> Iterator[dict[str, Any]]:
    """A strategy closed after making a variable, results, datasets and iterators of each kind."""
    s = idist.MirroredStrategy(["CPU:0", "CPU:1"])
    with s.scope():
        v = idist.Variable(np.float32(1.0), name="v")
    big = s.run(lambda: np.ones(100_000, np.float32))  # too big to come back inline: fetched on demand
    dataset = s.experimental_distribute_dataset(idist.data.Dataset.range(8).batch(2))
    from_fn = s.distribute_datasets_from_function(lambda ctx: idist.data.Dataset.range(8).batch(2))
    notebook_it, remote_it = iter(dataset), iter(from_fn)
    next(notebook_it), next(remote_it)
    entered = s.scope()
    entered.__enter__()  # a scope entered before the close: a variable made in it afterwards
    s.close()
    yield {
        "s": s,
        "v": v,
        "big": big,
        "dataset": dataset,
        "from_fn": from_fn,
        "notebook_it": notebook_it,
        "remote_it": remote_it,
    }
    entered.__exit__(None, None, None)


ENTRY_POINTS: dict[str, Callable[[dict[str, Any]], object]] = {
    "run": lambda c: c["s"].run(lambda: 1),
    "run_steps": lambda c: c["s"].run_steps(lambda b: b, c["remote_it"], 1),
    "reduce": lambda c: c["s"].reduce("SUM", np.float32(1.0), axis=None),
    "gather": lambda c: c["s"].gather(c["big"], axis=0),
    "scope": lambda c: c["s"].scope().__enter__(),
    "variable created in its scope": lambda c: idist.Variable(np.float32(2.0)),
    "experimental_distribute_dataset": lambda c: c["s"].experimental_distribute_dataset(
        idist.data.Dataset.range(4).batch(2)
    ),
    "iter of a distributed dataset": lambda c: iter(c["dataset"]),
    "next of its iterator": lambda c: next(c["notebook_it"]),
    "distribute_datasets_from_function": lambda c: c["s"].distribute_datasets_from_function(
        lambda ctx: idist.data.Dataset.range(4).batch(2)
    ),
    "iter of a dataset from a function": lambda c: iter(c["from_fn"]),
    "next of its iterator on the workers": lambda c: next(c["remote_it"]),
    "get_next": lambda c: c["remote_it"].get_next(),
    "experimental_distribute_values_from_function": lambda c: c["s"].experimental_distribute_values_from_function(
        lambda ctx: 1.0
    ),
    "variable read": lambda c: c["v"].numpy(),
    "variable as an array": lambda c: np.asarray(c["v"]),
    "variable copy read": lambda c: [np.asarray(x) for x in c["s"].experimental_local_results(c["v"])],
    "variable assign": lambda c: c["v"].assign(np.float32(3.0)),
    "extended.update": lambda c: c["s"].extended.update(c["v"], lambda x: x.assign(np.float32(3.0))),
    "extended.reduce_to": lambda c: c["s"].extended.reduce_to("SUM", c["big"], c["v"]),
    "resync_variables": lambda c: c["s"].resync_variables(),
    "extended.broadcast_to": lambda c: c["s"].extended.broadcast_to(np.float32(1.0), c["v"]),
}


@pytest.mark.parametrize("use", list(ENTRY_POINTS), ids=list(ENTRY_POINTS))
def test_every_use_after_close_says_so(closed: dict[str, Any], use: str) -> None:
    with pytest.raises(RuntimeError, match=CLOSED) as info:
        ENTRY_POINTS[use](closed)
    assert not isinstance(info.value, KeyError)


def test_a_result_not_yet_fetched_says_so(closed: dict[str, Any]) -> None:
    """A replica's result is held on its worker until read: after the close it is gone, and says why."""
    s, big = closed["s"], closed["big"]
    with pytest.raises(RuntimeError, match=r"^the strategy was closed \(strategy\.close\(\)\) before this value"):
        [x.numpy() for x in s.experimental_local_results(big)]


def test_close_twice_and_the_context_manager_are_quiet(closed: dict[str, Any]) -> None:
    s = closed["s"]
    s.close()  # again: nothing to do
    with idist.MirroredStrategy(["CPU:0"]) as t:
        pass
    with pytest.raises(RuntimeError, match=CLOSED):
        t.run(lambda: 1)

