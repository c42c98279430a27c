"""Datasets distributed over a strategy's replicas.

``experimental_distribute_dataset`` reads the global batches in the notebook,
splits each as TF does and hands every replica its part with the next ``run``
(one message per step, no extra round trip). ``distribute_datasets_from_function``
calls ``dataset_fn`` in the notebook once per input pipeline, as TF does (once on one
host; once per replica with ``PER_REPLICA``; on each worker's host across hosts), and
sends the pipeline it returns to the workers: its batches are read there and never
pass through the notebook.

**After a fault.** A step's batch is not lost with a replica: when ``strategy.run`` fails because a
replica's worker was lost or frozen (``WorkerLostError``, ``ReplicaFrozenError``), the next ``next``
hands out the batch that step was given again (unless a later ``run`` used it: a retry); a lost
replica's part of it is read again on its restarted worker. When the fault hits ``next`` itself, the
next ``next`` delivers that same step. Iterators whose batches are read on the workers do this by
asking every replica for batch ``k`` by its number: a replica that already read it hands out the one
it kept, and a restarted one starts its input pipeline again at that step. Where that pipeline cannot
give the same batches again (a ``shuffle`` that reshuffles each iteration, ``from_generator``),
``next`` raises ``IteratorLostError`` instead, saying which batches were delivered and how to go on.
"""

from __future__ import annotations

import itertools
import warnings
from collections.abc import Callable, Iterator
from typing import Any

from interdist import _nest
from interdist import device as device_lib
from interdist.errors import IteratorLostError as IteratorLostError
from interdist.errors import NotADatasetError
from interdist.input import _dask, _values
from interdist.input import plan as row_plan
from interdist.input.dataset import Dataset
from interdist.input.distributed_iterator import (
    DistributedIterator as DistributedIterator,
)
from interdist.input.distributed_iterator import (
    PerReplicaSpec as PerReplicaSpec,
)
from interdist.input.distributed_iterator import _check_open, _NoTransformations, _replicas
from interdist.input.input_context import (
    InputContext,
    InputOptions,
    InputReplicationMode,
    check_options_for_datasets_from_function,
    check_options_for_distribute_dataset,
)
from interdist.input.options import AutoShardPolicy
from interdist.input.rebatch import (
    rebatch_element_spec,
    shard_for_worker,
    split_for_replicas,
    static_batch_size,
    with_batch_size,
)
from interdist.input.remote_iterator import _release, _RemoteIterator, _status_of
from interdist.input.replica_side import (
    _END,
    _DatasetRecipe,
    _make_dataset,
    _place_dataset,
    _PlanRecipe,
    _ShardRecipe,
    _start_dask_reader,
    _start_iterator_if_held,
    _start_worker_shard,
)
from interdist.values.distributed import PerReplica
from interdist.values.tensor import Tensor


class DistributedDataset(_NoTransformations):
    """Each global batch of ``dataset`` split into per-replica batches.

    What ``strategy.experimental_distribute_dataset`` and ``distribute_datasets_from_function`` return;
    iterating it gives one ``PerReplica`` value per step.

    Examples
    --------
    >>> import interdist as idist, numpy as np
    >>> with idist.MirroredStrategy(["CPU:0", "CPU:1"]) as s:
    ...     dist = s.experimental_distribute_dataset(idist.data.Dataset.range(8).batch(4))
    ...     [[np.asarray(x).tolist() for x in s.experimental_local_results(batch)] for batch in dist]
    [[[0, 1], [2, 3]], [[4, 5], [6, 7]]]
    """

    def __init__(self, strategy: Any, dataset: Any, options: InputOptions | None = None) -> None:
        _check_open(strategy)
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
        _check_open(self._strategy)
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
                recipe = _PlanRecipe(plan)
                return _RemoteIterator(self._strategy, key, self.element_spec, lambda rank: recipe)
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
        per_worker = with_batch_size(dataset, batch // workers)
        strategy._system(_start_worker_shard, key, per_worker, workers, policy)
        recipe = _ShardRecipe(per_worker, workers, policy)
        return _RemoteIterator(strategy, key, self.element_spec, lambda rank: recipe)

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


_ids = itertools.count(1)


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
        n = strategy.num_replicas_in_sync
        if getattr(strategy, "_input_split_by_worker", False):
            # Several hosts: dataset_fn runs on each worker's host, as TF runs it in each worker's process.
            specs = strategy._system(_make_dataset, self._key, dataset_fn, per_replica)
            # How a restarted worker makes its dataset again (_DatasetRecipe).
            self._placements: list[tuple[Any, ...]] = [("made", dataset_fn, per_replica)] * n
        else:
            # One host: TF calls dataset_fn in this process, once per input pipeline: once for all
            # the replicas (PER_WORKER), or once per replica (PER_REPLICA). The pipelines travel to
            # the workers as descriptions; their data is read there.
            if per_replica:
                made = [_call_dataset_fn(dataset_fn, InputContext(n, r, n)) for r in range(n)]
                per_rank = [(self._key, made[r], 1, 0) for r in range(n)]
            else:
                made = [_call_dataset_fn(dataset_fn, InputContext(1, 0, n))]
                per_rank = [(self._key, made[0], n, r) for r in range(n)]
            specs = strategy._system(_place_dataset, per_rank=per_rank)
            self._placements = [("placed", *args[1:]) for args in per_rank]
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
        strategy = self._strategy
        started = strategy._system(_start_iterator_if_held, self._key, it_key)
        missing = [r for r, m in enumerate(started) if _status_of(m) is not None]
        _release(strategy, started)
        iterator = _RemoteIterator(strategy, it_key, self.element_spec, self._recipe)
        if missing:  # a worker restarted since: it makes the dataset again, then the iterator
            iterator._restart(missing, restore=False)
        return iterator

    def _recipe(self, rank: int) -> _DatasetRecipe:
        return _DatasetRecipe(self._key, self._placements[rank])


def _call_dataset_fn(dataset_fn: Callable[[InputContext], Any], ctx: InputContext) -> Dataset:
    dataset = dataset_fn(ctx)
    if not isinstance(dataset, Dataset):
        raise NotADatasetError(
            f"dataset_fn must return an interdist.data.Dataset, but it returned {type(dataset).__name__}"
        )
    return dataset
