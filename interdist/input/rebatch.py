"""The batch splitting and worker sharding behind ``experimental_distribute_dataset``.

Pure functions; the strategies call them. What TF 2.21 does, measured with
``MirroredStrategy`` on logical CPUs:

* Each element the dataset yields (a global batch) is cut along axis 0 into
  one piece per replica, *in order*: every replica gets
  ``ceil(L / num_replicas)`` rows until the ``L`` rows run out, and the
  remaining replicas get empty pieces. ``L`` is the length of *that*
  element, so a short last batch is re-divided: with 3 replicas a batch of
  4 goes ``[2, 2, 0]`` but a final batch of 3 goes ``[1, 1, 1]``
  (:func:`split_for_replicas`).
* Across workers the dataset is auto-sharded first (:func:`shard_for_worker`).
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np

from interdist import _nest
from interdist.input import _transforms
from interdist.input.dataset import Dataset
from interdist.input.options import AutoShardPolicy
from interdist.input.spec import TensorSpec

__all__ = [
    "batch_sizes_for_replicas",
    "rebatch_element_spec",
    "shard_for_worker",
    "split_batch",
    "split_for_replicas",
    "static_batch_size",
    "with_batch_size",
]


def batch_sizes_for_replicas(global_batch_size: int, num_replicas: int) -> list[int]:
    """How many rows of a global batch each replica receives.

    Every replica gets ``ceil(global_batch_size / num_replicas)`` rows, in
    replica order, until the batch is used up; the rest get zero.

    Examples
    --------
    >>> batch_sizes_for_replicas(4, 3)
    [2, 2, 0]
    >>> batch_sizes_for_replicas(6, 4)
    [2, 2, 2, 0]
    """
    if num_replicas <= 0:
        raise ValueError(f"num_replicas must be positive, got {num_replicas}")
    if global_batch_size < 0:
        raise ValueError(f"global_batch_size must be >= 0, got {global_batch_size}")
    per_replica = -(-global_batch_size // num_replicas)
    sizes = []
    remaining = global_batch_size
    for _ in range(num_replicas):
        take = min(per_replica, remaining)
        sizes.append(take)
        remaining -= take
    return sizes


def _leading_dim(batch: Any) -> int:
    """The common length of axis 0 of every leaf of ``batch``."""
    dims = set()
    for leaf in _nest.flatten(batch):
        if np.ndim(leaf) == 0:
            raise ValueError(
                "Cannot split a batch with scalar components across replicas; call `batch()` on the dataset first"
            )
        dims.add(np.shape(leaf)[0])
    if len(dims) != 1:
        raise ValueError(f"Components of the batch differ in leading dimension: {sorted(dims)}")
    return int(dims.pop())


def split_batch(batch: Any, batch_sizes: list[int]) -> list[Any]:
    """Cut a batch along axis 0 into consecutive pieces of the given sizes.

    Every leaf is cut the same way. When the batch is shorter than
    ``sum(batch_sizes)`` (a partial batch), pieces are filled in order and
    the later ones come out short or empty; an empty piece keeps the leaf's
    dtype and trailing shape, ``(0, *rest)``.

    Parameters
    ----------
    batch : nested structure of arrays
        One global batch; all leaves must share their leading dimension.
    batch_sizes : list of int
        Size of each piece.

    Returns
    -------
    list
        One structure per entry of ``batch_sizes``, shaped like ``batch``.

    Raises
    ------
    ValueError
        If the batch has more rows than ``sum(batch_sizes)``, a leaf is a
        scalar, or the leaves disagree on their leading dimension.

    Examples
    --------
    >>> [p.tolist() for p in split_batch(np.arange(6), [4, 4])]
    [[0, 1, 2, 3], [4, 5]]
    """
    if any(s < 0 for s in batch_sizes):
        raise ValueError(f"batch sizes must be >= 0, got {batch_sizes}")
    length = _leading_dim(batch)
    if length > sum(batch_sizes):
        raise ValueError(f"A batch of {length} rows does not fit into pieces of {batch_sizes}")
    leaves = [np.asarray(leaf) for leaf in _nest.flatten(batch)]
    pieces = []
    start = 0
    for size in batch_sizes:
        stop = min(start + size, length)
        # Slices (not copies): the pieces are handed straight to replicas and
        # the batch itself is not reused.
        pieces.append(_nest.pack_sequence_as(batch, [leaf[start:stop] for leaf in leaves]))
        start = stop
    return pieces


def split_for_replicas(batch: Any, num_replicas: int) -> list[Any]:
    """Split one global batch among replicas exactly as TF 2.21 does.

    The sizes come from :func:`batch_sizes_for_replicas` applied to this
    batch's own length, so a final partial batch is spread again rather than
    cut by the full batch's sizes (TF: 7 rows in batches of 4 over 2 replicas
    give ``[2, 2]`` then ``[2, 1]``; over 3 replicas ``[2, 2, 0]`` then
    ``[1, 1, 1]``).

    Each component is split by its own first dimension, as TF 2.21 does when they differ (an
    unbatched element ``((4,), (3,))`` over 2 replicas: ``[2, 2]`` and ``[2, 1]``; so does a ``map``
    after ``batch`` that returns ``(x, x[:3])``).
    """
    leaves = _nest.flatten(batch)
    for leaf in leaves:
        if np.ndim(leaf) == 0:
            raise ValueError(
                "Cannot split a batch with scalar components across replicas; call `batch()` on the dataset first"
            )
    if len({np.shape(leaf)[0] for leaf in leaves}) == 1:
        return split_batch(batch, batch_sizes_for_replicas(_leading_dim(batch), num_replicas))
    columns = [split_batch(leaf, batch_sizes_for_replicas(np.shape(leaf)[0], num_replicas)) for leaf in leaves]
    return [_nest.pack_sequence_as(batch, [column[r] for column in columns]) for r in range(num_replicas)]


def rebatch_element_spec(element_spec: Any, num_replicas: int) -> Any:
    """The per-replica element spec of a distributed dataset.

    A known leading dimension that divides evenly stays known (divided);
    otherwise it becomes ``None``, as TF reports it.
    """

    def per_replica(spec: TensorSpec) -> TensorSpec:
        if not spec.shape:
            return spec
        dim = spec.shape[0]
        new = dim // num_replicas if dim is not None and dim % num_replicas == 0 else None
        return TensorSpec((new, *spec.shape[1:]), spec.dtype, spec.name)

    return _nest.map_structure(per_replica, element_spec)


def static_batch_size(dataset: Dataset) -> int | None:
    """The ``batch_size`` of the last ``batch()`` in the pipeline, or None.

    Looks upstream through every other transformation (map, filter, prefetch,
    take, repeat, shard, ...); an ``unbatch()`` met before any ``batch()``
    means the elements are not batched.
    """
    node: Dataset | None = dataset
    while node is not None:
        if isinstance(node, _transforms.BatchDataset):
            return node.batch_size
        if isinstance(node, _transforms.UnbatchDataset):
            return None
        node = node._input
    return None


def shard_for_worker(
    dataset: Dataset,
    num_workers: int,
    worker_index: int,
    policy: AutoShardPolicy | None = None,
) -> Dataset:
    """The part of ``dataset`` that worker ``worker_index`` should read.

    Parameters
    ----------
    dataset : Dataset
        The full input pipeline.
    num_workers, worker_index : int
        The number of workers and this worker's index.
    policy : AutoShardPolicy, optional
        Defaults to the dataset's
        ``options().experimental_distribute.auto_shard_policy``.

    Returns
    -------
    Dataset
        ``OFF``/``HINT``: ``dataset`` itself. ``FILE``: the pipeline rebuilt
        over files ``worker_index::num_workers``. ``DATA``: ``dataset.shard(
        num_workers, worker_index)``. ``AUTO``: ``FILE`` when the dataset reads
        files, otherwise ``DATA`` with a ``UserWarning`` (TF logs one). With
        one worker nothing is sharded.

    Raises
    ------
    ValueError
        ``FILE`` on a dataset that does not read files; ``FILE`` or ``AUTO``
        on one with fewer files than workers (TF 2.21 raises in both cases);
        bad ``num_workers``/``worker_index``.
    """
    if num_workers <= 0 or not 0 <= worker_index < num_workers:
        raise ValueError(f"Invalid worker {worker_index} of {num_workers}")
    if policy is None:
        policy = dataset.options().experimental_distribute.auto_shard_policy
    if num_workers == 1 or policy in (AutoShardPolicy.OFF, AutoShardPolicy.HINT):
        return dataset
    if policy == AutoShardPolicy.DATA:
        return dataset.shard(num_workers, worker_index)
    files = dataset._source_files
    if files is not None:
        if len(files) < num_workers:
            # TF refuses here under AUTO as well: the fallback to DATA is only
            # for pipelines that do not read files at all.
            raise ValueError(
                f"Could not apply FILE based sharding: the dataset only has {len(files)} "
                f"file(s), which is not enough for the required {num_workers} shards/workers. "
                "If you are using datasets with distribution strategy, consider setting the "
                "auto sharding policy to either DATA or OFF using the "
                "`experimental_distribute.auto_shard_policy` option of `Options()`."
            )
        mine = files[worker_index::num_workers]
        return dataset._replace_source(lambda source: source._with_files(mine))
    if policy == AutoShardPolicy.FILE:
        raise ValueError(
            "Could not apply FILE based sharding: Found an unshardable source dataset "
            "(the pipeline does not read files)."
        )
    warnings.warn(
        "AUTO sharding policy will apply DATA sharding policy as it failed to apply "
        "FILE sharding policy because of the following reason: Found an unshardable "
        "source dataset (the pipeline does not read files). Every worker will run the "
        "whole input pipeline and keep 1/num_workers of its elements.",
        UserWarning,
        stacklevel=2,
    )
    return dataset.shard(num_workers, worker_index)


def with_batch_size(dataset: Dataset, batch_size: int) -> Dataset:
    """``dataset`` with its last ``batch()`` batching ``batch_size`` elements instead.

    The transformations after that ``batch`` are kept (rebuilt over the new one); used to turn a
    pipeline batched by the global batch size into one worker's pipeline.
    """
    if isinstance(dataset, _transforms.BatchDataset):
        return _transforms.BatchDataset(dataset._input, batch_size, dataset.drop_remainder)
    if dataset._input is None or isinstance(dataset, _transforms.UnbatchDataset):
        raise ValueError("the dataset is not batched: call .batch(global_batch_size) first")
    return dataset._with_input(with_batch_size(dataset._input, batch_size))
