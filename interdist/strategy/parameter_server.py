"""``ParameterServerStrategy``: variables on ``ps`` tasks, asynchronous steps on ``worker`` tasks.

Variables are placed round-robin over the ps tasks (each shard of a partitioned
variable takes the next ps). Steps are scheduled by a ``ClusterCoordinator``
(``interdist.strategy.coordinator``): each runs on one worker, reads the variables at its
start and sends its updates at its end; a ps applies them at once, without
waiting for the other workers (``replica/ps_step.py``, ``worker/ps_store.py``).

The notebook is TF's coordinator (the ``chief``). ``strategy.run`` called in the
notebook runs one step there, with the same read-then-apply rule.

A ps task whose process dies takes its variables with it. Every call that needs it (a step, a
read, a write) raises ``interdist.errors.UnavailableError`` naming it within seconds (a connection
to it is given ``ps_step.PS_CONNECT_TIMEOUT``, then the scheduler is asked whether it is still
there), as TF does. ``recover(checkpoint)`` then finds its restarted worker, places its variables
there again and restores the checkpoint: TF's "restart the ps and restore from the last checkpoint".
A ps task whose process is stopped (SIGSTOP, a debugger) is named within ``settings.frozen_after``
seconds with ``interdist.errors.TaskFrozenError`` (``replica/ps_liveness.py``); it keeps its variables,
and the strategy goes on once it resumes. Those faults and ``recover`` are in ``ps_recovery.py`` (a mixin of
the strategy), the notebook's connection to the tasks in ``ps_connection.py``.
"""

from __future__ import annotations

import itertools
import uuid
import weakref
from collections.abc import Callable
from typing import Any

import cloudpickle
import numpy as np

from interdist import _context
from interdist.client import cluster as cluster_lib
from interdist.client import reclaim, roles
from interdist.client.event_log import EventLog
from interdist.cluster_resolver import DaskClusterResolver, TFConfigClusterResolver
from interdist.partitioners import row_splits
from interdist.replica import ps_input, ps_liveness, ps_step, ps_worker
from interdist.strategy.base import Strategy
from interdist.strategy.extended import StrategyExtended
from interdist.strategy.ps_connection import ClientConnection as ClientConnection  # (this module's API too)
from interdist.strategy.ps_connection import _close
from interdist.strategy.ps_recovery import PSRecoveryMixin
from interdist.values import ps_variable
from interdist.values.variables import VariableAggregation, VariableSynchronization, normalize_args
from interdist.worker.ps_store import ensure_ps_plugin

_strategies: weakref.WeakValueDictionary[str, Any] = weakref.WeakValueDictionary()


class _PSExtended(StrategyExtended):
    experimental_between_graph = True

    @property
    def parameter_devices(self) -> tuple[str, ...]:
        return tuple(getattr(self._strategy, "_ps_devices"))  # noqa: B009 - set by the PS strategy


