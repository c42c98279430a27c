"""``SimpleClusterResolver`` and ``UnionResolver``, as in ``tf.distribute.cluster_resolver``.

``SimpleClusterResolver`` just hands back what it was given.  ``UnionResolver``
merges the cluster specs of several resolvers and takes everything else
(task, rpc layer, environment, accelerators) from the first one.
"""

from __future__ import annotations

from typing import Any

from interdist.cluster_resolver.base import ClusterResolver, format_master_url
from interdist.cluster_resolver.cluster_spec import ClusterSpec

__all__ = ["SimpleClusterResolver", "UnionResolver"]


class SimpleClusterResolver(ClusterResolver):
    """A resolver that returns exactly the attributes it was constructed with.

    Parameters
    ----------
    cluster_spec : ClusterSpec
        The cluster (must already be a :class:`ClusterSpec`, as in TF).
    master : str
        Returned by :meth:`master` when no task is named.
    task_type, task_id : optional
        This process's job and index.
    environment : str
        Returned by :attr:`environment`.
    num_accelerators : dict, optional
        Returned by :meth:`num_accelerators` (``{}`` when None); no probing.
    rpc_layer : str, optional
        Prefix for :meth:`master` URLs.

    Raises
    ------
    TypeError
        If ``cluster_spec`` is not a ClusterSpec or ``master`` not a string.

    Examples
    --------
    >>> spec = ClusterSpec({"worker": ["w0:2222", "w1:2222"]})
    >>> r = SimpleClusterResolver(spec, task_type="worker", task_id=1,
    ...                           num_accelerators={"GPU": 8}, rpc_layer="grpc")
    >>> r.master("worker", 1), r.master()
    ('grpc://w1:2222', 'grpc://')
    >>> r.num_accelerators()
    {'GPU': 8}
    """

    def __init__(
        self,
        cluster_spec: ClusterSpec,
        master: str = "",
        task_type: str | None = None,
        task_id: int | None = None,
        environment: str = "",
        num_accelerators: dict[str, int] | None = None,
        rpc_layer: str | None = None,
    ) -> None:
        self._task_type = task_type
        self._task_id = task_id
        self._environment = environment
        self._num_accelerators = num_accelerators
        self._rpc_layer = rpc_layer
        if not isinstance(cluster_spec, ClusterSpec):
            raise TypeError("cluster_spec must be a `ClusterSpec`.")
        self._cluster_spec = cluster_spec
        if not isinstance(master, str):
            raise TypeError("master must be a string.")
        self._master = master

    def cluster_spec(self) -> ClusterSpec:
        """Return the ClusterSpec given to the constructor."""
        return self._cluster_spec

    def master(
        self,
        task_type: str | None = None,
        task_id: int | None = None,
        rpc_layer: str | None = None,
    ) -> str:
        """The named task's address if both ``task_type`` and ``task_id`` are given, else ``master``.

        Either way it is prefixed with ``rpc_layer`` (or the constructor's).
        """
        if task_type is not None and task_id is not None:
            master = self.cluster_spec().task_address(task_type, task_id)
        else:
            master = self._master
        return format_master_url(master, rpc_layer=rpc_layer or self._rpc_layer)

    @property
    def environment(self) -> str:
        return self._environment

    def num_accelerators(
        self,
        task_type: str | None = None,
        task_id: int | None = None,
        config_proto: Any = None,
    ) -> dict[str, int]:
        """Return the ``num_accelerators`` given to the constructor (``{}`` if None)."""
        del task_type, task_id, config_proto  # no detection, as in TF
        if self._num_accelerators is None:
            return {}
        return self._num_accelerators


