"""``Strategy`` and ``StrategyExtended`` in the notebook, for strategies whose replicas are Dask workers.

The notebook holds handles; programs run on the replicas (``replica/``). The
arithmetic shared with the replicas lives in ``_reduction``.
"""

from __future__ import annotations

import warnings
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, cast

import numpy as np

from interdist import _context, _nest, _reduction
from interdist import device as device_lib
from interdist._convert import convert_for_variable, same_object_across
from interdist._reduction import reduce_arrays
from interdist.client import cluster as cluster_lib
from interdist.client.event_log import EventLog
from interdist.client.fn_pickle import cached_dumps
from interdist.client.group import DaskGroup
from interdist.collectives.registry import get_backend
from interdist.config import settings
from interdist.errors import WorkerLostError
from interdist.input.dataset import Dataset
from interdist.input.distributed_dataset import DistributedDataset, DistributedDatasetsFromFunction
from interdist.protocol import (
    VARIABLE_KEY,
    ArgRef,
    CreatedVariable,
    GroupSpec,
    StoreRef,
    ValueMeta,
    VariableMeta,
    VarRef,
    register_strategy,
    registered_variable,
    resolve_strategy,
)
from interdist.reduce_op import ReduceOp, resolve
from interdist.replica import programs
from interdist.replica.fused import PickledFunction, fused_steps
from interdist.strategy.extended import StrategyExtended
from interdist.values.distributed import DistributedValues, Mirrored, PerReplica
from interdist.values.distributed_variable import (
    CentralVariable,
    DistributedVariable,
    MirroredVariable,
    SyncOnReadVariable,
    _Handle,
    variable_kind,
)
from interdist.values.tensor import ArrayValue, RemoteValue, Tensor
from interdist.values.variables import (
    Variable,
    VariableAggregation,
    VariableSynchronization,
    args_from_meta,
    check_mean_dtype,
    normalize_args,
    variable_meta,
)


class RunOptions:
    """Run options for ``strategy.run`` (accepted for compatibility; interdist runs eagerly)."""

    def __init__(
        self,
        experimental_enable_dynamic_batch_size: bool = True,
        experimental_bucketizing_dynamic_shape: bool = False,
        experimental_xla_options: Any = None,
    ) -> None:
        self.experimental_enable_dynamic_batch_size = experimental_enable_dynamic_batch_size
        self.experimental_bucketizing_dynamic_shape = experimental_bucketizing_dynamic_shape
        self.experimental_xla_options = experimental_xla_options


