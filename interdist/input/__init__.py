"""Input pipelines: ``Dataset``, input contexts and options, and rebatching.

Re-exports only; see the submodules for the implementations.
"""

from __future__ import annotations

from interdist.input import _dask, _sources, _transforms, plan  # noqa: F401 - the node classes register themselves
from interdist.input._sources import TextLineDataset
from interdist.input.dataset import (
    AUTOTUNE,
    INFINITE_CARDINALITY,
    UNKNOWN_CARDINALITY,
    Dataset,
)
from interdist.input.input_context import (
    InputContext,
    InputOptions,
    InputReplicationMode,
)
from interdist.input.options import AutoShardPolicy, DistributeOptions, Options
from interdist.input.rebatch import (
    batch_sizes_for_replicas,
    rebatch_element_spec,
    shard_for_worker,
    split_batch,
    split_for_replicas,
    static_batch_size,
)
from interdist.input.spec import TensorSpec

__all__ = [
    "AUTOTUNE",
    "INFINITE_CARDINALITY",
    "UNKNOWN_CARDINALITY",
    "AutoShardPolicy",
    "Dataset",
    "DistributeOptions",
    "InputContext",
    "InputOptions",
    "InputReplicationMode",
    "Options",
    "TensorSpec",
    "TextLineDataset",
    "batch_sizes_for_replicas",
    "rebatch_element_spec",
    "shard_for_worker",
    "split_batch",
    "split_for_replicas",
    "static_batch_size",
]
