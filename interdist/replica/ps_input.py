"""Input for ``ParameterServerStrategy``: datasets made on each worker, one iterator per worker.

As in TF 2, ``strategy.experimental_distribute_dataset(ds)`` and
``strategy.distribute_datasets_from_function(fn)`` only describe a dataset; it is
made on the workers when the description is given to
``ClusterCoordinator.create_per_worker_dataset`` (``iter()`` of the description
raises ``ValueError``, TF's message). What TF 2.21 does there, and so what
happens here (checked with an in-process TF cluster of 2 workers and 1 ps):

* ``dataset_fn`` of ``distribute_datasets_from_function`` runs on every worker
  with ``InputContext(num_input_pipelines=1, input_pipeline_id=0,
  num_replicas_in_sync=1)``: a worker's replicas are the only ones in sync, so
  every worker is pipeline 0 of 1. Shard by hand if you want disjoint data.
* ``experimental_distribute_dataset(ds)`` gives every worker the whole of
  ``ds``: no auto-sharding, whatever ``auto_shard_policy`` says (DATA included),
  and no rebatching (one replica per worker).
* Every worker's iterator starts at the first element; two ``iter()`` of one
  per-worker dataset are independent.

Worker side: each worker keeps, per strategy, the datasets and iterators that
the coordinator asked for (``sync_resources``, run by the ``interdist_ps_input``
handler of ``ps_store.PSRuntime``), built with the helpers of
``interdist.input.replica_side``. A step's per-worker iterator argument
pickles as a key and becomes that worker's iterator when the step unpickles it
(``worker_iterator``); batches never pass through the notebook.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import cloudpickle

from interdist import _context
from interdist.errors import InterdistError, NotADatasetError
from interdist.input import distributed_dataset as _dd
from interdist.input.dataset import Dataset
from interdist.input.distributed_iterator import _NoTransformations
from interdist.input.input_context import InputContext, InputOptions, check_options_for_datasets_from_function
from interdist.input.replica_side import _make_dataset, _next_batch, _start_iterator
from interdist.protocol_errors import dump_exception
from interdist.replica import ps_step

#: TF 2.21's messages for ``iter()`` of a ParameterServerStrategy dataset outside the coordinator.
NOT_BUILT_DATASET = (
    "To use this dataset, you need to pass this dataset to ClusterCoordinator.create_per_worker_dataset."
)
NOT_BUILT_FROM_FUNCTION = "You need to use this dataset in ClusterCoordinator.create_per_worker_dataset."
_NO_SPEC = (
    "a ParameterServerStrategy distributed dataset is made on the workers: its element_spec is known once "
    "it is given to ClusterCoordinator.create_per_worker_dataset (read that object's element_spec)"
)


class _SpecOnceBuilt(_NoTransformations):
    """No ``element_spec`` before ``create_per_worker_dataset`` (an ``AttributeError``, as in TF).

    Based on ``_NoTransformations`` (whose ``__getattr__`` answers the other names), as both
    classes that mix it in are: their method resolution order is the same either way.
    """

    @property
    def element_spec(self) -> Any:
        raise AttributeError(_NO_SPEC)  # Python then asks __getattr__, which says the same

    def __getattr__(self, name: str) -> Any:
        if name == "element_spec":
            raise AttributeError(_NO_SPEC)
        return super().__getattr__(name)


class DistributedDataset(_SpecOnceBuilt, _dd.DistributedDataset):
    """``strategy.experimental_distribute_dataset(dataset)`` of a ``ParameterServerStrategy``.

    A description only: give it to ``ClusterCoordinator.create_per_worker_dataset``,
    which makes the whole ``dataset`` on every worker (TF 2 does not shard it there).
    As in TF, nothing is checked until then.
    """

    def __init__(self, dataset: Any, options: InputOptions | None = None) -> None:
        self._dataset = dataset
        self._options = options

    def __iter__(self) -> Any:
        raise ValueError(NOT_BUILT_DATASET)

    def __repr__(self) -> str:
        return f"<ParameterServerStrategy DistributedDataset of {self._dataset!r}>"


class DistributedDatasetsFromFunction(_SpecOnceBuilt, _dd.DistributedDatasetsFromFunction):
    """``strategy.distribute_datasets_from_function(dataset_fn)`` of a ``ParameterServerStrategy``.

    A description only: ``ClusterCoordinator.create_per_worker_dataset`` calls
    ``dataset_fn(InputContext(1, 0, 1))`` on every worker (TF 2's context there).
    """

    def __init__(self, dataset_fn: Callable[[InputContext], Any], options: InputOptions | None = None) -> None:
        if options is not None and not isinstance(options, InputOptions):
            raise TypeError(f"options must be a tf.distribute.InputOptions, but got {type(options).__name__}")
        # TF's ParameterServerStrategy accepts PER_REPLICA (a worker has one replica: the same thing).
        check_options_for_datasets_from_function(options, per_replica_supported=True)
        self._dataset_fn = dataset_fn
        self._options = options

    def __iter__(self) -> Any:
        raise ValueError(NOT_BUILT_FROM_FUNCTION)

    def __repr__(self) -> str:
        return f"<ParameterServerStrategy DistributedDatasetsFromFunction of {self._dataset_fn!r}>"


def is_distributed(x: Any) -> bool:
    return isinstance(x, (DistributedDataset, DistributedDatasetsFromFunction))


class MissingResourceError(InterdistError):
    """A step used a per-worker dataset or iterator that its worker does not hold (it was restarted)."""


# -- worker side ------------------------------------------------------------------------


class _Slot:
    """One strategy's input resources on one worker; shaped like the replica the input helpers expect."""

    world_size = 1  # one replica per worker, the only one in sync with itself
    rank = 0

    def __init__(self) -> None:
        self.store: dict[str, Any] = {}
        self.specs: dict[str, Any] = {}
        self.iterators: dict[str, WorkerIterator] = {}
        self.worker: Any = None  # the Dask worker (the input helpers bind Dask-backed sources to it)
        self.lock = threading.Lock()


_slots: dict[str, _Slot] = {}
_slots_lock = threading.Lock()


def _slot(store: str) -> _Slot:
    with _slots_lock:
        s = _slots.get(store)
        if s is None:
            s = _slots[store] = _Slot()
        return s


def drop_store(store: str) -> None:
    """Forget every dataset and iterator of a strategy on this worker (the strategy was closed)."""
    with _slots_lock:
        _slots.pop(store, None)


class WorkerIterator:
    """A worker's own iterator over its per-worker dataset: what a scheduled step gets."""

    def __init__(self, slot: _Slot, key: str, element_spec: Any, device: str) -> None:
        self._slot = slot
        self._key = key
        self._element_spec = element_spec
        self._device = device

    @property
    def element_spec(self) -> Any:
        return self._element_spec

    def __iter__(self) -> WorkerIterator:
        return self

    def __next__(self) -> Any:
        value = _next_batch(self._slot, self._key)
        if value is None:
            # TF raises OutOfRangeError ("End of sequence") from the step; ``join`` re-raises it.
            raise StopIteration(f"the per-worker iterator on {self._device} is exhausted (End of sequence)")
        return value

    def get_next(self) -> Any:
        return next(self)

    def __repr__(self) -> str:
        return f"<interdist per-worker iterator {self._key} on {self._device}>"


def _as_dataset(obj: Any, slot: _Slot, key: str) -> Any:
    """Make the dataset ``obj`` describes in ``slot.store[key]``; its element_spec."""
    if isinstance(obj, DistributedDatasetsFromFunction):
        return _make_dataset(slot, key, obj._dataset_fn, False)  # InputContext(1, 0, 1), as TF 2
    if isinstance(obj, DistributedDataset):
        obj = obj._dataset  # the whole dataset on every worker: TF 2 does not shard it
        if not isinstance(obj, Dataset):
            raise NotADatasetError(
                f"experimental_distribute_dataset requires an interdist.data.Dataset, but got {type(obj).__name__}"
            )
    if not isinstance(obj, Dataset):
        raise NotADatasetError(
            f"the dataset_fn given to create_per_worker_dataset must return an interdist.data."
            f"Dataset or a distributed dataset of this strategy, but it returned "
            f"{type(obj).__name__}"
        )
    if slot.worker is not None and hasattr(_dd, "_dask"):
        _dd._dask.bind_worker(slot.worker)  # a dataset reading Dask collections reads with this worker's client
    slot.store[key] = obj
    return obj.element_spec


def _build_dataset(slot: _Slot, key: str, payload: bytes, conn: Any, store: str, device: str) -> Any:

    # Inside a step context the strategy (captured by a dataset_fn) unpickles as this worker's view.
    ctx = ps_step.StepContext(f"input-{key}", conn, store, device)
    with _context.ps_step_context(ctx):
        recipe = cloudpickle.loads(payload)
        if not isinstance(recipe, Dataset) and not is_distributed(recipe):
            recipe = recipe()  # a dataset_fn: called with no argument, as in TF
        spec = _as_dataset(recipe, slot, key)
        ctx.flush()
    return spec


def sync_resources(
    conn: Any, store: str, builds: list[tuple[str, str, Any]], drops: list[str], device: str
) -> dict[str, Any]:
    """Drop ``drops``, then make each of ``builds`` this worker does not hold yet; never raises.

    ``builds`` are ``(key, "dataset", pickled recipe)`` or ``(key, "iterator", dataset key)``.
    The reply has the element_spec of each key, or the first error.
    """
    import traceback

    slot = _slot(store)
    with slot.lock:
        slot.worker = getattr(conn, "worker", None)
        for key in drops:
            slot.store.pop(key, None)
            slot.store.pop(key + ":buffer", None)
            slot.specs.pop(key, None)
            slot.iterators.pop(key, None)
        specs: dict[str, Any] = {}
        for key, kind, payload in builds:
            if key not in slot.specs:
                try:
                    if kind == "dataset":
                        slot.specs[key] = _build_dataset(slot, key, payload, conn, store, device)
                    else:
                        if payload not in slot.store:
                            raise MissingResourceError(f"dataset {payload} is not on this worker")
                        _start_iterator(slot, payload, key)
                        slot.specs[key] = slot.specs.get(payload)
                        slot.iterators[key] = WorkerIterator(slot, key, slot.specs[key], device)
                except BaseException as exc:  # noqa: BLE001 - the coordinator re-raises it in the notebook
                    slot.store.pop(key, None)
                    err = dump_exception(exc)
                    return {
                        "ok": False,
                        "key": key,
                        "error": err,
                        "type": type(exc).__name__,
                        "message": str(exc),
                        "traceback": traceback.format_exc(),
                    }
            specs[key] = slot.specs[key]
    return {"ok": True, "specs": cloudpickle.dumps(specs)}


def _lookup(store: str, key: str, what: str) -> Any:
    with _slots_lock:
        slot = _slots.get(store)
    found = None if slot is None else (slot.iterators.get(key) if what == "iterator" else slot.store.get(key))
    if found is None:
        raise MissingResourceError(f"this worker holds no per-worker {what} {key} (was it restarted?)")
    return found


def worker_iterator(store: str, key: str) -> WorkerIterator:
    """Unpickling a ``PerWorkerIterator`` in a step: this worker's iterator."""
    it: WorkerIterator = _lookup(store, key, "iterator")
    return it


def worker_dataset(store: str, key: str) -> Any:
    """Unpickling a ``PerWorkerDataset`` in a step: this worker's dataset."""
    return _lookup(store, key, "dataset")
