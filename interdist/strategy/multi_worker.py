"""``MultiWorkerMirroredStrategy``: synchronous replicas on the workers of a cluster spanning hosts.

Semantics are ``MirroredStrategy``'s; only where the replicas come from differs.
Each TF task of the ``chief`` and ``worker`` jobs is one replica (replica 0 is the
chief when there is one, as TF numbers them), played by the Dask worker of that
task (``client/roles.py``). Device strings are TF's:
``/job:worker/replica:0/task:1/device:CPU:0``.

One difference from TF, by design: TF runs the same program in every task and
each process sees only its own device in ``extended.worker_devices``; in
interdist one notebook drives every replica, so it lists all of them.
"""

from __future__ import annotations

import enum
from typing import Any

from interdist.client import cluster as cluster_lib
from interdist.client import roles
from interdist.cluster_resolver import DaskClusterResolver, TFConfigClusterResolver
from interdist.protocol import GroupSpec
from interdist.strategy.base import Strategy
from interdist.strategy.central_storage import default_local_devices
from interdist.strategy.extended import StrategyExtended
from interdist.strategy.mirrored import resolve_devices


class CommunicationImplementation(enum.Enum):
    """``tf.distribute.experimental.CommunicationImplementation``: how collectives travel.

    ``CollectiveCommunication`` is the same enum (TF's deprecated name for it).

    Examples
    --------
    >>> import interdist as idist
    >>> idist.experimental.CommunicationImplementation("RING")
    <CommunicationImplementation.RING: 'RING'>
    >>> idist.experimental.CollectiveCommunication is idist.experimental.CommunicationImplementation
    True
    """

    AUTO = "AUTO"
    RING = "RING"
    NCCL = "NCCL"


CollectiveCommunication = CommunicationImplementation  # TF's deprecated name


class CommunicationOptions:
    """``tf.distribute.experimental.CommunicationOptions``.

    Parameters
    ----------
    bytes_per_pack : int
        Accepted for compatibility (interdist packs every all-reduce as one message).
    timeout_seconds : float, optional
        Seconds a collective waits for its peers before it raises; also how long the
        strategy waits for the cluster's workers when it starts.
    implementation : CommunicationImplementation or str
        ``AUTO``, ``RING`` (worker-to-worker over Dask comms) or ``NCCL`` (GPU workers).

    Examples
    --------
    >>> import interdist as idist
    >>> options = idist.experimental.CommunicationOptions(timeout_seconds=30, implementation="ring")
    >>> options
    CommunicationOptions(bytes_per_pack=0, timeout_seconds=30, implementation=CommunicationImplementation.RING)
    >>> with idist.MultiWorkerMirroredStrategy(communication_options=options) as s:  # no TF_CONFIG: this machine
    ...     s.num_replicas_in_sync
    1
    """

    def __init__(
        self,
        bytes_per_pack: int = 0,
        timeout_seconds: float | None = None,
        implementation: Any = CommunicationImplementation.AUTO,
    ) -> None:
        if not isinstance(bytes_per_pack, int) or bytes_per_pack < 0:
            raise ValueError(f"bytes_per_pack must be a non-negative integer, but got {bytes_per_pack!r}")
        if timeout_seconds is not None and not timeout_seconds > 0:
            raise ValueError(f"timeout_seconds must be a positive number or None, but got {timeout_seconds!r}")
        if isinstance(implementation, str):
            implementation = CommunicationImplementation(implementation.upper())
        if not isinstance(implementation, CommunicationImplementation):
            raise ValueError(f"implementation must be a CommunicationImplementation, but got {implementation!r}")
        self.bytes_per_pack = bytes_per_pack
        self.timeout_seconds = timeout_seconds
        self.implementation = implementation

    def __repr__(self) -> str:
        return (
            f"CommunicationOptions(bytes_per_pack={self.bytes_per_pack}, timeout_seconds={self.timeout_seconds},"
            f" implementation={self.implementation})"
        )


class _MultiWorkerExtended(StrategyExtended):
    experimental_between_graph = True  # as TF reports it for MultiWorkerMirroredStrategy
    _int32_on_host = False  # TF's collectives reduce int32 with the rest (CollectiveAllReduceExtended)


