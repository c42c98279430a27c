"""Cluster resolvers, as ``tf.distribute.cluster_resolver``, for interdist.

A resolver tells a strategy what the cluster looks like (a :class:`ClusterSpec`
of jobs and task addresses) and which task the current process is.

Examples
--------
>>> from interdist.cluster_resolver import ClusterSpec, SimpleClusterResolver
>>> r = SimpleClusterResolver(ClusterSpec({"worker": ["w0:2222"]}), task_type="worker", task_id=0)
>>> r.cluster_spec().num_tasks("worker"), r.task_type
(1, 'worker')
"""

from __future__ import annotations

from interdist.cluster_resolver.base import ClusterResolver
from interdist.cluster_resolver.cluster_spec import ClusterSpec
from interdist.cluster_resolver.dask_resolver import DaskClusterResolver
from interdist.cluster_resolver.simple import SimpleClusterResolver, UnionResolver
from interdist.cluster_resolver.tf_config import TFConfigClusterResolver

__all__ = [
    "ClusterResolver",
    "ClusterSpec",
    "DaskClusterResolver",
    "SimpleClusterResolver",
    "TFConfigClusterResolver",
    "UnionResolver",
]
