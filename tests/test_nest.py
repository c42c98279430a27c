"""``interdist._nest``: ``map_structure`` as ``tf.nest`` defines it (flatten, apply, pack), in one walk."""

from __future__ import annotations

import collections
from typing import Any

import pytest

from interdist import _nest

Point = collections.namedtuple("Point", "y x")


class Seq(list):  # type: ignore[type-arg]
    """A list subclass: rebuilt as its own type, as ``pack_sequence_as`` rebuilds it."""


STRUCTURES: list[Any] = [
    None,
    7,
    (),
    {},
    ((), {}),
    ((1, [2, 3]), {"b": 4, "a": Point(5, 6)}),
    {"z": {"k": [7, (8,)], "c": 9}, "m": collections.OrderedDict([("q", 10), ("p", 11)])},
    Seq([12, {"b": 13, "a": 14}]),
    [[], [()], {"e": []}],
]


@pytest.mark.parametrize("structure", STRUCTURES, ids=range(len(STRUCTURES)))
def test_map_structure_of_one_structure_is_flatten_apply_pack(structure: Any) -> None:
    calls: list[Any] = []

    def fn(x: Any) -> Any:
        calls.append(x)
        return ("leaf", x)

    out = _nest.map_structure(fn, structure)
    leaves = _nest.flatten(structure)
    assert calls == leaves  # the leaves in flatten's order: dicts by sorted key
    expected = _nest.pack_sequence_as(structure, [("leaf", x) for x in leaves])
    assert out == expected
    # The containers' types and the dicts' own key order are kept.
    assert repr(out) == repr(expected)


def test_map_structure_keeps_dict_order_and_calls_by_sorted_key() -> None:
    order: list[str] = []
    out = _nest.map_structure(lambda v: order.append(v) or v.upper(), {"b": "x", "a": "y"})
    assert order == ["y", "x"]  # a, then b
    assert list(out) == ["b", "a"] and out == {"b": "X", "a": "Y"}


def test_map_structure_of_leaves_and_of_mismatched_structures() -> None:
    assert _nest.map_structure(lambda a, b: a + b, 1, 2) == 3
    assert _nest.map_structure(lambda a, b: a + b, (1, {"x": 2}), (10, {"x": 20})) == (11, {"x": 22})
    with pytest.raises(ValueError, match="same nested structure"):
        _nest.map_structure(lambda a, b: a, 1, (1,))
    with pytest.raises(ValueError, match="same number of elements"):
        _nest.map_structure(lambda a, b: a, (1, 2), (1,))
