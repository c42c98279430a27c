"""Datasets distributed over a strategy's replicas.

``experimental_distribute_dataset`` reads the global batches in the notebook,
splits each as TF does and hands every replica its part with the next ``run``
(one message per step, no extra round trip). ``distribute_datasets_from_function``
calls ``dataset_fn`` in the notebook once per input pipeline, as TF does (once on one
host; once per replica with ``PER_REPLICA``; on each worker's host across hosts), and
sends the pipeline it returns to the workers: its batches are read there and never
pass through the notebook.
"""

from __future__ import annotations

import itertools
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from interdist import _nest
from interdist import device as device_lib
from interdist.errors import NotADatasetError, OutOfRangeError
from interdist.input import _dask, _values
from interdist.input import plan as row_plan
from interdist.input.dataset import Dataset
from interdist.input.input_context import (
    InputContext,
    InputOptions,
    InputReplicationMode,
    check_options_for_datasets_from_function,
    check_options_for_distribute_dataset,
)
from interdist.input.optional import Optional
from interdist.input.options import AutoShardPolicy
from interdist.input.rebatch import (
    rebatch_element_spec,
    shard_for_worker,
    split_for_replicas,
    static_batch_size,
    with_batch_size,
)
from interdist.input.spec import TensorSpec
from interdist.values.distributed import PerReplica
from interdist.values.tensor import Tensor

_TRANSFORMATIONS = {
    "map",
    "batch",
    "unbatch",
    "repeat",
    "shard",
    "take",
    "skip",
    "prefetch",
    "filter",
    "shuffle",
    "cache",
    "with_options",
    "rebatch",
    "apply",
    "flat_map",
    "interleave",
    "padded_batch",
}


class _NoTransformations:
    def __getattr__(self, name: str) -> Any:
        if name in _TRANSFORMATIONS:
            raise AttributeError(
                f"'{type(self).__name__}' object has no attribute '{name}': a distributed dataset cannot be "
                f"transformed further; apply .{name}() to the dataset before distributing it"
            )
        raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")


