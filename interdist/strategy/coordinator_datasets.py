"""``ClusterCoordinator``'s per-worker datasets and iterators, and where each worker stands with them.

``PerWorkerDataset`` and ``PerWorkerIterator`` are the notebook's objects; each is a resource made
on every worker (``replica/ps_input.py``). ``PerWorkerResources``, a mixin of ``ClusterCoordinator``,
keeps the bookkeeping: which worker holds which resource, what a replaced worker must be given
again before its next step, and what to drop once the notebook's object is collected. Kept apart
from the scheduling of steps (``coordinator.py``), which only asks for a worker's resources to be
ensured before each step.
"""

from __future__ import annotations

import itertools
import threading
import weakref
from collections import deque
from typing import TYPE_CHECKING, Any

import cloudpickle

from interdist.replica import ps_input
from interdist.strategy.coordinator_values import PerWorkerValues, _rebuild_error
from interdist.strategy.parameter_server import ParameterServerStrategy

if TYPE_CHECKING:
    from interdist.strategy.coordinator import ClusterCoordinator


class PerWorkerResources:
    """The per-worker datasets and iterators of a coordinator, made on every worker and kept there."""

    # Set by ``ClusterCoordinator.__init__`` (coordinator.py).
    strategy: ParameterServerStrategy
    _client: Any
    _session: str
    _addresses: list[str]
    _devices: list[str]
    _resources: dict[str, tuple[str, Any]]
    _built: list[set[str]]
    _to_drop: list[set[str]]
    _forgotten: deque[str]
    _res_lock: threading.Lock
    _res_ids: itertools.count[int]

    def _new_resource(self, kind: str, payload: Any, owner: Any) -> tuple[str, Any]:
        """Register a dataset or iterator, make it on every worker that answers; its key and element_spec."""
        key = f"{kind}-{self._session}-{next(self._res_ids)}"
        with self._res_lock:
            self._collect_forgotten()
            self._resources[key] = (kind, payload)
        spec = None
        try:
            spec = self._build_everywhere(key)
        except BaseException:
            self._forget(key)
            raise
        weakref.finalize(owner, self._forgotten.append, key)
        return key, spec

    def _build_everywhere(self, key: str) -> Any:
        kind, payload = self._resources[key]
        addresses = list(self._addresses)
        calls = [
            (
                a,
                {
                    "store": self.strategy._store,
                    "builds": [(key, kind, payload)],
                    "drops": [],
                    "device": self._devices[i],
                },
            )
            for i, a in enumerate(addresses)
        ]

        # Watched: a frozen worker's error is its reply (it gets the resource when it answers again).
        replies = self.strategy._conn.call_tasks(
            [(a, "interdist_ps_input", kw, self._task_name(i)) for i, (a, kw) in enumerate(calls)]
        )
        spec, error = None, None
        for i, reply in enumerate(replies):
            if isinstance(reply, BaseException):
                continue  # the worker is gone: it gets the resource when it is back (_ensure_resources)
            if not reply["ok"]:
                error = error or _rebuild_error(
                    reply, f"create_per_worker_dataset ({kind})", self.strategy._worker_tasks[i].index
                )
                continue
            with self._res_lock:
                if self._addresses[i] == addresses[i]:  # else a new process answered: it is made there later
                    self._built[i].add(key)
            if spec is None:
                spec = cloudpickle.loads(reply["specs"])[key]
        if error is not None:
            raise error
        return spec

    def _task_name(self, index: int) -> str:
        return f"/job:worker/replica:0/task:{self.strategy._worker_tasks[index].index}"

    def _forget(self, key: str) -> None:
        with self._res_lock:
            self._resources.pop(key, None)
            for built, drop in zip(self._built, self._to_drop, strict=True):
                if key in built:
                    built.discard(key)
                    drop.add(key)

    def _collect_forgotten(self) -> None:
        """Forget the resources whose notebook objects were collected (holding ``_res_lock``)."""
        while self._forgotten:
            key = self._forgotten.popleft()
            self._resources.pop(key, None)
            for built, drop in zip(self._built, self._to_drop, strict=True):
                if key in built:
                    built.discard(key)
                    drop.add(key)

    def _ensure_resources(self, index: int) -> None:
        """Give worker ``index`` every registered dataset and iterator it lacks (after a restart)."""
        with self._res_lock:
            self._collect_forgotten()
            missing = [(k, kind, p) for k, (kind, p) in self._resources.items() if k not in self._built[index]]
            drops = list(self._to_drop[index])
            address = self._addresses[index]
        if not missing and not drops:
            return
        reply = self.strategy._conn.call_task(
            address,
            "interdist_ps_input",
            {"store": self.strategy._store, "builds": missing, "drops": drops, "device": self._devices[index]},
            self._task_name(index),
        )
        with self._res_lock:
            self._to_drop[index].difference_update(drops)
            if reply["ok"]:
                self._built[index].update(k for k, _, _ in missing)
        if not reply["ok"]:
            raise _ResourceError(
                _rebuild_error(
                    reply,
                    f"create_per_worker_dataset (rebuilding {reply['key']})",
                    self.strategy._worker_tasks[index].index,
                )
            )


