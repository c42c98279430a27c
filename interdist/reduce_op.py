"""``ReduceOp``: how a set of per-replica values is combined."""

from __future__ import annotations

import enum
from typing import Any


class ReduceOp(enum.Enum):
    """Indicates how a set of values should be reduced.

    As in TensorFlow, the enum looks up by exact value (``ReduceOp("SUM")``),
    while ``Strategy.reduce`` and ``ReplicaContext.all_reduce`` also accept the
    names in any case (see :func:`resolve`).

    >>> ReduceOp("MEAN")
    <ReduceOp.MEAN: 'MEAN'>
    """

    SUM = "SUM"
    MEAN = "MEAN"

    # Members are singletons (unpickled too), compared by identity: hashed by it, in C. Enum's own hash is
    # Python (``hash(self._name_)``), and every small all-reduce looks its plan up by a key holding its op.
    __hash__ = object.__hash__

    @staticmethod
    def from_variable_aggregation(aggregation: Any) -> ReduceOp:
        """The op that aggregates variable updates (SUM or MEAN)."""
        name = getattr(aggregation, "name", aggregation)
        if name == "SUM":
            return ReduceOp.SUM
        if name == "MEAN":
            return ReduceOp.MEAN
        raise ValueError(
            f"Could not convert from `tf.VariableAggregation` {aggregation} to `tf.distribute.ReduceOp` type"
        )


def resolve(reduce_op: Any) -> ReduceOp:
    """Accept a ``ReduceOp``, a ``VariableAggregation`` SUM/MEAN or a name in any case."""
    if isinstance(reduce_op, ReduceOp):
        return reduce_op
    if isinstance(reduce_op, str):
        try:
            return ReduceOp(reduce_op.upper())
        except ValueError:
            pass
    elif getattr(reduce_op, "name", None) in ("SUM", "MEAN") and type(reduce_op).__name__ == "VariableAggregation":
        return ReduceOp(reduce_op.name)
    choices = ", ".join(repr(op.value) for op in ReduceOp)
    raise ValueError(
        f"{reduce_op!r} is not a valid ReduceOp: reduce_op must be a tf.distribute.ReduceOp or one of the "
        f"strings {choices} (any case)"
    )


#: The names as written most often (``resolve`` takes any case).
_BY_NAME = {name: op for op in ReduceOp for name in (op.value, op.value.lower(), op.value.capitalize())}


def known_reduce_op(reduce_op: Any) -> ReduceOp | None:
    """``reduce_op`` when it is a ``ReduceOp`` or one of its usual names ("sum", "MEAN"), else None (then
    :func:`check_reduce_op` says what is wrong with it): every all_reduce's check, in one look."""
    if type(reduce_op) is ReduceOp:
        return reduce_op
    return _BY_NAME.get(reduce_op) if type(reduce_op) is str else None


def check_reduce_op(reduce_op: Any, where: str, kind: str = "") -> ReduceOp:
    """``reduce_op`` as ``Strategy.reduce``, ``extended.reduce_to``/``batch_reduce_to`` and ``all_reduce`` take it.

    As TF 2.21: a ``ReduceOp``, or its name in any case ("sum", "Mean"); another string is a
    ``ValueError`` ("'BOGUS' is not a valid ReduceOp"). Anything else (an int, ``None``, a
    ``VariableAggregation``, another enum) fails TF's internal ``assert isinstance(reduce_op, ReduceOp)``
    with an ``AssertionError``; under CentralStorageStrategy ``all_reduce`` and ``batch_reduce_to``
    raise ``ValueError`` instead ("`reduce_op` must be Reduce.SUM or Reduce.MEAN."), as TF does.
    (TF's MirroredStrategy silently sums with such an op in ``all_reduce``/``batch_reduce_to``,
    whatever it is, ``VariableAggregation.MEAN`` included; interdist refuses it, as TF's other paths do.)
    """
    known = known_reduce_op(reduce_op)  # the commonest, first: every all_reduce passes here
    if known is not None:
        return known
    if isinstance(reduce_op, str):
        return resolve(reduce_op)  # any other case ("sUm"), or the ValueError naming the choices
    message = (
        f"{where}: reduce_op must be a tf.distribute.ReduceOp (ReduceOp.SUM or ReduceOp.MEAN) or its name "
        f"as a string, but got {reduce_op!r} of type {type(reduce_op).__name__}"
    )
    if kind == "central_storage" and where in ("all_reduce", "batch_reduce_to"):
        raise ValueError(f"`reduce_op` must be Reduce.SUM or Reduce.MEAN. ({message})")
    raise AssertionError(message)
