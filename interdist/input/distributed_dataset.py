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
import os
import sys
import warnings
from collections.abc import Callable, Iterator
from typing import Any, cast

import numpy as np

from interdist import _nest
from interdist import device as device_lib
from interdist.errors import (
    IteratorLostError,
    NotADatasetError,
    OutOfRangeError,
    ReplicaFrozenError,
    WorkerLostError,
)
from interdist.input import _dask, _sources, _transforms, _values
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
from interdist.protocol import ValueMeta
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


class PerReplicaSpec:
    """The ``element_spec`` of a per-replica value: the same spec on each replica."""

    def __init__(self, spec: Any, num_replicas: int) -> None:
        self.spec = spec
        self.num_replicas = num_replicas

    def __eq__(self, other: object) -> bool:
        return isinstance(other, PerReplicaSpec) and (self.spec, self.num_replicas) == (other.spec, other.num_replicas)

    def __repr__(self) -> str:
        return f"PerReplicaSpec({', '.join([repr(self.spec)] * self.num_replicas)})"


def _check_open(strategy: Any) -> None:
    """The strategy's own "was closed" error, if it was closed."""
    if getattr(strategy, "_closed", False):
        strategy._check_usable()  # raises, saying so
        raise RuntimeError("the strategy was closed (strategy.close()); create a new one")


class DistributedIterator(_NoTransformations):
    """Iterator over a distributed dataset: each ``next`` is one step's per-replica values.

    After a ``strategy.run`` given this iterator's last batch failed because a replica was lost or
    frozen, the next ``next`` hands out that batch again (unless a later ``run`` used it: a retry), so
    that a loop such as ``for batch in it: try: strategy.run(step, args=(batch,)) except WorkerLostError:
    ...`` sees every batch once.

    Examples
    --------
    >>> import interdist as idist, numpy as np
    >>> with idist.MirroredStrategy(["CPU:0", "CPU:1"]) as s:
    ...     it = iter(s.experimental_distribute_dataset(idist.data.Dataset.range(8).batch(4)))
    ...     first = it.get_next()
    ...     sums = s.run(np.sum, args=(next(it),))  # the second global batch: [4, 5] and [6, 7]
    ...     [np.asarray(x).tolist() for x in s.experimental_local_results(first)]
    ...     float(s.reduce("SUM", sums, axis=None))
    [[0, 1], [2, 3]]
    22.0
    """

    def __init__(self, strategy: Any, steps: Iterator[Any], element_spec: Any) -> None:
        self._strategy = strategy
        self._steps = steps
        self._element_spec = element_spec
        self._last: Any = None  # the batch handed out last (a failed step's, for the next ``next``)
        self._redeliver = False  # the next ``next`` hands out ``_last`` again
        self._broken: str | None = None  # why this iterator cannot go on (IteratorLostError), once it cannot
        self._index = 0  # global batches handed out
        iterators = getattr(strategy, "_iterators", None)
        if iterators is not None:
            iterators.add(self)  # told about failed steps and restarted replicas (strategy/base.py)

    @property
    def element_spec(self) -> Any:
        return self._element_spec

    def __iter__(self) -> DistributedIterator:
        return self

    def __repr__(self) -> str:
        return f"<interdist.{type(self).__name__} over {_replicas(self._strategy)}>"

    def __next__(self) -> Any:
        value = self._repeat()
        if value is not None:
            return value
        value = next(self._steps)
        self._delivered(value)
        return value

    def _repeat(self) -> Any:
        """The checks before each ``next``; a failed step's batch to hand out again, or None."""
        _check_open(self._strategy)
        if self._broken is not None:
            raise IteratorLostError(self._broken, self._index)
        if self._redeliver and self._last is not None:
            self._redeliver = False
            return self._last
        return None

    def _delivered(self, value: Any) -> None:
        self._last, self._redeliver = value, False
        self._index += 1

    def _uses_last(self, leaves: set[int]) -> bool:
        return self._last is not None and any(id(x) in leaves for x in _nest.flatten(self._last))

    def _step_failed(self, leaves: set[int]) -> None:
        """A ``run`` whose arguments' leaves are ``leaves`` failed with a lost or frozen replica."""
        if self._uses_last(leaves):
            self._redeliver = True

    def _step_ran(self, leaves: set[int]) -> None:
        """A ``run`` whose arguments' leaves are ``leaves`` returned: a failed step's batch retried."""
        if self._redeliver and self._uses_last(leaves):
            self._redeliver = False

    def _fused_failed(self, exc: BaseException, taken: int) -> None:
        """``run_steps`` over this iterator took ``taken`` batches (-1: unknown) and failed with ``exc``."""
        first = self._index - taken if taken >= 0 else self._index
        if not _is_fault(exc):
            # The replica function's own error: the steps before it ran, as in a loop of ``run``; the batches
            # after it were taken from this iterator all the same (run_steps takes its batches first).
            if taken > 1:
                _skipped_warning(first, self._index)
            return
        took = f"global batches #{first} to #{self._index - 1}" if taken > 0 else f"the global batches from #{first} on"
        self._index = first  # the batches seen for sure
        self._broken = (
            f"run_steps over this distributed iterator failed ({type(exc).__name__}: a replica was lost or frozen) "
            f"after it took {took}: which of its steps were applied is unknown, so those batches were not all "
            "seen. " + _how_to_go_on(first)
        )

    def _replicas_replaced(self, ranks: list[int]) -> None:
        """Replicas ``ranks`` were restarted on new workers (their batches here are the notebook's: nothing to do)."""

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