class _ResourceError(Exception):
    """A per-worker dataset could not be made again on a worker: the step fails with ``error``."""

    def __init__(self, error: BaseException) -> None:
        super().__init__(str(error))
        self.error = error


class PerWorkerDataset:
    """A dataset made on each worker (``ClusterCoordinator.create_per_worker_dataset``).

    Examples
    --------
    (Skipped: it needs a Dask cluster with ps and worker tasks; ``ParameterServerStrategy``'s example
    runs these steps on one.)

    >>> dataset = coordinator.create_per_worker_dataset(lambda: idist.data.Dataset.range(4))  # doctest: +SKIP
    >>> iterator = iter(dataset)  # one iterator per worker  # doctest: +SKIP
    >>> float(coordinator.schedule(lambda it: np.float32(next(it)), args=(iterator,)).fetch())  # doctest: +SKIP
    0.0
    """

    def __init__(self, coordinator: ClusterCoordinator, recipe: bytes) -> None:
        self._coordinator = coordinator
        self._store = coordinator.strategy._store
        self._key, self._element_spec = coordinator._new_resource("dataset", recipe, self)

    @property
    def element_spec(self) -> Any:
        """The element_spec of the workers' datasets (TF's ``PerWorkerDataset.element_spec``)."""
        return self._element_spec

    def __iter__(self) -> PerWorkerIterator:
        """One new iterator on each worker, each at the dataset's first element."""
        return PerWorkerIterator(self)

    def __reduce__(self) -> Any:
        return (ps_input.worker_dataset, (self._store, self._key))

    def __repr__(self) -> str:
        return f"<PerWorkerDataset {self._key} on {len(self._coordinator._addresses)} workers>"


class PerWorkerIterator(PerWorkerValues):
    """One iterator per worker; in a scheduled step it is the iterator of the step's worker.

    ``next()`` of it in the notebook raises ``NotImplementedError`` (as TF's).

    Examples
    --------
    (Skipped: it needs a Dask cluster with ps and worker tasks; ``ParameterServerStrategy``'s example
    runs these steps on one.)

    >>> iterator = iter(coordinator.create_per_worker_dataset(lambda: idist.data.Dataset.range(4)))  # doctest: +SKIP
    >>> rvs = [coordinator.schedule(lambda it: next(it), args=(iterator,)) for _ in range(2)]  # doctest: +SKIP
    >>> sorted(int(rv.fetch()) for rv in rvs)  # with one worker: its first two elements  # doctest: +SKIP
    [0, 1]
    """

    def __init__(self, dataset: PerWorkerDataset) -> None:
        coordinator = dataset._coordinator
        self._dataset = dataset  # the dataset stays registered (re-made on a new worker) while this lives
        self._store = dataset._store
        self._key, self._element_spec = coordinator._new_resource("iterator", dataset._key, self)
        super().__init__(tuple(f"{d} iterator {self._key}" for d in coordinator._devices))

    @property
    def element_spec(self) -> Any:
        return self._element_spec

    def __reduce__(self) -> Any:
        return (ps_input.worker_iterator, (self._store, self._key))

    def __iter__(self) -> PerWorkerIterator:
        return self

    def __next__(self) -> Any:
        return self.get_next()

    def get_next(self, name: str | None = None) -> Any:
        # TF 2.21's message; the iterator is for ClusterCoordinator.schedule.
        raise NotImplementedError(
            "Iterating over an `AsyncDistributedIterator` is not supported right now. Pass "
            "the per-worker iterator to ClusterCoordinator.schedule and call next() on it "
            "inside the scheduled function."
        )

    def __repr__(self) -> str:
        return f"<PerWorkerIterator {self._key} on {len(self._values)} workers>"
