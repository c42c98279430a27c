"""``tf.distribute.experimental.coordinator``: schedule asynchronous steps on parameter-server workers.

``ClusterCoordinator(strategy)`` keeps one thread per worker task. ``schedule``
queues a step and returns a ``RemoteValue`` at once; an idle worker takes the
next step and runs it (``replica/ps_step.py``). Each step has an id: when a
worker dies during a step, the step goes back to the front of the queue and
another worker (or the dead one's replacement, found again by its Dask worker
name) runs it; the ps tasks apply a step id at most once.

Per-worker datasets (``create_per_worker_dataset``, ``coordinator_datasets.py``) are made on every worker
(``replica/ps_input.py``); a step's iterator argument becomes the iterator of the
worker that runs it. A worker that comes back after dying gets every dataset and
iterator again before its next step, the iterators from their first element (TF
re-creates them the same way).

Errors follow TF: the first error a step raises is raised once, by the next
``schedule``, ``join`` or ``done``; the steps still queued then are cancelled
(their ``RemoteValue.fetch`` raises ``interdist.errors.CancelledError``). A lost parameter
server is TF's ``UnavailableError`` (``interdist.errors.UnavailableError``, naming the ps task): the
queued steps fail with it at once, and every ``schedule``, ``join`` and ``done`` raises it until
``strategy.recover(checkpoint)`` has brought the variables back. A frozen parameter server (its process
stopped) is ``TaskFrozenError``, a subclass: raised once, then again only while it stays stopped; once it
resumes, steps run again without ``recover``. A frozen worker's step is given to another worker (the ps
tasks apply its id once, so the frozen worker's late update is ignored), as TF reschedules the closure
of an unresponsive worker. ``RemoteValue`` and
``PerWorkerValues`` live in ``coordinator_values.py``; this module re-exports them, as TF's
``tf.distribute.experimental.coordinator`` does.

Examples
--------
(Skipped: it needs a Dask cluster with ps and worker tasks, a few seconds to start;
``ParameterServerStrategy``'s example runs these steps on one.)

>>> coordinator = idist.coordinator.ClusterCoordinator(strategy)  # doctest: +SKIP
>>> result = coordinator.schedule(step_fn, args=(x,))  # doctest: +SKIP
>>> coordinator.join()  # doctest: +SKIP
>>> result.fetch()  # doctest: +SKIP
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable
from typing import Any

import cloudpickle

from interdist import _nest
from interdist.errors import CancelledError, TaskFrozenError, UnavailableError, WorkerLostError
from interdist.input.dataset import Dataset
from interdist.replica import ps_input
from interdist.strategy.coordinator_datasets import (
    PerWorkerDataset,
    PerWorkerIterator,
    PerWorkerResources,
    _ResourceError,
)
from interdist.strategy.coordinator_values import PerWorkerValues, RemoteValue, _rebuild_error
from interdist.strategy.parameter_server import ParameterServerStrategy

logger = logging.getLogger("interdist")

#: A step whose worker died this many times is given up (TF retries for ever).
MAX_ATTEMPTS = 10


class _Closure:
    def __init__(self, step_id: str, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        self.step_id, self.fn, self.args, self.kwargs = step_id, fn, args, kwargs
        self.remote = RemoteValue(step_id)
        self.fn_bytes = cloudpickle.dumps(fn)


class ClusterCoordinator(PerWorkerResources):
    """Schedules steps on the workers of a ``ParameterServerStrategy`` and collects their results.

    One thread per worker task takes the next queued step; ``schedule`` returns a ``RemoteValue`` at
    once, ``join`` waits for every step (see the module for errors and lost workers).

    Examples
    --------
    (Skipped: it needs a Dask cluster with ps and worker tasks; ``ParameterServerStrategy``'s example
    runs these steps on one.)

    >>> coordinator = idist.experimental.coordinator.ClusterCoordinator(strategy)  # doctest: +SKIP
    >>> results = [coordinator.schedule(lambda: np.float32(1.0)) for _ in range(3)]  # doctest: +SKIP
    >>> coordinator.join()  # doctest: +SKIP
    >>> [float(r.fetch()) for r in results]  # doctest: +SKIP
    [1.0, 1.0, 1.0]
    """

    def __init__(self, strategy: Any) -> None:

        if not isinstance(strategy, ParameterServerStrategy):
            raise ValueError(f"ClusterCoordinator needs a ParameterServerStrategy, but got {type(strategy).__name__}")
        if strategy._coordinator is not None:
            raise ValueError("this ParameterServerStrategy already has a ClusterCoordinator")
        strategy._coordinator = self
        self.strategy = strategy
        self._client = strategy._lease.client
        self._queue: deque[_Closure] = deque()
        self._cond = threading.Condition()
        self._inflight = 0  # scheduled and not finished (queued or running)
        self._running = 0  # taken by a worker and not finished
        self._error: BaseException | None = None  # the first error not raised yet (TF keeps one)
        self._cancelling = False
        self._stopped = False
        # A lost parameter server: every schedule, join and done raises it until strategy.recover().
        self._ps_error: UnavailableError | None = None
        self._ids = itertools.count()
        self._session = uuid.uuid4().hex[:8]
        self._addresses: list[str] = strategy._worker_addresses  # updated in place when a worker is replaced
        self._devices = [f"/job:worker/replica:0/task:{t.index}/device:CPU:0" for t in strategy._worker_tasks]
        # Per-worker datasets and iterators (replica/ps_input.py), in creation order: key -> (kind, payload).
        self._resources: dict[str, tuple[str, Any]] = {}
        self._built: list[set[str]] = [set() for _ in self._addresses]  # what each worker holds
        self._to_drop: list[set[str]] = [set() for _ in self._addresses]
        self._forgotten: deque[str] = deque()  # keys whose notebook object was collected (appended by finalizers)
        self._res_lock = threading.Lock()
        self._res_ids = itertools.count()
        self._threads = [
            threading.Thread(target=self._worker_loop, args=(i,), daemon=True, name=f"interdist-coordinator-worker-{i}")
            for i in range(len(self._addresses))
        ]
        for t in self._threads:
            t.start()

    # -- public API ------------------------------------------------------------
    def schedule(self, fn: Callable[..., Any], args: Any = None, kwargs: Any = None) -> RemoteValue:
        """Queue ``fn(*args, **kwargs)`` to run on some worker; returns its ``RemoteValue`` at once.

        Raises the first error of an earlier step not raised yet (and cancels the queued steps), as TF.
        """
        if not callable(fn):
            raise TypeError(f"schedule() requires a callable fn, but got {type(fn).__name__}")
        # The notebook met a lost (or still frozen) ps already: no step waits to find it.
        known = self.strategy._known_lost() or self.strategy._known_frozen()
        if known is not None:
            with self._cond:
                self._ps_error = self._ps_error or known
        self._raise_error()
        closure = _Closure(f"{self._session}-{next(self._ids)}", fn, tuple(args or ()), dict(kwargs or {}))
        with self._cond:
            if self._stopped:
                raise RuntimeError("this ClusterCoordinator was stopped (its strategy was closed)")
            self._queue.append(closure)
            self._inflight += 1
            self._cond.notify_all()
        return closure.remote

    def join(self) -> None:
        """Wait until every scheduled step has finished, or one failed: then raise its error.

        As in TF, the steps still queued when an error is raised are cancelled.
        """
        while True:
            with self._cond:
                self._cond.wait_for(
                    lambda: (
                        self._inflight == 0 or self._error is not None or self._ps_error is not None or self._stopped
                    )
                )
            self._raise_error()
            with self._cond:  # a frozen ps that resumed raised nothing: wait for the steps still running
                if self._inflight == 0 or self._stopped:
                    return

    def done(self) -> bool:
        """Whether every scheduled step has finished (raises a step's error, as TF does)."""
        self._raise_error()
        with self._cond:
            return self._inflight == 0

    def fetch(self, val: Any) -> Any:
        """``val`` with every ``RemoteValue`` in it replaced by its result."""
        return _nest.map_structure(lambda v: v.fetch() if isinstance(v, RemoteValue) else v, val)

    def create_per_worker_dataset(self, dataset_fn: Any) -> PerWorkerDataset:
        """Make a dataset on every worker; ``iter()`` of the result gives one iterator per worker.

        ``dataset_fn`` is a function of no argument returning an ``interdist.data.Dataset``
        (or the result of ``strategy.experimental_distribute_dataset`` /
        ``distribute_datasets_from_function``), or one of those objects itself, or a
        ``Dataset``. It is called on each worker, now; its error is raised here.
        Give the iterator to ``schedule``: each step gets its worker's iterator.

        Raises
        ------
        ValueError
            ``dataset_fn`` is none of these (TF's "Unexpected dataset type!").
        NotADatasetError
            ``dataset_fn`` returned something that is not a dataset.
        """

        if not (callable(dataset_fn) or isinstance(dataset_fn, Dataset) or ps_input.is_distributed(dataset_fn)):
            raise ValueError(
                f"Unexpected dataset type! create_per_worker_dataset takes a dataset_fn, a Dataset or "
                f"a distributed dataset of the strategy, but got {type(dataset_fn).__name__}"
            )
        return PerWorkerDataset(self, cloudpickle.dumps(dataset_fn))

    # -- internals -------------------------------------------------------------
    def _raise_error(self) -> None:
        """Raise the pending error once, after cancelling the queued steps (TF's ``_raise_if_error``).

        A lost parameter server's ``UnavailableError`` is raised every time, until ``strategy.recover``."""
        with self._cond:
            ps_error = self._ps_error
            first = self._error is not None
            if ps_error is not None:
                self._error = None
        if isinstance(ps_error, TaskFrozenError) and not first:
            # Raised once already: again only while the ps is still frozen (looked at now); resumed, it goes on.
            again = self.strategy._known_frozen()
            if again is None:
                with self._cond:
                    if self._ps_error is ps_error:
                        self._ps_error = None
                return
            ps_error = again
        if ps_error is not None:
            raise type(ps_error)(str(ps_error), task=ps_error.task)
        with self._cond:
            if self._error is None:
                return
            self._cancelling = True  # no worker takes a new step while the running ones finish
            try:
                self._cond.wait_for(lambda: self._running == 0 or self._stopped)
                cancelled = list(self._queue)
                self._queue.clear()
                self._inflight -= len(cancelled)
                err, self._error = self._error, None
            finally:
                self._cancelling = False
                self._cond.notify_all()
        for c in cancelled:
            c.remote._set(
                error=CancelledError(
                    f"The corresponding function ({c.step_id}) is cancelled. Please reschedule the function."
                )
            )
        raise err

    def _stop(self) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify_all()

    def _take(self) -> _Closure | None:
        with self._cond:
            self._cond.wait_for(lambda: (self._queue and not self._cancelling) or self._stopped, timeout=0.5)
            if self._stopped or self._cancelling or not self._queue:
                return None
            self._running += 1
            return self._queue.popleft()

    def _finish(self, closure: _Closure, value: Any = None, error: BaseException | None = None) -> None:
        closure.remote._set(value, error)
        failed: list[_Closure] = []
        with self._cond:
            # A lost or frozen ps already raised (or pending): the steps that met it too add no second error.
            same_ps = isinstance(error, UnavailableError) and self._ps_error is not None
            if error is not None and self._error is None and not same_ps:
                self._error = error
            if isinstance(error, UnavailableError) and self._ps_error is None:
                self._ps_error = error
                failed = list(self._queue)  # they would only meet the lost parameter server
                self._queue.clear()
                self._inflight -= len(failed)
            self._inflight -= 1
            self._running -= 1
            self._cond.notify_all()
        if isinstance(error, UnavailableError):
            self.strategy._ps_lost(error)
            for c in failed:
                c.remote._set(error=type(error)(f"step {c.step_id} was not run: {error}", task=error.task))

    def _recovered(self) -> None:
        """``strategy.recover`` restored the variables: steps may be scheduled again."""
        with self._cond:
            self._ps_error = None
            self._error = None
            self._cond.notify_all()

    def _worker_loop(self, index: int) -> None:
        task = self.strategy._worker_tasks[index]
        device = self._devices[index]
        while not self._stopped:
            closure = self._take()
            if closure is None:
                continue
            closure.remote.attempts += 1
            try:
                args_bytes = cloudpickle.dumps((closure.args, closure.kwargs))
            except Exception as e:  # noqa: BLE001 - unpicklable arguments are the caller's error
                self._finish(closure, error=e)
                continue
            try:
                self._ensure_resources(index)
            except _ResourceError as e:
                self._finish(closure, error=e.error)
                continue
            except Exception as e:  # noqa: BLE001 - the worker died or cannot be reached
                self._requeue(closure, index, e)
                self._wait_for_replacement(index)
                continue
            address = self._addresses[index]
            try:
                # Watched: a frozen worker (stopped, or not answering) is given up within seconds, as TF's
                # coordinator gives up an unresponsive worker. Its step runs again on another worker; the
                # ps tasks apply a step id once, so the frozen worker's late update is never applied twice.
                reply = self.strategy._conn.call_task(
                    address,
                    "interdist_ps_step",
                    {
                        "store": self.strategy._store,
                        "step_id": closure.step_id,
                        "fn": closure.fn_bytes,
                        "args": args_bytes,
                        "device": device,
                    },
                    f"/job:worker/replica:0/task:{task.index}",
                )
            except Exception as e:  # noqa: BLE001 - the worker died, is frozen, or cannot be reached
                if isinstance(e, TaskFrozenError):
                    logger.warning("interdist: %s; step %s goes to another worker", e, closure.step_id)
                self._requeue(closure, index, e)
                self._wait_for_replacement(index)
                continue
            if not reply["ok"] and reply.get("type") == ps_input.MissingResourceError.__name__:
                # The worker was restarted between the resources check and the step: give them again.
                with self._res_lock:
                    self._built[index].clear()
                self._requeue(closure, index, RuntimeError(reply.get("message")))
                continue
            closure.remote.worker = f"worker:{task.index}"
            if reply["ok"]:
                self._finish(closure, cloudpickle.loads(reply["result"]))
            else:
                self._finish(closure, error=_rebuild_error(reply, closure.step_id, task.index))

    def _requeue(self, closure: _Closure, index: int, exc: BaseException) -> None:
        if closure.remote.attempts >= MAX_ATTEMPTS:
            self._finish(
                closure,
                error=WorkerLostError(
                    f"step {closure.step_id} was lost with its worker {MAX_ATTEMPTS} times (last: worker:"
                    f"{self.strategy._worker_tasks[index].index}, {type(exc).__name__}: {exc})"
                ),
            )
            return
        with self._cond:
            self._running -= 1
            self._queue.appendleft(closure)  # first in line for the next idle worker
            self._cond.notify_all()

    def _wait_for_replacement(self, index: int) -> None:
        """Poll the scheduler until a worker with the same name is back (a nanny restarts it)."""
        name = self.strategy._worker_tasks[index].name
        old = self._addresses[index]
        while not self._stopped:
            try:
                workers = self._client.scheduler_info(n_workers=-1)["workers"]
            except Exception:  # noqa: BLE001 - the scheduler itself is unreachable for now
                workers = {}
            by_name = {w.get("name"): a for a, w in workers.items()}
            addr = by_name.get(name)
            # The scheduler may not have noticed the death yet: the old address counts only if it answers.
            if addr is not None and (addr != old or self._answers(addr)):
                with self._res_lock:
                    self._addresses[index] = addr
                    if addr != old:
                        # A new process: it holds no dataset or iterator; they are made again before its next step.
                        self._built[index].clear()
                        self._to_drop[index].clear()
                return
            time.sleep(0.2)

    def _answers(self, address: str) -> bool:
        try:
            self._client.sync(lambda: asyncio.wait_for(self._client.rpc(address).identity(), 2))
            return True
        except Exception:  # noqa: BLE001 - dead, or not reachable yet
            return False


__all__ = ["ClusterCoordinator", "PerWorkerDataset", "PerWorkerIterator", "PerWorkerValues", "RemoteValue"]
