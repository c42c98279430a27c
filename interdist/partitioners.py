"""``tf.distribute.experimental.partitioners``: how many shards (along axis 0) a variable gets.

A partitioner is called as ``partitioner(shape, dtype)`` and returns one count
per axis; ``ParameterServerStrategy`` splits along axis 0 only, as TF does.

>>> FixedShardsPartitioner(3)((10, 4), "float32")
[3, 1]
>>> MinSizePartitioner(min_shard_bytes=64, max_shards=4)((10, 4), "float32")
[3, 1]
>>> MaxSizePartitioner(max_shard_bytes=48)((10, 4), "float32")
[4, 1]
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np


def _bytes_per_element(dtype: Any, bytes_per_string: int) -> int:
    d = np.dtype(dtype)
    return bytes_per_string if d.kind in "OSU" else d.itemsize


class Partitioner:
    """Base class: ``__call__(shape, dtype, axis=0)`` gives the number of partitions of each axis.

    Any callable of ``(shape, dtype)`` serves as ``ParameterServerStrategy(variable_partitioner=...)``;
    a subclass says it is one.

    Examples
    --------
    >>> import interdist as idist
    >>> class TwoShards(idist.experimental.partitioners.Partitioner):
    ...     def __call__(self, shape, dtype, axis=0):
    ...         return [2 if i == axis else 1 for i in range(len(shape))]
    >>> TwoShards()((10, 4), "float32")
    [2, 1]
    """

    def __call__(self, shape: Any, dtype: Any, axis: int = 0) -> list[int]:
        raise NotImplementedError


class FixedShardsPartitioner(Partitioner):
    """``num_shards`` shards (fewer when axis 0 has fewer rows).

    Examples
    --------
    >>> import interdist as idist
    >>> partitioner = idist.experimental.partitioners.FixedShardsPartitioner(num_shards=3)
    >>> partitioner((10, 4), "float32"), partitioner((2, 4), "float32")
    ([3, 1], [2, 1])
    """

    def __init__(self, num_shards: int) -> None:
        if not isinstance(num_shards, int) or num_shards < 1:
            raise ValueError(f"num_shards must be a positive integer, but got {num_shards!r}")
        self._num_shards = num_shards

    def __call__(self, shape: Any, dtype: Any, axis: int = 0) -> list[int]:
        out = [1] * len(shape)
        out[axis] = min(self._num_shards, int(shape[axis]))
        return out


class MinSizePartitioner(Partitioner):
    """As many shards as keep each at least ``min_shard_bytes``, at most ``max_shards``.

    Examples
    --------
    >>> import interdist as idist
    >>> partitioner = idist.experimental.partitioners.MinSizePartitioner(min_shard_bytes=64, max_shards=4)
    >>> partitioner((10, 4), "float32")  # 160 bytes: 3 shards of at least 64 bytes
    [3, 1]
    """

    def __init__(self, min_shard_bytes: int = 256 << 10, max_shards: int = 1, bytes_per_string: int = 16) -> None:
        if min_shard_bytes < 1 or max_shards < 1 or bytes_per_string < 1:
            raise ValueError("min_shard_bytes, max_shards and bytes_per_string must be positive")
        self._min, self._max, self._bps = min_shard_bytes, max_shards, bytes_per_string

    def __call__(self, shape: Any, dtype: Any, axis: int = 0) -> list[int]:
        total = int(np.prod(shape)) * _bytes_per_element(dtype, self._bps)
        out = [1] * len(shape)
        out[axis] = max(1, min(int(shape[axis]), self._max, math.ceil(total / self._min)))
        return out


class MaxSizePartitioner(Partitioner):
    """Shards of at most ``max_shard_bytes`` (whole rows), at most ``max_shards`` of them.

    Examples
    --------
    >>> import interdist as idist
    >>> partitioner = idist.experimental.partitioners.MaxSizePartitioner(max_shard_bytes=48)
    >>> partitioner((10, 4), "float32")  # rows of 16 bytes, 3 a shard: 4 shards
    [4, 1]
    """

    def __init__(self, max_shard_bytes: int, max_shards: int | None = None, bytes_per_string: int = 16) -> None:
        if max_shard_bytes < 1 or (max_shards is not None and max_shards < 1) or bytes_per_string < 1:
            raise ValueError("max_shard_bytes, max_shards and bytes_per_string must be positive")
        self._max_bytes, self._max, self._bps = max_shard_bytes, max_shards, bytes_per_string

    def __call__(self, shape: Any, dtype: Any, axis: int = 0) -> list[int]:
        rows = int(shape[axis])
        per_row = int(np.prod(shape)) / max(rows, 1) * _bytes_per_element(dtype, self._bps)
        rows_per_shard = max(1, math.floor(self._max_bytes / per_row)) if per_row else rows
        shards = math.ceil(rows / rows_per_shard) if rows else 1
        if self._max is not None:
            shards = min(self._max, shards)
        out = [1] * len(shape)
        out[axis] = max(1, shards)
        return out


def row_splits(rows: int, num_shards: int) -> list[tuple[int, int]]:
    """TF's split of ``rows`` into shards: the first ``rows % n`` shards get one more row."""
    base, extra = divmod(rows, num_shards)
    out, start = [], 0
    for i in range(num_shards):
        stop = start + base + (1 if i < extra else 0)
        out.append((start, stop))
        start = stop
    return out


__all__ = ["FixedShardsPartitioner", "MaxSizePartitioner", "MinSizePartitioner", "Partitioner"]
