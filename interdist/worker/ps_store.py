"""Variables held by parameter-server tasks, and the handlers that read, update and run steps.

A ``PSRuntime`` worker plugin (its own, beside ``ReplicaRuntime``) is registered on
every worker of a ``ParameterServerStrategy``'s cluster. On a ``ps`` task it keeps
one ``ShardStore`` per strategy: the variable shards placed there, the ids of the
steps whose updates it applied (so that a step run again after its worker died
is never applied twice) and, for each applied step, its staleness: how many
other updates this store applied between the step's read and its apply. On a
``worker`` task it runs scheduled steps (``ps_worker.run_step``) one at a time and
keeps the per-worker datasets and iterators of ``replica/ps_input.py``.
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import cloudpickle
import numpy as np
from distributed.core import send_recv
from distributed.diagnostics.plugin import WorkerPlugin
from distributed.utils import sync

from interdist._convert import apply_op
from interdist.errors import TaskFrozenError, UnavailableError
from interdist.protocol_errors import dump_exception
from interdist.replica import faults, ps_input, ps_liveness
from interdist.replica.ps_input import sync_resources
from interdist.replica.ps_step import Connection
from interdist.replica.ps_worker import run_step

PLUGIN_NAME = "interdist-ps"


class ShardStore:
    """One strategy's variable shards on one ps task (thread-safe)."""

    def __init__(self) -> None:
        self.values: dict[int, np.ndarray] = {}
        self.applied: dict[str, int] = {}  # step id -> the store's update count after applying it
        self.applied_count = 0
        self.staleness: list[int] = []
        self.duplicates = 0
        self._lock = threading.Lock()

    def create(self, shard_id: int, value: np.ndarray, if_absent: bool = False) -> bool:
        """Hold ``value`` as the shard (replacing it, or only where there is none yet: whether it was made)."""
        with self._lock:
            if if_absent and shard_id in self.values:
                return False
            self.values[shard_id] = np.array(value, copy=True)
            return True

    def read(self, shard_ids: list[int]) -> tuple[list[np.ndarray], int]:
        """The shards' values and the update count they reflect (the step's read version)."""
        with self._lock:
            # Values are replaced on update, never changed in place: sending the reference is safe.
            return [self.values[i] for i in shard_ids], self.applied_count

    def apply(self, step_id: str, updates: list[tuple[int, str, np.ndarray]], read_count: int | None) -> bool:
        """Apply one step's updates, once: a step id seen before is ignored (returns False)."""
        with self._lock:
            if step_id in self.applied:
                self.duplicates += 1
                return False
            new: dict[int, np.ndarray] = {}
            for i, op, v in updates:  # in order, on a working copy: all or nothing
                new[i] = apply_op(op, new.get(i, self.values[i]), v)
            self.values.update(new)
            if read_count is not None:
                self.staleness.append(self.applied_count - read_count)
            self.applied_count += 1
            self.applied[step_id] = self.applied_count
            return True

    def stats(self) -> dict[str, Any]:
        with self._lock:
            return {
                "applied_count": self.applied_count,
                "applied_ids": list(self.applied),
                "staleness": list(self.staleness),
                "duplicates": self.duplicates,
                "shards": sorted(self.values),
            }


