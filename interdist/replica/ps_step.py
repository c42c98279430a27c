"""One step of asynchronous parameter-server training: read at the start, apply at the end.

A step (a function the coordinator scheduled, or ``strategy.run`` in the notebook)
runs inside a ``StepContext``: the variables it uses are read from their ps tasks
when it starts (one message per ps task), its reads see its own writes, and its
updates are buffered and sent to the ps tasks when it ends, tagged with the
step's id. A ps applies a step id once, so a step run again on another worker
after its first worker died changes the variables once.
"""

from __future__ import annotations

import asyncio
import threading
import traceback
from collections.abc import Callable
from contextlib import contextmanager
from typing import Any

import cloudpickle
import numpy as np

from interdist import _context, _nest, _reduction
from interdist.reduce_op import resolve
from interdist.values.distributed import DistributedValues
from interdist.replica.variable import apply_op

_state = threading.local()

#: Why ``Variable(...)`` fails inside a step (TF 2.21 refuses too, with a ValueError from tf.function:
#: "tf.function only supports singleton tf.Variables created on the first call").
VARIABLE_IN_STEP = (
    "ParameterServerStrategy cannot create a variable inside a step (a function given to "
    "ClusterCoordinator.schedule or strategy.run): a step only reads variables at its start and sends "
    "updates at its end. Create the variable in the notebook under `with strategy.scope():` before "
    "scheduling the steps that use it.")


def current_step() -> StepContext | None:
    """The step running in this thread, if any."""
    return getattr(_state, "ctx", None)


class Connection:
    """Calls handlers on workers from a thread that is not the event loop's."""

    def _sync(self, coro_fn: Callable[[], Any]) -> Any:
        raise NotImplementedError

    def _rpc(self, address: str) -> Any:
        raise NotImplementedError

    def call_many(self, calls: list[tuple[str, str, dict[str, Any]]]) -> list[Any]:
        """``[(address, handler, kwargs)]`` concurrently; the results in order."""
        async def go() -> list[Any]:
            return list(await asyncio.gather(*[getattr(self._rpc(a), h)(**kw) for a, h, kw in calls]))

        return list(self._sync(go)) if calls else []


class WorkerConnection(Connection):
    def __init__(self, worker: Any) -> None:
        self.worker = worker

    def _sync(self, coro_fn: Callable[[], Any]) -> Any:
        from distributed.utils import sync

        return sync(self.worker.loop, coro_fn)

    def _rpc(self, address: str) -> Any:
        return self.worker.rpc(address)


class ClientConnection(Connection):
    def __init__(self, client: Any) -> None:
        self.client = client

    def _sync(self, coro_fn: Callable[[], Any]) -> Any:
        return self.client.sync(coro_fn)

    def _rpc(self, address: str) -> Any:
        return self.client.rpc(address)


def read_shards(conn: Connection, store: str, variables: list[Any]) -> tuple[dict[int, np.ndarray], dict[str, int]]:
    """Whole values of ``variables`` (shards joined along axis 0) and each ps task's read version."""
    wanted: dict[str, list[int]] = {}
    for v in variables:
        for shard in v._shards:
            wanted.setdefault(shard.address, []).append(shard.shard_id)
    addrs = list(wanted)
    replies = conn.call_many([(a, "interdist_ps_read", {"store": store, "shard_ids": wanted[a]}) for a in addrs])
    parts: dict[int, np.ndarray] = {}
    counts: dict[str, int] = {}
    for a, raw in zip(addrs, replies):
        values, count = cloudpickle.loads(raw)
        counts[a] = count
        parts.update(zip(wanted[a], values))
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
    return [(s.address, s.shard_id, op, np.ascontiguousarray(value[s.start:s.stop])) for s in var._shards]


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
        calls = [(a, "interdist_ps_apply", {"store": self.store, "step_id": self.step_id,
                                            "updates": cloudpickle.dumps(u), "read_count": self.read_counts.get(a)})
                 for a, u in per_ps.items()]
        self.updates = []
        return sum(bool(r) for r in self.conn.call_many(calls))


@contextmanager
def step_context(ctx: StepContext) -> Any:
    prev = getattr(_state, "ctx", None)
    _state.ctx = ctx
    try:
        yield ctx
    finally:
        _state.ctx = prev


