"""One step of asynchronous parameter-server training: read at the start, apply at the end.

A step (a function the coordinator scheduled, or ``strategy.run`` in the notebook)
runs inside a ``StepContext``: the variables it uses are read from their ps tasks
when it starts (one message per ps task), its reads see its own writes, and its
updates are buffered and sent to the ps tasks when it ends, tagged with the
step's id. A ps applies a step id once, so a step run again on another worker
after its first worker died changes the variables once.

How it calls the ps tasks (``Connection``, watched calls) is in ``ps_calls.py``, re-exported here.
"""

from __future__ import annotations

import time
from typing import Any

import cloudpickle
import numpy as np

from interdist import _nest
from interdist._convert import apply_op
from interdist.config import settings
from interdist.replica.ps_calls import PS_CONNECT_TIMEOUT as PS_CONNECT_TIMEOUT  # (this module's API too)
from interdist.replica.ps_calls import STILL_FROZEN_PROBE as STILL_FROZEN_PROBE
from interdist.replica.ps_calls import Connection as Connection
from interdist.replica.ps_calls import frozen_error as frozen_error
from interdist.replica.ps_calls import unavailable as unavailable
from interdist.values.distributed import DistributedValues
from interdist.values.tensor import ArrayValue
from interdist.values.variables import Variable

#: Why ``Variable(...)`` fails inside a step (TF 2.21 refuses too, with a ValueError from tf.function:
#: "tf.function only supports singleton tf.Variables created on the first call").
VARIABLE_IN_STEP = (
    "ParameterServerStrategy cannot create a variable inside a step (a function given to "
    "ClusterCoordinator.schedule or strategy.run): a step only reads variables at its start and sends "
    "updates at its end. Create the variable in the notebook under `with strategy.scope():` before "
    "scheduling the steps that use it."
)


def ps_task(device: str) -> str:
    """``/job:ps/replica:0/task:0`` of a shard's device ``/job:ps/replica:0/task:0/device:CPU:0``."""
    return device.rsplit("/device:", 1)[0]


#: Seconds an update may take to reach its ps and start being applied (``not_after``); later, the ps
#: refuses it (its sender may have given up on a frozen ps). Never shorter than 2 s.
APPLY_WINDOW_MIN = 2.0


def apply_window() -> float:
    return max(settings.frozen_after, APPLY_WINDOW_MIN)


def read_shards(conn: Connection, store: str, variables: list[Any]) -> tuple[dict[int, np.ndarray], dict[str, int]]:
    """Whole values of ``variables`` (shards joined along axis 0) and each ps task's read version."""
    wanted: dict[str, list[int]] = {}
    for v in variables:
        for shard in v._shards:
            wanted.setdefault(shard.address, []).append(shard.shard_id)
    addrs = list(wanted)
    tasks = {s.address: ps_task(s.device) for v in variables for s in v._shards}
    replies = conn.call_many([(a, "interdist_ps_read", {"store": store, "shard_ids": wanted[a]}) for a in addrs], tasks)
    parts: dict[int, np.ndarray] = {}
    counts: dict[str, int] = {}
    for a, raw in zip(addrs, replies, strict=True):
        values, count = cloudpickle.loads(raw)
        counts[a] = count
        parts.update(zip(wanted[a], values, strict=True))
    out = {}
    for v in variables:
        pieces = [parts[s.shard_id] for s in v._shards]
        out[v._var_id] = pieces[0] if len(pieces) == 1 else np.concatenate(pieces, axis=0)
    return out, counts


def split_update(var: Any, op: str, value: np.ndarray) -> list[tuple[str, int, str, np.ndarray]]:
    """One update of a (possibly sharded) variable as ``(ps address, shard id, op, part)``."""
    if len(var._shards) == 1:
        s = var._shards[0]
        return [(s.address, s.shard_id, op, value)]
    return [(s.address, s.shard_id, op, np.ascontiguousarray(value[s.start : s.stop])) for s in var._shards]


class StepContext:
    """The variables one step read and the updates it will send."""

    def __init__(self, step_id: str, conn: Connection, store: str, device: str) -> None:
        self.step_id = step_id
        self.conn = conn
        self.store = store
        self.device = device
        self.vars: dict[int, Any] = {}
        self.values: dict[int, np.ndarray] = {}
        self.read_counts: dict[str, int] = {}
        self.updates: list[tuple[str, int, str, np.ndarray]] = []
        self.view: Any = None

    def register(self, var: Any) -> None:
        self.vars.setdefault(var._var_id, var)

    def prefetch(self) -> None:
        """Read every registered variable not read yet (the step's start)."""
        todo = [v for i, v in self.vars.items() if i not in self.values]
        if not todo:
            return
        values, counts = read_shards(self.conn, self.store, todo)
        self.values.update(values)
        for a, c in counts.items():
            self.read_counts.setdefault(a, c)  # the first read is the step's read version

    def read(self, var: Any) -> np.ndarray:
        self.register(var)
        if var._var_id not in self.values:
            self.prefetch()
        return np.array(self.values[var._var_id], copy=True)

    def update(self, var: Any, op: str, value: np.ndarray) -> None:
        current = self.read(var)
        self.values[var._var_id] = apply_op(op, current, value)
        self.updates += split_update(var, op, value)

    def flush(self) -> int:
        """Send the buffered updates, one message per ps task; how many ps tasks applied them."""
        per_ps: dict[str, list[tuple[int, str, np.ndarray]]] = {}
        for addr, shard_id, op, part in self.updates:
            per_ps.setdefault(addr, []).append((shard_id, op, part))
        calls = [
            (
                a,
                "interdist_ps_apply",
                {
                    "store": self.store,
                    "step_id": self.step_id,
                    "updates": cloudpickle.dumps(u),
                    "read_count": self.read_counts.get(a),
                    "not_after": time.time() + apply_window(),
                },
            )
            for a, u in per_ps.items()
        ]
        self.updates = []
        tasks = {s.address: ps_task(s.device) for v in self.vars.values() for s in v._shards}
        for a in per_ps:
            tasks.setdefault(a, f"the parameter server at {a}")
        return sum(bool(r) for r in self.conn.call_many(calls, tasks))


def materialize(result: Any) -> Any:
    """A step's result as plain values (variables read, handles fetched), to send back."""

    def leaf(x: Any) -> Any:
        if isinstance(x, (Variable, ArrayValue)):
            return np.asarray(x)
        if isinstance(x, DistributedValues):
            return type(x)([leaf(c) for c in x.values])
        return x

    return _nest.map_structure(leaf, result)