def _is_fault(exc: BaseException) -> bool:
    """A lost or frozen replica (not an error of the replica function's own)."""
    return isinstance(exc, (WorkerLostError, ReplicaFrozenError))


def _skipped_warning(first: int, end: int) -> None:
    warnings.warn(
        f"run_steps over this distributed iterator failed in its replica function after it took global batches "
        f"#{first} to #{end - 1}: the steps before the failed one ran; the failed step's batch and those after it "
        f"were not run, and the iterator goes on from batch #{end}",
        UserWarning,
        stacklevel=_user_stacklevel(),
    )


def _user_stacklevel() -> int:
    """The ``stacklevel`` of a warning made by the caller that points at the first line outside interdist."""
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    frame: Any = sys._getframe(1)
    level = 1
    while frame is not None and frame.f_code.co_filename.startswith(package):
        frame = frame.f_back
        level += 1
    return level


def _how_to_go_on(delivered: int) -> str:
    return (
        f"It handed out {delivered} global batch(es) (#0 to #{delivered - 1}); the batches from #{delivered} on were "
        "not delivered. To go on, create a new iterator (iter(dist_dataset)): it starts from the first batch, so "
        f"leave out the {delivered} already seen (.skip() on the batched dataset before distributing it)"
        if delivered
        else "It handed out no batch yet: create a new iterator (iter(dist_dataset))"
    )


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


