"""``Metric``: the base class of the metrics, its state kept in sync-on-read variables.

Part of ``interdist.metrics``, which re-exports its public names; the metrics themselves are in ``classes``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from interdist import _context
from interdist._gpu import to_host
from interdist.values.tensor import Tensor
from interdist.values.variables import Variable, VariableAggregation, VariableSynchronization

_AGGREGATIONS = {
    "sum": VariableAggregation.SUM,
    "mean": VariableAggregation.MEAN,
    "only_first_replica": VariableAggregation.ONLY_FIRST_REPLICA,
    "none": VariableAggregation.NONE,
}


class _Result(Tensor):
    """What ``result()`` returns: a ``Tensor`` that also formats like TF's (``f"{acc:.3f}"``), and whose
    ``numpy()`` is a NumPy scalar for a scalar, as ``EagerTensor.numpy()``."""

    def numpy(self) -> Any:
        a = np.array(self._get())
        return a[()] if a.ndim == 0 else a

    def __format__(self, format_spec: str) -> str:
        return format(self.numpy(), format_spec)


def _initial(initializer: Any, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    if initializer is None or (isinstance(initializer, str) and initializer.lower() == "zeros"):
        return np.zeros(shape, dtype)
    if isinstance(initializer, str) and initializer.lower() == "ones":
        return np.ones(shape, dtype)
    if callable(initializer):
        return np.asarray(initializer(shape, dtype=dtype), dtype)
    return np.full(shape, initializer, dtype)


class Metric:
    """Base class (``keras.metrics.Metric``): create metrics inside ``strategy.scope()`` to make them distributed.

    A subclass makes its state with ``add_variable`` (or ``add_weight``) and implements
    ``update_state`` and ``result``.

    Examples
    --------
    A metric that counts the values it saw, on every replica:

    >>> import interdist as idist, numpy as np
    >>> class Count(idist.metrics.Metric):
    ...     def __init__(self, name=None):
    ...         super().__init__(name=name)
    ...         self.count = self.add_variable((), "zeros", name="count")  # sync-on-read, SUM
    ...     def update_state(self, values):
    ...         self.count.assign_add(np.float32(np.size(values)))
    ...     def result(self):
    ...         return self.count.read_value()
    >>> with idist.MirroredStrategy(["CPU:0", "CPU:1"]) as s:
    ...     with s.scope():
    ...         seen = Count()
    ...     _ = s.run(lambda: seen.update_state(np.ones(idist.get_replica_context().replica_id_in_sync_group + 1)))
    ...     seen, float(seen.result())  # 1 value on replica 0, 2 on replica 1
    (<Count name=count>, 3.0)
    """

    def __init__(self, dtype: Any = None, name: str | None = None) -> None:
        self.name = name or _snake(type(self).__name__)
        self.dtype = np.dtype(dtype or np.float32)
        self._variables: list[Any] = []

    @property
    def variables(self) -> list[Any]:
        return list(self._variables)

    def add_variable(
        self,
        shape: Any,
        initializer: Any,
        dtype: Any = None,
        aggregation: str = "sum",
        name: str | None = None,
    ) -> Any:
        """A state variable, sync-on-read (a replica updates its copy; a read aggregates as ``aggregation``)."""
        if not hasattr(self, "_variables"):
            raise RuntimeError("You forgot to call `super().__init__()` in the `__init__()` method. Go add it!")
        shape = (shape,) if isinstance(shape, int) else tuple(shape)
        value = _initial(initializer, shape, np.dtype(dtype or self.dtype))
        variable = Variable(
            value,
            name=f"{self.name}/{name or 'variable'}",
            trainable=False,
            synchronization=VariableSynchronization.ON_READ,
            aggregation=_AGGREGATIONS[str(aggregation).lower()],
        )
        self._variables.append(variable)
        return variable

    def add_weight(self, shape: Any = (), initializer: Any = None, dtype: Any = None, name: str | None = None) -> Any:
        return self.add_variable(shape=shape, initializer=initializer, dtype=dtype, name=name)

    def update_state(self, *args: Any, **kwargs: Any) -> None:
        """Accumulate statistics for the metric."""
        raise NotImplementedError

    def result(self) -> Any:
        """The metric's current value."""
        raise NotImplementedError

    def reset_state(self) -> None:
        """Set every state variable back to zero (cross-replica: every replica's copy)."""
        for v in self.variables:
            v.assign(np.zeros(v.shape, v.dtype))

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """``update_state(*args, **kwargs)``, then ``result()``."""
        self.update_state(*args, **kwargs)
        return self.result()

    def get_config(self) -> dict[str, Any]:
        return {"name": self.name, "dtype": self.dtype.name}

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> Any:
        return cls(**config)

    def _as_result(self, value: Any) -> _Result:
        """A result as TF gives it: on the host in the notebook, on the replica's device inside ``run``."""
        if _context.current().replica_context is not None and self._variables:
            return _Result(value, str(self._variables[0].device))
        return _Result(value)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} name={self.name}>"


def _snake(name: str) -> str:
    return "".join(f"_{c.lower()}" if c.isupper() and i else c.lower() for i, c in enumerate(name))


def _read(variable: Any) -> Any:
    return np.asarray(to_host(variable.read_value()))  # a GPU replica's copy is a CuPy array


def _assign_add(variable: Any, value: Any) -> None:
    """Keras 3's ``variable.assign_add(value)``, which is ``variable.assign(variable + value)``.

    Inside ``strategy.run`` a replica adds to its own copy (as before). Anywhere else the variable is read,
    added to and assigned: what TF allows on a sync-on-read SUM variable in cross-replica context (the new
    total split evenly across the copies), so that a metric made in ``strategy.scope()`` can be updated in
    the notebook, in the scope or out of it, as in Keras 3.
    """
    if _context.get_replica_context() is not None and _context.has_strategy():
        variable.assign_add(value)
    else:
        variable.assign(_read(variable) + to_host(value))
