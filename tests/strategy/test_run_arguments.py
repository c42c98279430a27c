"""What each replica receives from ``strategy.run(fn, args, kwargs)``, and what comes back unchanged.

TF gives replica ``i`` component ``i`` of every distributed value in the arguments, wherever it sits in
the structure (tuples, lists, dicts, namedtuples), a distributed variable as itself, and everything
else as it is; a value a replica returns unchanged comes back as the notebook's own object (a
``PerReplica`` of the same components, the variable itself). The notebook picks every rank's
arguments in one pass over the leaves (``ReplicaDispatch._per_rank``) and pickles plain ones with the
standard pickler (``client/group.py``, ``_plain``): these tests hold both to those semantics, for
leaves of every kind those paths tell apart.
"""

from __future__ import annotations

from collections import namedtuple
from typing import Any

import numpy as np
import pytest

import interdist as idist

Pair = namedtuple("Pair", "value weight")


def _locals(strategy: Any, value: Any) -> list[Any]:
    return list(strategy.experimental_local_results(value))


def test_each_replica_gets_its_component_wherever_it_sits(mirrored2: Any) -> None:
    held = mirrored2.run(lambda: np.float32(10 * (idist.get_replica_context().replica_id_in_sync_group + 1)))
    made_here = idist.PerReplica([np.float32(1), np.float32(2)])
    with mirrored2.scope():
        w = idist.Variable(np.float32(0.5), name="w")

    def fn(a: Any, scale: int, tag: str, pair: Any, opts: Any) -> Any:
        rid = idist.get_replica_context().replica_id_in_sync_group
        assert isinstance(pair, Pair) and isinstance(opts, dict) and isinstance(opts["more"], list)
        total = float(a) * scale + float(pair.value) + float(np.asarray(pair.weight)) + float(opts["more"][0])
        return f"{tag}{rid}", np.float32(total)

    tags, totals = mirrored2.run(fn, args=(held, 3, "r"), kwargs={"pair": Pair(made_here, w), "opts": {"more": [held]}})
    assert _locals(mirrored2, tags) == ["r0", "r1"]
    # replica 0: 10 * 3 + 1 + 0.5 + 10; replica 1: 20 * 3 + 2 + 0.5 + 20
    assert [float(x) for x in _locals(mirrored2, totals)] == [41.5, 82.5]


def test_components_that_are_structures_go_whole_to_their_replica(mirrored2: Any) -> None:
    nested = idist.PerReplica([(np.float32(1), {"k": np.float32(2)}), (np.float32(3), {"k": np.float32(4)})])
    out = mirrored2.run(lambda t, c: float(t[0]) * 10 + float(t[1]["k"]) + c, args=(nested, 0.25))
    assert [float(x) for x in _locals(mirrored2, out)] == [12.25, 34.25]


def test_empty_containers_keep_their_places_beside_distributed_values(mirrored2: Any) -> None:
    held = mirrored2.run(lambda: np.float32(idist.get_replica_context().replica_id_in_sync_group))

    def shapes(*args: Any) -> str:
        return repr([type(a).__name__ + str(len(a)) if isinstance(a, (tuple, list)) else float(a) for a in args])

    out = mirrored2.run(shapes, args=((), (held, 1), held, []))
    assert _locals(mirrored2, out) == ["['tuple0', 'tuple2', 0.0, 'list0']", "['tuple0', 'tuple2', 1.0, 'list0']"]
    out = mirrored2.run(lambda a, b: shapes(a, b, b[0]), args=((), (held, 1)))  # as many leaves as arguments
    assert _locals(mirrored2, out) == ["['tuple0', 'tuple2', 0.0]", "['tuple0', 'tuple2', 1.0]"]