class _RemoteIterator(DistributedIterator):
    """An iterator whose batches are read on the replicas' workers: ``next`` asks each for batch ``k``."""

    def __init__(self, strategy: Any, key: str, element_spec: Any, recipe: Callable[[int], Any]) -> None:
        super().__init__(strategy, iter(()), element_spec)
        self._key = key
        self._done = False
        self._recipe = recipe  # rank -> how that replica starts this iterator again (_PlanRecipe...)
        self._last_keys: list[list[str | None]] = []  # per rank: where the last batch's parts are kept
        self._resync = False  # after a failed run_steps: take the replicas' position as this iterator's

    def __next__(self) -> Any:
        value = self._repeat()
        if value is not None:
            return value
        if self._done:
            raise StopIteration
        raw = self._fetch()
        results = raw
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
            value = _fill_empty(self.element_spec, results, self._strategy)
        else:
            value = self._strategy._regroup(results)
        self._delivered(value)
        self._last_keys = [[m.key if isinstance(m, ValueMeta) else None for m in _nest.flatten(r)] for r in raw]
        return value

    def _fetch(self) -> list[Any]:
        """Every replica's part of batch ``self._index`` (None where a replica's data ran out)."""
        strategy = self._strategy
        for _ in range(3):
            raw: list[Any] = strategy._system(_next_batch_at, self._key, self._index)
            statuses = {r: st for r, st in ((r, _status_of(m)) for r, m in enumerate(raw)) if st is not None}
            if not statuses:
                self._resync = False
                return raw
            _release(strategy, raw)  # the replicas that gave their part keep it for the repeat below
            at = {st.consumed for st in statuses.values() if st.kind == "at"}
            if self._resync and len(statuses) == len(raw) and len(at) == 1:
                # A run_steps that failed in the replica function: its steps before the failure ran, as a
                # loop of ``run`` would have; the iterator goes on after the batches it took, and says so.
                self._resync = False
                position = at.pop()
                if position > self._index + 1:
                    _skipped_warning(self._index, position)
                self._index = position
                continue
            # A restarted worker lacks the iterator (and the notebook's last batch: read again too); a replica
            # at another batch than the others (none that it kept) starts again at this one.
            missing = sorted(r for r, st in statuses.items() if st.kind == "missing")
            if missing:
                self._restart(missing, restore=True)
            elsewhere = sorted(r for r, st in statuses.items() if st.kind != "missing")
            if elsewhere:
                self._restart(elsewhere, restore=False)
        raise IteratorLostError(
            f"the replicas of this distributed iterator still do not agree on global batch #{self._index} after "
            "it was started again on them. " + _how_to_go_on(self._index),
            self._index,
        )

    def _restart(self, ranks: list[int], restore: bool) -> None:
        """Start this iterator again on replicas ``ranks``, at batch ``self._index``; with ``restore``, read the
        batch before it again into the keys the notebook's last batch names (a failed step can run again)."""
        strategy = self._strategy
        n = strategy.num_replicas_in_sync
        keep = restore and self._last is not None and self._index > 0 and len(self._last_keys) == n
        per_rank: list[tuple[Any, ...]] = [(self._key, None, 0, None)] * n
        for r in ranks:
            per_rank[r] = (self._key, self._recipe(r), self._index, self._last_keys[r] if keep else None)
        try:
            answers = strategy._system(_rebuild_at, per_rank=per_rank)
        except Exception as exc:
            if _is_fault(exc):
                raise  # another fault: the next ``next`` tries again
            self._broken = (
                f"this distributed iterator could not be started again on replica(s) {ranks} "
                f"({type(exc).__name__}: {exc}). " + _how_to_go_on(self._index)
            )
            raise IteratorLostError(self._broken, self._index) from exc
        why = [(r, m.value) for r, m in enumerate(answers) if isinstance(m, ValueMeta) and m.value is not None]
        _release(strategy, answers)
        if why:
            rank, reason = why[0]
            self._broken = (
                f"this distributed iterator cannot go on: replica {rank}'s input pipeline had to be started again "
                f"(its worker was lost) and cannot be read again to global batch #{self._index} ({reason}). "
                + _how_to_go_on(self._index)
            )
            raise IteratorLostError(self._broken, self._index)

    def _replicas_replaced(self, ranks: list[int]) -> None:
        if self._broken is not None or self._done:
            return
        try:
            self._restart(ranks, restore=True)
        except Exception:  # noqa: BLE001, S110 - the recovery goes on; ``next`` says why (``_broken``) or tries again
            pass

    def _fused_ran(self, done: int) -> None:
        """``run_steps`` ran ``done`` steps of this iterator's batches on the replicas."""
        self._index += done
        self._last, self._redeliver, self._last_keys = None, False, []

    def _fused_failed(self, exc: BaseException, taken: int) -> None:
        if _is_fault(exc):
            super()._fused_failed(exc, -1)
        else:
            self._resync = True


def _status_of(meta: Any) -> _Status | None:
    """The ``_Status`` a replica answered instead of a batch, or None."""
    if isinstance(meta, ValueMeta) and meta.shape is None and isinstance(meta.value, _Status):
        return meta.value
    return None


