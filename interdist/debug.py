"""Looking at replicas from the notebook: each copy of a variable, how far they drift apart, and what a
replica prints.

>>> import interdist as idist, numpy as np
>>> with idist.MirroredStrategy(["CPU:0", "CPU:1"]) as s:
...     with s.scope():
...         w = idist.Variable(np.float32(1.0), name="w")
...     idist.debug.replica_values(s, w), idist.debug.replica_divergence(s)["w"].diverged
([array(1., dtype=float32), array(1., dtype=float32)], False)
"""

from __future__ import annotations

import builtins
import contextlib
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from interdist import _context, _gpu, events, protocol
from interdist.replica import faults
from interdist.values import ps_variable


@dataclass(frozen=True)
class Divergence:
    """How far the copies of one variable disagree (0.0 when they are equal), and whether that is a
    divergence: a sync-on-read variable's copies are each replica's own (a metric's count), meant to
    differ and aggregated on read, so they never diverge (as the dashboard shows them: "per replica").

    ``replica_divergence`` gives one per variable.

    >>> from interdist.debug import Divergence
    >>> Divergence("w", max_abs_diff=0.5, copies=2).diverged
    True
    >>> Divergence("count", max_abs_diff=3.0, copies=2, synchronization="ON_READ").diverged
    False
    """

    name: str
    max_abs_diff: float
    copies: int
    synchronization: str = "ON_WRITE"  # the variable's VariableSynchronization name

    @property
    def diverged(self) -> bool:
        """Copies that should be equal and are not."""
        return self.max_abs_diff > 0 and self.synchronization != "ON_READ"


def replica_values(strategy: Any, variable: Any) -> list[np.ndarray]:
    """Every replica's copy of ``variable``, read from its worker now.

    >>> import interdist as idist, numpy as np
    >>> with idist.MirroredStrategy(["CPU:0", "CPU:1"]) as s:
    ...     with s.scope():
    ...         w = idist.Variable([1.0, 2.0])
    ...     idist.debug.replica_values(s, w)
    [array([1., 2.], dtype=float32), array([1., 2.], dtype=float32)]
    """
    return [np.asarray(c) for c in strategy.experimental_local_results(variable)]


def replica_divergence(strategy: Any, variables: Any = None) -> dict[str, Divergence]:
    """For each variable of ``strategy`` (or those given), the largest difference between its copies, and
    whether it diverged (``Divergence.diverged``: never for a sync-on-read variable, whose copies differ by
    design; the dashboard marks the same ones).

    >>> import interdist as idist, numpy as np, warnings
    >>> with idist.MirroredStrategy(["CPU:0", "CPU:1"]) as s, warnings.catch_warnings():
    ...     warnings.simplefilter("ignore")  # the warning that NONE lets copies drift: that is the point here
    ...     with s.scope():
    ...         v = idist.Variable(np.float32(1.0), name="v")   # aggregation NONE: copies may drift
    ...     _ = s.run(lambda: v.assign_add(np.float32(idist.get_replica_context().replica_id_in_sync_group)))
    ...     d = idist.debug.replica_divergence(s)["v"]
    >>> d.max_abs_diff, d.diverged
    (1.0, True)
    """
    if variables is None:
        variables = strategy._live_variables()
    out: dict[str, Divergence] = {}
    for var in variables:
        copies = replica_values(strategy, var)
        ref = copies[0].astype(np.float64)
        diff = max((float(np.max(np.abs(c.astype(np.float64) - ref))) if c.size else 0.0) for c in copies)
        name = var.name.split(":")[0]
        key, k = name, 1
        while key in out:  # TF lets names repeat; keep every variable
            k += 1
            key = f"{name}_{k}"
        sync = getattr(getattr(var, "synchronization", None), "name", "ON_WRITE")
        out[key] = Divergence(name, diff, len(copies), "ON_READ" if sync == "ON_READ" else "ON_WRITE")
    return out


def print(fmt: str, *args: Any, **kwargs: Any) -> None:  # jax.debug.print's name
    """Print ``fmt.format(*args, **kwargs)``, as ``jax.debug.print`` does.

    Inside a replica function the line reaches the cell that ran the step, labelled with the
    replica (as every ``print`` there does): ``[replica 1] loss=0.25``.

    >>> import interdist as idist
    >>> idist.debug.print("loss={loss:.2f}", loss=0.25)
    loss=0.25
    """
    builtins.print(fmt.format(*args, **kwargs))


