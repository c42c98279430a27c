"""``ForeignVariable``: another strategy's distributed variable met inside a replica function. Split from
``variables.py``, which re-exports it."""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.lib.mixins import NDArrayOperatorsMixin

from interdist import autodiff
from interdist.autodiff import Differentiable
from interdist.protocol import current_resolving, resolve_variable


class ForeignVariable(Differentiable, NDArrayOperatorsMixin):
    """Another strategy's distributed variable inside a replica function: TF converts it to its value
    (``v + 1``, ``np.asarray(v)``, ``v.value()``), but ``read_value``, ``numpy`` and every write raise
    ``RuntimeError`` ("Mixing different tf.distribute.Strategy objects")."""

    def __init__(
        self, group_id: str, var_id: int, name: str, value: np.ndarray, copies: int, owner: str, readable: bool = False
    ) -> None:
        self._group_id, self._var_id, self._name, self._readable = group_id, var_id, name, readable
        self._snapshot, self._copies, self._owner = value, copies, owner
        replica = current_resolving()
        self._rank = replica.rank if replica is not None else 0

    def __reduce__(self) -> Any:
        return (resolve_variable, (self._group_id, self._var_id))

    def _mixing(self, what: str) -> RuntimeError:
        return RuntimeError(
            f"Mixing different tf.distribute.Strategy objects: {what} of the variable {self._name!r}, created in "
            f"the scope of {self._owner}, inside another strategy's replica function. Create the variable in "
            "this strategy's scope, or pass its value (np.asarray(v)) as an argument"
        )

    def _value(self) -> np.ndarray:
        if self._rank >= self._copies:
            raise IndexError(
                f"the variable {self._name!r} of {self._owner} has {self._copies} copies; replica {self._rank} of "
                "another strategy has none to read. Create the variable in this strategy's scope"
            )
        return np.array(self._snapshot, copy=True)

    @property
    def name(self) -> str:
        return f"{self._name}:0"

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self._snapshot.shape)

    @property
    def dtype(self) -> np.dtype[Any]:
        return self._snapshot.dtype

    def value(self) -> np.ndarray:
        return self._value()

    def read_value(self) -> np.ndarray:
        if self._readable:  # CentralStorage's variables (TF: AggregatingVariable) read from anywhere
            return self._value()
        raise self._mixing("read_value()")

    def numpy(self) -> np.ndarray:
        if self._readable:
            return self._value()
        raise self._mixing("numpy()")

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        a = self._value()
        return a.astype(dtype) if dtype is not None else a

    def __array_ufunc__(self, ufunc: Any, method: str, *inputs: Any, **kwargs: Any) -> Any:
        if autodiff.recording():  # on a GradientTape: the read is recorded
            return autodiff.apply_ufunc(ufunc, method, inputs, kwargs)
        conv = tuple(x._value() if isinstance(x, ForeignVariable) else x for x in inputs)
        return getattr(ufunc, method)(*conv, **kwargs)

    def assign(self, value: Any, use_locking: Any = None, name: Any = None, read_value: bool = True) -> Any:
        raise self._mixing("assign()")

    def assign_add(self, delta: Any, use_locking: Any = None, name: Any = None, read_value: bool = True) -> Any:
        raise self._mixing("assign_add()")

    def assign_sub(self, delta: Any, use_locking: Any = None, name: Any = None, read_value: bool = True) -> Any:
        raise self._mixing("assign_sub()")

    def __repr__(self) -> str:
        return f"<interdist.Variable '{self.name}' of {self._owner} (another strategy's)>"
