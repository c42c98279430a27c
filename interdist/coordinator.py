"""``tf.distribute.experimental.coordinator``: schedule asynchronous steps on parameter-server workers.

``ClusterCoordinator(strategy)`` keeps one thread per worker task. ``schedule``
queues a step and returns a ``RemoteValue`` at once; an idle worker takes the
next step and runs it (``runtime/ps_step.py``). Each step has an id: when a
worker dies during a step, the step goes back to the front of the queue and
another worker (or the dead one's replacement, found again by its Dask worker
name) runs it; the ps tasks apply a step id at most once.

>>> # coordinator = ClusterCoordinator(strategy)
>>> # rv = coordinator.schedule(step_fn, args=(x,)); coordinator.join(); rv.fetch()
"""

from __future__ import annotations

import itertools
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable
from typing import Any

import cloudpickle

from . import _nest
from .errors import WorkerLostError

#: A step whose worker died this many times is given up (TF retries for ever).
MAX_ATTEMPTS = 10


class RemoteValue:
    """The future result of a scheduled step (``tf.distribute.experimental.coordinator.RemoteValue``)."""

    def __init__(self, step_id: str) -> None:
        self.step_id = step_id
        self._done = threading.Event()
        self._value: Any = None
        self._error: BaseException | None = None
        self.attempts = 0
        self.worker: str | None = None  # the task that ran it

    def _set(self, value: Any = None, error: BaseException | None = None) -> None:
        self._value, self._error = value, error
        self._done.set()

    def fetch(self) -> Any:
        """Wait for the step and return its result (as NumPy values); raise its error if it failed."""
        self._done.wait()
        if self._error is not None:
            raise self._error
        return self._value

    def get(self) -> Any:
        """The same as ``fetch`` (TF's ``get`` returns the value without copying it to the host)."""
        return self.fetch()

    def done(self) -> bool:
        return self._done.is_set()

    def __repr__(self) -> str:
        state = "done" if self.done() else "pending"
        return f"<RemoteValue {self.step_id} {state}>"


class PerWorkerValues:
    """One value per worker (``tf.distribute.experimental.coordinator.PerWorkerValues``)."""

    def __init__(self, values: tuple[Any, ...]) -> None:
        self._values = tuple(values)

    def __repr__(self) -> str:
        return f"PerWorkerValues({self._values!r})"


