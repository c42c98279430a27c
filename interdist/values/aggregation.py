"""How a variable is synchronized and aggregated: TF's two enums, and a distributed variable's description
(``variable_meta``) as the workers and a restore know it. Split from ``variables.py``, which re-exports it."""

from __future__ import annotations

import enum
from typing import Any

import numpy as np


class VariableSynchronization(enum.Enum):
    """When a distributed variable is aggregated: on write (mirrored) or on read.

    ``AUTO`` and ``ON_WRITE`` give a ``MirroredVariable`` in a ``MirroredStrategy``'s scope, ``ON_READ``
    a ``SyncOnReadVariable``; ``NONE`` only a non-trainable variable there (as in TF).

    Examples
    --------
    >>> import interdist as idist
    >>> idist.VariableSynchronization.ON_READ
    <VariableSynchronization.ON_READ: 3>
    >>> idist.Variable(1.0).synchronization
    <VariableSynchronization.AUTO: 0>
    """

    AUTO = 0
    NONE = 1
    ON_WRITE = 2
    ON_READ = 3


class VariableAggregation(enum.Enum):
    """How replica-context updates to a distributed variable are combined.

    ``SUM`` and ``MEAN`` reduce the replicas' updates, ``ONLY_FIRST_REPLICA`` takes replica 0's, and
    ``NONE`` (the default) applies each replica's update to its own copy only, so the copies of a
    mirrored variable updated in replica context may drift apart (a warning says so, as TF lets them).

    Examples
    --------
    >>> import interdist as idist
    >>> idist.VariableAggregation.MEAN
    <VariableAggregation.MEAN: 2>
    >>> idist.Variable(1.0, aggregation=idist.VariableAggregation.SUM).aggregation
    <VariableAggregation.SUM: 1>
    """

    NONE = 0
    SUM = 1
    MEAN = 2
    ONLY_FIRST_REPLICA = 3


def _enum(cls: Any, value: Any, what: str) -> Any:
    # TF accepts only the enum members (a string such as "sum" is refused).
    if isinstance(value, cls):
        return value
    raise ValueError(
        f"Invalid variable {what} mode: {value!r}; use one of "
        f"{', '.join(f'{cls.__name__}.{m}' for m in cls.__members__)}"
    )


def check_mean_dtype(a: dict[str, Any]) -> None:
    """MEAN aggregation needs a floating (or complex) dtype, as in TF."""
    if a["aggregation"].name == "MEAN" and a["value"].dtype.kind not in "fc":
        raise ValueError(
            f"Cannot create variable {a['name']!r} of dtype {a['value'].dtype.name} with "
            "tf.VariableAggregation.MEAN: MEAN aggregation needs a floating dtype"
        )


def variable_meta(a: dict[str, Any], kind: str, strategy_kind: str) -> dict[str, Any]:
    """What the workers (and a restore) know of a distributed variable, from its normalized arguments."""
    return {
        "name": a["name"],
        "trainable": a["trainable"],
        "synchronization": a["synchronization"].name,
        "aggregation": a["aggregation"].name,
        "kind": kind,
        "strategy_kind": strategy_kind,
    }


def args_from_meta(meta: dict[str, Any], shape: tuple[int, ...], dtype: Any) -> dict[str, Any]:
    """The normalized arguments of a variable known by its ``variable_meta`` (its value only by shape and dtype)."""
    return {
        "name": meta["name"],
        "trainable": meta["trainable"],
        "synchronization": VariableSynchronization[meta["synchronization"]],
        "aggregation": VariableAggregation[meta["aggregation"]],
        "value": np.empty(shape, np.dtype(dtype)),
    }