class PSRuntime(WorkerPlugin):
    """Handlers ``interdist_ps_*`` on every worker of a parameter-server cluster."""

    name = PLUGIN_NAME
    idempotent = True

    def setup(self, worker: Any) -> None:
        self.worker = worker
        self.stores: dict[str, ShardStore] = {}
        self.incarnation = f"{time.strftime('%H:%M:%S')}, {uuid.uuid4().hex[:8]}"
        self.armed: dict[str, dict[str, Any]] = {}  # idist.debug.inject on a ParameterServerStrategy
        # One scheduled step at a time per worker, as TF runs one closure at a time per worker.
        self.executor = ThreadPoolExecutor(1, thread_name_prefix="interdist-ps-step")
        # Datasets are made in a thread of their own, so that making one does not wait for a running step.
        self.input_executor = ThreadPoolExecutor(1, thread_name_prefix="interdist-ps-input")
        worker.handlers.update(
            {
                "interdist_ps_create": self.create,
                "interdist_ps_read": self.read,
                "interdist_ps_apply": self.apply,
                "interdist_ps_stats": self.stats,
                "interdist_ps_drop": self.drop,
                "interdist_ps_step": self.step,
                "interdist_ps_input": self.input,
                "interdist_ps_incarnation": self.incarnation_id,
                "interdist_ps_whoami": self.whoami,
                "interdist_ps_arm": self.arm,
                "interdist_ps_fire": self.fire,
                "interdist_ps_disarm": self.disarm,
            }
        )
        worker.interdist_ps = self

    def teardown(self, worker: Any) -> None:

        self.executor.shutdown(wait=False, cancel_futures=True)
        self.input_executor.shutdown(wait=False, cancel_futures=True)
        for store in list(self.stores):
            ps_input.drop_store(store)
        self.stores.clear()

    def _store(self, store: str) -> ShardStore:
        s = self.stores.get(store)
        if s is None:
            s = self.stores[store] = ShardStore()
        return s

    async def create(self, store: str, shard_id: int, value: bytes, if_absent: bool = False) -> str:
        made = self._store(store).create(shard_id, cloudpickle.loads(value), if_absent)
        return "OK" if made else "EXISTS"

    def _held(self, store: str) -> ShardStore:
        """The strategy's store, which a restarted worker lacks (a parameter server's variables die with it)."""
        s = self.stores.get(store)
        if s is None:
            raise UnavailableError(
                f"this process (started {self.incarnation}) holds no variables of the strategy: it was restarted "
                "and the variables it held were lost"
            )
        return s

    async def incarnation_id(self) -> str:
        """Which process this is: a restarted worker answers at the same name (or address) with a new id."""
        return self.incarnation

    async def whoami(self) -> dict[str, Any]:
        """This process's pid and host key: a caller on the same host watches its process state
        (``replica/ps_liveness.py``) while it waits for this task."""
        return ps_liveness.whoami()

    async def read(self, store: str, shard_ids: list[int]) -> bytes:
        held = self._held(store)
        self._check_shards(held, shard_ids)
        return bytes(cloudpickle.dumps(held.read(list(shard_ids))))

    def _check_shards(self, held: ShardStore, shard_ids: Any) -> None:
        missing = [i for i in shard_ids if i not in held.values]
        if missing:
            raise UnavailableError(
                f"this process (started {self.incarnation}) holds no shard {missing} of the strategy: they were "
                "lost with an earlier process and not restored"
            )

    async def apply(
        self, store: str, step_id: str, updates: bytes, read_count: int | None = None, not_after: float | None = None
    ) -> bool:
        """Apply a step's updates once. An update that arrives after ``not_after`` (its sender's wall
        clock) is refused: this process was stopped while it was on its way, and its sender gave up on
        it (``ps_step.Connection``), so the step was reported failed and must not change anything now."""
        _refuse_late(step_id, not_after)
        held = self._held(store)
        parsed = cloudpickle.loads(updates)
        self._check_shards(held, [i for i, _, _ in parsed])
        if self.armed:
            fired = await self._fire("ps_step", f"the apply of step {step_id}")
            if fired == "freeze":  # stopped in the middle of this apply: its sender may have given up
                _refuse_late(step_id, not_after)
        return held.apply(step_id, parsed, read_count)

    async def arm(self, at: str, fault: str, seconds: float, task: str) -> str:
        """``idist.debug.inject`` on a ParameterServerStrategy: arm ``fault`` at ``at`` on this task, once.

        It stays armed until it fires (``persist=True``'s meaning): a task runs steps as the coordinator
        schedules them, so there is no "next program" of the task to disarm it after."""
        self.armed[at] = {"fault": fault, "seconds": float(seconds), "task": task}
        return "OK"

    async def disarm(self) -> str:
        """``idist.debug.disarm``: drop every fault armed on this task that has not fired."""
        self.armed.clear()
        return "OK"

    async def fire(self, at: str) -> str:
        """Fire a fault armed at ``at`` now (``"checkpoint_save"``: called in the middle of a save)."""
        await self._fire(at, "a checkpoint save")
        return "OK"

    async def _fire(self, at: str, where: str) -> str | None:
        """Fire the fault armed at ``at``, if any; the fault that fired."""
        armed = self.armed.pop(at, None)
        if armed is None:
            return None
        where = f"{at} ({where}) on {armed['task']}"
        if armed["fault"] == "slow":  # alive: this worker's event loop goes on answering meanwhile
            await asyncio.sleep(armed["seconds"])
        else:
            faults.act(armed["fault"], armed["seconds"], where)
        return str(armed["fault"])

    async def stats(self, store: str) -> dict[str, Any]:
        return self._store(store).stats() if store in self.stores else {}

    async def drop(self, store: str) -> str:

        self.stores.pop(store, None)
        ps_input.drop_store(store)
        return "OK"

    async def step(self, store: str, step_id: str, fn: bytes, args: bytes, device: str) -> dict[str, Any]:

        conn = WorkerConnection(self.worker)
        loop = asyncio.get_running_loop()
        armed = self.armed.pop("ps_step", None)
        if armed is not None:  # in the step's thread, as the step's own code would meet it
            where = f"ps_step (the start of step {step_id}) on {armed['task']}"
            return await loop.run_in_executor(
                self.executor, _faulty_step, armed, where, conn, store, step_id, fn, args, device
            )
        return await loop.run_in_executor(self.executor, run_step, conn, store, step_id, fn, args, device)

    async def input(self, store: str, builds: list[Any], drops: list[str], device: str) -> dict[str, Any]:
        """Make the per-worker datasets and iterators this worker lacks (``ps_input.sync_resources``)."""

        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(
            self.input_executor, sync_resources, WorkerConnection(self.worker), store, list(builds), list(drops), device
        )


