"""``ParameterServerStrategy``'s faults and recovery: faults armed on its tasks (``idist.debug.inject``), the ps
tasks found lost or frozen, and ``recover`` from a checkpoint once a lost one is back.

A mixin of ``ParameterServerStrategy`` (``parameter_server.py``), split from there: the state it uses is
declared here and set by that class's ``__init__``.
"""

from __future__ import annotations

import asyncio
import gc
import time
from collections.abc import Callable
from typing import Any

import cloudpickle
import numpy as np

from interdist.checkpoint import Checkpoint, CheckpointManager
from interdist.client import roles
from interdist.errors import TaskFrozenError, UnavailableError
from interdist.replica import faults, ps_liveness, ps_step
from interdist.strategy.dispatch import ReplicaDispatch
from interdist.strategy.ps_connection import ClientConnection
from interdist.values import ps_variable


class PSRecoveryMixin(ReplicaDispatch):
    """Faults and recovery of a parameter server strategy's tasks: ``recover``, and what ``idist.debug`` and the
    ``ClusterCoordinator`` call (``_inject``, ``_disarm``, ``_ps_lost``, ``_known_lost``, ``_known_frozen``)."""

    # Set by ``ParameterServerStrategy.__init__`` (parameter_server.py).
    _conn: ClientConnection
    _spec: Any  # the cluster spec as at the start
    _store: str
    _ps_tasks: list[roles.TaskWorker]
    _ps_devices: list[str]
    _ps_addresses: list[str]
    _ps_incarnations: list[Any]
    _ps_timeout: float
    _worker_tasks: list[roles.TaskWorker]
    _worker_addresses: list[str]
    _coordinator: Any

    def _ps_names(self) -> dict[str, str]:
        return {t.address: f"/job:ps/replica:0/task:{t.index}" for t in self._ps_tasks}

    def _inject(self, task: Any, fault: str, at: str, seconds: float, persist: bool = False) -> None:
        """``idist.debug.inject`` here: ``task`` a worker index, ``"worker:i"`` or ``"ps:i"``.

        ``persist`` changes nothing: a task's fault always waits until its point is reached (what
        ``persist=True`` asks for on the other strategies). Tasks run steps as the coordinator schedules
        them, so no call is a task's "next program", after which an unreached fault could be dropped;
        ``idist.debug.disarm`` drops them (``_disarm``)."""
        if at not in faults.PS_POINTS:
            raise ValueError(f"on a ParameterServerStrategy, at must be one of {faults.PS_POINTS}, got {at!r}")
        job, index = ("worker", task) if isinstance(task, int) and not isinstance(task, bool) else (None, None)
        if isinstance(task, str) and task.count(":") == 1 and task.split(":")[1].isdigit():
            job, index = task.split(":")[0], int(task.split(":")[1])
        tasks = {"worker": self._worker_tasks, "ps": self._ps_tasks}.get(job or "")
        found = [t for t in tasks or [] if t.index == index]
        if not found:
            names = [f"worker:{t.index}" for t in self._worker_tasks] + [f"ps:{t.index}" for t in self._ps_tasks]
            raise ValueError(f"{task!r} is not a task of this strategy (one of {names}, or a worker's index)")
        t = found[0]
        address = self._worker_addresses[self._worker_tasks.index(t)] if job == "worker" else t.address
        label = f"/job:{job}/replica:0/task:{index}"
        ps_names = self._ps_names() if job == "ps" else {address: label}  # watched: a frozen task is named
        self._conn.call_many(
            [(address, "interdist_ps_arm", {"at": at, "fault": fault, "seconds": seconds, "task": label})], ps_names
        )
        if at == "checkpoint_save":  # Checkpoint.write fires it in the middle of its next save
            self._checkpoint_fault: Callable[[], Any] | None = lambda: self._conn.call_many(
                [(address, "interdist_ps_fire", {"at": "checkpoint_save"})], ps_names
            )

    def _disarm(self) -> None:
        """``idist.debug.disarm`` here: every task drops the faults armed on it (a task that cannot be
        reached now is skipped: a lost task's faults went with its process)."""
        self._checkpoint_fault = None
        workers = [
            (a, f"/job:worker/replica:0/task:{t.index}")
            for t, a in zip(self._worker_tasks, self._worker_addresses, strict=True)
        ]
        tasks = {**dict(workers), **self._ps_names()}
        self._conn.call_many([(a, "interdist_ps_disarm", {}) for a in tasks], tasks, return_exceptions=True)

    def _ps_lost(self, error: UnavailableError) -> None:
        """A step found ``error.task`` gone (or frozen): the notebook's own calls to it fail at once from
        now on (while it stays frozen)."""
        for t in self._ps_tasks:
            if f"/job:ps/replica:0/task:{t.index}" == error.task:
                if isinstance(error, TaskFrozenError):
                    self._conn.frozen.setdefault(t.address, error)
                else:
                    self._conn.lost.setdefault(t.address, error)

    def _known_frozen(self) -> TaskFrozenError | None:
        """The error of a ps task found frozen that still is (looked at again now, within 2 s), if any."""
        conn = self._conn
        for address in [t.address for t in self._ps_tasks if t.address in conn.frozen]:

            async def look(a: str = address) -> None:
                await conn._check_still_frozen(a, conn.frozen)

            try:
                conn._sync(look)
            except TaskFrozenError as e:
                return e
        return None

    def _known_lost(self) -> UnavailableError | None:
        """The error of a ps task the notebook already found gone, if any."""
        for t in self._ps_tasks:
            err = self._conn.lost.get(t.address)
            if err is not None:
                return err
        return None

    def _lost_ps(self) -> list[int]:
        """The ps tasks whose process is gone or was replaced since the variables were placed there."""
        addrs = [t.address for t in self._ps_tasks]

        async def probe(a: str, before: str) -> bool:
            try:
                now = await asyncio.wait_for(
                    self._conn._call(a, "interdist_ps_incarnation", {}, ps_step.PS_CONNECT_TIMEOUT), 10
                )
            except (TimeoutError, OSError):
                return True
            return bool(now != before)

        async def go() -> list[bool]:
            return list(await asyncio.gather(*[probe(a, b) for a, b in zip(addrs, self._ps_incarnations, strict=True)]))

        return [i for i, lost in enumerate(self._conn._sync(go)) if lost or addrs[i] in self._conn.lost]

    def recover(self, checkpoint: Any, path: str | None = None, timeout: float | None = None) -> str:
        """Bring the strategy back after a parameter server was lost, from a checkpoint.

        A parameter server's variables die with its process (TF's answer: restart the parameter
        server and restore from the last checkpoint). Once its worker is back (a Dask nanny restarts
        it; or start a worker with the same name, ``ps-<i>``), this finds it, places the lost variables
        there again and restores every variable of ``checkpoint`` from ``path``, so that training goes
        on from the checkpoint. ``ClusterCoordinator.schedule`` works again afterwards. A variable
        that a lost ps task held and ``checkpoint`` does not hold stays lost: reading or updating it
        raises ``UnavailableError``.

        Parameters
        ----------
        checkpoint : Checkpoint or CheckpointManager
            What to restore. With a manager, ``path`` defaults to its latest checkpoint.
        path : str, optional
            The checkpoint directory to restore.
        timeout : float, optional
            Seconds to wait for a lost ps task's worker to be back (default: the strategy's timeout).

        Returns
        -------
        str
            The path restored.

        Raises
        ------
        ValueError
            No checkpoint path, or the checkpoint cannot be restored (checked before anything changes).
        TimeoutError
            A lost ps task's worker did not come back within ``timeout`` (naming it).
        """
        self._check_usable()
        manager = checkpoint if isinstance(checkpoint, CheckpointManager) else None
        ckpt = manager.checkpoint if manager is not None else checkpoint
        if not isinstance(ckpt, Checkpoint):
            raise TypeError(
                f"recover needs an interdist Checkpoint or CheckpointManager, got {type(checkpoint).__name__}"
            )
        path = path if path is not None else (manager.latest_checkpoint if manager is not None else None)
        if path is None:
            raise ValueError("recover needs a checkpoint to restore: pass path=, or a CheckpointManager that has one")
        values = ckpt._load(path)  # every value read and checked before anything changes
        gc.collect()  # variables the notebook dropped (in reference cycles) are not asked for
        lost = self._lost_ps()
        tracked = {id(v) for v, _ in values.values()}
        restored = [h for key, h in ps_variable._handles.items() if key[0] == self._store and id(h) in tracked]
        if lost:
            self._replace_ps(lost, restored, timeout)
        for var, value in values.values():
            var.assign(value)
        if self._coordinator is not None:
            self._coordinator._recovered()
        return str(path)

    def _replace_ps(self, lost: list[int], handles: list[Any], timeout: float | None) -> None:
        """Find the lost ps tasks' new workers and place the shards of ``handles`` (the variables the
        checkpoint restores) there again: zeros, until the restore assigns them. Other variables keep
        naming the lost process: using them raises ``UnavailableError``."""
        timeout = float(timeout if timeout is not None else self._ps_timeout)
        spec = self._spec
        old = {i: self._ps_tasks[i] for i in lost}
        deadline = time.monotonic() + timeout
        new: dict[int, roles.TaskWorker] = {}
        while True:
            left = max(0.1, deadline - time.monotonic())
            found = roles.find_task_workers(self._conn.client, spec, [("ps", old[i].index) for i in lost], left)
            incarnations = (
                self._conn.call_many(
                    [(t.address, "interdist_ps_incarnation", {}) for t in found],
                    {t.address: f"/job:ps/replica:0/task:{t.index}" for t in found},
                )
                if all(t.address not in self._conn.lost for t in found)
                else [None] * len(found)
            )
            fresh = [
                inc is not None and inc != self._ps_incarnations[i] for i, inc in zip(lost, incarnations, strict=True)
            ]
            if all(fresh):
                new = dict(zip(lost, found, strict=True))
                break
            if time.monotonic() >= deadline:
                raise TimeoutError(
                    f"parameter server(s) {[self._ps_devices[i] for i in lost]} did not come back within "
                    f"{timeout:g} s: start a worker with the same name (ps-<index>) on the scheduler, "
                    "then call recover again"
                )
            time.sleep(0.2)
        moved = {old[i].address: new[i].address for i in lost}
        calls = []
        for h in handles:
            shards = []
            for sh in h._desc["shards"]:
                shard_id, address, device, start, stop = sh
                if address in moved:
                    address = moved[address]
                    shape = (stop - start, *h._shape[1:]) if len(h._desc["shards"]) > 1 else h._shape
                    zeros = np.zeros(shape, h.dtype)
                    payload = {"store": self._store, "shard_id": shard_id, "value": cloudpickle.dumps(zeros)}
                    calls.append((address, "interdist_ps_create", payload))
                shards.append((shard_id, address, device, start, stop))
            h._desc["shards"] = shards
            h._shards = tuple(ps_variable.Shard(*x) for x in shards)
        for i in lost:
            ps_liveness.peers.pop(old[i].address, None)  # a new process: it tells its pid at the next call
            self._conn.frozen.pop(old[i].address, None)
            self._ps_tasks[i] = new[i]
            self._ps_addresses[i] = new[i].address
            self._ps_incarnations[i] = incarnations[lost.index(i)]
            task = f"/job:ps/replica:0/task:{old[i].index}"
            if new[i].address == old[i].address:
                self._conn.lost.pop(old[i].address, None)
            else:  # what still names the old process: the variables the checkpoint did not hold
                self._conn.lost[old[i].address] = ps_step.unavailable(
                    task, old[i].address, "it was restarted, and this variable was not in the checkpoint recovered"
                )
        self._conn.call_many(calls, self._ps_names())
