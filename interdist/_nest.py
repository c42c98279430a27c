"""Nested structures (tuples, lists, dicts, namedtuples) as ``tf.nest`` treats them.

Bottom layer: stdlib only. Leaves are anything that is not a tuple, list or dict.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any


def _is_namedtuple(x: object) -> bool:
    return isinstance(x, tuple) and hasattr(type(x), "_fields")


def is_nested(x: object) -> bool:
    """True for the containers ``tf.nest`` walks into."""
    return isinstance(x, (tuple, list, dict))


def flatten(structure: Any) -> list[Any]:
    """Leaves in a fixed order (dicts by sorted key, as ``tf.nest``)."""
    out: list[Any] = []
    _flatten_into(structure, out)
    return out


def _flatten_into(x: Any, out: list[Any]) -> None:
    if isinstance(x, dict):
        for k in sorted(x):
            _flatten_into(x[k], out)
    elif isinstance(x, (tuple, list)):
        for v in x:
            _flatten_into(v, out)
    else:
        out.append(x)


def flatten_up_to(shallow: Any, deep: Any) -> list[Any]:
    """What ``deep`` holds at each leaf of ``shallow``, in :func:`flatten`'s order (``tf.nest.flatten_up_to``):
    ``deep`` nests as ``shallow`` does down to those leaves, and may nest further below them.

    >>> flatten_up_to((1, {"x": 2}), ((1, 2), {"x": [3]}))
    [(1, 2), [3]]
    """
    if isinstance(shallow, dict):
        return [x for k in sorted(shallow) for x in flatten_up_to(shallow[k], deep[k])]
    if isinstance(shallow, (tuple, list)):
        return [x for s, d in zip(shallow, deep, strict=True) for x in flatten_up_to(s, d)]
    return [deep]


def pack_sequence_as(structure: Any, leaves: list[Any]) -> Any:
    """Inverse of :func:`flatten`."""
    it = iter(leaves)
    result = _pack(structure, it)
    rest = list(it)
    if rest:
        raise ValueError(f"pack_sequence_as got {len(rest)} leaves more than the structure holds")
    return result


def _pack(x: Any, it: Iterator[Any]) -> Any:
    if isinstance(x, dict):
        packed = {k: _pack(x[k], it) for k in sorted(x)}
        return type(x)((k, packed[k]) for k in x) if type(x) is not dict else {k: packed[k] for k in x}
    if _is_namedtuple(x):
        return type(x)(*[_pack(v, it) for v in x])
    if isinstance(x, (tuple, list)):
        return type(x)(_pack(v, it) for v in x)
    try:
        return next(it)
    except StopIteration:
        raise ValueError("pack_sequence_as: the structure holds more leaves than were given") from None


def map_structure(fn: Callable[..., Any], *structures: Any) -> Any:
    """Apply ``fn`` leaf-wise to structures of the same shape.

    >>> map_structure(lambda a, b: a + b, (1, {"x": 2}), (10, {"x": 20}))
    (11, {'x': 22})
    """
    if not structures:
        raise ValueError("map_structure needs at least one structure")
    first = structures[0]
    if len(structures) == 1:
        return _map1(fn, first)
    if not any(isinstance(s, (tuple, list, dict)) for s in structures):
        return fn(*structures)  # leaves only (a ``run``'s usual result): nothing to check or rebuild
    for other in structures[1:]:
        assert_same_structure(first, other)
    flat = [flatten(s) for s in structures]
    # Not strict: assert_same_structure lets a dict stand for a sequence of as many elements (its
    # values unchecked), so the leaf counts may differ; zip keeps its old behaviour there.
    return pack_sequence_as(first, [fn(*leaves) for leaves in zip(*flat, strict=False)])


def _map1(fn: Callable[[Any], Any], x: Any) -> Any:
    """``map_structure(fn, x)`` in one walk: ``fn`` called on the leaves in :func:`flatten`'s order (dicts by
    sorted key), containers rebuilt as :func:`pack_sequence_as` rebuilds them. Every ``run`` maps its
    arguments and results several times on both sides; flattening, then packing through an iterator,
    took most of that."""
    if isinstance(x, dict):
        packed = {k: _map1(fn, x[k]) for k in sorted(x)}
        return type(x)((k, packed[k]) for k in x) if type(x) is not dict else {k: packed[k] for k in x}
    if isinstance(x, (tuple, list)):
        if _is_namedtuple(x):
            return type(x)(*[_map1(fn, v) for v in x])
        return type(x)([_map1(fn, v) for v in x])
    return fn(x)


def assert_same_structure(a: Any, b: Any) -> None:
    """Raise ``ValueError`` when ``a`` and ``b`` do not nest the same way."""
    if is_nested(a) != is_nested(b):
        raise ValueError(f"The two structures don't have the same nested structure: {a!r} and {b!r}")
    if isinstance(a, dict):
        if not isinstance(b, dict) or sorted(a) != sorted(b):
            raise ValueError(f"The two structures don't have the same keys: {a!r} and {b!r}")
        for k in a:
            assert_same_structure(a[k], b[k])
    elif isinstance(a, (tuple, list)):
        if len(a) != len(b):
            raise ValueError(f"The two structures don't have the same number of elements: {len(a)} and {len(b)}")
        for x, y in zip(a, b, strict=True):
            assert_same_structure(x, y)


def check_call_args(fn: Any, args: Any, kwargs: Any, positional: bool = True) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """``args`` and ``kwargs`` for ``fn(*args, **kwargs)``, checked as TF's ``run`` and ``merge_call`` check them.

    ``run`` (``positional``) takes a list or tuple (else ``ValueError``, TF's "positional args must be
    a list or tuple"); ``merge_call`` takes any iterable (``TypeError`` otherwise, as Python's ``*``).
    ``kwargs``: ``None`` or a mapping (``TypeError``, Python's "argument after ** must be a mapping").
    """
    if positional:
        if not isinstance(args, (list, tuple)):
            raise ValueError(f"positional args must be a list or tuple, got {type(args)}")
        args = tuple(args)
    else:
        try:
            args = tuple(args)
        except TypeError:
            raise TypeError(f"Value after * must be an iterable, not {type(args).__name__}") from None
    if kwargs is None:
        kwargs = {}
    elif not isinstance(kwargs, Mapping):
        name = getattr(fn, "__qualname__", type(fn).__name__)
        raise TypeError(f"{name}() argument after ** must be a mapping, not {type(kwargs).__name__}")
    return args, dict(kwargs)