def log_scalar(name: str, value: Any) -> None:
    """Log one number from inside a replica function: the dashboard draws a line per replica over the
    steps (its "scalars" tab), and ``strategy.events`` and the Chrome trace keep it (a counter track).

    Only the number travels, with the step's reply (and live to an open dashboard), as a
    ``ScalarLogged`` event.

    >>> import interdist as idist, numpy as np
    >>> with idist.MirroredStrategy(["CPU:0", "CPU:1"]) as s:
    ...     def step():
    ...         r = idist.get_replica_context().replica_id_in_sync_group
    ...         idist.debug.log_scalar("loss", np.float32(0.5 + r))
    ...     s.run(step)
    ...     [(e.replica, e.value) for e in s.events.events if e.kind == "scalar-logged"]
    [(0, 0.5), (1, 1.5)]
    """
    if not isinstance(name, str) or not name:
        raise TypeError(f"log_scalar needs a name (a non-empty str), got {name!r}")
    a = np.asarray(_gpu.to_host(value.numpy() if hasattr(value, "numpy") else value))
    if a.size != 1 or a.dtype.kind not in "biuf":
        raise ValueError(f"log_scalar logs one real number, got {a.dtype} of shape {a.shape}")
    replica = getattr(_context.current().strategy, "_replica", None)
    if replica is None:
        raise RuntimeError(
            "idist.debug.log_scalar is called inside a replica function (strategy.run(fn)): "
            "there is no replica to log for here"
        )
    replica.emit(events.ScalarLogged(replica.group_id, replica.step, replica.rank, time.time(), name, float(a)))


def visualize_placement(strategy: Any) -> Any:
    """A picture of where ``strategy``'s state lives, as ``jax.debug.visualize_array_sharding`` draws an
    array's: hosts, their workers, each worker's devices (a replica's, central storage's parameter
    device, a parameter-server task), and on each device a chip per copy (or shard) of each variable,
    coloured by variable; a copy that differs from the others has a red border. A static SVG in a
    notebook (saved with it, shown with no kernel); a text tree in a terminal. The live version is the
    dashboard's "placement" tab.

    >>> import interdist as idist, numpy as np
    >>> with idist.MirroredStrategy(["CPU:0", "CPU:1"]) as s:
    ...     with s.scope():
    ...         v = idist.Variable(np.zeros(2, np.float32), name="v")
    ...     print(repr(idist.debug.visualize_placement(s)).replace(s._lease.addresses[0], "A")
    ...           .replace(s._lease.addresses[1], "B"))
    MirroredStrategy: 2 replicas
    host 127.0.0.1
      worker A
        CPU:0 (replica 0): v
      worker B
        CPU:1 (replica 1): v
    """
    from interdist.dashboard import placement_layout  # Bokeh-free, but the dashboard package loads Bokeh

    title = f"{type(strategy).__name__}: {strategy.num_replicas_in_sync} replicas"
    ps_tasks = getattr(strategy, "_ps_tasks", None)
    if ps_tasks is not None:  # ParameterServerStrategy: no replica group, no events; its handles know
        store = strategy._store
        handles = [v for (st, _), v in sorted(ps_variable._handles.items()) if st == store]
        variables = [
            (v._name, v._shape, v._dtype.name, [(sh.device, sh.start, sh.stop) for sh in v._shards]) for v in handles
        ]
        workers = list(zip(strategy._lease.addresses, strategy._devices, strict=False))
        ps = [(t.address, d) for t, d in zip(ps_tasks, strategy._ps_devices, strict=True)]
        title = f"{type(strategy).__name__}: {len(workers)} worker(s), {len(ps)} ps task(s)"
        return placement_layout.PlacementPicture(placement_layout.from_parameter_servers(workers, ps, variables), title)
    from interdist.dashboard.model import DashboardModel

    model = DashboardModel()
    for r, (address, device) in enumerate(_workers(strategy)):
        model.note_worker(r, address, device)
    model.feed_many(list(strategy.events.events))
    return placement_layout.PlacementPicture(placement_layout.from_model(model), title)


