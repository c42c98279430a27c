"""``Strategy`` and ``StrategyExtended`` in the notebook, for strategies whose replicas are Dask workers.

The notebook holds handles; programs run on the replicas (``replica/``). The
arithmetic shared with the replicas lives in ``_reduction``.

This module holds ``Strategy``'s construction, lifecycle, scope and ``run``; the rest of it is
inherited from one module per concept: ``dispatch.py`` (the replica group and the program round
trip), ``variables.py``, ``cross_replica.py`` (``reduce``, ``gather``) and ``input_distribution.py``.
"""

from __future__ import annotations

import abc
import html
import importlib
import sys
import types
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import cloudpickle

from interdist import _context, _nest, debug
from interdist import device as device_lib
from interdist.client import cluster as cluster_lib
from interdist.client import reclaim
from interdist.client.event_log import EventLog
from interdist.client.fn_pickle import cached_dumps, ship_by_value
from interdist.client.group import DaskGroup
from interdist.collectives.registry import get_backend
from interdist.config import settings, snapshot
from interdist.errors import ReplicaFrozenError, WorkerLostError
from interdist.input.distributed_dataset import DistributedIterator
from interdist.protocol import GroupSpec, VariableMeta, pickling_for, register_strategy, resolve_strategy
from interdist.replica.fused import PickledFunction, fused_steps
from interdist.strategy.cross_replica import CrossReplicaMixin
from interdist.strategy.extended import StrategyExtended
from interdist.strategy.input_distribution import InputMixin
from interdist.strategy.variables import VariablesMixin
from interdist.values import reprs


class RunOptions:
    """Run options for ``strategy.run`` (accepted for compatibility; interdist runs eagerly).

    Examples
    --------
    >>> import interdist as idist, numpy as np
    >>> with idist.MirroredStrategy(["CPU:0", "CPU:1"]) as s:
    ...     out = s.run(lambda: np.float32(1.0), options=idist.RunOptions(experimental_enable_dynamic_batch_size=False))
    ...     [float(x) for x in s.experimental_local_results(out)]
    [1.0, 1.0]
    """

    def __init__(
        self,
        experimental_enable_dynamic_batch_size: bool = True,
        experimental_bucketizing_dynamic_shape: bool = False,
        experimental_xla_options: Any = None,
    ) -> None:
        self.experimental_enable_dynamic_batch_size = experimental_enable_dynamic_batch_size
        self.experimental_bucketizing_dynamic_shape = experimental_bucketizing_dynamic_shape
        self.experimental_xla_options = experimental_xla_options