class UnionResolver(ClusterResolver):
    """The union of several resolvers' cluster specs.

    Jobs present in several specs are merged: concatenated when every spec
    gives the job as a list, otherwise merged as ``{index: address}`` dicts
    (a ``KeyError`` on a clashing index).  Task, rpc layer, environment, master
    and accelerators come from the first resolver unless overridden.

    Parameters
    ----------
    *resolvers : ClusterResolver
        At least one.
    rpc_layer, task_type, task_id : optional
        Overrides for the values of the first resolver.

    Raises
    ------
    ValueError
        With no resolvers, or an unknown keyword argument.
    TypeError
        If an argument is not a ClusterResolver.

    Examples
    --------
    >>> a = SimpleClusterResolver(ClusterSpec({"worker": ["w0:1"]}), task_type="worker", task_id=0)
    >>> b = SimpleClusterResolver(ClusterSpec({"worker": ["w1:1"], "ps": ["p0:1"]}))
    >>> u = UnionResolver(a, b)
    >>> u.cluster_spec().as_dict()
    {'worker': ['w0:1', 'w1:1'], 'ps': ['p0:1']}
    >>> u.task_type, u.task_id
    ('worker', 0)
    """

    def __init__(self, *resolvers: ClusterResolver, **kwargs: Any) -> None:
        self._rpc_layer: str | None = kwargs.pop("rpc_layer", None)
        self._task_type: str | None = kwargs.pop("task_type", None)
        self._task_id: int | None = kwargs.pop("task_id", None)
        if kwargs:
            raise ValueError(f"Unexpected kwargs provided {kwargs!r}")
        if not resolvers:
            raise ValueError("At least one ClusterResolver is required.")
        for resolver in resolvers:
            if not isinstance(resolver, ClusterResolver):
                raise TypeError("All arguments must be a sub-class of `ClusterResolver.`")
        self._cluster_resolvers = resolvers

    def cluster_spec(self) -> ClusterSpec:
        """Merge the specs of all resolvers (see the class docstring)."""
        dicts = [r.cluster_spec().as_dict() for r in self._cluster_resolvers]
        # First pass: a job stays a list only if every spec lists it densely.
        merged: dict[str, list[str] | dict[int, str]] = {}
        for cluster in dicts:
            for job, tasks in cluster.items():
                if job not in merged:
                    merged[job] = [] if isinstance(tasks, list) else {}
                elif isinstance(tasks, dict):
                    merged[job] = {}
        for cluster in dicts:
            for job, tasks in cluster.items():
                target = merged[job]
                if isinstance(target, list):
                    assert isinstance(tasks, list)
                    target.extend(tasks)
                    continue
                task_dict: dict[int, Any] = dict(enumerate(tasks)) if isinstance(tasks, list) else dict(tasks)
                clash = set(task_dict) & set(target)
                if clash:
                    raise KeyError(f"Duplicate keys detected when merging two ClusterSpecs: {clash!r}")
                target.update(task_dict)
        return ClusterSpec(merged)

    def master(
        self,
        task_type: str | None = None,
        task_id: int | None = None,
        rpc_layer: str | None = None,
    ) -> str:
        """The named task's address in the merged spec, else the first resolver's master."""
        if task_type is not None and task_id is not None:
            address = self.cluster_spec().task_address(task_type, task_id)
            return format_master_url(address, rpc_layer or self._rpc_layer)
        return self._cluster_resolvers[0].master(rpc_layer=rpc_layer)

    # TF tests overrides with ``or``, so an override of task_id=0 is ignored;
    # ``is not None`` is what it means, and what we do.
    @property
    def task_type(self) -> str | None:
        if self._task_type is not None:
            return self._task_type
        return self._cluster_resolvers[0].task_type

    @task_type.setter
    def task_type(self, task_type: str | None) -> None:
        self._task_type = task_type

    @property
    def task_id(self) -> int | None:
        if self._task_id is not None:
            return self._task_id
        return self._cluster_resolvers[0].task_id

    @task_id.setter
    def task_id(self, task_id: int | None) -> None:
        self._task_id = task_id

    @property
    def rpc_layer(self) -> str | None:
        return self._rpc_layer or self._cluster_resolvers[0].rpc_layer

    @rpc_layer.setter
    def rpc_layer(self, rpc_layer: str | None) -> None:
        self._rpc_layer = rpc_layer

    @property
    def environment(self) -> str | None:
        return self._cluster_resolvers[0].environment

    def num_accelerators(
        self,
        task_type: str | None = None,
        task_id: int | None = None,
        config_proto: Any = None,
    ) -> dict[str, int]:
        """Delegate to the first resolver."""
        return self._cluster_resolvers[0].num_accelerators(task_type, task_id, config_proto)
