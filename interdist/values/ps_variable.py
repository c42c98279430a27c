"""Handles to variables held by parameter-server tasks (``ParameterServerStrategy``).

A handle carries everything needed to find its shards (ps addresses, shard ids,
row ranges), so it works unchanged when it travels inside a scheduled function
to a worker: there it reads and writes through the worker's current step
(``replica/ps_step.py``); in the notebook it reads the ps tasks directly.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Any, cast

import numpy as np

from interdist import _context
from interdist._convert import apply_op, convert_for_variable
from interdist.autodiff import Differentiable
from interdist.values.tensor import Tensor
from interdist.values.variables import Variable, VariableAggregation, VariableSynchronization

# (store id, variable id) -> the notebook's handle, so a handle coming back from a worker is the same object.
# Weak: a variable the notebook no longer holds is not asked for by ParameterServerStrategy.recover.
_handles: weakref.WeakValueDictionary[tuple[str, int], Any] = weakref.WeakValueDictionary()


@dataclass(frozen=True)
class Shard:
    """Rows ``start:stop`` (axis 0) of a variable, held by the ps task at ``address``."""

    shard_id: int
    address: str
    device: str
    start: int
    stop: int


class ShardView(Differentiable):
    """One shard of a partitioned variable, as ``ShardedVariable.variables`` lists them."""

    def __init__(self, var: PSVariable, index: int) -> None:
        self._var, self._index = var, index

    @property
    def name(self) -> str:
        return f"{self._var._name}/part_{self._index}:0"

    @property
    def device(self) -> str:
        return self._var._shards[self._index].device

    @property
    def shape(self) -> tuple[int, ...]:
        s = self._var._shards[self._index]
        return (s.stop - s.start, *self._var._shape[1:])

    @property
    def dtype(self) -> np.dtype[Any]:
        return self._var.dtype

    @property
    def trainable(self) -> bool:
        return self._var.trainable

    def _tape_value(self) -> Any:
        return self.numpy()

    def _tape_key(self) -> Any:
        return ("shard", self._var._tape_key(), self._index)

    def read_value(self) -> Tensor:
        """This shard's rows of the variable, a tensor on its ps task."""
        return Tensor(self.numpy(), self.device)

    def numpy(self) -> np.ndarray:
        s = self._var._shards[self._index]
        return np.asarray(self._var.read_value()[s.start : s.stop])

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        a = self.numpy()
        return a.astype(dtype) if dtype is not None else a

    def assign(self, value: Any) -> ShardView:
        return self._apply("assign", value)

    def assign_add(self, value: Any) -> ShardView:
        return self._apply("assign_add", value)

    def assign_sub(self, value: Any) -> ShardView:
        return self._apply("assign_sub", value)

    def _apply(self, op: str, value: Any) -> ShardView:
        """Write this shard only (its ps task), as TF's shard variables do."""
        var, index = self._var, self._index
        part = convert_for_variable(np.asarray(value), var.dtype, self.shape, self.name)
        ctx = _context.current_ps_step()
        if ctx is not None and ctx.store == var._store:
            s = var._shards[index]
            current = ctx.read(var)
            current[s.start : s.stop] = apply_op(op, current[s.start : s.stop], part)
            ctx.values[var._var_id] = current  # the step sees its own write
            ctx.updates.append((s.address, s.shard_id, op, part))  # sent to the shard's ps task at the step's end
        elif var._strategy is None:
            raise RuntimeError(
                f"variable {self.name!r} of a ParameterServerStrategy was updated on a worker outside a scheduled step"
            )
        else:
            var._strategy._write_ps_shard(var, index, op, part)
        return self

    def __repr__(self) -> str:
        return f"<interdist.Variable '{self.name}' shape={self.shape} dtype={self._var.dtype.name} on {self.device}>"


class PSVariable(Variable):
    """A variable of ``ParameterServerStrategy``: one logical value, in shards on ps tasks."""

    kind = "parameter_server"

    def __init__(
        self, desc: dict[str, Any], strategy: Any = None
    ) -> None:  # no Variable.__init__: the value lives on the ps
        self._desc = desc
        self._strategy = strategy
        self._store: str = desc["store"]
        self._var_id: int = desc["var_id"]
        self._name: str = desc["name"]
        self._shape: tuple[int, ...] = tuple(desc["shape"])
        self._dtype: np.dtype[Any] = np.dtype(desc["dtype"])
        self._trainable: bool = desc["trainable"]
        self._synchronization = VariableSynchronization[desc["synchronization"]]
        self._aggregation = VariableAggregation[desc["aggregation"]]
        self._shards: tuple[Shard, ...] = tuple(Shard(*s) for s in desc["shards"])
        self._id = self._var_id

    def __reduce__(self) -> Any:
        return (_rebuild, (self._desc,))

    def _tape_parts(self) -> list[Any] | None:
        return list(self.variables) if len(self._shards) > 1 else None

    # -- attributes ------------------------------------------------------------------
    @property
    def shape(self) -> tuple[int, ...]:
        return self._shape

    @property
    def dtype(self) -> np.dtype[Any]:
        return np.dtype(self._dtype)

    @property
    def device(self) -> str:
        return self._shards[0].device

    @property
    def name(self) -> str:
        # TF 2.21's ShardedVariable is made without a name: its ``name`` is "ShardedVariable"
        # (each shard is named "<name>/part_<i>:0").
        return "ShardedVariable" if len(self._shards) > 1 else f"{self._name}:0"

    @property
    def distribute_strategy(self) -> Any:
        return self._strategy

    @property
    def variables(self) -> tuple[ShardView, ...]:
        """The shards (one for an unpartitioned variable), as TF's ``ShardedVariable.variables``."""
        return tuple(ShardView(self, i) for i in range(len(self._shards)))

    # -- reads and writes ------------------------------------------------------------
    def read_value(self) -> np.ndarray:
        ctx = _context.current_ps_step()
        if ctx is not None and ctx.store == self._store:
            return np.asarray(ctx.read(self))  # the value read at the step's start, with the step's own writes
        if self._strategy is None:
            raise RuntimeError(
                f"variable {self._name!r} of a ParameterServerStrategy was read on a worker outside a scheduled step"
            )
        return cast("np.ndarray", self._strategy._read_ps_variable(self))

    def _apply(self, op: str, value: Any) -> Any:
        v = self._check(value)
        ctx = _context.current_ps_step()
        if ctx is not None and ctx.store == self._store:
            ctx.update(self, op, v)  # sent to the ps tasks when the step ends
        elif self._strategy is None:
            raise RuntimeError(
                f"variable {self._name!r} of a ParameterServerStrategy was updated on a worker outside a scheduled step"
            )
        else:
            self._strategy._write_ps_variable(self, op, v)
        return self

    def __repr__(self) -> str:
        try:
            body = np.array2string(self.read_value(), separator=", ")
        except Exception as e:  # noqa: BLE001 - a repr must not fail because a ps is gone
            body = f"<unreadable: {type(e).__name__}>"
        return f"<interdist.Variable '{self._name}:0' shape={self._shape} dtype={self._dtype.name}, numpy={body}>"


def _rebuild(desc: dict[str, Any]) -> PSVariable:
    """Unpickling a handle: the notebook's own handle, or (on a worker) a new one bound to the step."""
    own = _handles.get((desc["store"], desc["var_id"]))
    ctx = _context.current_ps_step()
    if ctx is not None and ctx.store == desc["store"]:
        var = ctx.vars.get(desc["var_id"]) or PSVariable(desc)
        ctx.register(var)  # read at the step's start, with the step's other variables
        return var
    return own if own is not None else PSVariable(desc)