def test_arguments_returned_unchanged_are_the_notebooks_own_objects(mirrored2: Any) -> None:
    made_here = idist.PerReplica([np.float32(1), np.float32(2)])
    held = mirrored2.run(lambda: np.ones(3, np.float32))
    with mirrored2.scope():
        v = idist.Variable(np.ones(2, np.float32), name="v")

    back_made, back_held, back_var, plain = mirrored2.run(lambda a, b, c, d: (a, b, c, d), args=(made_here, held, v, 7))
    assert all(x is y for x, y in zip(_locals(mirrored2, back_made), made_here.values, strict=True))
    assert all(x is y for x, y in zip(_locals(mirrored2, back_held), held.values, strict=True))
    assert back_var is v
    assert plain == 7


def test_an_argument_changed_in_place_and_returned_comes_back_changed(mirrored2: Any) -> None:
    """A replica that updates an array argument in place and returns it returns what it computed, not the
    notebook's array (which it never changes): each replica works on its own copy. Returned unchanged, the
    argument is still the notebook's own object. Small (inline) and large (kept on the replicas) alike."""

    def inc(x: np.ndarray) -> np.ndarray:
        x += idist.get_replica_context().replica_id_in_sync_group + 1
        return x

    for n in (3, 20_000):
        a = np.zeros(n)
        out = mirrored2.run(inc, args=(a,))
        assert out is not a
        assert [float(np.asarray(v).sum()) for v in _locals(mirrored2, out)] == [n * 1.0, n * 2.0]
        assert not a.any()  # the notebook's array: unchanged
        assert mirrored2.run(lambda x: x, args=(a,)) is a
        nan = np.full(n, np.nan)
        assert mirrored2.run(lambda x: x, args=(nan,)) is nan  # unchanged by its bits, NaNs included
        flipped = mirrored2.run(lambda x: x.__setitem__(slice(None), x[::-1]) or x, args=(np.arange(n, dtype=float),))
        assert [np.asarray(v)[0] for v in _locals(mirrored2, flipped)] == [n - 1.0, n - 1.0]


def test_a_held_value_is_not_changed_by_a_function_that_updates_its_argument(mirrored2: Any) -> None:
    """Values the replicas hold (an earlier run's results) reach a function as copies: ``x += 1`` there leaves
    the held value as it was, as a TF tensor is never changed by a step that reads it. Returned unchanged, a
    held value is the notebook's own handle; changed, a new value."""
    for n in (3, 20_000):
        held = mirrored2.run(lambda n=n: np.zeros(n))

        def inc(x: np.ndarray) -> np.ndarray:
            x += 1
            return x

        out = mirrored2.run(inc, args=(held,))
        assert [float(np.asarray(v).sum()) for v in _locals(mirrored2, out)] == [float(n)] * 2
        assert [float(np.asarray(v).sum()) for v in _locals(mirrored2, held)] == [0.0, 0.0]
        seen = mirrored2.run(lambda x: float(x.sum()), args=(held,))  # what a replica reads now
        assert list(mirrored2.experimental_local_results(seen)) == [0.0, 0.0]
        back = mirrored2.run(lambda x: x, args=(held,))
        assert all(x is y for x, y in zip(_locals(mirrored2, back), held.values, strict=True))


def test_a_variable_of_another_strategy_is_refused_by_name(mirrored2: Any) -> None:
    with idist.MirroredStrategy(["CPU:0", "CPU:1"]) as other:
        with other.scope():
            foreign = idist.Variable(np.float32(1), name="foreign_w")
        held = mirrored2.run(lambda: np.float32(1))
        with pytest.raises(ValueError, match="'foreign_w' was created in the scope of another strategy"):
            mirrored2.run(lambda a, b: a, args=(held, foreign))


def test_arguments_the_standard_pickler_cannot_carry_still_reach_the_replicas(mirrored2: Any) -> None:
    # A function inside an object array, beside a PerReplica: pickled by value (cloudpickle), not by the
    # standard pickler, which cannot write a lambda at all.
    held = mirrored2.run(lambda: np.float32(idist.get_replica_context().replica_id_in_sync_group))
    table = np.empty(1, dtype=object)
    table[0] = lambda x: x * 100 + 5

    out = mirrored2.run(lambda t, x: np.float32(t[0](float(x))), args=(table, held))
    assert [float(x) for x in _locals(mirrored2, out)] == [5.0, 105.0]