@contextlib.contextmanager
def performance_report(
    filename: str | os.PathLike[str] = "interdist-report.html", strategy: Any = None, title: str | None = None
) -> Iterator[None]:
    """Write a one-file HTML report of what the replicas did inside the ``with`` block, as Dask's
    ``performance_report`` does: the collective timeline and timings, the variables' values per replica,
    the logged scalars and the placement. BokehJS is inline: the file opens anywhere, with no kernel.

    Every strategy whose replicas sent events during the block gets a section (only ``strategy`` when
    given). Its timeline and timings are the block's; its values, placement and run numbers are its state.

    >>> import interdist as idist, numpy as np, os, tempfile
    >>> from pathlib import Path
    >>> path = os.path.join(tempfile.mkdtemp(), "report.html")
    >>> with idist.MirroredStrategy(["CPU:0", "CPU:1"]) as s:
    ...     with idist.performance_report(path):
    ...         _ = s.run(lambda: idist.get_replica_context().all_reduce("sum", np.float32(1)))
    >>> "all_reduce" in Path(path).read_text()
    True
    """
    since = time.time()
    yield
    from interdist.dashboard.report import write_report  # Bokeh: loaded only for a report

    chosen = [strategy] if strategy is not None else list(protocol._client_strategies.values())
    sections = []
    for s in chosen:
        evs = list(getattr(getattr(s, "events", None), "events", ()))
        if evs and max(e.time for e in evs) >= since:
            label = f"{type(s).__name__} ({s.num_replicas_in_sync} replicas, group {evs[0].group})"
            sections.append((label, evs, _workers(s)))
    write_report(filename, sections, since=since, title=title or "interdist performance report")


def _workers(strategy: Any) -> list[tuple[str, str]]:
    """Each replica's (worker address, device), for the placement picture."""
    lease = getattr(strategy, "_lease", None)
    devices = list(getattr(strategy.extended, "worker_devices", ()))
    return list(zip(getattr(lease, "addresses", ()), devices, strict=False))


