"""Row plans: which source rows make each replica's part of each global batch.

A pipeline of the form ``source -> map/take/skip/shard -> batch -> repeat/take/skip/shard/prefetch``
over a Dask (or NumPy ``from_tensor_slices``) source is described by a ``Plan``; each replica then
reads only its own rows of each global batch, a window of steps ahead (``iterate_plan``,
``PrefetchingReader``), instead of iterating the whole pipeline.
"""

from __future__ import annotations

import builtins
import itertools
import queue
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from interdist import _nest
from interdist.config import settings
from interdist.errors import CollectiveAbortedError
from interdist.input import _direct, _sources, _transforms, _values
from interdist.input import _transforms as t
from interdist.input._dask import (
    PREFETCH_WINDOWS,
    WINDOW_ROWS,
    DaskChunksDataset,
    DaskSliceDataset,
    ReadingClient,
    _read_rows,
)
from interdist.input.dataset import Dataset, set_plan_reader
from interdist.input.rebatch import batch_sizes_for_replicas

# -- row plans ------------------------------------------------------------------------------------
_BatchIds = Callable[[], Iterator[int]]
"""Starts an iteration over base batch ids (each call from the beginning)."""


@dataclass
class Plan:
    """Which source rows make each global batch of a pipeline over a Dask source."""

    structure: Any  # the source's structure of Dask arrays
    rows: builtins.range  # the source rows the pre-batch stream reads, in order
    maps: list[Any]  # element-wise MapDataset nodes, innermost first
    batch_size: int | None  # None: batches are the source's chunks
    drop_remainder: bool
    chunks: tuple[int, ...] | None
    post: list[tuple[str, Any]] = field(default_factory=list)  # ops on the sequence of batches
    element_spec: Any = None  # the pre-batch element (after the maps)

    def num_base_batches(self) -> int:
        if self.batch_size is None:
            assert self.chunks is not None
            return len(self.chunks)
        n, b = len(self.rows), self.batch_size
        return n // b if self.drop_remainder else -(-n // b)

    def batch_rows(self, j: int) -> builtins.range:
        """The source rows of base batch ``j``."""
        if self.batch_size is None:
            assert self.chunks is not None
            lo = sum(self.chunks[:j])
            return builtins.range(lo, lo + self.chunks[j])
        b = self.batch_size
        return self.rows[j * b : (j + 1) * b]

    def batch_ids(self) -> Iterator[int]:
        """The base batch of every element of the pipeline, in order (a finite or endless iterator)."""
        ids: _BatchIds = lambda: iter(builtins.range(self.num_base_batches()))
        for op, arg in self.post:
            ids = _post(ids, op, arg)
        return ids()


def _post(inner: _BatchIds, op: str, arg: Any) -> _BatchIds:
    if op == "repeat":

        def repeat() -> Iterator[int]:
            count = itertools.count() if arg < 0 else builtins.range(arg)
            for _ in count:
                empty = True
                for j in inner():
                    empty = False
                    yield j
                if empty:
                    return

        return repeat
    if op == "take":
        return lambda: inner() if arg < 0 else itertools.islice(inner(), arg)
    if op == "skip":
        return lambda: iter(()) if arg < 0 else itertools.islice(inner(), arg, None)
    if op == "shard":
        k, i = arg
        return lambda: itertools.islice(inner(), i, None, k)
    raise AssertionError(op)


def plan_of(dataset: Dataset) -> Plan | None:
    """The row plan of ``dataset``, or None when it is not of a shape a plan describes.

    The source may also be a NumPy ``from_tensor_slices``: iterating such a pipeline by its
    plan skips the rows of batches that a ``shard`` or ``skip`` after ``batch`` drops, instead
    of reading and mapping them (a per-worker pipeline sharded among a worker's replicas).
    """

    post: list[tuple[str, Any]] = []
    node: Any = dataset
    passthrough = (t.PrefetchDataset, t.OptionsDataset)
    while True:  # after batch: ops on whole batches
        if isinstance(node, DaskChunksDataset):
            return Plan(node._value, builtins.range(0), [], None, False, node._chunks, post[::-1], None)
        if isinstance(node, passthrough):
            pass
        elif isinstance(node, t.RepeatDataset):
            post.append(("repeat", node.count))
        elif isinstance(node, t.TakeDataset):
            post.append(("take", node.count))
        elif isinstance(node, t.SkipDataset):
            post.append(("skip", node.count))
        elif isinstance(node, t.ShardDataset):
            post.append(("shard", (node.num_shards, node.index)))
        elif isinstance(node, t.BatchDataset):
            break
        else:
            return None
        node = node._input
    batch = node
    pre: list[Any] = []
    node = batch._input
    while not isinstance(node, (DaskSliceDataset, _sources.TensorSliceDataset)):
        if isinstance(node, (t.MapDataset, t.TakeDataset, t.SkipDataset, t.ShardDataset)):
            pre.append(node)
        elif not isinstance(node, passthrough):
            return None
        node = node._input
    if isinstance(node, _sources.TensorSliceDataset) and not all(
        isinstance(leaf, np.ndarray) for leaf in _nest.flatten(node._value)
    ):
        return None
    rows = builtins.range(node._length)
    maps = []
    for op in reversed(pre):  # innermost first
        if isinstance(op, t.MapDataset):
            maps.append(op)
        elif isinstance(op, t.TakeDataset):
            rows = rows if op.count < 0 else rows[: op.count]
        elif isinstance(op, t.SkipDataset):
            rows = builtins.range(0) if op.count < 0 else rows[op.count :]
        else:
            rows = rows[op.index :: op.num_shards]
    return Plan(
        node._value, rows, maps, batch.batch_size, batch.drop_remainder, None, post[::-1], batch._input.element_spec
    )


