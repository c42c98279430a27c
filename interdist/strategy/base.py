"""``Strategy`` and ``StrategyExtended`` in the notebook, for strategies whose replicas are Dask workers.

The notebook holds handles; programs run on the replicas (``replica/``). The
arithmetic shared with the replicas lives in ``_reduction``.

This module holds ``Strategy``'s construction, lifecycle and scope; the rest of it is
inherited from one module per concept: ``dispatch.py`` (the replica group and the program round
trip), ``variables.py``, ``cross_replica.py`` (``reduce``, ``gather``), ``input_distribution.py``,
``running.py`` (``run``, ``run_steps``, and ``RunOptions``, re-exported here) and ``display.py``
(``repr``, the HTML card, ``dashboard``).
"""

from __future__ import annotations

import abc
import importlib
import sys
import types
import weakref
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

import cloudpickle

from interdist import _context
from interdist import device as device_lib
from interdist.client import cluster as cluster_lib
from interdist.client import reclaim
from interdist.client.event_log import EventLog
from interdist.client.fn_pickle import ship_by_value
from interdist.client.group import DaskGroup
from interdist.collectives.registry import backend_for, get_backend
from interdist.config import settings, snapshot
from interdist.protocol import GroupSpec, VariableMeta, register_strategy, resolve_strategy
from interdist.strategy.cross_replica import CrossReplicaMixin
from interdist.strategy.display import DisplayMixin
from interdist.strategy.extended import StrategyExtended
from interdist.strategy.input_distribution import InputMixin
from interdist.strategy.running import RunMixin
from interdist.strategy.running import RunOptions as RunOptions  # (this module's API too)
from interdist.strategy.variables import VariablesMixin


