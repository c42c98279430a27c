"""Dask arrays and DataFrames as dataset sources, read on the worker of the replica that consumes them.

Two ways in:

* ``Dataset.from_tensor_slices(x)`` where ``x`` (or any leaf of a nested
  tuple/dict) is a Dask array, Series or DataFrame: one element per row, as for
  NumPy arrays. A DataFrame becomes a dict of its columns (the counterpart of
  TF's ``from_tensor_slices(dict(df))``).
* ``strategy.experimental_distribute_dataset(x)`` with a Dask collection
  itself: each chunk (each partition of a DataFrame) is one global batch, split
  among the replicas as TF splits a batch.

Nothing is computed when the dataset is made (a DataFrame's partition lengths
are, once: they are a few integers). Reading happens where the rows are used.

**Row plans.** A pipeline of the form ``source → (map | take | skip | shard |
prefetch | with_options)* → batch → (repeat | take | skip | shard | prefetch |
with_options)*`` is described by a :class:`Plan`: which rows make each global
batch. Every replica works out the same sequence of batches from the plan and
reads only its own rows of each (TF's split rule), in windows of many steps, on
its own worker, with the next window read by a background thread while the
replica computes. Rows of chunks already in memory on this host are read from
the memory of the worker holding them, only the rows this replica needs
(``_direct.py``); otherwise they are fetched with the worker's own Dask client,
so chunks held by other workers move worker to worker and chunks not yet
computed are computed by the cluster. The notebook holds only the plan. Element-wise
``map`` functions run on the rows a replica reads, before they are batched, so
they cost the same as in one process but run on every replica at once.

A pipeline of another shape over a Dask source (a ``filter``, a ``map`` after
``batch``...) is read in the notebook and split there, with a warning saying so.
"""

from __future__ import annotations

import builtins
import itertools
import os
import queue
import threading
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from interdist import _nest
from interdist.input import _values
from interdist.input.dataset import Dataset
from interdist.input.spec import TensorSpec

__all__ = ["DaskChunksDataset", "DaskSliceDataset", "Plan", "contains_dask", "is_dask_collection", "plan_of"]

# Rows read per fetch on a worker (a window of whole steps; at least one step).
WINDOW_ROWS = 16384
# Windows read ahead of the replica by its background thread.
PREFETCH_WINDOWS = 2
# Rows of persisted chunks on this host are read from their holder's memory (``_direct.py``);
# INTERDIST_DIRECT_READS=0 reads every row through Dask.
_direct_reads = os.environ.get("INTERDIST_DIRECT_READS", "1") != "0"


def is_dask_collection(x: Any) -> bool:
    """True for a Dask array, Series or DataFrame (checked without importing Dask)."""
    module = type(x).__module__ or ""
    return module.startswith("dask") and hasattr(x, "__dask_graph__")


def contains_dask(structure: Any) -> bool:
    """True if any leaf of a tuple/dict structure is a Dask collection."""
    if isinstance(structure, dict):
        return any(contains_dask(v) for v in structure.values())
    if isinstance(structure, tuple):
        return any(contains_dask(v) for v in structure)
    return is_dask_collection(structure)


def _as_row_arrays(structure: Any) -> Any:
    """Leaves as Dask arrays with known row chunks; a DataFrame becomes a dict of its columns."""
    if isinstance(structure, dict):
        return {k: _as_row_arrays(v) for k, v in structure.items()}
    if isinstance(structure, tuple):
        items = [_as_row_arrays(v) for v in structure]
        return type(structure)(*items) if hasattr(type(structure), "_fields") else tuple(items)
    if not is_dask_collection(structure):
        raise TypeError(f"Cannot mix Dask collections with {type(structure).__name__} in one dataset source: "
                        "make every component a Dask collection (dask.array.from_array wraps a NumPy array)")
    import dask.array as da

    if isinstance(structure, da.Array):
        arr = structure
        if arr.ndim == 0:
            raise ValueError("Unbatching a tensor is only supported for rank >= 1")
        if any(np.isnan(c) for c in arr.chunks[0]):
            arr = arr.compute_chunk_sizes()  # e.g. from a boolean mask: the lengths are needed to find rows
        return arr
    columns = getattr(structure, "columns", None)
    if columns is not None:  # a DataFrame: one component per column, as from_tensor_slices(dict(df))
        return {str(c): structure[c].to_dask_array(lengths=True) for c in columns}
    to_array = getattr(structure, "to_dask_array", None)
    if to_array is not None:  # a Series
        return to_array(lengths=True)
    raise TypeError(f"Unsupported Dask collection {type(structure).__name__}: use a Dask array, Series or DataFrame")


