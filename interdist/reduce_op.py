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
        f"reduce_op must be a tf.distribute.ReduceOp or one of the strings {choices} (any case), but got {reduce_op!r}"
    )
