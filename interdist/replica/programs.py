"""The engine's own programs, run on every replica like a user function.

Each takes the ``Replica`` first. Reusing the ``run`` path gives them the same
step numbering, events, timeouts and abort handling as user code.
"""

from __future__ import annotations

import copy
import json
from typing import TYPE_CHECKING, Any

import numpy as np

from interdist import _context, _gpu, _reduction
from interdist._convert import as_array, content_digest, is_array_like
from interdist.protocol import VariableMeta
from interdist.reduce_op import ReduceOp
from interdist.replica.variable import ReplicaVariable, emit_created, variable_class

if TYPE_CHECKING:
    from interdist.replica.replica import Replica


class ValueContext:
    """``tf.distribute.experimental.ValueContext``: what ``value_fn`` learns about its replica.

    ``strategy.experimental_distribute_values_from_function(value_fn)`` calls ``value_fn`` with one
    per replica.

    Examples
    --------
    >>> import interdist as idist, numpy as np
    >>> idist.ValueContext(replica_id_in_sync_group=1, num_replicas_in_sync=2)
    tf.distribute.ValueContext(replica id 1,  total replicas in sync: 2)
    >>> with idist.MirroredStrategy(["CPU:0", "CPU:1"]) as s:
    ...     v = s.experimental_distribute_values_from_function(
    ...         lambda ctx: np.float32(10 * ctx.replica_id_in_sync_group)
    ...     )
    ...     [float(x) for x in s.experimental_local_results(v)]
    [0.0, 10.0]
    """

    def __init__(self, replica_id_in_sync_group: int = 0, num_replicas_in_sync: int = 1) -> None:
        self._replica_id = replica_id_in_sync_group
        self._num = num_replicas_in_sync

    @property
    def replica_id_in_sync_group(self) -> int:
        return self._replica_id

    @property
    def num_replicas_in_sync(self) -> int:
        return self._num

    def __repr__(self) -> str:
        return f"tf.distribute.ValueContext(replica id {self._replica_id},  total replicas in sync: {self._num})"


def convert_value(value: Any) -> Any:
    """What ``value_fn`` returned, as TF keeps it: Python numbers (int, float, bool) stay Python
    numbers in the PerReplica, in ``run`` and in ``experimental_local_results`` (TF 2.21, checked)."""
    return as_array(value) if isinstance(value, list) else value


def create_variable(replica: Replica, var_id: int, meta: VariableMeta, value: np.ndarray) -> None:
    var = variable_class(ReplicaVariable, meta)(replica, var_id, meta, _gpu.place(value, replica.device))
    replica.variables[var_id] = var
    emit_created(replica, var)


def delete_variables(replica: Replica, var_ids: list[int]) -> None:
    for var_id in var_ids:
        replica.variables.pop(var_id, None)


def assign_variable(replica: Replica, var_id: int, op: str, value: Any) -> Any:
    """A cross-replica write from the notebook (the value was checked there)."""
    with _context.enter(replica.view, None):
        var = replica.variables[var_id]._update(op, value)
    return _gpu.host_copy(var.raw)  # what the assign returns: the value right after it


def read_variable(replica: Replica, var_id: int) -> Any:
    """A cross-replica read (aggregated for sync-on-read); only replica 0 replies with it."""
    with _context.enter(replica.view, None):
        out = replica.variables[var_id].read_value()
    return _gpu.to_host(out) if replica.rank == 0 else None


def read_copy(replica: Replica, var_id: int) -> Any:
    return _gpu.host_copy(replica.variables[var_id].raw)


def reduce_values(replica: Replica, op: ReduceOp, axis: _reduction.Axis, value: Any) -> Any:
    """``Strategy.reduce``: contributions gathered on replica 0, which alone replies."""
    part = _reduction.local_numer_denom(_read(value), op, axis)
    parts = replica.exchange("reduce", part, int(getattr(part[0], "nbytes", 0)))
    if replica.rank != 0:
        return None
    return _gpu.to_host(_reduction.combine(op, parts, axis))


def gather_values(replica: Replica, axis: int, value: Any) -> Any:
    v = as_array(_read(value))
    parts = replica.exchange("gather", v, v.nbytes)
    return _gpu.to_host(_reduction.gather_components(parts, axis)) if replica.rank == 0 else None


def _read(value: Any) -> Any:
    if isinstance(value, ReplicaVariable):
        return value.raw
    return value if not is_array_like(value) or isinstance(value, np.ndarray) else as_array(value)


def copy_checksums(replica: Replica) -> str:
    """This replica's mirrored variable copies, each as (name, dtype and shape, CRC-32 of its bytes), in
    a JSON object keyed by variable id (one small string, not a nest of stored results).

    Only copies that must be equal on every replica: mirrored variables (sync-on-read copies differ
    by design, and so do the copies of a NONE-aggregation variable once it was updated in replica
    context, as in TF: ``replica.diverged``). Run after a fault, to tell the user which copies differ
    (``VariablesMixin._check_copies``); ~1 GB/s."""
    out: dict[str, tuple[str, str, int]] = {}
    for var_id, var in replica.variables.items():
        meta = var.meta
        if meta.get("kind") != "mirrored" or var_id in replica.diverged:
            continue
        a = np.ascontiguousarray(_gpu.to_host(var.raw))
        crc = content_digest(a)[2]
        out[str(var_id)] = (str(meta.get("name", var_id)), f"{a.dtype}{list(a.shape)}", crc)
    return json.dumps(out)


def share_optimizer_state(replica: Replica, source: int, targets: list[int]) -> None:
    """After a worker restart: the optimizers' per-replica state (slots: momentum, moments, step counts,
    kept in ``replica.store["optimizer:<id>"]``) copied from replica ``source`` to the new ``targets``,
    so that their updates go on exactly as the survivors' (else their weights drift apart)."""
    mine = {k: v for k, v in replica.store.items() if k.startswith("optimizer:")} if replica.rank == source else None
    parts = replica.exchange("optimizer_state", mine)
    if replica.rank in targets and parts[source]:
        replica.store.update(copy.deepcopy(parts[source]))