def _leaf(x: Any) -> Any:
    """What a replica receives for a leaf, comparable: an array's type and bits, a held value's key, a variable."""
    if isinstance(x, np.ndarray | np.generic):
        return type(x), np.asarray(x).dtype.str, np.asarray(x).tobytes()
    return type(x), getattr(x, "key", None) if type(x).__name__ == "StoreRef" else id(x)


def test_structured_components_are_picked_as_the_walks_pick_them(mirrored2: Any) -> None:
    """A ``PerReplica`` of structures (every batch of a distributed dataset) is picked leaf by leaf in one pass: each
    rank gets what ``_select``'s walks give it, containers of the same types, and the same leaves kept to
    recognise what comes back unchanged; one whose structure holds a distributed value still goes through them."""
    held = mirrored2.run(lambda: np.float32(idist.get_replica_context().replica_id_in_sync_group))
    with mirrored2.scope():
        v = idist.Variable(np.float32(2.0), name="v_struct")
    batch = idist.PerReplica(
        [(np.ones((2, 3), np.float32), np.arange(2)), (np.zeros((2, 3), np.float32), np.arange(2, 4))]
    )
    pairs = idist.PerReplica(
        [Pair(np.float32(1), {"k": [np.float32(2)], "a": ()}), Pair(np.float32(3), {"k": [np.float32(4)], "a": ()})]
    )
    deep = idist.PerReplica([(held, 1), (held, 2)])  # a component holding a distributed value
    for structure in (
        ((batch,), {}),
        ((batch, 5, held, v), {"pairs": pairs}),
        (([batch, {"b": pairs}],), {}),
        ((deep, batch), {}),
    ):
        got, kept = mirrored2._per_rank(structure)
        want, want_kept = mirrored2._per_rank_walked(structure)
        for g, w, gk, wk in zip(got, want, kept, want_kept, strict=True):
            assert repr(idist._nest.map_structure(lambda x: 0, g)) == repr(idist._nest.map_structure(lambda x: 0, w))
            assert [_leaf(x) for x in idist._nest.flatten(g)] == [_leaf(x) for x in idist._nest.flatten(w)]
            assert len(gk) == len(wk) and all(a is b for a, b in zip(gk, wk, strict=True))

    def first_rows(pair: Any, extra: Any) -> Any:
        x, y = pair
        return pair, float(x[0, 0]) + float(y[-1]) + float(extra["pairs"].value)

    back, totals = mirrored2.run(first_rows, args=(batch, {"pairs": pairs}))
    assert [float(t) for t in _locals(mirrored2, totals)] == [3.0, 6.0]  # 1 + 1 + 1; 0 + 3 + 3
    assert all(b[0] is c[0] and b[1] is c[1] for b, c in zip(_locals(mirrored2, back), batch.values, strict=True))


def test_a_replica_changing_a_batch_in_place_leaves_the_notebooks_tensors_unchanged(mirrored2: Any) -> None:
    """A distributed batch's components are sent without a copy of their own (each replica unpickles one): a
    replica that adds to its batch in place changes its copy only, and an argument returned unchanged is still
    the notebook's tensor."""
    rng = np.random.default_rng(0)
    ds = idist.data.Dataset.from_tensor_slices((rng.random((8, 3), dtype=np.float32), np.arange(8))).batch(4)
    images, labels = next(iter(mirrored2.experimental_distribute_dataset(ds)))
    before = [np.array(np.asarray(t)) for t in _locals(mirrored2, images)]

    def bump(x: Any, y: Any) -> Any:
        x += 1.0
        return float(x.sum()), y

    sums, back = mirrored2.run(bump, args=(images, labels))
    assert [float(s) for s in _locals(mirrored2, sums)] == [pytest.approx(float(b.sum()) + b.size) for b in before]
    for t, b in zip(_locals(mirrored2, images), before, strict=True):
        np.testing.assert_array_equal(np.asarray(t), b)
    assert all(x is y for x, y in zip(_locals(mirrored2, back), labels.values, strict=True))
