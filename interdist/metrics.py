"""Metrics built on sync-on-read variables: each replica accumulates locally, a read aggregates.

``update_state`` in replica context changes only the replica's own copies (no
communication); ``result()`` in the notebook sums the copies across replicas.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from interdist.values.variables import Variable, VariableAggregation, VariableSynchronization


def _sum_var(name: str, dtype: Any) -> Any:
    return Variable(
        np.zeros((), dtype),
        name=name,
        trainable=False,
        synchronization=VariableSynchronization.ON_READ,
        aggregation=VariableAggregation.SUM,
    )


class Metric:
    """Base class: create metrics inside ``strategy.scope()`` to make them distributed."""

    def __init__(self, name: str | None = None, dtype: Any = np.float32) -> None:
        self.name = name or type(self).__name__.lower()
        self.dtype = np.dtype(dtype)

    @property
    def variables(self) -> list[Any]:
        raise NotImplementedError  # pragma: no cover - abstract

    def reset_state(self) -> None:
        """Set every accumulator back to zero (cross-replica)."""
        for v in self.variables:
            v.assign(np.zeros(v.shape, v.dtype))


class Sum(Metric):
    """The sum of all values seen, on all replicas.

    >>> m = Sum()
    >>> m.update_state([1.0, 2.0]); float(m.result())
    3.0
    """

    def __init__(self, name: str | None = None, dtype: Any = np.float32) -> None:
        super().__init__(name, dtype)
        self.total = _sum_var(f"{self.name}/total", self.dtype)

    @property
    def variables(self) -> list[Any]:
        return [self.total]

    def update_state(self, values: Any, sample_weight: Any = None) -> None:
        v = np.asarray(values, dtype=self.dtype)
        if sample_weight is not None:
            v = v * np.asarray(sample_weight, dtype=self.dtype)
        self.total.assign_add(np.asarray(np.sum(v), dtype=self.dtype))

    def result(self) -> np.ndarray:
        return np.asarray(self.total.read_value())


class Mean(Metric):
    """The (weighted) mean of all values seen, on all replicas: sum of values / number of values.

    >>> m = Mean()
    >>> m.update_state([1.0, 2.0, 6.0]); float(m.result())
    3.0
    """

    def __init__(self, name: str | None = None, dtype: Any = np.float32) -> None:
        super().__init__(name, dtype)
        self.total = _sum_var(f"{self.name}/total", self.dtype)
        self.count = _sum_var(f"{self.name}/count", self.dtype)

    @property
    def variables(self) -> list[Any]:
        return [self.total, self.count]

    def update_state(self, values: Any, sample_weight: Any = None) -> None:
        v = np.asarray(values, dtype=self.dtype)
        if sample_weight is None:
            w = np.ones_like(v)
        else:
            w = np.broadcast_to(np.asarray(sample_weight, dtype=self.dtype), v.shape)
        self.total.assign_add(np.asarray(np.sum(v * w), dtype=self.dtype))
        self.count.assign_add(np.asarray(np.sum(w), dtype=self.dtype))

    def result(self) -> np.ndarray:
        total = np.asarray(self.total.read_value())
        count = np.asarray(self.count.read_value())
        return np.asarray(total / count if count else np.zeros((), self.dtype), dtype=self.dtype)