class _Closure:
    def __init__(self, step_id: str, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        self.step_id, self.fn, self.args, self.kwargs = step_id, fn, args, kwargs
        self.remote = RemoteValue(step_id)
        self.fn_bytes = cloudpickle.dumps(fn)


class ClusterCoordinator:
    """Schedules steps on the workers of a ``ParameterServerStrategy`` and collects their results."""

    def __init__(self, strategy: Any) -> None:
        from .strategy.parameter_server import ParameterServerStrategy

        if not isinstance(strategy, ParameterServerStrategy):
            raise ValueError(f"ClusterCoordinator needs a ParameterServerStrategy, but got {type(strategy).__name__}")
        if strategy._coordinator is not None:
            raise ValueError("this ParameterServerStrategy already has a ClusterCoordinator")
        strategy._coordinator = self
        self.strategy = strategy
        self._client = strategy._lease.client
        self._queue: deque[_Closure] = deque()
        self._cond = threading.Condition()
        self._inflight = 0
        self._errors: list[BaseException] = []
        self._stopped = False
        self._ids = itertools.count()
        self._session = uuid.uuid4().hex[:8]
        self._addresses = [t.address for t in strategy._worker_tasks]
        self._threads = [threading.Thread(target=self._worker_loop, args=(i,), daemon=True,
                                          name=f"interdist-coordinator-worker-{i}")
                         for i in range(len(self._addresses))]
        for t in self._threads:
            t.start()

    # -- public API ------------------------------------------------------------
    def schedule(self, fn: Callable[..., Any], args: Any = None, kwargs: Any = None) -> RemoteValue:
        """Queue ``fn(*args, **kwargs)`` to run on some worker; returns its ``RemoteValue`` at once."""
        if not callable(fn):
            raise TypeError(f"schedule() requires a callable fn, but got {type(fn).__name__}")
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
        """Wait until every scheduled step has finished; raise the first error a step raised."""
        with self._cond:
            self._cond.wait_for(lambda: self._inflight == 0 or self._stopped)
        self._raise_error()

    def done(self) -> bool:
        """Whether every scheduled step has finished (raises a step's error, as TF does)."""
        self._raise_error()
        with self._cond:
            return self._inflight == 0

    def fetch(self, val: Any) -> Any:
        """``val`` with every ``RemoteValue`` in it replaced by its result."""
        return _nest.map_structure(lambda v: v.fetch() if isinstance(v, RemoteValue) else v, val)

    def create_per_worker_dataset(self, dataset_fn: Callable[[], Any]) -> PerWorkerDataset:
        """``dataset_fn()`` made on each worker; ``iter()`` of it gives one iterator per worker."""
        return PerWorkerDataset(dataset_fn)

    # -- internals -------------------------------------------------------------
    def _raise_error(self) -> None:
        with self._cond:
            if self._errors:
                err = self._errors.pop(0)
                raise err

    def _stop(self) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify_all()

    def _take(self) -> _Closure | None:
        with self._cond:
            self._cond.wait_for(lambda: self._queue or self._stopped, timeout=0.5)
            if self._stopped or not self._queue:
                return None
            return self._queue.popleft()

    def _finish(self, closure: _Closure, value: Any = None, error: BaseException | None = None) -> None:
        closure.remote._set(value, error)
        with self._cond:
            if error is not None:
                self._errors.append(error)
            self._inflight -= 1
            self._cond.notify_all()

    def _worker_loop(self, index: int) -> None:
        task = self.strategy._worker_tasks[index]
        device = f"/job:worker/replica:0/task:{task.index}/device:CPU:0"
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
            address = self._addresses[index]
            try:
                reply = self._client.sync(lambda a=address, c=closure, b=args_bytes: self._client.rpc(a)
                                          .interdist_ps_step(store=self.strategy._store, step_id=c.step_id,
                                                             fn=c.fn_bytes, args=b, device=device))
            except Exception as e:  # noqa: BLE001 - the worker died or cannot be reached
                self._requeue(closure, index, e)
                self._wait_for_replacement(index)
                continue
            closure.remote.worker = f"worker:{task.index}"
            if reply["ok"]:
                self._finish(closure, cloudpickle.loads(reply["result"]))
            else:
                self._finish(closure, error=_rebuild_error(reply, closure.step_id, task.index))

    def _requeue(self, closure: _Closure, index: int, exc: BaseException) -> None:
        if closure.remote.attempts >= MAX_ATTEMPTS:
            self._finish(closure, error=WorkerLostError(
                f"step {closure.step_id} was lost with its worker {MAX_ATTEMPTS} times (last: worker:"
                f"{self.strategy._worker_tasks[index].index}, {type(exc).__name__}: {exc})"))
            return
        with self._cond:
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
                self._addresses[index] = addr
                return
            time.sleep(0.2)

    def _answers(self, address: str) -> bool:
        import asyncio

        try:
            self._client.sync(lambda: asyncio.wait_for(self._client.rpc(address).identity(), 2))
            return True
        except Exception:  # noqa: BLE001 - dead, or not reachable yet
            return False


class PerWorkerDataset:
    """A dataset made on each worker by ``dataset_fn`` (``create_per_worker_dataset``)."""

    def __init__(self, dataset_fn: Callable[[], Any]) -> None:
        self._fn_bytes = cloudpickle.dumps(dataset_fn)
        self._key = uuid.uuid4().hex

    def __iter__(self) -> PerWorkerIterator:
        return PerWorkerIterator(self._key, self._fn_bytes)


class PerWorkerIterator:
    """Stands for each worker's own iterator; it becomes that iterator when a step unpickles it there."""

    def __init__(self, key: str, fn_bytes: bytes) -> None:
        self._key, self._fn_bytes = key, fn_bytes

    def __reduce__(self) -> Any:
        return (_worker_iterator, (self._key, self._fn_bytes))

    def __next__(self) -> Any:
        raise RuntimeError("a per-worker iterator can only be used inside a function given to schedule()")


_worker_iterators: dict[str, Any] = {}
_iter_lock = threading.Lock()


def _worker_iterator(key: str, fn_bytes: bytes) -> Any:
    """The worker's iterator for ``key``, made the first time a step on this worker needs it."""
    with _iter_lock:
        it = _worker_iterators.get(key)
        if it is None:
            it = _worker_iterators[key] = iter(cloudpickle.loads(fn_bytes)())
        return it


def _rebuild_error(reply: dict[str, Any], step_id: str, task_index: int) -> BaseException:
    exc: BaseException | None = None
    if reply.get("error") is not None:
        try:
            exc = cloudpickle.loads(reply["error"])
        except Exception:  # noqa: BLE001
            exc = None
    if exc is None:
        exc = RuntimeError(f"{reply['type']}: {reply['message']}")
    try:
        exc.add_note(f"interdist: raised in step {step_id} on worker:{task_index}\n--- remote traceback ---\n"
                     f"{reply.get('traceback', '')}")
    except Exception:  # noqa: BLE001
        pass
    return exc


__all__ = ["ClusterCoordinator", "PerWorkerValues", "RemoteValue"]
