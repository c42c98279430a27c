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
import threading
import time
import warnings
import weakref
from collections.abc import Iterator
from typing import Any

import numpy as np

from interdist import _nest, config
from interdist.input import _direct, _values
from interdist.input._values import is_dask_collection
from interdist.input.dataset import Dataset, register_node
from interdist.input.spec import TensorSpec

__all__ = ["DaskChunksDataset", "DaskSliceDataset"]

# Rows read per fetch on a worker (a window of whole steps; at least one step).
WINDOW_ROWS = 16384
# Windows read ahead of the replica by its background thread.
PREFETCH_WINDOWS = 2
# Rows of persisted chunks on this host are read from their holder's memory (``_direct.py``);
# ``interdist.input.direct-reads: false`` reads every row through Dask. True or False here overrides the key.
_direct_reads: bool | None = None


def _as_row_arrays(structure: Any) -> Any:
    """Leaves as Dask arrays with known row chunks; a DataFrame becomes a dict of its columns."""
    if isinstance(structure, dict):
        return {k: _as_row_arrays(v) for k, v in structure.items()}
    if isinstance(structure, tuple):
        items = [_as_row_arrays(v) for v in structure]
        return type(structure)(*items) if hasattr(type(structure), "_fields") else tuple(items)
    if not is_dask_collection(structure):
        raise TypeError(
            f"Cannot mix Dask collections with {type(structure).__name__} in one dataset source: "
            "make every component a Dask collection (dask.array.from_array wraps a NumPy array)"
        )
    import dask.array as da

    if isinstance(structure, da.Array):
        arr = structure
        if arr.ndim == 0:
            raise ValueError("Unbatching a tensor is only supported for rank >= 1")
        if any(np.isnan(c) for c in arr.chunks[0]):
            # E.g. from a boolean mask: the lengths are needed to find rows.
            arr = arr.compute_chunk_sizes()  # type: ignore[no-untyped-call]  # dask.array is unannotated
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
    return TensorSpec((None, *shape) if batched else shape, dtype)


# -- which client reads ---------------------------------------------------------------------------
_bound = threading.local()
# The Dask worker this process is, once replica programs run here (bind_worker); None in the notebook.
_worker: Any = None
# The reading clients made on this worker (ReadingClient): their reads run here (_compute_here).
_readers: weakref.WeakSet[Any] = weakref.WeakSet()


def bind_worker(worker: Any) -> None:
    """Reads in this process use ``worker``'s client (set by the replica programs on a worker)."""
    global _worker
    _worker = worker


class using_client:  # noqa: N801 - a context manager named like a function; benchmarks/bench_input.py uses it
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

        return default_client()  # type: ignore[no-untyped-call]  # distributed is unannotated
    except (ImportError, ValueError):
        return None


class ReadingClient:
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

        self.own = Client(  # type: ignore[no-untyped-call]  # distributed is unannotated
            _worker.scheduler.address,
            security=_worker.security,
            set_as_default=False,
            name=f"interdist-reader-{_worker.name}",
        )
        _readers.add(self.own)
        return self.own

    def __exit__(self, *exc: object) -> None:
        if self.own is not None:
            self.own.close()


def compute(arrays: list[Any], client: Any = None) -> list[np.ndarray]:
    """Compute Dask arrays to NumPy arrays, with ``client`` or the current one."""
    client = client if client is not None else current_client()
    if client is None:
        from dask.base import compute as dask_compute  # what ``dask.compute`` is

        computed = dask_compute(*arrays, scheduler="threads")  # type: ignore[no-untyped-call]  # dask is unannotated
        return [np.asarray(a) for a in computed]
    attempts = 6
    for attempt in builtins.range(attempts):
        try:
            if _worker is not None and client in _readers:
                return _compute_here(arrays, client)
            return [np.asarray(a) for a in client.compute(list(arrays), sync=True)]
        except Exception as e:
            # A read whose inputs another client released and re-persisted under the same keys at
            # that moment is cancelled by the scheduler ("lost dependencies"); reads are pure, so
            # read again once the scheduler has settled (seen when a notebook deletes a persisted
            # array and persists it again, then reads at once: up to ~1 s of such cancels).
            if type(e).__name__ not in ("FutureCancelledError", "CancelledError") or attempt == attempts - 1:
                raise
            time.sleep(0.05 * 2**attempt)
    raise AssertionError("unreachable")