class Strategy:
    """A state & compute distribution policy on a list of devices (replicas are Dask workers)."""

    _is_default = False
    _extended_class: type[StrategyExtended] = StrategyExtended
    _variable_class: type[DistributedVariable] = MirroredVariable
    _kind = "mirrored"

    def __init__(self, devices: list[str], cluster: Any = None, spec: GroupSpec | None = None) -> None:
        self._devices = devices
        self._closed = False
        self._colocate_with: Any = None
        self._var_ids = iter(range(1, 1 << 62))
        self._var_metas: dict[int, VariableMeta] = {}
        self.extended = self._extended_class(self)
        specs = [device_lib.parse(d) for d in devices]
        backend = (spec or {}).get("collectives_backend") or settings.collectives_backend
        get_backend(backend)  # an unknown or unavailable backend fails here, before any worker is taken
        self._lease = self._acquire(specs, cluster)
        spec = GroupSpec(**(spec or {}))
        spec.update({"world_size": len(devices), "devices": devices, "kind": self._kind})
        # Collective messages between replicas on one host go over Unix sockets (control.py).
        spec.setdefault("local_control", settings.local_control)
        spec.setdefault("collectives_backend", backend)  # the replicas' transport (collectives/registry.py)
        self._group = DaskGroup(self._lease.client, self._lease.addresses, spec, self._lease.names)
        self._group_id = self._group.group_id
        register_strategy(self._group_id, self)
        self.events = EventLog()
        self._group.on_events = self.events.add_msgs
        self._group.on_created = self._adopt_run_variables
        self._run_variables: list[Any] = []  # handles of variables made inside the current run, until it returns
        self._group.on_recover = self._restore_replicas
        # ``weakref.finalize[..., Any]``: subclasses finalize with functions of their own (parameter_server.py).
        self._finalizer: weakref.finalize[..., Any] = weakref.finalize(self, _close_group, self._group, self._lease)

    def _acquire(self, specs: list[Any], cluster: Any) -> cluster_lib.Lease:
        # A hook: multi-worker strategies pick their workers by TF task name (strategy/multi_worker.py).
        return cluster_lib.acquire(specs, cluster)

    # -- lifecycle ---------------------------------------------------------------
    def close(self) -> None:
        """Release the replicas' state and give the workers back."""
        if self._closed:
            return
        self._closed = True
        self._finalizer()

    def __enter__(self) -> Strategy:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __reduce__(self) -> Any:

        return (resolve_strategy, (self._group_id,))

    @property
    def dashboard_link(self) -> str | None:
        """The Dask dashboard of the cluster the replicas run on."""
        return self._lease.dashboard_link

    def dashboard(self, interval: float = 0.2, threshold_s: float = 5.0) -> Any:
        """A live dashboard of the replicas (ipywidgets), see ``interdist.dashboard.show``."""
        from interdist.dashboard import show

        return show(self, interval=interval, threshold_s=threshold_s)

    @property
    def client(self) -> Any:
        """The ``distributed.Client`` the strategy talks to the workers with."""
        return self._lease.client

    # -- properties --------------------------------------------------------------
    @property
    def num_replicas_in_sync(self) -> int:
        return len(self._devices)

    @property
    def cluster_resolver(self) -> Any:
        return None

    def _parameter_devices(self) -> list[str]:
        return list(self._devices)

    # -- contexts ----------------------------------------------------------------
    @contextmanager
    def scope(self) -> Iterator[Strategy]:
        """Make this strategy current; variables created here are distributed."""
        self._check_usable()
        current = _context.get_strategy()
        if not _context.is_default(current) and current is not self:
            raise RuntimeError(f"Mixing different tf.distribute.Strategy objects: {current!r} is not {self!r}")
        if current is self:
            yield self
            return
        with _context.enter(self, None):
            yield self

    def _check_usable(self) -> None:
        if self._closed:
            raise RuntimeError("this strategy was closed; create a new one")

    def _enter_or_check(self) -> Any:
        current = _context.get_strategy()
        if not _context.is_default(current) and current is not self:
            raise RuntimeError(f"Mixing different tf.distribute.Strategy objects: {current!r} is not {self!r}")
        return self.scope()

    def _require_cross_replica(self, what: str) -> None:
        entry = _context.current()
        if entry.replica_context is not None and not _context.is_default(entry.strategy):
            raise RuntimeError(
                f"Method {what} requires being in cross-replica context, use get_replica_context().merge_call()"
            )

    # -- run -----------------------------------------------------------------------
    def run(self, fn: Callable[..., Any], args: Any = (), kwargs: Any = None, options: Any = None) -> Any:
        """Invokes ``fn`` on each replica, with the given arguments.

        >>> import interdist as idist, numpy as np
        >>> s = idist.MirroredStrategy(["CPU:0", "CPU:1"])
        >>> [float(v) for v in s.experimental_local_results(s.run(lambda x: x * 2.0, args=(np.float32(3.0),)))]
        [6.0, 6.0]
        >>> s.close()
        """
        self._check_usable()
        if not callable(fn):
            raise TypeError(f"run() requires a callable fn, but got {type(fn).__name__}")
        if options is not None and not isinstance(options, RunOptions):
            raise TypeError(f"options must be a tf.distribute.RunOptions, but got {type(options).__name__}")
        with self._enter_or_check():
            self._require_cross_replica("run")
            structure = (tuple(args), dict(kwargs or {}))
            per_rank = [self._select(r, structure) for r in range(self.num_replicas_in_sync)]
            results = self._group.execute(fn, per_rank, system=False, what=f"run of {_fn_name(fn)}")
            originals = [_nest.flatten(self._select(r, structure, keep=True)) for r in range(self.num_replicas_in_sync)]
            out = self._regroup(results, originals)
            self._run_variables.clear()  # variables made in the step now live as long as the notebook holds them
            return out

    def run_steps(self, fn: Callable[..., Any], iterator: Any, steps: int) -> Any:
        """Run ``fn(batch)`` for the next ``steps`` batches of ``iterator`` in one call to the replicas.

        The fused form of ``for _ in range(steps): strategy.run(fn, args=(next(iterator),))`` (in the
        spirit of Keras' ``steps_per_execution``): same results, every step's events recorded, one
        notebook-worker round trip. Returns the last step's result; raises ``StopIteration`` when the
        iterator has no batch left. Stops early (after fewer steps) at the end of the data.

        >>> import interdist as idist
        >>> with idist.MirroredStrategy(["CPU:0", "CPU:1"]) as s:
        ...     it = iter(s.experimental_distribute_dataset(idist.data.Dataset.range(8).batch(2)))
        ...     last = s.run_steps(lambda b: b * 10, it, steps=3)
        ...     [v.tolist() for v in map(np.asarray, s.experimental_local_results(last))]
        [[40], [50]]
        """

        self._check_usable()
        if not isinstance(steps, int) or steps < 1:
            raise ValueError(f"run_steps requires steps >= 1, but got {steps!r}")
        # ``fn`` travels inside the program's arguments; a function whose pickle can be reused goes
        # as those bytes (pickling it anew cost ~1 ms a call: client/fn_pickle.py).
        packed = cached_dumps(fn)
        fn_arg: Any = fn if packed is None else PickledFunction(packed)
        remote_key = getattr(iterator, "_key", None)
        if remote_key is not None and getattr(iterator, "_strategy", None) is self:
            # One argument object for every rank: the group pickles it (and ``fn``) once, not per rank.
            per_rank: list[tuple[tuple[Any, ...], dict[str, Any]]] = [
                ((fn_arg, ("remote", remote_key), steps), {})
            ] * self.num_replicas_in_sync
        else:
            batches = []
            for _ in range(steps):
                try:
                    batches.append(next(iterator))
                except StopIteration:
                    break
            if not batches:
                raise StopIteration("run_steps: the iterator has no batch left")
            per_rank = [
                ((fn_arg, ("shipped", [self._select(r, b) for b in batches]), steps), {})
                for r in range(self.num_replicas_in_sync)
            ]
        with self._enter_or_check():
            results = self._group.execute(
                fused_steps, per_rank, system=True, what=f"run_steps of {_fn_name(fn)}", steps=steps
            )
        done = results[0][1].value
        if done == 0:
            # Uneven ends: some replicas still hold batches. One plain step gives the others
            # empty batches, as TF does; nothing left at all ends the iteration.
            return self.run(fn, args=(next(iterator),))
        out = self._regroup([r[0] for r in results])
        self._run_variables.clear()
        return out

    def _system(self, program: Callable[..., Any], *args: Any, per_rank: list[Any] | None = None) -> list[Any]:
        self._check_usable()
        if per_rank is None:
            same: tuple[tuple[Any, ...], dict[str, Any]] = (args, {})
            rank_args = [same] * self.num_replicas_in_sync
        else:
            rank_args = [(tuple(a), {}) for a in per_rank]
        return self._group.execute(program, rank_args, system=True, what=program.__name__)

    def _select(self, rank: int, structure: Any, keep: bool = False) -> Any:
        """``structure`` as replica ``rank`` receives it: components picked, stored values referenced.

        With ``keep``, the notebook's own objects are kept (to recognise arguments returned unchanged).
        """

        def leaf(x: Any) -> Any:
            if keep:
                return _nest.map_structure(leaf, x.values[rank]) if isinstance(x, DistributedValues) else x
            if isinstance(x, _Handle):
                if x._strategy is not self:
                    raise ValueError(
                        f"The variable {x._name!r} was created in the scope of another strategy "
                        f"({x._strategy!r}); it cannot be used by {self!r}"
                    )
                return x
            if isinstance(x, DistributedValues):
                return _nest.map_structure(leaf, self._select_values(x)[rank])
            if isinstance(x, RemoteValue):
                if x._owner is self._group and x._rank == rank:
                    return StoreRef(x._key)
                return x.numpy()
            if isinstance(x, ArrayValue):
                return x.numpy()
            return x

        return _nest.map_structure(leaf, structure)

    def _regroup(self, results: list[Any], originals: list[list[Any]] | None = None) -> Any:
        n = len(results)

        def decode(rank: int, m: Any) -> Any:
            if m is None:
                return None
            if isinstance(m, ArgRef):
                assert originals is not None
                return originals[rank][m.index]
            if isinstance(m, VarRef):
                return self._variable_by_id(m.var_id)
            if m.shape is None:
                return m.value
            return self._remote(rank, m)

        def leaf(*metas: Any) -> Any:
            decoded = [decode(r, m) for r, m in enumerate(metas)]
            if n == 1:
                return decoded[0]
            d0 = decoded[0]
            if all(d is None for d in decoded):
                return None
            if all(d is d0 for d in decoded) and (isinstance(d0, _Handle) or isinstance(metas[0], ArgRef)):
                return d0
            if all(isinstance(m, ValueMeta) and m.shape is None for m in metas) and same_object_across(decoded):
                return d0
            if all(isinstance(m, ValueMeta) and m.shared for m in metas):
                return d0  # merge_call's result returned unchanged: one value, as TF
            return PerReplica(decoded, self)

        return _nest.map_structure(leaf, *results)

    def _remote(self, rank: int, meta: ValueMeta) -> RemoteValue:
        rv = RemoteValue(meta.key, rank, self._devices[rank], meta.as_dict(), self._group.fetch, owner=self._group)
        weakref.finalize(rv, self._group.finalizer(), rank, meta.key)
        return rv

    # -- cross-replica API ---------------------------------------------------------
    def experimental_local_results(self, value: Any) -> tuple[Any, ...]:
        """The per-replica values contained in ``value``; ``(value,)`` for a single value."""
        if isinstance(value, DistributedValues):
            return value.values
        if _nest.is_nested(value):
            # TF maps over the nest: one copy of the structure per replica, components picked.
            return tuple(
                _nest.map_structure(lambda x, r=r: x.values[r] if isinstance(x, DistributedValues) else x, value)
                for r in range(self.num_replicas_in_sync)
            )
        return (value,)

    def reduce(self, reduce_op: Any, value: Any, axis: int | None = None) -> Any:
        """Reduce ``value`` across replicas and return the result in the notebook (host CPU:0).

        ``axis=None`` reduces across replicas only; ``axis=0`` also across the batch
        (MEAN divides by the true number of elements, also for uneven last batches).
        """
        if not isinstance(reduce_op, (str, ReduceOp)) and type(reduce_op).__name__ != "VariableAggregation":
            # TF 2.21 fails an internal assert for anything that is neither a string nor a ReduceOp.
            raise AssertionError(
                f"reduce_op must be a tf.distribute.ReduceOp or one of 'SUM', 'MEAN', but got {reduce_op!r}"
            )
        op = resolve(reduce_op)
        self._check_usable()
        self._require_cross_replica("reduce")
        if _nest.is_nested(value):
            return _nest.map_structure(lambda v: self.reduce(op, v, axis), value)
        n = self.num_replicas_in_sync
        if isinstance(value, Mirrored) and n > 1:
            if op == ReduceOp.SUM and axis is None:
                # TF 2.21 asserts that a SUM never gets a mirrored value (checked with TF).
                raise AssertionError(f"reduce(SUM) of a mirrored value {value!r}: its copies are already equal")
            if axis is None:
                return Tensor(np.asarray(value), device_lib.host_device())
        host = device_lib.host_device()
        if isinstance(value, DistributedVariable):
            value = PerReplica([np.asarray(c) for c in value.values])
        elif isinstance(value, _Handle):
            value = value.read_value()
        if not isinstance(value, DistributedValues):
            if axis is None:
                return Tensor(_reduction.reduce_non_distributed(op, value, n), host)
            return Tensor(_reduction.reduce_components(op, [value] * n, axis), host)
        comps = self._select_all(value)
        if all(not isinstance(c, StoreRef) for c in comps):
            return Tensor(_reduction.reduce_components(op, list(comps), axis), host)
        results = self._system(programs.reduce_values, per_rank=[(op, axis, c) for c in comps])
        return Tensor(_meta_value(results[0], self, 0), host)

    def _select_all(self, value: DistributedValues) -> list[Any]:
        out: list[Any] = []
        for r, c in enumerate(self._select_values(value)):
            if isinstance(c, RemoteValue) and c._owner is self._group and c._rank == r and not c.is_fetched:
                out.append(StoreRef(c._key))
            else:
                out.append(np.asarray(c) if isinstance(c, ArrayValue) else c)
        return out

    def _select_values(self, value: DistributedValues) -> list[Any]:
        """One component per replica: TF picks component i for replica i and ignores extra ones."""
        if len(value.values) < self.num_replicas_in_sync:
            raise ValueError(
                f"{type(value).__name__} has {len(value.values)} component(s) but this strategy has "
                f"{self.num_replicas_in_sync} replica(s): it belongs to another strategy"
            )
        return list(value.values[: self.num_replicas_in_sync])

    def gather(self, value: Any, axis: int) -> Any:
        """Concatenate the replicas' values along ``axis`` into one value in the notebook."""
        self._check_usable()
        self._require_cross_replica("gather")
        host = device_lib.host_device()
        if axis < 0:
            raise ValueError(f"gather requires 0 <= axis < rank of the value, but got axis={axis}")
        if not isinstance(value, DistributedValues):
            return Tensor(_reduction.gather_components([value], axis), host)  # TF: the value itself
        comps = self._select_all(value)
        if all(not isinstance(c, StoreRef) for c in comps):
            return Tensor(_reduction.gather_components(list(comps), axis), host)
        results = self._system(programs.gather_values, per_rank=[(axis, c) for c in comps])
        return Tensor(_meta_value(results[0], self, 0), host)

    def experimental_distribute_values_from_function(self, value_fn: Callable[..., Any]) -> Any:
        """A ``PerReplica`` whose component ``i`` is ``value_fn(ValueContext(i, n))``, made on replica ``i``."""
        if not callable(value_fn):
            raise TypeError(f"value_fn must be callable, but got {type(value_fn).__name__}")
        # Called in the notebook, once per replica, as TF does; each value travels to its
        # replica with the next program that uses it.
        values = []
        for r in range(self.num_replicas_in_sync):
            with _context.enter(self, None):
                v = value_fn(programs.ValueContext(r, self.num_replicas_in_sync))
            v = programs.convert_value(v)
            # TF leaves value_fn's results on the host's CPU:0 until a run uses them.
            values.append(
                _nest.map_structure(
                    lambda x: Tensor(x, device_lib.host_device()) if isinstance(x, (np.ndarray, np.generic)) else x, v
                )
            )
        return PerReplica(values, self)

    def _mirror(self, value: np.ndarray, destinations: Any) -> Any:
        """``value`` on ``destinations``: one device string gives a single value, else a ``Mirrored``."""
        if isinstance(destinations, str):
            return Tensor(value, device_lib.canonicalize(destinations))
        return Mirrored([Tensor(value, d) for d in self._devices], self)

    # -- variables -------------------------------------------------------------------
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

        if _context.get_replica_context() is not None:
            raise NotImplementedError(
                "interdist creates distributed variables in strategy.scope() (cross-replica context); "
                "creating them inside strategy.run is not supported yet"
            )
        a = normalize_args(
            initial_value,
            name,
            trainable,
            dtype,
            synchronization,
            VariableAggregation.NONE if aggregation is None else aggregation,
        )
        if a["synchronization"] == VariableSynchronization.NONE and a["trainable"]:
            raise ValueError(
                "Synchronization value NONE is not supported for trainable variables in a "
                f"distribution strategy (variable {a['name']!r}); set trainable=False"
            )
        if a["synchronization"] == VariableSynchronization.AUTO and self._kind != "central_storage":
            a["synchronization"] = VariableSynchronization.ON_WRITE
        check_mean_dtype(a)
        var_id = next(self._var_ids)
        kind = self._variable_kind(a)
        meta = cast(VariableMeta, variable_meta(a, kind, self._kind))  # variable_meta is typed dict[str, Any]
        self._create_on_replicas(var_id, meta, a["value"])
        self._var_metas[var_id] = meta
        cls: Any = {"mirrored": self._variable_class, "sync_on_read": SyncOnReadVariable, "central": CentralVariable}[
            kind
        ]
        return cls(self, var_id, a, self._variable_devices(kind))

    def _forget_variable(self, var_id: int) -> None:
        """A variable's handle was collected: its copies go with the next program (called by a finalizer)."""

        group = getattr(self, "_group", None)
        if group is None or group.closed:
            return
        self._var_metas.pop(var_id, None)
        for rank in range(self.num_replicas_in_sync):
            group.queue_release(rank, f"{VARIABLE_KEY}{var_id}")

    def _adopt_run_variables(self, created: list[CreatedVariable]) -> None:
        """Handles for the variables a replica function created (one per variable, as TF's eager run)."""
        for c in created:
            if self._variable_by_id(c["var_id"]) is not None:
                continue
            meta = c["meta"]
            a = args_from_meta(cast("dict[str, Any]", meta), c["shape"], c["dtype"])  # typed dict[str, Any]
            self._var_metas[c["var_id"]] = meta
            cls: Any = {"mirrored": self._variable_class, "sync_on_read": SyncOnReadVariable}[meta["kind"]]
            # Kept until the step's results are decoded (they may be this variable); after that it
            # lives as long as the notebook holds it, as TF's variable lives with its object.
            self._run_variables.append(cls(self, c["var_id"], a, self._variable_devices(meta["kind"])))

    def _create_on_replicas(self, var_id: int, meta: VariableMeta, value: np.ndarray) -> None:
        """Make the replicas' copies (a hook: central storage keeps one, strategy/central_storage.py)."""
        self._system(programs.create_variable, var_id, meta, value)

    def _live_variables(self) -> list[Any]:
        """The variables created in this strategy's scope that still exist, in creation order."""
        return [v for v in (self._variable_by_id(i) for i in sorted(self._var_metas)) if v is not None]

    def _restore_replicas(self, ranks: list[int]) -> None:
        """After a worker restart: give the new replicas the variables, copied from a survivor."""
        self._lease.addresses = list(self._group.addresses)
        survivors = [r for r in range(self.num_replicas_in_sync) if r not in ranks]
        if not survivors:
            raise WorkerLostError("every replica of this strategy was lost; its variables are gone")
        source = survivors[0]
        restored = []
        for var_id, meta in list(self._var_metas.items()):
            if self._variable_by_id(var_id) is None:
                continue
            value = self._group.read_variable(source, var_id)
            if meta["kind"] == "sync_on_read" and meta["aggregation"] == "SUM":
                value = np.zeros_like(value)  # a lost replica's share of a sum is lost, not duplicated
            for r in ranks:
                self._group.restore_variable(r, var_id, meta, value)
            restored.append(meta["name"])
        warnings.warn(
            f"replica(s) {ranks} of {self!r} were restarted on new workers; {len(restored)} variable(s) were copied "
            f"there from replica {source}. Values the lost replicas held (run results, dataset iterators) are gone.",
            UserWarning,
            stacklevel=4,
        )

    def _variable_kind(self, args: dict[str, Any]) -> str:
        return variable_kind(args["synchronization"])

    def _variable_devices(self, kind: str) -> list[str]:
        return list(self._devices)

    def _variable_by_id(self, var_id: int) -> Any:

        return registered_variable(self._group_id, var_id)

    def _read_copy(self, var: Any, rank: int) -> Any:
        return self._group.read_variable(rank, var._var_id)

    def _read_variable(self, var: Any) -> Any:
        # In the notebook a strategy's variables are always read in cross-replica context.
        if isinstance(var, SyncOnReadVariable):
            agg = var.aggregation.name
            if agg == "NONE":
                raise ValueError(
                    "Could not convert from `tf.VariableAggregation` VariableAggregation.NONE to "
                    "`tf.distribute.ReduceOp` type (reading a sync-on-read variable in cross-replica "
                    "context needs SUM, MEAN or ONLY_FIRST_REPLICA aggregation)"
                )
            if agg in ("SUM", "MEAN"):
                return reduce_arrays([np.asarray(c) for c in var.values], ReduceOp(agg))
        return self._read_copy(var, 0)

    def _assign_variable(self, var: Any, op: str, value: Any) -> Any:

        if _context.get_replica_context() is not None and not _context.is_default(_context.get_strategy()):
            raise RuntimeError("a distributed variable was assigned in the notebook inside a replica context")
        if isinstance(var, SyncOnReadVariable) and var.aggregation.name == "SUM" and op != "assign":
            raise ValueError(
                f"SyncOnReadVariable does not support `{op}` in cross-replica context when "
                "aggregation is set to `tf.VariableAggregation.SUM`."
            )
        n = self.num_replicas_in_sync
        if isinstance(value, PerReplica) and n > 1:
            # TF 2.21 (unlike its docs) gives each copy its replica's component; the copies may diverge.
            parts = [np.asarray(c) for c in self._select_values(value)]
        else:
            if isinstance(value, DistributedValues):
                value = value.values[0]
            parts = [np.asarray(value) if isinstance(value, (Variable, ArrayValue)) else value] * n
        # Every replica's value is checked before any replica changes.
        checked = [convert_for_variable(p, var.dtype, var.shape, var._name) for p in parts]
        after = self._system(programs.assign_variable, per_rank=[(var._var_id, op, c) for c in checked])
        if isinstance(var, MirroredVariable) and n > 1:
            # TF returns the values as they are right after this assign (a snapshot), not the live variable.
            return Mirrored([self._remote(r, m) for r, m in enumerate(after)], self)
        return None

    def _update(
        self, var: Any, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any], group: bool
    ) -> Any:
        if not self.extended.variable_created_in_scope(var):
            raise ValueError(f"update() requires a variable created in this strategy's scope, but got {var!r}")
        per_rank = [self._select(r, (var, args, kwargs)) for r in range(self.num_replicas_in_sync)]
        results = self._group.execute(
            _update_program, [((fn, *p), {}) for p in per_rank], system=True, what=f"update of {var._name}"
        )
        out = self._regroup(results)
        if not group and self._kind == "central_storage":
            return (out.values[0] if isinstance(out, DistributedValues) else out,)  # one copy, one result
        if not group:
            # One result per replica (TF's update_regroup with group=False).
            if isinstance(out, PerReplica):
                return tuple(out.values)
            if isinstance(out, _Handle):
                return (
                    tuple(out._values)
                    if len(out._values) == self.num_replicas_in_sync
                    else (out,) * self.num_replicas_in_sync
                )
            return (out,) * self.num_replicas_in_sync
        return out

    # -- input ---------------------------------------------------------------------
    def experimental_distribute_dataset(self, dataset: Any, options: Any = None) -> Any:
        """Split each global batch of ``dataset`` into per-replica batches (see ``interdist.input``)."""

        return DistributedDataset(self, dataset, options)

    def distribute_datasets_from_function(self, dataset_fn: Callable[..., Any], options: Any = None) -> Any:
        """Call ``dataset_fn(InputContext)`` on each worker; replicas dequeue their batches there."""

        return DistributedDatasetsFromFunction(self, dataset_fn, options)

    def experimental_distribute_datasets_from_function(
        self, dataset_fn: Callable[..., Any], options: Any = None
    ) -> Any:
        return self.distribute_datasets_from_function(dataset_fn, options)

    def experimental_make_numpy_dataset(self, numpy_input: Any) -> Any:
        """A ``Dataset`` of the slices of ``numpy_input`` (deprecated, as in TF)."""
        warnings.warn(
            "experimental_make_numpy_dataset is deprecated: use interdist.data.Dataset.from_tensor_slices instead",
            DeprecationWarning,
            stacklevel=2,
        )

        return Dataset.from_tensor_slices(numpy_input)

    def __repr__(self) -> str:
        return f"<interdist.{type(self).__name__} on {', '.join(self._devices)}>"


def _update_program(
    replica: Any, fn: Callable[..., Any], var: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Any:
    with _context.enter(replica.view, None, update_replica_id=replica.rank):
        return fn(var, *args, **kwargs)


def _meta_value(meta: Any, strategy: Strategy, rank: int) -> Any:
    if meta is None:
        return None
    if meta.has_value:
        return meta.value
    return strategy._group.fetch(rank, meta.key)


def _close_group(group: DaskGroup, lease: cluster_lib.Lease) -> None:
    try:
        group.leave()
    finally:
        cluster_lib.release(lease)


def _fn_name(fn: Any) -> str:
    return str(getattr(fn, "__qualname__", getattr(fn, "__name__", type(fn).__name__)))