class ParameterServerStrategy(PSRecoveryMixin, Strategy):
    """An asynchronous multi-worker parameter server strategy.

    Parameters
    ----------
    cluster_resolver : ClusterResolver, optional
        Default ``TFConfigClusterResolver`` (``TF_CONFIG`` must name ``ps`` and
        ``worker`` tasks); with ``cluster=`` and no TF_CONFIG, a
        ``DaskClusterResolver`` (workers named ``ps-*`` or with a ``ps`` resource
        are the ps tasks).
    variable_partitioner : callable, optional
        ``partitioner(shape, dtype)`` giving the number of shards along axis 0,
        e.g. ``experimental.partitioners.FixedShardsPartitioner(2)``.
    cluster : str, distributed.Client or cluster object, optional
        The Dask cluster (default: the scheduler of the resolver's chief task).
    timeout : float, optional
        Seconds to wait for the scheduler and for every task's worker.
    security : distributed.security.Security, optional
        TLS credentials for a scheduler reached by address or TF_CONFIG (as for
        ``MultiWorkerMirroredStrategy``).

    Raises
    ------
    ValueError
        When the cluster has no ``ps`` or no ``worker`` task.
    TimeoutError
        When a task's worker cannot be reached within ``timeout`` (naming it).

    Examples
    --------
    A cluster with a ``ps`` task and a ``worker`` task: Dask workers named ``ps-0`` and ``worker-0`` (here
    in this process, to start at once; on a real cluster each task is ``python -m interdist.server`` on
    its machine). The variables live on the ps task, and a ``ClusterCoordinator`` schedules steps on the
    workers:

    >>> import interdist as idist, numpy as np
    >>> from distributed import Scheduler, SpecCluster, Worker
    >>> task = {"cls": Worker, "options": {"nthreads": 1, "host": "127.0.0.1", "memory_limit": 0}}
    >>> cluster = SpecCluster(
    ...     scheduler={"cls": Scheduler, "options": {"host": "127.0.0.1", "dashboard_address": ":0"}},
    ...     workers={"ps-0": task, "worker-0": task},
    ... )
    >>> with cluster, idist.ParameterServerStrategy(cluster=cluster) as strategy:
    ...     coordinator = idist.experimental.coordinator.ClusterCoordinator(strategy)
    ...     with strategy.scope():
    ...         total = idist.Variable(np.float32(0.0))
    ...     dataset = coordinator.create_per_worker_dataset(
    ...         lambda: idist.data.Dataset.range(1, 4).map(lambda x: np.float32(x))
    ...     )
    ...     iterator = iter(dataset)
    ...     def step(iterator):
    ...         x = next(iterator)
    ...         total.assign_add(x)
    ...         return x * 2
    ...     results = [coordinator.schedule(step, args=(iterator,)) for _ in range(3)]
    ...     coordinator.join()
    ...     strategy.extended.parameter_devices
    ...     [float(r.fetch()) for r in results], float(total.numpy())
    ('/job:ps/replica:0/task:0/device:CPU:0',)
    ([2.0, 4.0, 6.0], 6.0)
    """

    _extended_class = _PSExtended
    _kind = "parameter_server"

    def __init__(
        self,
        cluster_resolver: Any = None,
        variable_partitioner: Any = None,
        cluster: Any = None,
        timeout: float | None = None,
        security: Any = None,
    ) -> None:
        if variable_partitioner is not None and not callable(variable_partitioner):
            raise TypeError(f"variable_partitioner must be callable, but got {type(variable_partitioner).__name__}")
        timeout = float(timeout or roles.default_connect_timeout())
        resolver = cluster_resolver if cluster_resolver is not None else TFConfigClusterResolver()
        if cluster_resolver is None and not resolver.cluster_spec().jobs:
            if cluster is None:
                raise ValueError(
                    "ParameterServerStrategy needs a cluster: set TF_CONFIG (with 'ps' and 'worker' "
                    "tasks), pass a cluster_resolver, or pass cluster= a Dask cluster"
                )
            resolver = None
        if resolver is not None:
            _check_spec(resolver.cluster_spec())
        client, owned = roles.open_client(cluster, resolver, timeout, security)
        try:
            resolver = resolver if resolver is not None else DaskClusterResolver(client)
            spec = resolver.cluster_spec()
            _check_spec(spec)
            ps = roles.find_task_workers(client, spec, [("ps", i) for i in sorted(spec.task_indices("ps"))], timeout)
            workers = roles.find_task_workers(
                client, spec, [("worker", i) for i in sorted(spec.task_indices("worker"))], timeout
            )
            ensure_ps_plugin(client)
            cluster_lib.add_dashboard_pages(client)  # the interdist pages on that cluster's dashboard
        except BaseException:
            if owned:
                client.close()
            raise
        self._cluster_resolver = resolver
        self._spec = spec  # as at the start: a DaskClusterResolver's own spec lacks a task whose worker is down
        self._partitioner = variable_partitioner
        self._ps_tasks, self._worker_tasks = ps, workers
        self._ps_devices = [f"/job:ps/replica:0/task:{t.index}/device:CPU:0" for t in ps]
        self._store = uuid.uuid4().hex[:12]
        self._next_ps = itertools.count()
        self._handles: dict[int, Any] = {}
        self._coordinator: Any = None
        # What the base class's cross-replica methods need; there is no synchronous replica group.
        self._devices = [f"/job:worker/replica:0/task:{t.index}/device:CPU:0" for t in workers]
        self._closed = False
        self._colocate_with = None
        self._var_ids = iter(range(1, 1 << 62))
        self._var_metas = {}
        self.extended = self._extended_class(self)
        self._group: Any = None
        self._group_id = self._store
        self.events = EventLog()
        self._conn = ClientConnection(client)
        self._lease = cluster_lib.Lease(
            client,
            [t.address for t in workers],
            [t.name for t in workers],
            None,
            False,
            ("own-client", len(workers)) if owned else None,
        )
        _strategies[self._store] = self
        addrs = [t.address for t in ps]
        self._ps_addresses = addrs  # updated in place by recover(): the finalizer drops the stores there
        self._ps_timeout = timeout
        # Which process plays each ps task: a restarted one (same name or address) answers with a new id.
        self._ps_incarnations = self._conn.call_many(
            [(a, "interdist_ps_incarnation", {}) for a in addrs], self._ps_names()
        )
        # The workers' current addresses: the coordinator updates them when a worker is replaced.
        self._worker_addresses = [t.address for t in workers]
        # Each task's pid and host, so that a call waiting for a task on this host sees it stopped (frozen).
        infos = self._conn.call_many(
            [(a, "interdist_ps_whoami", {}) for a in [*addrs, *self._worker_addresses]], return_exceptions=True
        )
        for a, info in zip([*addrs, *self._worker_addresses], infos, strict=True):
            ps_liveness.learn(a, info)
        self._finalizer = reclaim.finalize(  # collected without close(): closed by the reclaim thread
            self,
            _close,
            self._lease,
            addrs,
            self._worker_addresses,
            self._store,
        )

    # -- properties ------------------------------------------------------------
    @property
    def cluster_resolver(self) -> Any:
        return self._cluster_resolver

    @property
    def num_replicas_in_sync(self) -> int:
        return 1  # one CPU replica per worker; workers are not in sync with each other

    def __reduce__(self) -> Any:
        return (_resolve_strategy, (self._store,))

    def close(self) -> None:
        """Stop the coordinator's threads, drop the variables from the ps tasks, release the client."""
        if self._coordinator is not None:
            self._coordinator._stop()
        super().close()

    # -- variables -------------------------------------------------------------
    def _create_variable(
        self,
        initial_value: Any = None,
        trainable: bool | None = None,
        name: str | None = None,
        dtype: Any = None,
        synchronization: Any = VariableSynchronization.AUTO,
        aggregation: Any = None,
        shape: Any = None,
        **_: Any,
    ) -> Any:

        self._check_usable()
        if _context.current_ps_step() is not None or _context.get_replica_context() is not None:
            raise NotImplementedError(ps_step.VARIABLE_IN_STEP)
        a = normalize_args(
            initial_value,
            name,
            trainable,
            dtype,
            synchronization,
            VariableAggregation.NONE if aggregation is None else aggregation,
        )
        value = a["value"]
        shards = 1
        if self._partitioner is not None and value.ndim >= 1 and value.shape[0] > 1:
            shards = max(1, min(int(self._partitioner(value.shape, value.dtype)[0]), value.shape[0]))
        splits = row_splits(value.shape[0], shards) if shards > 1 else [(0, value.shape[0] if value.ndim else 0)]
        var_id = next(self._var_ids)
        desc_shards = []
        calls = []
        for k, (start, stop) in enumerate(splits):
            t = self._ps_tasks[next(self._next_ps) % len(self._ps_tasks)]
            shard_id = var_id * 1024 + k
            part = value[start:stop] if shards > 1 else value
            desc_shards.append((shard_id, t.address, self._ps_devices[self._ps_tasks.index(t)], start, stop))
            calls.append(
                (
                    t.address,
                    "interdist_ps_create",
                    {"store": self._store, "shard_id": shard_id, "value": cloudpickle.dumps(part)},
                )
            )
        self._conn.call_many(calls, self._ps_names())
        desc = {
            "store": self._store,
            "var_id": var_id,
            "name": a["name"],
            "shape": value.shape,
            "dtype": value.dtype.str,
            "trainable": a["trainable"],
            "synchronization": a["synchronization"].name,
            "aggregation": a["aggregation"].name,
            "shards": desc_shards,
        }
        var = ps_variable.PSVariable(desc, self)
        ps_variable._handles[(self._store, var_id)] = var
        return var

    def _read_ps_variable(self, var: Any) -> np.ndarray:
        self._check_usable()
        values, _ = ps_step.read_shards(self._conn, self._store, [var])
        return np.array(values[var._var_id], copy=True)

    def _write_ps_variable(self, var: Any, op: str, value: np.ndarray) -> None:
        """A write from the notebook: applied at once, as a step of its own."""
        self._check_usable()
        ctx = ps_step.StepContext(f"notebook-{uuid.uuid4().hex}", self._conn, self._store, "")
        ctx.register(var)  # names its ps tasks in errors
        ctx.updates = ps_step.split_update(var, op, value)
        ctx.flush()

    def _write_ps_shard(self, var: Any, index: int, op: str, part: np.ndarray) -> None:
        """A write of one shard from the notebook (``v.variables[i].assign(...)``): that ps task only."""
        self._check_usable()
        s = var._shards[index]
        ctx = ps_step.StepContext(f"notebook-{uuid.uuid4().hex}", self._conn, self._store, "")
        ctx.register(var)
        ctx.updates = [(s.address, s.shard_id, op, part)]
        ctx.flush()

    # -- run in the notebook -----------------------------------------------------
    def run(self, fn: Callable[..., Any], args: Any = (), kwargs: Any = None, options: Any = None) -> Any:
        """Run ``fn`` once, in the notebook, as one asynchronous step (read at start, apply at end).

        Inside a function given to ``ClusterCoordinator.schedule`` the same call runs
        ``fn`` on the step's worker instead.
        """
        self._check_usable()
        if not callable(fn):
            raise TypeError(f"run() requires a callable fn, but got {type(fn).__name__}")
        self._require_cross_replica("run")
        ctx = ps_step.StepContext(f"notebook-{uuid.uuid4().hex}", self._conn, self._store, self._devices[0])
        with _context.ps_step_context(ctx):
            with _context.enter(self, None):
                result = ps_worker.worker_view(ctx).run(fn, args, kwargs)
            ctx.flush()
        return result

    def experimental_distribute_dataset(self, dataset: Any, options: Any = None) -> Any:
        """A description of ``dataset`` for ``ClusterCoordinator.create_per_worker_dataset``.

        As in TF 2, every worker then makes the whole ``dataset`` (no sharding, whatever
        its auto-shard policy) and each step takes its worker's next batch. ``iter()`` of
        the result raises ``ValueError``: pass it to the coordinator. See ``replica/ps_input.py``.
        """
        self._check_usable()
        return ps_input.DistributedDataset(dataset, options)

    def distribute_datasets_from_function(self, dataset_fn: Callable[..., Any], options: Any = None) -> Any:
        """A description of ``dataset_fn``'s datasets for ``ClusterCoordinator.create_per_worker_dataset``.

        ``dataset_fn(input_context)`` is called on each worker, with
        ``InputContext(num_input_pipelines=1, input_pipeline_id=0, num_replicas_in_sync=1)``
        as in TF 2 (the workers are not in sync with each other). ``iter()`` of the
        result raises ``ValueError``: pass it to the coordinator.
        """
        self._check_usable()
        return ps_input.DistributedDatasetsFromFunction(dataset_fn, options)

    def _ps_stats(self) -> list[dict[str, Any]]:
        """Per ps task: applied step ids, update count and the staleness of each applied step."""
        return list(
            self._conn.call_many(
                [(t.address, "interdist_ps_stats", {"store": self._store}) for t in self._ps_tasks], self._ps_names()
            )
        )

    def __repr__(self) -> str:
        return f"<interdist.ParameterServerStrategy: {len(self._worker_tasks)} worker(s), {len(self._ps_tasks)} ps>"


def _check_spec(spec: Any) -> None:
    if "ps" not in spec.jobs or not spec.task_indices("ps"):
        raise ValueError(f"ParameterServerStrategy needs at least one 'ps' task, but the cluster is {spec.as_dict()}")
    if "worker" not in spec.jobs or not spec.task_indices("worker"):
        raise ValueError(
            f"ParameterServerStrategy needs at least one 'worker' task, but the cluster is {spec.as_dict()}"
        )


def _resolve_strategy(store: str) -> Any:
    """Unpickling the strategy: the notebook's object, or the worker's view inside a step."""
    ctx = _context.current_ps_step()
    if ctx is not None and ctx.store == store:
        return ps_worker.worker_view(ctx)
    own = _strategies.get(store)
    if own is not None:
        return own
    raise RuntimeError(f"the ParameterServerStrategy {store} was used on a worker outside a scheduled step")