class Strategy(CrossReplicaMixin, InputMixin, VariablesMixin, RunMixin, DisplayMixin, metaclass=abc.ABCMeta):
    """A state & compute distribution policy on a list of devices (replicas are Dask workers).

    An ``abc.ABCMeta`` class so that the default strategy (``default.py``, which runs in the notebook
    and shares none of this code) is registered as one: ``isinstance(get_strategy(), Strategy)`` holds
    everywhere, as in TF.

    Examples
    --------
    Variables made in ``scope()`` have a copy on each replica; ``run`` calls a function on every
    replica; ``reduce`` combines the per-replica results:

    >>> import interdist as idist, numpy as np
    >>> with idist.MirroredStrategy(["CPU:0", "CPU:1"]) as strategy:
    ...     with strategy.scope():
    ...         w = idist.Variable(np.float32(2.0))
    ...     def step():
    ...         return w * np.float32(idist.get_replica_context().replica_id_in_sync_group + 1)
    ...     total = strategy.reduce("SUM", strategy.run(step), axis=None)
    ...     isinstance(strategy, idist.Strategy), strategy.num_replicas_in_sync, float(total)
    (True, 2, 6.0)
    >>> isinstance(idist.get_strategy(), idist.Strategy)  # the default strategy, too
    True
    """

    _is_default = False
    _extended_class: type[StrategyExtended] = StrategyExtended
    _kind = "mirrored"

    def __init__(
        self, devices: list[str], cluster: Any = None, spec: GroupSpec | None = None, security: Any = None
    ) -> None:
        self._devices = devices
        self._security = security  # TLS credentials for an address or an embedded cluster (client/cluster.py)
        self._closed = False
        self._colocate_with: Any = None
        self._var_ids = iter(range(1, 1 << 62))
        self._var_metas: dict[int, VariableMeta] = {}
        self.extended = self._extended_class(self)
        specs = [device_lib.parse(d) for d in devices]
        # The strategy's own, else the setting; its default ``auto`` is ``gpu`` for GPU devices where CuPy is
        # installed (CuPy batches then all-reduce on the device where the cost model says so), else ``dask``
        backend = backend_for(devices, (spec or {}).get("collectives_backend"))
        get_backend(backend)  # an unknown or unavailable backend fails here, before any worker is taken
        self._lease = self._acquire(specs, cluster)
        if not self._lease.embedded:  # a cluster made elsewhere: the interdist pages on its dashboard too
            cluster_lib.add_dashboard_pages(self._lease.client)
        spec = GroupSpec(**(spec or {}))
        spec.update({"world_size": len(devices), "devices": devices, "kind": self._kind})
        # Who the replicas' view of this strategy says it is (``isinstance``, ``type(...).__name__``).
        spec.update(
            {
                "strategy_class": _class_path(type(self)),
                "strategy_class_pickle": _class_pickle(type(self)),
                "strategy_name": type(self).__name__,
                "extended_class": _class_path(type(self.extended)),
                # MirroredStrategy's batch_reduce_to refuses int32 among several values (strategy/extended.py)
                "int32_on_host": self._kind == "mirrored" and self.extended._int32_on_host,
                "extended_name": type(self.extended).__name__,
            }
        )
        # Collective messages between replicas on one host go over Unix sockets (control.py).
        spec.setdefault("local_control", settings.local_control)
        spec.setdefault("collectives_backend", backend)  # the replicas' transport (collectives/registry.py)
        spec.setdefault("config", snapshot())  # the notebook's settings, for the workers' processes (config.apply)
        try:
            self._group = DaskGroup(self._lease.client, self._lease.addresses, spec, self._lease.names)
        except BaseException:
            cluster_lib.release(self._lease)  # a replica that could not join (frozen, gone): the workers go back
            raise
        self._group_id = self._group.group_id
        register_strategy(self._group_id, self)
        self.events = EventLog()
        self._group.on_events = self.events.add_msgs
        # The group's callbacks hold the strategy weakly: the finalizer below holds the group, and a strategy
        # its own finalizer kept alive would never be collected, nor its workers given back.
        self._group.on_created = _weak_method(self._adopt_run_variables)
        self._run_variables: list[Any] = []  # handles of variables made inside the current run, until it returns
        # The live distributed iterators over this strategy's datasets: told about steps that failed with a
        # lost or frozen replica (they hand that step's batch out again) and about restarted replicas.
        self._iterators: weakref.WeakSet[Any] = weakref.WeakSet()
        self._group.on_recover = _weak_method(self._on_recover)
        self._fetch_open = _fetch_while_open(self._group)  # results' fetch (``_remote``): clear once closed
        # ``weakref.finalize[..., Any]``: subclasses finalize with functions of their own (parameter_server.py).
        # Collected without close(), the strategy's close is queued and run by a thread of its own
        # (``client/reclaim.py``: never inside the garbage collector); ``close()`` runs it at once.
        self._finalizer: weakref.finalize[..., Any] = reclaim.finalize(self, _close_group, self._group, self._lease)

    def _acquire(self, specs: list[Any], cluster: Any) -> cluster_lib.Lease:
        # A hook: multi-worker strategies pick their workers by TF task name (strategy/multi_worker.py).
        return cluster_lib.acquire(specs, cluster, self._security)

    # -- lifecycle ---------------------------------------------------------------
    def close(self) -> None:
        """Release the replicas' state and give the workers back."""
        if self._closed:
            return
        self._closed = True
        reclaim.now(self._finalizer)

    def _check_usable(self) -> None:
        if self._closed:
            raise RuntimeError("the strategy was closed (strategy.close()); create a new one")
        super()._check_usable()

    def __enter__(self) -> Strategy:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __reduce__(self) -> Any:

        return (resolve_strategy, (self._group_id,))

    def __interdist_fingerprint__(self) -> Any:
        """What a strategy pickles to in a replica function (``fn_pickle``'s cache): its group, for good."""
        return ("strategy", self._group_id)

    def ship(self, *modules: Any) -> None:
        """Make your own modules (a ``helpers.py`` next to the notebook) usable in replica functions on
        every worker, also workers on other hosts that do not have the file.

        Functions and classes from a shipped module travel by value with the replica function (through
        cloudpickle's pickle-by-value), and so does the module when the function names it
        (``import helpers; helpers.loss(x)``). Ship again after editing the file and reloading the
        module (``importlib.reload``): the next step sends the new code. Modules are given as module
        objects or names; installed packages (anything outside the notebook's own files) are refused,
        since the workers import those themselves.

        >>> import interdist as idist, types, sys
        >>> helpers = types.ModuleType("helpers_doc"); exec("def double(x): return x * 2", helpers.__dict__)
        >>> sys.modules["helpers_doc"] = helpers
        >>> with idist.MirroredStrategy(["CPU:0"]) as s:
        ...     s.ship(helpers)
        ...     s.run(lambda: helpers.double(21))
        42
        """
        for m in modules:
            module = importlib.import_module(m) if isinstance(m, str) else m
            if not isinstance(module, types.ModuleType):
                raise TypeError(f"ship() takes modules or module names, got {type(m).__name__}")
            top = module.__name__.split(".")[0]
            if top in sys.stdlib_module_names or top in {"interdist", "numpy", "dask", "distributed", "cloudpickle"}:
                raise ValueError(
                    f"ship() is for your own modules; {module.__name__!r} is installed on the workers already"
                )
            path = getattr(module, "__file__", None) or ""
            if "site-packages" in path or "dist-packages" in path:
                raise ValueError(
                    f"ship() is for your own modules; {module.__name__!r} is an installed package ({path}): "
                    "install it on the workers instead"
                )
            ship_by_value(module)

    @property
    def client(self) -> Any:
        """The ``distributed.Client`` the strategy talks to the workers with."""
        return self._lease.client

    # -- properties --------------------------------------------------------------
    @property
    def cluster_resolver(self) -> Any:
        return None

    def _parameter_devices(self) -> list[str]:
        return list(self._devices)

    # -- contexts ----------------------------------------------------------------
    def scope(self) -> AbstractContextManager[Strategy]:
        """Make this strategy current; variables created here are distributed."""
        return _Scope(self)

    def _enter_or_check(self) -> Any:
        current = _context.get_strategy()
        if not _context.is_default(current) and current is not self:
            raise RuntimeError(f"Mixing different tf.distribute.Strategy objects: {current!r} is not {self!r}")
        return self.scope()

    # -- after a fault ---------------------------------------------------------------
    def _on_recover(self, ranks: list[int]) -> None:
        """Replicas ``ranks`` were restarted on new workers: their variables, then their input iterators."""
        self._restore_replicas(ranks)
        for iterator in list(self._iterators):
            iterator._replicas_replaced(ranks)

    # -- variables and inputs of a closed strategy -------------------------------------
    def _read_copy(self, var: Any, rank: int) -> Any:
        self._check_open()
        return super()._read_copy(var, rank)

    def _read_variable(self, var: Any) -> Any:
        self._check_open()
        return super()._read_variable(var)

    def _update(
        self, var: Any, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any], group: bool
    ) -> Any:
        self._check_open()
        return super()._update(var, fn, args, kwargs, group)

    def experimental_distribute_values_from_function(self, value_fn: Callable[..., Any]) -> Any:
        self._check_open()
        return super().experimental_distribute_values_from_function(value_fn)

    def experimental_distribute_dataset(self, dataset: Any, options: Any = None) -> Any:
        self._check_open()
        return super().experimental_distribute_dataset(dataset, options)

    def distribute_datasets_from_function(self, dataset_fn: Callable[..., Any], options: Any = None) -> Any:
        self._check_open()
        return super().distribute_datasets_from_function(dataset_fn, options)

    def _remote(self, rank: int, meta: Any) -> Any:
        rv = super()._remote(rank, meta)
        rv._fetch = self._fetch_open
        return rv

    def _check_open(self) -> None:
        if self._closed:
            self._check_usable()  # raises, saying the strategy was closed