class MultiWorkerMirroredStrategy(Strategy):
    """A distribution strategy for synchronous training on multiple workers.

    Parameters
    ----------
    cluster_resolver : ClusterResolver, optional
        Which tasks form the cluster. Default: ``TFConfigClusterResolver`` when
        ``TF_CONFIG`` names a cluster; else, with ``cluster=``, a
        ``DaskClusterResolver`` of that Dask cluster (its non-``ps`` workers);
        else one worker on this machine with its local devices, as TF does.
    communication_options : CommunicationOptions, optional
        ``timeout_seconds`` bounds every collective and the wait for workers.
    cluster : str, distributed.Client or cluster object, optional
        The Dask cluster to use (default: the scheduler of the coordinator task of
        the resolver's cluster, as ``python -m interdist.server`` starts it).
    security : distributed.security.Security, optional
        TLS credentials for a scheduler reached by address or TF_CONFIG (servers started with
        ``--tls-ca-file/--tls-cert/--tls-key``; a TF_CONFIG address then means ``tls://``).

    Examples
    --------
    >>> import interdist as idist
    >>> s = idist.MultiWorkerMirroredStrategy()   # no TF_CONFIG: this machine only
    >>> s.num_replicas_in_sync, s.extended.worker_devices
    (1, ('/job:localhost/replica:0/task:0/device:CPU:0',))
    >>> s.close()
    """

    _input_split_by_worker = True  # one replica per worker task: auto-sharding splits input by worker (input/)

    _extended_class = _MultiWorkerExtended

    def __init__(
        self, cluster_resolver: Any = None, communication_options: Any = None, cluster: Any = None, security: Any = None
    ) -> None:
        options = communication_options if communication_options is not None else CommunicationOptions()
        if not isinstance(options, CommunicationOptions):
            raise ValueError(
                f"communication_options must be a tf.distribute.experimental.CommunicationOptions, "
                f"but got {type(options).__name__}"
            )
        self._communication_options = options
        timeout = options.timeout_seconds or roles.default_connect_timeout()
        self._planned_lease: cluster_lib.Lease | None = None
        resolver = cluster_resolver
        if resolver is None:
            tf_config = TFConfigClusterResolver()
            resolver = tf_config if tf_config.cluster_spec().jobs or cluster is None else None
        spec_extra: GroupSpec = {"timeout": options.timeout_seconds} if options.timeout_seconds else {}
        if resolver is not None and not resolver.cluster_spec().jobs and cluster is None:
            # TF without a cluster: one worker, this machine's GPUs (one replica each), else CPU:0 alone,
            # however many logical CPUs are configured (TF 2.21).
            self._cluster_resolver = resolver
            super().__init__(resolve_devices(default_local_devices()), None, spec=spec_extra)
            return
        client, owned = roles.open_client(cluster, resolver, timeout, security)
        try:
            if resolver is None:
                resolver = DaskClusterResolver(client)
            self._cluster_resolver = resolver
            spec = resolver.cluster_spec()
            tasks = _replica_tasks(spec, from_dask=isinstance(resolver, DaskClusterResolver))
            found = roles.find_task_workers(client, spec, tasks, timeout)
        except BaseException:
            if owned:
                client.close()
            raise
        devices = [f"/job:{t.job}/replica:0/task:{t.index}/device:CPU:0" for t in found]
        self._planned_lease = cluster_lib.Lease(
            client,
            [t.address for t in found],
            [t.name for t in found],
            None,
            False,
            ("own-client", len(found)) if owned else None,
        )
        super().__init__(devices, cluster, spec=spec_extra)

    def _acquire(self, specs: list[Any], cluster: Any) -> cluster_lib.Lease:
        if self._planned_lease is not None:
            return self._planned_lease
        return super()._acquire(specs, cluster)

    @property
    def cluster_resolver(self) -> Any:
        """The cluster resolver this strategy was built from (see the class docstring)."""
        return self._cluster_resolver


def _replica_tasks(spec: Any, from_dask: bool) -> list[tuple[str, int]]:
    """The tasks that are replicas, in TF's order: the chief first, then the workers."""
    tasks: list[tuple[str, int]] = []
    if "chief" in spec.jobs and not from_dask:  # a Dask resolver's chief is the scheduler: no replica
        tasks += [("chief", i) for i in sorted(spec.task_indices("chief"))]
    if "worker" in spec.jobs:
        tasks += [("worker", i) for i in sorted(spec.task_indices("worker"))]
    if not tasks:
        raise ValueError(f"the cluster {spec.as_dict()} has no 'chief' or 'worker' task to run replicas on")
    return tasks


class ExperimentalMultiWorkerMirroredStrategy(MultiWorkerMirroredStrategy):
    """``tf.distribute.experimental.MultiWorkerMirroredStrategy`` (its ``communication`` argument first).

    TF's deprecated alias: a subclass of ``interdist.MultiWorkerMirroredStrategy`` whose first argument
    is the ``CommunicationImplementation``.

    Examples
    --------
    >>> import interdist as idist
    >>> ring = idist.experimental.CommunicationImplementation.RING
    >>> with idist.experimental.MultiWorkerMirroredStrategy(ring) as s:  # no TF_CONFIG: this machine only
    ...     isinstance(s, idist.MultiWorkerMirroredStrategy), s.num_replicas_in_sync
    (True, 1)
    """

    def __init__(
        self,
        communication: Any = CommunicationImplementation.AUTO,
        cluster_resolver: Any = None,
        communication_options: Any = None,
        cluster: Any = None,
        security: Any = None,
    ) -> None:
        if communication_options is None:
            communication_options = CommunicationOptions(implementation=communication)
        super().__init__(cluster_resolver, communication_options, cluster, security)