def materialize(result: Any) -> Any:
    """A step's result as plain values (variables read, handles fetched), to send back."""
    from interdist.values.tensor import ArrayValue
    from interdist.values.variables import Variable

    def leaf(x: Any) -> Any:
        if isinstance(x, (Variable, ArrayValue)):
            return np.asarray(x)
        if isinstance(x, DistributedValues):
            return type(x)([leaf(c) for c in x.values])
        return x

    return _nest.map_structure(leaf, result)


def run_step(conn: Connection, store: str, step_id: str, fn_bytes: bytes, args_bytes: bytes,
             device: str) -> dict[str, Any]:
    """Run one scheduled step on this worker; never raises (a failure is the reply)."""
    ctx = StepContext(step_id, conn, store, device)
    try:
        with step_context(ctx):
            fn = cloudpickle.loads(fn_bytes)  # variable handles register with ctx as they unpickle
            args, kwargs = cloudpickle.loads(args_bytes)
            ctx.prefetch()
            with _context.enter(worker_view(ctx), None):
                result = materialize(fn(*args, **kwargs))
            ctx.flush()
        return {"ok": True, "result": cloudpickle.dumps(result)}
    except BaseException as exc:  # noqa: BLE001 - every failure must reach the coordinator
        try:
            err: bytes | None = cloudpickle.dumps(exc)
            cloudpickle.loads(err)
        except Exception:  # noqa: BLE001
            err = None
        return {"ok": False, "error": err, "type": type(exc).__name__, "message": str(exc),
                "traceback": traceback.format_exc()}


def worker_view(ctx: StepContext) -> Any:
    if ctx.view is None:
        ctx.view = PSWorkerView(ctx.store, ctx.device)
    return ctx.view


class PSWorkerView:
    """The ``ParameterServerStrategy`` as a step sees it on its worker: one replica, the worker's CPU."""

    def __init__(self, store: str, device: str) -> None:
        from interdist.collectives.local import local_group
        from interdist.replica.replica import Replica
        from interdist.replica.view import ReplicaContext

        self._store = store
        spec = {"world_size": 1, "devices": [device], "kind": "parameter_server"}
        self._replica = Replica(f"ps-{store}", 0, spec, local_group(1)[0], lambda e: None, lambda s, r: None)
        self._replica.view = self  # type: ignore[assignment]
        self._replica_context = ReplicaContext(self._replica)
        self.extended = self  # the few StrategyExtended members a step needs live here
        self.worker_devices = (device,)

    num_replicas_in_sync = 1
    cluster_resolver = None

    @contextmanager
    def scope(self) -> Any:
        with _context.enter(self, None):
            yield self

    def run(self, fn: Callable[..., Any], args: Any = (), kwargs: Any = None, options: Any = None) -> Any:
        self._replica.step += 1
        self._replica.seq = 0
        with _context.enter(self, self._replica_context):
            return fn(*tuple(args or ()), **dict(kwargs or {}))

    def reduce(self, reduce_op: Any, value: Any, axis: int | None = None) -> Any:
        op = resolve(reduce_op)
        if isinstance(value, DistributedValues):
            return _reduction.reduce_components(op, [np.asarray(c) for c in value.values], axis)
        return value if axis is None else _reduction.reduce_components(op, [np.asarray(value)], axis)

    def experimental_local_results(self, value: Any) -> tuple[Any, ...]:
        return value.values if isinstance(value, DistributedValues) else (value,)

    def call_for_each_replica(self, fn: Callable[..., Any], args: Any = (), kwargs: Any = None) -> Any:
        return self.run(fn, args, kwargs)

    # A dataset_fn given to ClusterCoordinator.create_per_worker_dataset runs on the worker and may
    # call these (TF's example does): the same descriptions the notebook's strategy makes.
    def experimental_distribute_dataset(self, dataset: Any, options: Any = None) -> Any:
        from interdist.replica.ps_input import DistributedDataset

        return DistributedDataset(dataset, options)

    def distribute_datasets_from_function(self, dataset_fn: Callable[..., Any], options: Any = None) -> Any:
        from interdist.replica.ps_input import DistributedDatasetsFromFunction

        return DistributedDatasetsFromFunction(dataset_fn, options)

    def experimental_distribute_datasets_from_function(self, dataset_fn: Callable[..., Any],
                                                       options: Any = None) -> Any:
        return self.distribute_datasets_from_function(dataset_fn, options)

    def _create_variable(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(VARIABLE_IN_STEP)

    def __repr__(self) -> str:
        return f"<interdist ParameterServerStrategy view on {self.worker_devices[0]}>"
