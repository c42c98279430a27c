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
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import cloudpickle
import numpy as np
from distributed.diagnostics.plugin import WorkerPlugin
from distributed.utils import sync

from interdist._convert import apply_op
from interdist.replica import ps_input
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

    def create(self, shard_id: int, value: np.ndarray) -> None:
        with self._lock:
            self.values[shard_id] = np.array(value, copy=True)

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

    async def create(self, store: str, shard_id: int, value: bytes) -> str:
        self._store(store).create(shard_id, cloudpickle.loads(value))
        return "OK"

    async def read(self, store: str, shard_ids: list[int]) -> bytes:
        if store not in self.stores:
            raise KeyError(
                f"ps worker {self.worker.address} holds no variables of strategy {store} (was it "
                "restarted? a parameter server's variables are lost with it)"
            )
        return bytes(cloudpickle.dumps(self.stores[store].read(list(shard_ids))))

    async def apply(self, store: str, step_id: str, updates: bytes, read_count: int | None = None) -> bool:
        return self._store(store).apply(step_id, cloudpickle.loads(updates), read_count)

    async def stats(self, store: str) -> dict[str, Any]:
        return self._store(store).stats() if store in self.stores else {}

    async def drop(self, store: str) -> str:

        self.stores.pop(store, None)
        ps_input.drop_store(store)
        return "OK"

    async def step(self, store: str, step_id: str, fn: bytes, args: bytes, device: str) -> dict[str, Any]:

        conn = WorkerConnection(self.worker)
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self.executor, run_step, conn, store, step_id, fn, args, device)

    async def input(self, store: str, builds: list[Any], drops: list[str], device: str) -> dict[str, Any]:
        """Make the per-worker datasets and iterators this worker lacks (``ps_input.sync_resources``)."""

        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(
            self.input_executor, sync_resources, WorkerConnection(self.worker), store, list(builds), list(drops), device
        )


def ensure_ps_plugin(client: Any) -> None:
    """Register ``PSRuntime`` on the cluster (new and restarted workers get it from the scheduler)."""
    if getattr(client, "_interdist_ps_registered", False):
        return
    client.register_plugin(PSRuntime(), name=PLUGIN_NAME)
    client._interdist_ps_registered = True


class WorkerConnection(Connection):
    def __init__(self, worker: Any) -> None:
        self.worker = worker

    def _sync(self, coro_fn: Callable[[], Any]) -> Any:
        return sync(self.worker.loop, coro_fn)

    def _rpc(self, address: str) -> Any:
        return self.worker.rpc(address)