def _leaf_spec(arr: Any, batched: bool) -> TensorSpec:
    dtype = np.dtype(arr.dtype)
    if dtype.kind in "OUS":
        dtype = np.dtype(np.str_)
    shape = tuple(int(d) for d in arr.shape[1:])
    return TensorSpec(((None,) + shape) if batched else shape, dtype)


# -- which client reads ---------------------------------------------------------------------------
_bound = threading.local()
_worker: Any = None


def bind_worker(worker: Any) -> None:
    """Reads in this process use ``worker``'s client (set by the replica programs on a worker)."""
    global _worker
    _worker = worker


class using_client:
    """Reads on this thread go through ``client`` (the notebook side of a strategy)."""

    def __init__(self, client: Any) -> None:
        self.client = client

    def __enter__(self) -> None:
        self.previous = getattr(_bound, "client", None)
        _bound.client = self.client

    def __exit__(self, *exc: object) -> None:
        _bound.client = self.previous


def current_client() -> Any:
    """The Dask client for reads here: a bound one, the default one, or None (local threads)."""
    client = getattr(_bound, "client", None)
    if client is not None:
        return client
    try:
        from distributed import default_client

        return default_client()
    except (ImportError, ValueError):
        return None


class reading_client:
    """The client one read loop uses: on a worker, a client of its own, closed when the loop ends.

    Persisted collections carry futures; a worker's shared client keeps the state of futures
    it once saw, and a key forgotten and persisted again under the same name (re-running a
    notebook cell) would reach it as cancelled ("lost dependencies"). A client per read loop
    starts clean.
    """

    def __init__(self) -> None:
        self.own: Any = None

    def __enter__(self) -> Any:
        bound = getattr(_bound, "client", None)
        if bound is not None or _worker is None:
            return bound if bound is not None else current_client()
        from distributed import Client

        self.own = Client(_worker.scheduler.address, security=_worker.security, set_as_default=False,
                          name=f"interdist-reader-{_worker.name}")
        self.own._interdist_reader = True  # reads run on this worker (_compute_here)
        return self.own

    def __exit__(self, *exc: object) -> None:
        if self.own is not None:
            self.own.close()


def compute(arrays: list[Any], client: Any = None) -> list[np.ndarray]:
    """Compute Dask arrays to NumPy arrays, with ``client`` or the current one."""
    client = client if client is not None else current_client()
    if client is None:
        import dask

        return [np.asarray(a) for a in dask.compute(*arrays, scheduler="threads")]
    attempts = 6
    for attempt in builtins.range(attempts):
        try:
            if _worker is not None and getattr(client, "_interdist_reader", False):
                return _compute_here(arrays, client)
            return [np.asarray(a) for a in client.compute(list(arrays), sync=True)]
        except Exception as e:
            # A read whose inputs another client released and re-persisted under the same keys at
            # that moment is cancelled by the scheduler ("lost dependencies"); reads are pure, so
            # read again once the scheduler has settled (seen when a notebook deletes a persisted
            # array and persists it again, then reads at once: up to ~1 s of such cancels).
            if type(e).__name__ not in ("FutureCancelledError", "CancelledError") or attempt == attempts - 1:
                raise
            time.sleep(0.05 * 2 ** attempt)
    raise AssertionError("unreachable")


def _compute_here(arrays: list[Any], client: Any) -> list[np.ndarray]:
    """Compute on this worker and take the results from its memory (no copy through a comm).

    The read's tasks are pinned to this worker: chunks it holds are sliced in place, chunks
    other workers hold come worker to worker, and chunks not yet computed are computed here.
    Measured (2 workers, 8 MiB of rows from a persisted array): about 3x faster than gathering
    the result through the reading client.
    """
    futures = client.compute(list(arrays), workers=[_worker.address], allow_other_workers=False)
    try:
        out = []
        for f in futures:
            if f.exception() is not None:  # waits for the task without moving its result
                f.result()  # raises the task's error, with its traceback
            value = _worker.data.get(f.key) if f.key in _worker.data else None
            out.append(np.asarray(value) if value is not None else np.asarray(f.result()))
        return out
    finally:
        for f in futures:
            f.release()