def _release(strategy: Any, raw: list[Any]) -> None:
    """Let the replicas drop the values of replies the notebook does not keep."""
    group = getattr(strategy, "_group", None)
    if group is None:
        return
    for rank, reply in enumerate(raw):
        for m in _nest.flatten(reply):
            if isinstance(m, ValueMeta):
                group.queue_release(rank, m.key)


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
    replica.store[key] = _Positioned(iter(shard_for_worker(dataset, workers, replica.rank, policy)))


def _step_aborted(replica: Any) -> Callable[[], str | None] | None:
    """Why the replica's running step was aborted (a peer failed or was lost), or None: a replica waiting for
    its batch leaves the step then, instead of holding the next program behind a read that may not end."""
    mailbox = getattr(getattr(replica, "transport", None), "mailbox", None)
    if mailbox is None:
        return None
    return lambda: cast("str | None", mailbox.aborted(replica.step))


def _start_dask_reader(replica: Any, key: str, plan: Any) -> None:
    _dask.bind_worker(replica.worker)
    reader = row_plan.PrefetchingReader(plan, replica.rank, replica.world_size, aborted=_step_aborted(replica))
    replica.store[key] = _Positioned(reader)


def _start_iterator(replica: Any, key: str, it_key: str) -> None:
    replica.store[it_key] = _Positioned(iter(replica.store[key]))


def _start_iterator_if_held(replica: Any, key: str, it_key: str) -> Any:
    """``_start_iterator``; a ``missing`` status where this worker holds no such dataset (it was restarted)."""
    if key not in replica.store:
        return _Status("missing")
    _start_iterator(replica, key, it_key)
    return None


_END = object()


def _next_batch(replica: Any, it_key: str) -> Any:
    buffer = replica.store.get(it_key + ":buffer")
    value = buffer.pop(0) if buffer else next(replica.store[it_key], _END)
    return None if value is _END else value


class _Positioned:
    """A replica's iterator over its own batches, counting them, with the last one it handed out kept:
    the notebook asks for batch ``k`` by its number (``_next_batch_at``), so that a request repeated after
    a fault gets the same batch again and a replica restarted after one starts at the right batch."""

    def __init__(self, it: Iterator[Any], position: int = 0) -> None:
        self._it = it
        self.pulled = position  # batches taken from ``it`` (by ``next`` and run_steps' buffer), from the first
        self.last: tuple[int, Any] | None = None  # (number, batch) of the last one ``_next_batch_at`` gave
        self.ended = False  # ``it`` ran out (the other replicas may go on: padded steps)

    def __iter__(self) -> _Positioned:
        return self

    def __next__(self) -> Any:
        try:
            value = next(self._it)
        except StopIteration:
            self.ended = True
            raise
        self.pulled += 1
        return value

    def __getattr__(self, name: str) -> Any:  # the reader's own attributes (a PrefetchingReader's ``stats``)
        if name.startswith("__") or name == "_it":
            raise AttributeError(name)
        return getattr(self._it, name)

    def close(self) -> None:
        close = getattr(self._it, "close", None)
        if close is not None:
            close()


class _Status:
    """What ``_next_batch_at`` answers instead of a batch: ``missing`` (this worker holds no such iterator:
    it was restarted) or ``at`` (its iterator is at batch ``consumed``, and does not hold the one asked for)."""

    __slots__ = ("consumed", "kind")

    def __init__(self, kind: str, consumed: int = 0) -> None:
        self.kind, self.consumed = kind, consumed

    def __reduce__(self) -> tuple[Any, ...]:
        return (_Status, (self.kind, self.consumed))


