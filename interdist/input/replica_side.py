"""The replicas' side of distributed datasets: what each replica keeps and reads on its worker.

The programs the notebook runs on every replica (``strategy._system``): place or make the replica's dataset
(``_place_dataset``, ``_make_dataset``), start its iterators, hand out global batch ``k`` by its number
(``_next_batch_at``), and start an iterator again at a given batch after a fault (``_rebuild_at``, with
the recipes that say how). Split from ``distributed_dataset.py``.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from typing import Any, cast

from interdist import _nest
from interdist.errors import NotADatasetError
from interdist.input import _dask, _sources, _transforms
from interdist.input import plan as row_plan
from interdist.input.dataset import Dataset
from interdist.input.input_context import InputContext
from interdist.input.rebatch import shard_for_worker


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