def _read_rows(leaves: list[Any], rows: np.ndarray, client: Any) -> list[np.ndarray]:
    """The given rows (sorted) of every leaf; a contiguous run is read as a slice."""
    if len(rows) == 0:
        return [np.empty((0, *leaf.shape[1:]), leaf.dtype) for leaf in leaves]
    if _worker is not None and getattr(client, "_interdist_reader", False) and _direct_reads:
        from interdist.input import _direct

        direct = _direct.read_rows(_worker, leaves, rows, client)
        if direct is not None:
            return direct
    lo, hi = int(rows[0]), int(rows[-1]) + 1
    if hi - lo == len(rows):
        return compute([leaf[lo:hi] for leaf in leaves], client)
    return compute([leaf[rows] for leaf in leaves], client)


# -- sources --------------------------------------------------------------------------------------
class DaskSliceDataset(Dataset):
    """``Dataset.from_tensor_slices`` of Dask collections: one element per row."""

    def __init__(self, tensors: Any) -> None:
        super().__init__()
        self._value = _as_row_arrays(tensors)
        leaves = _nest.flatten(self._value)
        if not leaves:
            raise ValueError("from_tensor_slices() needs at least one component")
        sizes = [int(leaf.shape[0]) for leaf in leaves]
        for size in sizes[1:]:
            if size != sizes[0]:
                raise ValueError(f"Dimensions {sizes[0]} and {size} are not compatible")
        self._length = sizes[0]

    def _iterate(self) -> Iterator[Any]:
        leaves = _nest.flatten(self._value)
        step = max(1, WINDOW_ROWS)
        with reading_client() as client:
            for lo in builtins.range(0, self._length, step):
                hi = min(lo + step, self._length)
                window = compute([leaf[lo:hi] for leaf in leaves], client)
                for i in builtins.range(hi - lo):
                    yield _nest.pack_sequence_as(self._value, [_values.copy_leaf(w[i]) for w in window])

    def _cardinality(self) -> int:
        return self._length

    def _compute_element_spec(self) -> Any:
        return _nest.map_structure(lambda a: _leaf_spec(a, batched=False), self._value)


class DaskChunksDataset(Dataset):
    """A Dask collection as a batched dataset: each chunk (partition) of rows is one element."""

    def __init__(self, collection: Any) -> None:
        super().__init__()
        self._value = _as_row_arrays(collection)
        leaves = _nest.flatten(self._value)
        chunks = leaves[0].chunks[0]
        for leaf in leaves[1:]:
            if leaf.chunks[0] != chunks:
                raise ValueError("The components of a Dask dataset must have the same row chunks "
                                 f"(got {chunks} and {leaf.chunks[0]}): rechunk them alike")
        self._chunks = tuple(int(c) for c in chunks)

    def _iterate(self) -> Iterator[Any]:
        leaves = _nest.flatten(self._value)
        starts = np.cumsum((0,) + self._chunks)
        with reading_client() as client:
            for j, size in enumerate(self._chunks):
                lo = int(starts[j])
                parts = compute([leaf[lo:lo + size] for leaf in leaves], client)
                yield _nest.pack_sequence_as(self._value, parts)

    def _cardinality(self) -> int:
        return len(self._chunks)

    def _compute_element_spec(self) -> Any:
        return _nest.map_structure(lambda a: _leaf_spec(a, batched=True), self._value)


# -- row plans ------------------------------------------------------------------------------------
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
        return self.rows[j * b:(j + 1) * b]

    def batch_ids(self) -> Iterator[int]:
        """The base batch of every element of the pipeline, in order (a finite or endless iterator)."""
        ids: Any = lambda: iter(builtins.range(self.num_base_batches()))
        for op, arg in self.post:
            ids = _post(ids, op, arg)
        return ids()


