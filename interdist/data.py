"""``interdist.data``: the counterpart of the ``tf.data`` namespace.

Examples
--------
>>> from interdist import data
>>> opts = data.Options()
>>> opts.experimental_distribute.auto_shard_policy = data.experimental.AutoShardPolicy.DATA
>>> ds = data.Dataset.range(8).batch(4).with_options(opts)
"""

from __future__ import annotations

import types

from interdist.input._sources import TextLineDataset
from interdist.input.dataset import (
    AUTOTUNE,
    INFINITE_CARDINALITY,
    UNKNOWN_CARDINALITY,
    Dataset,
)
from interdist.input.options import AutoShardPolicy, DistributeOptions, Options
from interdist.input.spec import TensorSpec

experimental = types.SimpleNamespace(
    AutoShardPolicy=AutoShardPolicy,
    DistributeOptions=DistributeOptions,
    AUTOTUNE=AUTOTUNE,
    INFINITE_CARDINALITY=INFINITE_CARDINALITY,
    UNKNOWN_CARDINALITY=UNKNOWN_CARDINALITY,
)
"""``tf.data.experimental``: the names of it that interdist provides.

>>> from interdist import data
>>> data.experimental.AutoShardPolicy.DATA, data.experimental.AUTOTUNE == data.AUTOTUNE
(<AutoShardPolicy.DATA: 2>, True)
"""

__all__ = [
    "AUTOTUNE",
    "INFINITE_CARDINALITY",
    "UNKNOWN_CARDINALITY",
    "AutoShardPolicy",
    "Dataset",
    "DistributeOptions",
    "Options",
    "TensorSpec",
    "TextLineDataset",
    "experimental",
]