def _next_batch_at(replica: Any, it_key: str, index: int) -> Any:
    """Batch number ``index`` of this replica's iterator (None at the end of its data), or a ``_Status``."""
    it = replica.store.get(it_key)
    if not isinstance(it, _Positioned):
        return _Status("missing")
    buffer = replica.store.get(it_key + ":buffer") or []
    consumed = it.pulled - len(buffer)  # batches handed out so far (run_steps' buffer holds some not yet used)
    if index > consumed and it.ended and not buffer:
        return None  # this replica's data ran out steps ago, while the others' went on
    if index == consumed:
        value = buffer.pop(0) if buffer else next(it, _END)
        if value is _END:
            return None
        it.last = (index, value)
        return value
    if it.last is not None and it.last[0] == index and consumed == index + 1:
        return it.last[1]  # handed out to a request that failed elsewhere: the same batch again
    return _Status("at", consumed)


def _rebuild_at(replica: Any, it_key: str, recipe: Any, position: int, restore: list[str | None] | None) -> Any:
    """Start this replica's iterator ``it_key`` again at batch ``position``; None, or why it cannot be.

    ``restore``: the keys the notebook's last batch (number ``position - 1``) names on this replica: that
    batch is read again into them first, so that a step it was given can run again here.
    """
    if recipe is None:
        return None
    old = replica.store.pop(it_key, None)
    replica.store.pop(it_key + ":buffer", None)
    if isinstance(old, _Positioned):
        old.close()
    start = position - 1 if restore else position
    made = recipe.start(replica, start)
    if isinstance(made, str):
        return made
    it = _Positioned(made, start)
    if restore:
        batch = next(it, _END)
        if batch is not _END:
            for key, leaf in zip(restore, _nest.flatten(batch), strict=False):
                if key is not None:
                    replica.store[key] = leaf
            it.last = (start, batch)
    replica.store[it_key] = it
    return None


def _unreplayable(dataset: Dataset) -> str | None:
    """Why reading ``dataset`` again may not give the same elements in the same order; None if it does."""
    node: Dataset | None = dataset
    while node is not None:
        if isinstance(node, _transforms.ShuffleDataset) and node.reshuffle:
            return (
                "it shuffles anew on every iteration: shuffle() with reshuffle_each_iteration=True, the default; "
                "shuffle(..., reshuffle_each_iteration=False) gives one order that can be read again"
            )
        if isinstance(node, _sources.GeneratorDataset):
            return "a from_generator source need not yield the same elements when called again"
        node = node._input
    return None


def _skip(dataset: Dataset, position: int) -> Iterator[Any] | str:
    """``dataset``'s elements from number ``position`` on (read again from the first), or why not."""
    if position:
        why = _unreplayable(dataset)
        if why is not None:
            return why
    return itertools.islice(iter(dataset), position, None)


class _PlanRecipe:
    """A replica's Dask reader started again: its rows of each global batch of ``plan`` (no row read twice)."""

    def __init__(self, plan: Any) -> None:
        self.plan = plan

    def start(self, replica: Any, position: int) -> Iterator[Any] | str:
        _dask.bind_worker(replica.worker)
        return row_plan.PrefetchingReader(
            self.plan, replica.rank, replica.world_size, start=position, aborted=_step_aborted(replica)
        )


class _ShardRecipe:
    """A worker's shard of a pipeline (MultiWorkerMirroredStrategy's FILE or OFF auto-shard), read again."""

    def __init__(self, dataset: Dataset, workers: int, policy: Any) -> None:
        self.dataset, self.workers, self.policy = dataset, workers, policy

    def start(self, replica: Any, position: int) -> Iterator[Any] | str:
        _dask.bind_worker(replica.worker)
        return _skip(shard_for_worker(self.dataset, self.workers, replica.rank, self.policy), position)


class _DatasetRecipe:
    """An iterator over the dataset a ``DistributedDatasetsFromFunction`` keeps at ``key`` on each worker, read
    again; a restarted worker first makes the dataset again (``placement``: as ``_place_dataset`` or
    ``_make_dataset`` made it)."""

    def __init__(self, key: str, placement: tuple[Any, ...]) -> None:
        self.key, self.placement = key, placement

    def start(self, replica: Any, position: int) -> Iterator[Any] | str:
        if self.key not in replica.store:
            kind, *args = self.placement
            (_place_dataset if kind == "placed" else _make_dataset)(replica, self.key, *args)
        return _skip(replica.store[self.key], position)