class Strategy(CrossReplicaMixin, InputMixin, VariablesMixin, metaclass=abc.ABCMeta):
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
        backend = (spec or {}).get("collectives_backend") or settings.collectives_backend
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

    @property
    def dashboard_link(self) -> str | None:
        """The Dask dashboard of the cluster the replicas run on."""
        return self._lease.dashboard_link

    def dashboard(self, interval: float = 0.2, threshold_s: float = 5.0, *, docked: bool = False) -> Any:
        """A live dashboard of the replicas: inline (ipywidgets, see ``interdist.dashboard.show``), or with
        ``docked=True`` the Dask page ``/individual-interdist-overview`` (status strip, watchdog, timeline),
        which JupyterLab (``interdist[lab]``) docks to the right of the notebook, where it stays in view and
        live while the cells run, comes back after a page reload and follows the notebook's new cluster
        after Kernel > Restart; elsewhere the output is a link to that page (see
        ``interdist.dashboard.docked``). ``interval`` and ``threshold_s`` are the inline dashboard's."""
        if docked:
            from interdist.dashboard.docked import docked as docked_dashboard

            return docked_dashboard(self._lease)
        from interdist.dashboard import show

        ref = weakref.ref(self)  # the dashboard must not keep the strategy alive

        def inject(**kwargs: Any) -> None:  # the dashboard's fault control
            strategy = ref()
            if strategy is None:
                raise RuntimeError("the strategy is gone")
            debug.inject(strategy, **kwargs)

        return show(self, interval=interval, threshold_s=threshold_s, inject=inject)

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
    @contextmanager
    def scope(self) -> Iterator[Strategy]:
        """Make this strategy current; variables created here are distributed."""
        self._check_usable()
        self._require_cross_replica("scope")  # TF: not inside run, nor inside `with ReplicaContext(...)`
        current = _context.get_strategy()
        if not _context.is_default(current) and current is not self:
            raise RuntimeError(f"Mixing different tf.distribute.Strategy objects: {current!r} is not {self!r}")
        if current is self:
            yield self
            return
        with _context.enter(self, None):
            yield self

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

    def _inputs_failed(self, structure: Any) -> None:
        """A ``run`` given ``structure`` failed with a lost or frozen replica: an iterator whose last batch
        it was hands that batch out again."""
        if not self._iterators:
            return
        leaves = {id(x) for x in _nest.flatten(structure)}
        for iterator in list(self._iterators):
            iterator._step_failed(leaves)

    def _inputs_ran(self, structure: Any) -> None:
        """A ``run`` given ``structure`` returned: a failed step's batch retried by hand is not handed out again."""
        pending = [it for it in list(self._iterators) if it._redeliver]
        if pending:
            leaves = {id(x) for x in _nest.flatten(structure)}
            for iterator in pending:
                iterator._step_ran(leaves)

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

    # -- run -----------------------------------------------------------------------
    def run(self, fn: Callable[..., Any], args: Any = (), kwargs: Any = None, options: Any = None) -> Any:
        """Invokes ``fn`` on each replica, with the given arguments.

        >>> import interdist as idist, numpy as np
        >>> s = idist.MirroredStrategy(["CPU:0", "CPU:1"])
        >>> [float(v) for v in s.experimental_local_results(s.run(lambda x: x * 2.0, args=(np.float32(3.0),)))]
        [6.0, 6.0]
        >>> s.close()
        """
        __tracebackhide__ = True  # a replica's error shows the user's frames, not interdist's
        self._check_usable()
        if not callable(fn):
            raise TypeError(f"run() requires a callable fn, but got {type(fn).__name__}")
        if options is not None and not isinstance(options, RunOptions):
            raise TypeError(f"options must be a tf.distribute.RunOptions, but got {type(options).__name__}")
        args, kwargs = _nest.check_call_args(fn, args, kwargs)  # as TF: ValueError, TypeError
        with self._enter_or_check():
            self._require_cross_replica("run")
            structure = (args, kwargs)
            per_rank = [self._select(r, structure) for r in range(self.num_replicas_in_sync)]
            try:
                results = self._group.execute(fn, per_rank, system=False, what=f"run of {_fn_name(fn)}")
            except (WorkerLostError, ReplicaFrozenError):
                self._inputs_failed(structure)
                raise
            if self._iterators:
                self._inputs_ran(structure)
            originals = [_nest.flatten(self._select(r, structure, keep=True)) for r in range(self.num_replicas_in_sync)]
            out = self._regroup(results, originals)
            self._run_variables.clear()  # variables made in the step now live as long as the notebook holds them
            return out

    def run_steps(self, fn: Callable[..., Any], iterator: Any, steps: int, progress: bool = False) -> Any:
        """Run ``fn(batch)`` for the next ``steps`` batches of ``iterator`` in one call to the replicas.

        The fused form of ``for _ in range(steps): strategy.run(fn, args=(next(iterator),))`` (in the
        spirit of Keras' ``steps_per_execution``): same results, every step's events recorded, one
        notebook-worker round trip. Returns the last step's result; raises ``StopIteration`` when the
        iterator has no batch left. Stops early (after fewer steps) at the end of the data.

        ``progress=True`` shows a ``tqdm.auto`` bar of the steps in the cell (a widget in a notebook,
        text on stderr in a script): the loop then goes to the replicas in chunks of
        ``max(1, steps // 20)`` steps, one tick per chunk, with the same results.

        >>> import interdist as idist, numpy as np
        >>> with idist.MirroredStrategy(["CPU:0", "CPU:1"]) as s:
        ...     it = iter(s.experimental_distribute_dataset(idist.data.Dataset.range(8).batch(2)))
        ...     last = s.run_steps(lambda b: b * 10, it, steps=3)
        ...     [v.tolist() for v in map(np.asarray, s.experimental_local_results(last))]
        [[40], [50]]
        """

        self._check_usable()
        if not isinstance(steps, int) or steps < 1:
            raise ValueError(f"run_steps requires steps >= 1, but got {steps!r}")
        if not progress:
            out, done = self._fused_call(fn, iterator, steps)
            # Uneven ends: some replicas still hold batches. One plain step gives the others
            # empty batches, as TF does; nothing left at all ends the iteration.
            return self.run(fn, args=(next(iterator),)) if done == 0 else out
        from tqdm.auto import tqdm  # only here: progress=False costs no import

        chunk = max(1, steps // 20)
        ran = 0
        last: Any = None
        with tqdm(total=steps, desc=f"run_steps of {_fn_name(fn)}", unit="step") as bar:
            while ran < steps:
                n = min(chunk, steps - ran)
                try:
                    out, done = self._fused_call(fn, iterator, n)
                except StopIteration:
                    if ran == 0:
                        raise
                    break  # the notebook's iterator ran out after the steps already run
                if done == 0:
                    # The end of the data: as in one fused call, the steps already run give the result.
                    if ran == 0:
                        return self.run(fn, args=(next(iterator),))
                    break
                last, ran = out, ran + done
                bar.update(done)
                if done < n:
                    break  # a replica ran out of data: one fused call would have stopped here too
        return last

    def _fused_call(self, fn: Callable[..., Any], iterator: Any, steps: int) -> tuple[Any, int]:
        """One call of ``fused_steps`` on the replicas: the last step's result and how many steps ran."""
        # ``fn`` travels inside the program's arguments; a function whose pickle can be reused goes
        # as those bytes (pickling it anew cost ~1 ms a call: client/fn_pickle.py).
        with pickling_for(self._group.group_id, self._group.world_size):  # another strategy's variable: a copy
            packed = cached_dumps(fn)
        fn_arg: Any = fn if packed is None else PickledFunction(packed)
        remote_key = getattr(iterator, "_key", None)
        ours = isinstance(iterator, DistributedIterator) and iterator._strategy is self
        taken = 0  # batches taken from a notebook-side iterator
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
            taken = len(batches)
            if not batches:
                raise StopIteration("run_steps: the iterator has no batch left")
            per_rank = [
                ((fn_arg, ("shipped", [self._select(r, b) for b in batches]), steps), {})
                for r in range(self.num_replicas_in_sync)
            ]
        __tracebackhide__ = True  # a replica's error shows the user's frames, not interdist's
        try:
            with self._enter_or_check():
                results = self._group.execute(
                    fused_steps, per_rank, system=True, what=f"run_steps of {_fn_name(fn)}", steps=steps
                )
        except BaseException as exc:
            if ours:
                iterator._fused_failed(exc, taken)  # which of its batches the steps used is unknown after a fault
            raise
        done = int(results[0][1].value)
        if ours and remote_key is not None:
            iterator._fused_ran(done)
        if done == 0:
            return None, 0
        out = self._regroup([r[0] for r in results])
        self._run_variables.clear()
        return out, done

    def __repr__(self) -> str:
        return f"<interdist.{type(self).__name__} on {', '.join(self._devices)}>"

    def _repr_html_(self) -> str:
        """A card like Dask's ``Client``: replicas, devices, workers, hosts, health, dashboard.

        Reads only what the notebook holds (the group's lost/busy replicas, the client's cached
        dashboard address): no round trip to a worker.
        """
        e = html.escape
        group = getattr(self, "_group", None)
        addresses = list(getattr(group, "addresses", None) or self._lease.addresses)
        names = list(getattr(self._lease, "names", None) or [])
        lost = dict(getattr(group, "lost", None) or {})
        busy = dict(getattr(group, "busy", None) or {})
        closed = self._closed or bool(getattr(group, "closed", False))
        devices = list(self._devices)
        short = reprs.short_devices(devices)
        hosts = sorted({_host(a) for a in addresses})
        rows = []
        for r, dev in enumerate(short):
            address = addresses[r] if r < len(addresses) else ""
            name = names[r] if r < len(names) else ""
            if closed:
                state = "closed"
            elif r in lost:
                state = "lost"
            elif r in busy:
                state = f"busy (step {busy[r][0]})"
            else:
                state = "ok"
            colour = {"ok": "#2e7d32", "closed": "#777"}.get(state, "#c62828")
            rows.append(
                reprs.row(
                    str(r),
                    f'<span title="{e(devices[r])}">{e(dev)}</span>',
                    f"<code>{e(address)}</code>",
                    e(str(name)),
                    f'<span style="color: {colour}">{e(state)}</span>',
                )
            )
        health = "closed" if closed else "ok" if not (lost or busy) else f"{len(lost)} lost, {len(busy)} busy"
        facts = [
            ("Replicas", e(str(self.num_replicas_in_sync))),
            ("Devices", e(", ".join(short))),
            ("Hosts", e(", ".join(hosts)) + f" ({len(hosts)})"),
            ("Health", e(health)),
        ]
        link = None if closed else self.dashboard_link
        if link:
            pages = [f'<a href="{e(link)}" target="_blank">{e(link)}</a>']
            if getattr(self._lease, "embedded", False) and "interdist.dashboard.pages" in sys.modules:
                from interdist.dashboard.docked import page_url

                # The pages the embedded cluster registered (dashboard/pages.py), by their view names; each
                # with the dashboard's token, as the link (lab/dashboard_auth.py).
                pages += [
                    f'<a href="{e(page_url(link, view) or "")}" target="_blank">interdist {view}</a>'
                    for view in ("status", "timeline", "placement")
                ]
            facts.append(("Dashboard", " &middot; ".join(pages)))
        body = reprs.table([], [reprs.row(f"<strong>{k}</strong>", v) for k, v in facts])
        body += reprs.table(["replica", "device", "worker", "name", "state"], rows)
        return reprs.card(type(self).__name__, f"{len(devices)} replica(s) on {len(hosts)} host(s)", body)


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


def _host(address: str) -> str:
    """``tcp://10.0.0.5:40123`` -> ``10.0.0.5``."""
    rest = address.split("://", 1)[-1]
    return rest.rsplit(":", 1)[0] if ":" in rest else rest


def _fn_name(fn: Any) -> str:
    return str(getattr(fn, "__qualname__", getattr(fn, "__name__", type(fn).__name__)))