def _pieces(plan: Plan, batch_rows: builtins.range, rank: int, num_replicas: int) -> builtins.range:
    """Replica ``rank``'s rows of one global batch (TF's split: ceil(L/n) each, in order)."""
    if num_replicas == 1:
        return batch_rows

    sizes = batch_sizes_for_replicas(len(batch_rows), num_replicas)
    lo = sum(sizes[:rank])
    return batch_rows[lo : lo + sizes[rank]]


def _empty_like_spec(spec: Any) -> Any:
    return _nest.map_structure(lambda s: np.empty((0, *(0 if d is None else d for d in s.shape)), s.dtype), spec)


_OPEN = object()  # iterate_plan opens a reading client of its own


def iterate_plan(
    plan: Plan,
    rank: int = 0,
    num_replicas: int = 1,
    client: Any = _OPEN,
    window_rows: int = WINDOW_ROWS,
    stats: dict[str, int] | None = None,
    start: int = 0,
) -> Iterator[Any]:
    """Replica ``rank``'s batch of every global batch of ``plan``, read in windows of steps.

    ``stats``, if given, counts the ``rows`` read and the ``reads`` (one per window). ``start``: the
    number of global batches to leave out first (their rows are not read), to go on from that step.
    """
    if client is _OPEN:
        with ReadingClient() as own:
            yield from iterate_plan(plan, rank, num_replicas, own, window_rows, stats, start)
        return
    leaves = _nest.flatten(plan.structure)
    ids = plan.batch_ids()
    if start:
        ids = itertools.islice(ids, start, None)
    if isinstance(leaves[0], np.ndarray):
        # A NumPy source: each step's rows are one slice of it (rows is a range), copied once.
        # One array, no map (a dataset_fn's `from_tensor_slices(x).batch(b)`): the batch is the
        # copy itself, without the structure round trip (~1/3 of a 128-row batch's time).
        single = not plan.maps and plan.structure is leaves[0]
        for j in ids:
            piece = _pieces(plan, plan.batch_rows(j), rank, num_replicas)
            lo, hi, step = piece.start, piece.stop, piece.step
            if stats is not None:
                stats["rows"] = stats.get("rows", 0) + len(piece)
            if single:
                yield np.array(leaves[0][lo:hi:step])
                continue
            columns = [np.array(leaf[lo:hi:step]) for leaf in leaves]
            yield _batch(plan, columns, len(piece))
        return
    per_step = max(1, (plan.batch_size or (max(plan.chunks or (1,)) or 1)) // num_replicas)
    most = max(1, window_rows // per_step)
    # Slow start: the first read is one step, then each window doubles up to ``window_rows``, so
    # the replica's first batch is not held up by a whole window (later reads overlap its steps).
    steps_per_window = 1
    while True:
        window = list(itertools.islice(ids, steps_per_window))
        steps_per_window = min(most, steps_per_window * 2)
        if not window:
            return
        pieces = [_pieces(plan, plan.batch_rows(j), rank, num_replicas) for j in window]
        wanted = np.fromiter(itertools.chain.from_iterable(pieces), np.int64)
        order = np.argsort(wanted, kind="stable")
        sorted_rows = wanted[order]
        unique, inverse = np.unique(sorted_rows, return_inverse=True)
        data = _read_rows(leaves, unique, client)
        if stats is not None:
            stats["rows"] = stats.get("rows", 0) + len(unique)
            stats["reads"] = stats.get("reads", 0) + 1
        back = np.empty(len(wanted), np.int64)
        back[order] = inverse  # position in `data` of every wanted row, in wanted order
        at = 0
        for piece in pieces:
            take = back[at : at + len(piece)]
            at += len(piece)
            yield _batch(plan, [d[take] for d in data], len(piece))


def _batch(plan: Plan, columns: list[np.ndarray], size: int) -> Any:
    if not plan.maps:
        return _nest.pack_sequence_as(plan.structure, columns)
    if size == 0:
        return _empty_like_spec(plan.element_spec)
    elements = []
    for i in builtins.range(size):
        element = _nest.pack_sequence_as(plan.structure, [_values.copy_leaf(c[i]) for c in columns])
        for m in plan.maps:
            element = m._apply(element)
        elements.append(element)
    return _values.stack_elements(elements)


#: How often (seconds) a replica waiting for its next batch checks whether its step was aborted.
ABORT_POLL_S = 0.1


class PrefetchingReader:
    """``iterate_plan`` on a background thread, ``PREFETCH_WINDOWS`` windows ahead (on a worker).

    ``start``: the global batches to leave out first (a reader started again after a fault, at the
    step its replica's iterator was at).
    """

    def __init__(
        self,
        plan: Plan,
        rank: int,
        num_replicas: int,
        start: int = 0,
        aborted: Callable[[], str | None] | None = None,
    ) -> None:
        # ``aborted``: why the step now waiting for a batch was aborted (a peer lost), or None: a replica
        # waiting on a read (of rows a lost worker held, say) leaves the step then, as a collective would.
        self._aborted = aborted
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=PREFETCH_WINDOWS * 64)
        self._closed = threading.Event()
        self.stats: dict[str, int] = {}  # rows and reads so far (for tests and the curious)
        self.rank = rank
        # The reading client connects now, while the iterator is made (as TF's iterator creation).
        self._reading = ReadingClient()
        client = self._reading.__enter__()
        self._thread = threading.Thread(
            target=self._fill,
            args=(plan, rank, num_replicas, client, start),
            name=f"interdist-dask-reader-{rank}",
            daemon=True,
        )
        self._thread.start()

    def _fill(self, plan: Plan, rank: int, num_replicas: int, client: Any, start: int) -> None:
        try:
            for batch in iterate_plan(plan, rank, num_replicas, client, stats=self.stats, start=start):
                if not self._put(("ok", batch)):
                    return
            self._put(("end", None))
        except BaseException as e:  # noqa: BLE001 - handed to the replica that reads next
            self._put(("error", e))
        finally:
            _direct.close_connections()
            self._reading.__exit__(None, None, None)

    def _put(self, item: Any) -> bool:
        while not self._closed.is_set():
            try:
                self._queue.put(item, timeout=0.5)
                return True
            except queue.Full:
                continue
        return False

    def __iter__(self) -> PrefetchingReader:
        return self

    def __next__(self) -> Any:
        deadline = time.monotonic() + settings.input_timeout
        while True:
            try:
                kind, value = self._queue.get(timeout=ABORT_POLL_S)
                break
            except queue.Empty:
                reason = self._aborted() if self._aborted is not None else None
                if reason is not None:  # the batch stays in the queue for the step handed out again
                    raise CollectiveAbortedError(f"the wait for this replica's batch was aborted: {reason}") from None
                if time.monotonic() < deadline:
                    continue
                raise TimeoutError(
                    f"no batch from this replica's Dask read for {settings.input_timeout:g} s (its read is still "
                    "running: is a worker holding the data gone?); the Dask config key interdist.input.timeout, set "
                    "in the notebook before the strategy is made, sets the limit"
                ) from None
        if kind == "ok":
            return value
        self._closed.set()
        if kind == "end":
            self._queue.put(("end", None))  # stays exhausted
            raise StopIteration
        raise value

    def close(self) -> None:
        """Stop reading ahead (the thread ends at its next batch)."""
        self._closed.set()

    def __del__(self) -> None:
        self._closed.set()


def read_by_plan(dataset: Dataset) -> Iterator[Any] | None:
    """``iter(dataset)`` by its row plan, when it has one worth using; else None (iterate node by node)."""
    source = dataset
    while source._input is not None:
        source = source._input
    if isinstance(source, (DaskSliceDataset, DaskChunksDataset)):
        plan = plan_of(dataset)
        if plan is not None:  # whole batches read in windows of rows, not row by row
            return iterate_plan(plan)
    elif isinstance(source, _sources.TensorSliceDataset) and isinstance(dataset, _transforms.ShardDataset):
        plan = plan_of(dataset)
        if plan is not None:  # read (and map) only the rows of the batches kept
            return iterate_plan(plan, client=None)
    return None


set_plan_reader(read_by_plan)
