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
from collections.abc import Callable
from typing import Any

import cloudpickle
import numpy as np

from interdist import _nest
from interdist._convert import apply_op
from interdist.errors import UnavailableError
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


#: Seconds a call waits to connect to a parameter server before asking the scheduler whether it is
#: still there (Dask's own connect timeout is 30 s: a dead ps must be named sooner).
PS_CONNECT_TIMEOUT = 2.0


def ps_task(device: str) -> str:
    """``/job:ps/replica:0/task:0`` of a shard's device ``/job:ps/replica:0/task:0/device:CPU:0``."""
    return device.rsplit("/device:", 1)[0]


def unavailable(task: str, address: str, why: str) -> UnavailableError:
    return UnavailableError(
        f"parameter server {task} (Dask worker {address}) is unavailable: {why}. A parameter server's "
        "variables are lost with its process: once it is back (a nanny restarts it, or start a worker "
        "with the same name), call strategy.recover(checkpoint) to restore them from the last checkpoint "
        "and go on (TF's answer: restart the parameter server and restore from a checkpoint)",
        task=task,
    )


class Connection:
    """Calls handlers on workers from a thread that is not the event loop's.

    A call to a parameter server (its address in ``tasks``) that cannot connect within
    ``PS_CONNECT_TIMEOUT``, or whose connection breaks, asks the scheduler whether the worker is
    still there: gone, it raises ``UnavailableError`` naming the task; there, it is tried once more
    with Dask's own timeout (every ps handler may run twice: a step's updates apply once).
    """

    #: ps addresses found gone: later calls to them fail at once (``ClientConnection`` keeps them).
    lost: dict[str, UnavailableError]

    def _sync(self, coro_fn: Callable[[], Any]) -> Any:
        raise NotImplementedError

    def _rpc(self, address: str) -> Any:
        raise NotImplementedError

    def _scheduler(self) -> Any:
        raise NotImplementedError

    def call_many(self, calls: list[tuple[str, str, dict[str, Any]]], tasks: dict[str, str] | None = None) -> list[Any]:
        """``[(address, handler, kwargs)]`` concurrently; the results in order. ``tasks``: the ps
        tasks' names by address, for the calls that go to parameter servers."""
        tasks = tasks or {}
        lost = getattr(self, "lost", None)
        if lost:
            for a, _, _ in calls:
                if a in lost:
                    raise lost[a]

        async def one(a: str, h: str, kw: dict[str, Any]) -> Any:
            if a not in tasks:
                return await getattr(self._rpc(a), h)(**kw)
            try:
                return await self._call(a, h, kw, PS_CONNECT_TIMEOUT)
            except UnavailableError as e:  # raised by the ps itself: a new process, without the variables
                if e.task is None:
                    raise unavailable(tasks[a], a, str(e)) from None
                raise
            except (TimeoutError, OSError) as e:
                if not await self._listed(a):
                    err = unavailable(tasks[a], a, f"its worker left the cluster ({type(e).__name__}: {e})")
                    if lost is not None:
                        lost[a] = err
                    raise err from None
                try:  # still listed: slow, or the scheduler has not seen it die yet
                    return await self._call(a, h, kw, None)
                except (TimeoutError, OSError) as e2:
                    raise unavailable(tasks[a], a, f"it does not answer ({type(e2).__name__}: {e2})") from None

        async def go() -> list[Any]:
            return list(await asyncio.gather(*[one(a, h, kw) for a, h, kw in calls]))

        return list(self._sync(go)) if calls else []

    async def _call(self, address: str, handler: str, kwargs: dict[str, Any], connect_timeout: float | None) -> Any:
        """One call, connecting within ``connect_timeout`` seconds (None: Dask's own timeout)."""
        raise NotImplementedError

    async def _listed(self, address: str) -> bool:
        """Whether the scheduler still lists the worker at ``address`` (waits up to 1 s for it to leave:
        a killed worker's stream closes at once, but the scheduler may not have read that yet)."""
        deadline = asyncio.get_running_loop().time() + 1.0
        while True:
            try:
                info = await asyncio.wait_for(self._scheduler().identity(n_workers=-1), 5)
            except (TimeoutError, OSError):
                return True  # the scheduler does not answer: no verdict, keep trying the worker
            if address not in info.get("workers", {}):
                return False
            if asyncio.get_running_loop().time() >= deadline:
                return True
            await asyncio.sleep(0.1)


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