class DistributedDataset(_NoTransformations):
    """Each global batch of ``dataset`` split into per-replica batches."""

    def __init__(self, strategy: Any, dataset: Any, options: InputOptions | None = None) -> None:
        if _values.is_dask_collection(dataset):
            dataset = _dask.DaskChunksDataset(dataset)  # each chunk (partition) is one global batch
        if not isinstance(dataset, Dataset):
            raise NotADatasetError(
                f"experimental_distribute_dataset requires an interdist.data.Dataset, but got {type(dataset).__name__}"
            )
        if options is not None and not isinstance(options, InputOptions):
            raise TypeError(f"options must be a tf.distribute.InputOptions, but got {type(options).__name__}")
        check_options_for_distribute_dataset(options)
        n = strategy.num_replicas_in_sync
        if n > 1 and any(spec.rank == 0 for spec in _nest.flatten(dataset.element_spec)):
            # TF 2.21 splits every element along its first axis, batched or not (elements of shape (4,)
            # over 2 replicas: (2,) each), and fails here with an IndexError when a component is a
            # scalar (it looks for the first dimension of a rank-0 element).
            raise IndexError(
                "experimental_distribute_dataset splits every element of the dataset along its first axis "
                "among the replicas, and this dataset has scalar components: call .batch(global_batch_size) first"
            )
        self._strategy = strategy
        self._dataset = dataset
        self._options = options

    @property
    def element_spec(self) -> Any:
        spec = self._dataset.element_spec
        n = self._strategy.num_replicas_in_sync
        if n == 1:
            return spec
        return _nest.map_structure(lambda s: PerReplicaSpec(s, n), rebatch_element_spec(spec, n))

    def __repr__(self) -> str:
        return f"<interdist.DistributedDataset of {self._dataset!r} over {_replicas(self._strategy)}>"

    def __iter__(self) -> DistributedIterator:
        sharded = self._worker_shards()
        if sharded is not None:
            return sharded
        if _source(self._dataset) is not None:
            plan = row_plan.plan_of(self._dataset)
            fetch = self._options is None or self._options.experimental_fetch_to_device is not False
            if plan is not None and fetch:
                # Each replica reads its own rows of every global batch on its worker.
                key = f"dask:{next(_ids)}"
                self._strategy._system(_start_dask_reader, key, plan)
                return _RemoteIterator(self._strategy, key, self.element_spec)
            _dask.notebook_fallback_warning(
                "its shape has no row plan"
                if plan is None
                else "experimental_fetch_to_device=False keeps batches on the host"
            )
            return DistributedIterator(
                self._strategy, self._per_step(_read_with(self._strategy, self._dataset)), self.element_spec
            )
        return DistributedIterator(self._strategy, self._per_step(iter(self._dataset)), self.element_spec)

    def progress(self, **tqdm_kwargs: Any) -> Any:
        """``iter(self)`` with a ``tqdm.auto`` bar in the cell, one tick per global batch (an interdist addition).

        ``for batch in dist_dataset.progress(): strategy.run(step, args=(batch,))`` shows the bar (a
        widget in a notebook, text on stderr in a script); ``for batch in dist_dataset`` shows
        nothing. The bar's total is the dataset's cardinality where it is known; keyword arguments
        go to ``tqdm`` (``desc=``, ``total=``, ``leave=``...).
        """
        from tqdm.auto import tqdm  # only here: iterating without a bar imports nothing

        if "total" not in tqdm_kwargs:
            n = int(self._dataset.cardinality())  # negative: infinite or unknown
            tqdm_kwargs["total"] = n if n >= 0 else None
        tqdm_kwargs.setdefault("unit", "batch")
        return tqdm(iter(self), **tqdm_kwargs)

    def _worker_shards(self) -> DistributedIterator | None:
        """Across several workers (MultiWorkerMirroredStrategy), auto-shard as TF does.

        ``FILE`` (or ``AUTO`` on a pipeline that reads files): every worker reads its own files
        (``files[w::W]``) with the per-worker batch size, on its own host. ``OFF``: every worker
        reads the whole pipeline with the per-worker batch size (the same data on each, as in
        TF). ``DATA`` (or ``AUTO`` without files, with TF's warning): worker ``w`` would keep
        every ``W``-th per-worker batch of the whole pipeline, which is exactly the contiguous
        split of each global batch that the notebook makes: it is read once, in the notebook.
        """
        strategy, dataset = self._strategy, self._dataset
        workers = strategy.num_replicas_in_sync  # one replica per worker task
        if not getattr(strategy, "_input_split_by_worker", False) or workers == 1:
            return None
        policy = dataset.options().experimental_distribute.auto_shard_policy
        files = dataset._source_files is not None
        if policy == AutoShardPolicy.AUTO:
            policy = AutoShardPolicy.FILE if files else AutoShardPolicy.DATA
            if not files:
                warnings.warn(
                    "AUTO sharding policy will apply DATA sharding policy as it failed to apply FILE sharding "
                    "policy because of the following reason: Found an unshardable source dataset (the pipeline "
                    "does not read files).",
                    UserWarning,
                    stacklevel=3,
                )
        if policy in (AutoShardPolicy.DATA, AutoShardPolicy.HINT):
            return None
        batch = static_batch_size(dataset)
        if batch is None or batch % workers:
            raise ValueError(
                f"the global batch size ({batch}) must divide evenly among the {workers} workers "
                f"to shard the input by {policy.name}"
            )
        if policy == AutoShardPolicy.FILE:
            shard_for_worker(dataset, workers, 0, AutoShardPolicy.FILE)  # TF's checks, here, before any worker
        key = f"sharded:{next(_ids)}"
        strategy._system(_start_worker_shard, key, with_batch_size(dataset, batch // workers), workers, policy)
        return _RemoteIterator(strategy, key, self.element_spec)

    def _per_step(self, it: Iterator[Any]) -> Iterator[Any]:
        n = self._strategy.num_replicas_in_sync
        devices = list(self._strategy.extended.worker_devices)
        if self._options is not None and self._options.experimental_fetch_to_device is False:
            devices = [device_lib.host_device()] * n  # the batches stay on the host, as in TF
        for batch in it:
            if n == 1:
                yield _nest.map_structure(lambda x: Tensor(x, devices[0]), batch)
                continue
            parts = split_for_replicas(batch, n)
            yield _nest.map_structure(
                lambda *leaves: PerReplica([Tensor(x, devices[r]) for r, x in enumerate(leaves)], self._strategy),
                *parts,
            )


def _source(dataset: Dataset) -> Dataset | None:
    """The Dask source at the bottom of ``dataset``'s pipeline, or None."""
    node = dataset
    while node._input is not None:
        node = node._input
    return node if isinstance(node, (_dask.DaskSliceDataset, _dask.DaskChunksDataset)) else None


def _read_with(strategy: Any, dataset: Dataset) -> Iterator[Any]:
    """Iterate ``dataset`` in the notebook, its Dask reads going through the strategy's client."""
    it = iter(dataset)
    while True:
        with _dask.using_client(strategy.client):
            batch = next(it, _END)
        if batch is _END:
            return
        yield batch


class PerReplicaSpec:
    """The ``element_spec`` of a per-replica value: the same spec on each replica."""

    def __init__(self, spec: Any, num_replicas: int) -> None:
        self.spec = spec
        self.num_replicas = num_replicas

    def __eq__(self, other: object) -> bool:
        return isinstance(other, PerReplicaSpec) and (self.spec, self.num_replicas) == (other.spec, other.num_replicas)

    def __repr__(self) -> str:
        return f"PerReplicaSpec({', '.join([repr(self.spec)] * self.num_replicas)})"


class DistributedIterator(_NoTransformations):
    """Iterator over a distributed dataset: each ``next`` is one step's per-replica values."""

    def __init__(self, strategy: Any, steps: Iterator[Any], element_spec: Any) -> None:
        self._strategy = strategy
        self._steps = steps
        self._element_spec = element_spec

    @property
    def element_spec(self) -> Any:
        return self._element_spec

    def __iter__(self) -> DistributedIterator:
        return self

    def __repr__(self) -> str:
        return f"<interdist.{type(self).__name__} over {_replicas(self._strategy)}>"

    def __next__(self) -> Any:
        return next(self._steps)

    def get_next(self) -> Any:
        """The next step's values; ``OutOfRangeError`` at the end (TF's class), where ``next`` stops."""
        try:
            return next(self)
        except StopIteration:
            raise OutOfRangeError(
                "End of sequence: the distributed iterator is exhausted (use get_next_as_optional() "
                "or a for loop to stop at the end of the data)"
            ) from None

    def get_next_as_optional(self) -> Optional:
        """The next step's values as an ``Optional``: ``has_value()`` is False at the end of the data."""
        try:
            return Optional(next(self), self.element_spec)
        except StopIteration:
            return Optional.empty(self.element_spec)


_ids = itertools.count(1)


def _replicas(strategy: Any) -> str:
    n = getattr(strategy, "num_replicas_in_sync", "?")
    return f"{n} replica(s) of {type(strategy).__name__}"


class DistributedDatasetsFromFunction(_NoTransformations):
    """Datasets made by ``dataset_fn`` on each replica's worker."""

    def __init__(
        self, strategy: Any, dataset_fn: Callable[[InputContext], Any], options: InputOptions | None = None
    ) -> None:
        if not callable(dataset_fn):
            raise TypeError(f"dataset_fn must be callable, but got {type(dataset_fn).__name__}")
        if options is not None and not isinstance(options, InputOptions):
            raise TypeError(f"options must be a tf.distribute.InputOptions, but got {type(options).__name__}")
        kind = strategy._kind
        check_options_for_datasets_from_function(options, per_replica_supported=kind in ("mirrored", "central_storage"))
        self._strategy = strategy
        self._key = f"dataset:{next(_ids)}"
        per_replica = options is not None and options.experimental_replication_mode == InputReplicationMode.PER_REPLICA
        if per_replica and kind == "central_storage":
            assert options is not None
            if options.experimental_fetch_to_device is False:
                # TF 2.21 then gives each step one batch that is not per-replica (checked): a silent error.
                raise NotImplementedError(
                    "InputReplicationMode.PER_REPLICA with experimental_fetch_to_device=False is not supported "
                    "by CentralStorageStrategy: use the default InputOptions (one input pipeline for all replicas)"
                )
            per_replica = False  # TF's CentralStorageStrategy reads one pipeline for all its replicas here
        if getattr(strategy, "_input_split_by_worker", False):
            # Several hosts: dataset_fn runs on each worker's host, as TF runs it in each worker's process.
            specs = strategy._system(_make_dataset, self._key, dataset_fn, per_replica)
        else:
            # One host: TF calls dataset_fn in this process, once per input pipeline: once for all
            # the replicas (PER_WORKER), or once per replica (PER_REPLICA). The pipelines travel to
            # the workers as descriptions; their data is read there.
            n = strategy.num_replicas_in_sync
            if per_replica:
                made = [_call_dataset_fn(dataset_fn, InputContext(n, r, n)) for r in range(n)]
                per_rank = [(self._key, made[r], 1, 0) for r in range(n)]
            else:
                made = [_call_dataset_fn(dataset_fn, InputContext(1, 0, n))]
                per_rank = [(self._key, made[0], n, r) for r in range(n)]
            specs = strategy._system(_place_dataset, per_rank=per_rank)
        self._element_spec = strategy._regroup([specs[0]])

    @property
    def element_spec(self) -> Any:
        n = self._strategy.num_replicas_in_sync
        if n == 1 or self._element_spec is None:
            return self._element_spec
        return _nest.map_structure(lambda s: PerReplicaSpec(s, n), self._element_spec)

    def __repr__(self) -> str:
        return f"<interdist.DistributedDatasetsFromFunction {self._key!r} over {_replicas(self._strategy)}>"

    def __iter__(self) -> Iterator[Any]:
        it_key = f"{self._key}:iter:{next(_ids)}"
        self._strategy._system(_start_iterator, self._key, it_key)
        return _RemoteIterator(self._strategy, it_key, self.element_spec)


class _RemoteIterator(DistributedIterator):
    def __init__(self, strategy: Any, key: str, element_spec: Any) -> None:
        super().__init__(strategy, iter(()), element_spec)
        self._key = key
        self._done = False

    def __next__(self) -> Any:
        if self._done:
            raise StopIteration
        results = self._strategy._system(_next_batch, self._key)
        if all(r is None for r in results):
            self._done = True
            raise StopIteration
        if any(r is None for r in results) and not _pads_partial_steps(self._strategy, self.element_spec):
            # TF 2.21 pads a step only when the element shapes are not all static or across workers; otherwise
            # (and always with CentralStorageStrategy) the iteration ends at the first step a replica lacks.
            self._done = True
            raise StopIteration
        if any(r is None for r in results):
            # TF: a replica whose pipeline ran out while others still had a batch gets an empty batch.
            return _fill_empty(self.element_spec, results, self._strategy)
        return self._strategy._regroup(results)


def _replica_spec(spec: Any) -> Any:
    return spec.spec if isinstance(spec, PerReplicaSpec) else spec


def _pads_partial_steps(strategy: Any, element_spec: Any) -> bool:
    """TF's ``_enable_get_next_as_optional``: whether a step some replicas lack is padded (else it ends the data).

    Not with CentralStorageStrategy (checked with TF 2.21); across workers always; on one host only when
    some dimension of the element spec is unknown (``batch`` without ``drop_remainder``).
    """
    if strategy._kind == "central_storage":
        return False
    if getattr(strategy, "_input_split_by_worker", False) and strategy.num_replicas_in_sync > 1:
        return True
    return any(None in _replica_spec(s).shape for s in _nest.flatten(element_spec))


def _dummy_batch(spec: TensorSpec) -> Any:
    """TF's ``_dummy_tensor_fn``: zeros of ``spec``'s shape with unknown dimensions 0, and the first dimension 0
    when the shape is fully known. So a ``(None, None, 1)`` spec gives ``(0, 0, 1)`` and a ``(2, None, 1)`` one
    gives ``(2, 0, 1)`` (TF 2.21 does both), whatever shape the other replicas' batches have.
    """
    dims = [0 if d is None else d for d in spec.shape]
    if dims and None not in spec.shape:
        dims[0] = 0
    return np.zeros(dims, spec.dtype)


def _fill_empty(element_spec: Any, results: list[Any], strategy: Any) -> Any:
    """One step's values where some replicas' pipelines ran out: theirs are dummy batches, on their devices."""
    present = next(r for r in results if r is not None)
    nothing = _nest.map_structure(lambda _: None, present)
    regrouped = strategy._regroup([r if r is not None else nothing for r in results])
    devices = list(strategy.extended.worker_devices)

    def fill(value: Any, spec: Any) -> Any:
        if not isinstance(value, PerReplica):
            return value
        dummy = _dummy_batch(_replica_spec(spec))
        parts = [v if v is not None else Tensor(dummy.copy(), devices[r]) for r, v in enumerate(value.values)]
        return PerReplica(parts, strategy)

    return _nest.map_structure(fill, regrouped, element_spec)


def _call_dataset_fn(dataset_fn: Callable[[InputContext], Any], ctx: InputContext) -> Dataset:
    dataset = dataset_fn(ctx)
    if not isinstance(dataset, Dataset):
        raise NotADatasetError(
            f"dataset_fn must return an interdist.data.Dataset, but it returned {type(dataset).__name__}"
        )
    return dataset


def _place_dataset(replica: Any, key: str, dataset: Dataset, shards: int, index: int) -> Any:
    """Keep ``dataset`` (made in the notebook) on this replica: every ``shards``-th batch from ``index``."""
    if getattr(replica, "worker", None) is not None:
        _dask.bind_worker(replica.worker)  # Dask sources in the pipeline read with this worker's client
    if shards > 1:
        dataset = dataset.shard(shards, index)
    replica.store[key] = dataset
    return dataset.element_spec


def _make_dataset(replica: Any, key: str, dataset_fn: Callable[[InputContext], Any], per_replica: bool) -> Any:
    n, rank = replica.world_size, replica.rank
    if per_replica:
        ctx = InputContext(num_input_pipelines=n, input_pipeline_id=rank, num_replicas_in_sync=n)
    else:
        # One input pipeline per worker, as TF on one host: every replica reads the same
        # pipeline and takes every n-th batch, starting at its own.
        ctx = InputContext(num_input_pipelines=1, input_pipeline_id=0, num_replicas_in_sync=n)
    if getattr(replica, "worker", None) is not None:
        _dask.bind_worker(replica.worker)  # Dask sources made by dataset_fn read with this worker's client
    dataset = dataset_fn(ctx)
    if not isinstance(dataset, Dataset):
        raise NotADatasetError(
            f"dataset_fn must return an interdist.data.Dataset, but it returned {type(dataset).__name__}"
        )
    if not per_replica and n > 1:
        dataset = dataset.shard(n, rank)
    replica.store[key] = dataset
    return dataset.element_spec


def _start_worker_shard(replica: Any, key: str, dataset: Dataset, workers: int, policy: Any) -> None:
    _dask.bind_worker(replica.worker)
    replica.store[key] = iter(shard_for_worker(dataset, workers, replica.rank, policy))


def _start_dask_reader(replica: Any, key: str, plan: Any) -> None:
    _dask.bind_worker(replica.worker)
    replica.store[key] = row_plan.PrefetchingReader(plan, replica.rank, replica.world_size)


def _start_iterator(replica: Any, key: str, it_key: str) -> None:
    replica.store[it_key] = iter(replica.store[key])


_END = object()


def _next_batch(replica: Any, it_key: str) -> Any:
    buffer = replica.store.get(it_key + ":buffer")
    value = buffer.pop(0) if buffer else next(replica.store[it_key], _END)
    return None if value is _END else value