def _class_path(cls: type) -> list[list[str]]:
    """``cls`` and its bases as ``[module, qualname]`` pairs, for the replicas to import by name.

    Classes of ``__main__`` (the notebook's own) and local classes cannot be imported there: they
    are left out, so the replica finds the nearest importable base (``replica/view.py``).
    """
    return [
        [c.__module__, c.__qualname__]
        for c in cls.__mro__
        if c is not object and c.__module__ != "__main__" and "<locals>" not in c.__qualname__
    ]


def _class_pickle(cls: type) -> bytes | None:
    """``cls`` pickled with cloudpickle: by name when importable, else by value (a notebook's subclass).

    cloudpickle gives a class pickled by value the same identity on a worker each time it arrives
    there, so a function that names the notebook's subclass finds the class the view reports.
    """
    try:
        return bytes(cloudpickle.dumps(cls))
    except Exception:  # noqa: BLE001 - a class that cannot travel: the replicas use _class_path
        return None


def _weak_method(method: Callable[..., Any]) -> Callable[..., Any]:
    """``method`` of an object, holding the object weakly: a call once it is gone does nothing."""
    ref = weakref.WeakMethod(method)

    def call(*args: Any, **kwargs: Any) -> Any:
        bound = ref()
        return None if bound is None else bound(*args, **kwargs)

    return call


def _close_group(group: DaskGroup, lease: cluster_lib.Lease) -> None:
    try:
        group.leave()
    finally:
        cluster_lib.release(lease)


def _fetch_while_open(group: DaskGroup) -> Callable[[int, str], Any]:
    """``group.fetch``, refusing with the strategy's words once it was closed (its workers then hold nothing).

    It holds the group, not the strategy: a result kept in the notebook must not keep its strategy alive.
    """
    fetch = group.fetch

    def fetch_while_open(rank: int, key: str) -> Any:
        if group.closed:
            raise RuntimeError(
                "the strategy was closed (strategy.close()) before this value was fetched from its replica; "
                "create a new one (read values with .numpy() before closing to keep them)"
            )
        return fetch(rank, key)

    return fetch_while_open


class _Scope:
    """``strategy.scope()``: checked when entered (TF: not inside ``run``, nor inside ``with ReplicaContext(...)``;
    not inside another strategy's scope); pushes the strategy unless it is current already. A class rather than
    a ``contextmanager`` generator: every ``run`` enters one."""

    __slots__ = ("_entered", "_strategy")

    def __init__(self, strategy: Strategy) -> None:
        self._strategy = strategy
        self._entered: _context.enter | None = None

    def __enter__(self) -> Strategy:
        strategy = self._strategy
        strategy._check_usable()
        strategy._require_cross_replica("scope")
        current = _context.get_strategy()
        if not _context.is_default(current) and current is not strategy:
            raise RuntimeError(f"Mixing different tf.distribute.Strategy objects: {current!r} is not {strategy!r}")
        if current is not strategy:
            self._entered = _context.enter(strategy, None)
            self._entered.__enter__()
        return strategy

    def __exit__(self, *exc: object) -> None:
        entered, self._entered = self._entered, None
        if entered is not None:
            entered.__exit__(*exc)