def _compute_here(arrays: list[Any], client: Any) -> list[np.ndarray]:
    """Compute on this worker and take the results from its memory (no copy through a comm).

    The read's tasks are meant for this worker (a loose restriction): chunks it holds are sliced in
    place, chunks other workers hold come worker to worker, and chunks not yet computed are computed
    here, unless another reader asked for the same keys first.
    Measured (2 workers, 8 MiB of rows from a persisted array): about 3x faster than gathering
    the result through the reading client.
    """
    # Loose: a task with a key another reader pinned to a worker that died since would wait for that worker
    # for ever (Dask keeps one task per key, with the first restriction); loose, it runs on another.
    futures = client.compute(list(arrays), workers=[_worker.address], allow_other_workers=True)
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
    direct_reads = config.get("input.direct-reads") if _direct_reads is None else _direct_reads
    if _worker is not None and client in _readers and direct_reads:
        direct = _direct.read_rows(_worker, leaves, rows, client)
        if direct is not None:
            return direct
    lo, hi = int(rows[0]), int(rows[-1]) + 1
    if hi - lo == len(rows):
        return compute([leaf[lo:hi] for leaf in leaves], client)
    return compute([leaf[rows] for leaf in leaves], client)


# -- sources --------------------------------------------------------------------------------------
@register_node
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
        with ReadingClient() as client:
            for lo in builtins.range(0, self._length, step):
                hi = min(lo + step, self._length)
                window = compute([leaf[lo:hi] for leaf in leaves], client)
                for i in builtins.range(hi - lo):
                    yield _nest.pack_sequence_as(self._value, [_values.copy_leaf(w[i]) for w in window])

    def _cardinality(self) -> int:
        return self._length

    def _compute_element_spec(self) -> Any:
        return _nest.map_structure(lambda a: _leaf_spec(a, batched=False), self._value)


@register_node
class DaskChunksDataset(Dataset):
    """A Dask collection as a batched dataset: each chunk (partition) of rows is one element."""

    def __init__(self, collection: Any) -> None:
        super().__init__()
        self._value = _as_row_arrays(collection)
        leaves = _nest.flatten(self._value)
        chunks = leaves[0].chunks[0]
        for leaf in leaves[1:]:
            if leaf.chunks[0] != chunks:
                raise ValueError(
                    "The components of a Dask dataset must have the same row chunks "
                    f"(got {chunks} and {leaf.chunks[0]}): rechunk them alike"
                )
        self._chunks = tuple(int(c) for c in chunks)

    def _iterate(self) -> Iterator[Any]:
        leaves = _nest.flatten(self._value)
        starts = np.cumsum((0, *self._chunks))
        with ReadingClient() as client:
            for j, size in enumerate(self._chunks):
                lo = int(starts[j])
                parts = compute([leaf[lo : lo + size] for leaf in leaves], client)
                yield _nest.pack_sequence_as(self._value, parts)

    def _cardinality(self) -> int:
        return len(self._chunks)

    def _compute_element_spec(self) -> Any:
        return _nest.map_structure(lambda a: _leaf_spec(a, batched=True), self._value)


def notebook_fallback_warning(reason: str) -> None:
    warnings.warn(
        f"This pipeline over a Dask source is read in the notebook and split there ({reason}): "
        "only source → map/take/skip/shard → batch → repeat/take/skip/shard/prefetch pipelines are "
        "read on the replicas' workers",
        UserWarning,
        stacklevel=3,
    )