def _post(inner: Any, op: str, arg: Any) -> Any:
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
    from interdist.input import _sources
    from interdist.input import _transforms as t

    post: list[tuple[str, Any]] = []
    node: Any = dataset
    passthrough = (t.PrefetchDataset, t.OptionsDataset)
    while True:  # after batch: ops on whole batches
        if isinstance(node, DaskChunksDataset):
            return Plan(node._value, builtins.range(0), [], None, False, node._chunks, post[::-1],
                        None)
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
            isinstance(leaf, np.ndarray) for leaf in _nest.flatten(node._value)):
        return None
    rows = builtins.range(node._length)
    maps = []
    for op in reversed(pre):  # innermost first
        if isinstance(op, t.MapDataset):
            maps.append(op)
        elif isinstance(op, t.TakeDataset):
            rows = rows if op.count < 0 else rows[:op.count]
        elif isinstance(op, t.SkipDataset):
            rows = builtins.range(0) if op.count < 0 else rows[op.count:]
        else:
            rows = rows[op.index::op.num_shards]
    return Plan(node._value, rows, maps, batch.batch_size, batch.drop_remainder, None, post[::-1],
                batch._input.element_spec)


def _pieces(plan: Plan, batch_rows: builtins.range, rank: int, num_replicas: int) -> builtins.range:
    """Replica ``rank``'s rows of one global batch (TF's split: ceil(L/n) each, in order)."""
    if num_replicas == 1:
        return batch_rows
    from interdist.input.rebatch import batch_sizes_for_replicas

    sizes = batch_sizes_for_replicas(len(batch_rows), num_replicas)
    lo = sum(sizes[:rank])
    return batch_rows[lo:lo + sizes[rank]]


def _empty_like_spec(spec: Any) -> Any:
    return _nest.map_structure(
        lambda s: np.empty((0, *(0 if d is None else d for d in s.shape)), s.dtype), spec)


_OPEN = object()  # iterate_plan opens a reading client of its own


def iterate_plan(plan: Plan, rank: int = 0, num_replicas: int = 1, client: Any = _OPEN,
                 window_rows: int = WINDOW_ROWS, stats: dict[str, int] | None = None) -> Iterator[Any]:
    """Replica ``rank``'s batch of every global batch of ``plan``, read in windows of steps.

    ``stats``, if given, counts the ``rows`` read and the ``reads`` (one per window).
    """
    if client is _OPEN:
        with reading_client() as own:
            yield from iterate_plan(plan, rank, num_replicas, own, window_rows, stats)
        return
    leaves = _nest.flatten(plan.structure)
    ids = plan.batch_ids()
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
            take = back[at:at + len(piece)]
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


class PrefetchingReader:
    """``iterate_plan`` on a background thread, ``PREFETCH_WINDOWS`` windows ahead (on a worker)."""

    def __init__(self, plan: Plan, rank: int, num_replicas: int) -> None:
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=PREFETCH_WINDOWS * 64)
        self._closed = threading.Event()
        self.stats: dict[str, int] = {}  # rows and reads so far (for tests and the curious)
        self.rank = rank
        # The reading client connects now, while the iterator is made (as TF's iterator creation).
        self._reading = reading_client()
        client = self._reading.__enter__()
        self._thread = threading.Thread(target=self._fill, args=(plan, rank, num_replicas, client),
                                        name=f"interdist-dask-reader-{rank}", daemon=True)
        self._thread.start()

    def _fill(self, plan: Plan, rank: int, num_replicas: int, client: Any) -> None:
        try:
            for batch in iterate_plan(plan, rank, num_replicas, client, stats=self.stats):
                if not self._put(("ok", batch)):
                    return
            self._put(("end", None))
        except BaseException as e:  # noqa: BLE001 - handed to the replica that reads next
            self._put(("error", e))
        finally:
            from interdist.input import _direct

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
        from interdist.config import settings

        try:
            kind, value = self._queue.get(timeout=settings.input_timeout)
        except queue.Empty:
            raise TimeoutError(
                f"no batch from this replica's Dask read for {settings.input_timeout:g} s (its read is still "
                "running: is a worker holding the data gone?); interdist.config.settings.input_timeout on the "
                "workers, or INTERDIST_INPUT_TIMEOUT, sets the limit") from None
        if kind == "ok":
            return value
        self._closed.set()
        if kind == "end":
            self._queue.put(("end", None))  # stays exhausted
            raise StopIteration
        raise value

    def __del__(self) -> None:
        self._closed.set()


def notebook_fallback_warning(reason: str) -> None:
    warnings.warn(f"This pipeline over a Dask source is read in the notebook and split there ({reason}): "
                  "only source → map/take/skip/shard → batch → repeat/take/skip/shard/prefetch pipelines are "
                  "read on the replicas' workers", UserWarning, stacklevel=3)
