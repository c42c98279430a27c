"""``ReplicaComponent``: one copy of a distributed variable as replica code sees it (``v.values[r]``).

Split from variable.py, which re-exports it; ``_ReplicaSide`` is the base of both, so that either reads
as a value where the other is expected.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

import numpy as np
from numpy.lib.mixins import NDArrayOperatorsMixin

from interdist import _context, _gpu, autodiff
from interdist.autodiff import Differentiable
from interdist.protocol import resolve_variable
from interdist.values.distributed_variable import VariableComponent
from interdist.values.variables import _maybe

if TYPE_CHECKING:
    from interdist.replica.variable import ReplicaVariable


class _ReplicaSide(Differentiable, NDArrayOperatorsMixin):
    """A variable or one of its copies as a replica holds it (``ReplicaVariable``, ``ReplicaComponent``):
    read with ``read_value()`` where a value is expected."""

    def read_value(self) -> np.ndarray:
        raise NotImplementedError(
            f"{type(self).__name__} must define read_value() (ReplicaVariable and ReplicaComponent do)"
        )


def _resolve_component(group_id: str, var_id: int, rank: int) -> Any:
    """Unpickling a ``ReplicaComponent``: the notebook's ``VariableComponent`` (or the copy view on a replica)."""
    var = resolve_variable(group_id, var_id)
    if isinstance(var, _ReplicaSide):  # a ReplicaVariable: this is a replica
        return cast("ReplicaVariable", var).values[rank]
    return var._values[rank]


class ReplicaComponent(_ReplicaSide):
    """One copy of a distributed variable as replica code sees it (``v.values[r]``, TF's component variable).

    It passes for the notebook's ``VariableComponent`` (an ``interdist.Variable``). Its name, device,
    shape, dtype and attributes are known on every replica. Reading it is a collective (every replica
    reads, each gets copy ``r``): the copy may live in another worker process. Only its own replica can
    write it (TF: an assign changes that copy only); inside ``merge_fn`` the other replicas skip the write.
    """

    def __init__(self, var: ReplicaVariable, rank: int) -> None:
        self._var = var
        self._rank = rank

    @property  # type: ignore[misc]  # a read-only __class__, for isinstance (see the class docstring)
    def __class__(self) -> type:
        return VariableComponent

    def __reduce__(self) -> Any:
        return (_resolve_component, (self._var.group_id, self._var.var_id, self._rank))

    @property
    def name(self) -> str:
        base = self._var.meta["name"]
        return f"{base}:0" if self._rank == 0 else f"{base}/replica_{self._rank}:0"

    @property
    def device(self) -> str:
        return str(self._var._replica.devices[self._rank])

    @property
    def shape(self) -> tuple[int, ...]:
        return self._var.shape

    @property
    def dtype(self) -> np.dtype[Any]:
        return self._var.dtype

    @property
    def trainable(self) -> bool:
        return self._var.trainable

    @property
    def synchronization(self) -> Any:
        return self._var.synchronization

    @property
    def aggregation(self) -> Any:
        return self._var.aggregation

    def read_value(self) -> np.ndarray:
        return self._var._all_copies()[self._rank]

    def value(self) -> np.ndarray:
        return self.read_value()

    def numpy(self) -> np.ndarray:
        return _gpu.to_host(self.read_value())  # type: ignore[no-any-return]

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        a: np.ndarray = _gpu.to_host(self.read_value())
        return a.astype(dtype) if dtype is not None else a

    def __array_ufunc__(self, ufunc: Any, method: str, *inputs: Any, **kwargs: Any) -> Any:
        if autodiff.recording():  # on a GradientTape: the read is recorded
            return autodiff.apply_ufunc(ufunc, method, inputs, kwargs)
        conv = tuple(x.read_value() if isinstance(x, _ReplicaSide) else x for x in inputs)
        return getattr(ufunc, method)(*conv, **kwargs)

    def __hash__(self) -> int:
        return id(self)

    def _write(self, op: str, value: Any) -> ReplicaComponent:
        replica = self._var._replica
        if self._rank == replica.rank:
            if isinstance(value, _ReplicaSide):
                value = value.read_value()
            self._var._local(op, value)
        elif _context.current().replica_context is not None:
            raise NotImplementedError(
                f"Replica {replica.rank} cannot {op} copy {self._rank} of variable {self._var.meta['name']!r} "
                f"({self.name}) inside a replica function: that copy lives in replica {self._rank}'s worker "
                f"process. Write it from replica {self._rank} (v.values[{self._rank}] there), inside merge_call, "
                "or outside run."
            )
        # cross-replica (merge_fn): every replica runs this; the copy's own replica applies it
        return self

    def assign(self, value: Any, use_locking: Any = None, name: Any = None, read_value: bool = True) -> Any:
        return _maybe(read_value, self._write("assign", value))

    def assign_add(self, delta: Any, use_locking: Any = None, name: Any = None, read_value: bool = True) -> Any:
        return _maybe(read_value, self._write("assign_add", delta))

    def assign_sub(self, delta: Any, use_locking: Any = None, name: Any = None, read_value: bool = True) -> Any:
        return _maybe(read_value, self._write("assign_sub", delta))

    def __repr__(self) -> str:
        return f"<interdist.Variable '{self.name}' shape={self.shape} dtype={np.dtype(self.dtype).name}>"