def _refuse_late(step_id: str, not_after: float | None) -> None:
    late = time.time() - not_after if not_after is not None else 0.0
    if late > 0:
        raise TaskFrozenError(
            f"the update of step {step_id} reached this process {late:.1f} s after its sender stopped waiting "
            "for it (this process was stopped): it was not applied"
        )


def _faulty_step(armed: dict[str, Any], where: str, *step: Any) -> dict[str, Any]:
    """A step that meets an injected fault first: a raise is the step's error, as the step's own would be."""
    try:
        faults.act(armed["fault"], armed["seconds"], where)
    except Exception as exc:  # noqa: BLE001 - the injected error is the step's reply
        return {
            "ok": False,
            "error": dump_exception(exc),
            "type": type(exc).__name__,
            "message": str(exc),
            "traceback": "",
        }
    return run_step(*step)


def ensure_ps_plugin(client: Any) -> None:
    """Register ``PSRuntime`` on the cluster (new and restarted workers get it from the scheduler)."""
    if getattr(client, "_interdist_ps_registered", False):
        return
    client.register_plugin(PSRuntime(), name=PLUGIN_NAME)
    client._interdist_ps_registered = True


async def pooled_call(
    rpc: Any,
    address: str,
    handler: str,
    kwargs: dict[str, Any],
    connect_timeout: float | None,
    comms: list[Any] | None = None,
) -> Any:
    """``rpc(address).handler(**kwargs)`` through ``rpc``'s connection pool, connecting within
    ``connect_timeout`` seconds (Dask's pooled call always waits its full connect timeout, 30 s).
    The comm is appended to ``comms``: a caller that gives up aborts it (it goes back to no pool)."""
    pool = rpc(address).pool
    comm = await pool.connect(address, timeout=connect_timeout)
    if comms is not None:
        comms.append(comm)
    try:
        return await send_recv(comm=comm, op=handler, **kwargs)
    finally:
        pool.reuse(address, comm)


class PooledConnection(Connection):
    """Calls the ps tasks' handlers over the pooled connections of ``owner``, a Dask client (the notebook:
    ``strategy/ps_connection.ClientConnection``) or worker (``WorkerConnection``); each says how to wait."""

    def __init__(self, owner: Any) -> None:
        self.owner = owner

    def _rpc(self, address: str) -> Any:
        return self.owner.rpc(address)

    def _scheduler(self) -> Any:
        return self.owner.scheduler

    async def _call(
        self,
        address: str,
        handler: str,
        kwargs: dict[str, Any],
        connect_timeout: float | None,
        comms: list[Any] | None = None,
    ) -> Any:
        return await pooled_call(self.owner.rpc, address, handler, kwargs, connect_timeout, comms)


class WorkerConnection(PooledConnection):
    """From a worker (a thread that is not its event loop)."""

    def _sync(self, coro_fn: Callable[[], Any]) -> Any:
        return sync(self.owner.loop, coro_fn)