def inject(
    strategy: Any,
    replica: int | str,
    fault: str,
    at: str = "step",
    seconds: float = 3.0,
    persist: bool = False,
) -> None:
    """Arm one fault on one replica for the strategy's next program: faults on purpose, for teaching and
    for testing what a failure looks like (``interdist/replica/faults.py``).

    Parameters
    ----------
    strategy
        The strategy whose replica fails.
    replica
        The replica's index. On a ``ParameterServerStrategy``: a worker task's index, or ``"worker:i"``
        or ``"ps:i"``.
    fault
        ``"raise"`` (the replica raises ``InjectedFaultError``), ``"slow"`` (it sleeps ``seconds``: slow
        but alive, never reported as failed), ``"freeze"`` (its worker process stops, as under SIGSTOP,
        for ``seconds``: the notebook names it frozen after ``config.settings.frozen_after``), ``"kill"``
        (its worker process dies: ``WorkerLostError``, and an embedded cluster starts it again).
    at
        ``"step"`` (the start of the replica function), ``"collective"`` (before its first collective),
        a collective's name (``"all_reduce"``, ``"all_gather"``, ``"merge_call"``), ``"update"`` (before
        its first variable update in replica context), or ``"checkpoint_save"`` (in the middle of the
        next ``Checkpoint.save``, after its first variable is written). ``"all_reduce"`` is also where
        a ``merge_fn`` reduces: ``optimizer.apply_gradients``, ``strategy.extended.reduce_to`` and
        ``batch_reduce_to``, ``strategy.reduce``. On a ``ParameterServerStrategy``: ``"ps_step"`` (a
        worker: the start of its next step; a ps task: when it next applies a step's updates) or
        ``"checkpoint_save"``.
    seconds
        How long ``"slow"`` sleeps and ``"freeze"`` stops the process.
    persist
        The fault is for the next user call (``strategy.run``, ``run_steps``; for ``"checkpoint_save"``
        the next ``Checkpoint.save``): if that call does not reach ``at``, the fault is disarmed at its
        end with a ``UserWarning``. With ``persist=True`` it stays armed, call after call, until it fires
        (once) or ``disarm(strategy)``. The engine's own programs in between (variables created, values
        assigned from the notebook) never fire or disarm it. On a ``ParameterServerStrategy`` every
        fault waits until its point is reached, as with ``persist=True``: its tasks run steps as the
        coordinator schedules them, so there is no "next call" there.

    Notes
    -----
    The strategy's events record it: ``FaultArmed`` (the notebook's), ``FaultFired`` (the replica's,
    just before the fault acts: a kill or a freeze may keep it from arriving) and ``FaultDisarmed``;
    the dashboard's "faults" tab lists them. Arming a fault replaces the one armed before.

    Examples
    --------
    >>> import interdist as idist, numpy as np
    >>> with idist.MirroredStrategy(["CPU:0", "CPU:1"]) as s:
    ...     idist.debug.inject(s, replica=1, fault="raise", at="all_reduce")
    ...     try:
    ...         s.run(lambda: idist.get_replica_context().all_reduce("SUM", np.float32(1.0)))
    ...     except idist.errors.InjectedFaultError as e:
    ...         caught = (type(e).__name__, e.interdist_replica)
    ...     [(e.kind, e.replica, e.at) for e in s.events.events if e.kind.startswith("fault-")]
    [('fault-armed', 1, 'all_reduce'), ('fault-fired', 1, 'all_reduce')]
    >>> caught
    ('InjectedFaultError', 1)
    """
    if fault not in faults.FAULTS:
        raise ValueError(f"fault must be one of {faults.FAULTS}, got {fault!r}")
    if not isinstance(at, str) or not at:
        raise TypeError(f"at must be a point name such as {faults.POINTS} or a collective's name, got {at!r}")
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not 0 <= seconds <= 3600:
        raise ValueError(f"seconds must be a number of seconds between 0 and 3600, got {seconds!r}")
    if not isinstance(persist, bool):
        raise TypeError(f"persist must be True or False, got {persist!r}")
    if hasattr(strategy, "_inject"):  # ParameterServerStrategy: tasks, not replicas
        strategy._inject(replica, fault, at, float(seconds), persist=persist)
        return
    n = strategy.num_replicas_in_sync
    if isinstance(replica, bool) or not isinstance(replica, int):
        raise TypeError(f"replica must be a replica index (int), got {replica!r}")
    if not 0 <= replica < n:
        raise ValueError(f"replica {replica} is not a replica of this strategy (0..{n - 1})")
    if not hasattr(strategy, "_system"):
        raise TypeError(f"inject needs an interdist strategy with replicas on workers, got {type(strategy).__name__}")
    group = strategy._group
    # ``group.runs``: the notebook's count of user calls, so that a replica names the call it meant ("run #5").
    strategy._system(faults.arm, replica, fault, at, float(seconds), persist, group.runs)

    def checkpoint_fault() -> None:  # Checkpoint.write calls it once, in the middle of its next save
        strategy._system(faults.fire_point, "checkpoint_save")

    strategy._checkpoint_fault = checkpoint_fault if at == "checkpoint_save" else None  # replaces an older one
    armed = events.FaultArmed(group.group_id, group.step, replica, time.time(), fault, at, float(seconds), persist)
    group.emit(armed, urgent=True)


def disarm(strategy: Any) -> None:
    """Drop every fault ``inject`` armed on ``strategy`` and that has not fired (``persist=True`` ones too).

    Each replica that held one records a ``FaultDisarmed`` event.

    >>> import interdist as idist, numpy as np
    >>> with idist.MirroredStrategy(["CPU:0", "CPU:1"]) as s:
    ...     idist.debug.inject(s, replica=0, fault="raise", at="step", persist=True)
    ...     idist.debug.disarm(s)
    ...     [float(x) for x in s.experimental_local_results(s.run(lambda: np.float32(1.0)))]
    [1.0, 1.0]
    """
    if hasattr(strategy, "_disarm"):  # ParameterServerStrategy
        strategy._disarm()
        return
    if not hasattr(strategy, "_system"):
        raise TypeError(f"disarm needs an interdist strategy with replicas on workers, got {type(strategy).__name__}")
    strategy._checkpoint_fault = None
    strategy._system(faults.disarm)
