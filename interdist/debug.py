"""Looking at replicas from the notebook: each copy of a variable, how far they drift apart, and what a
replica prints."""

from __future__ import annotations

import builtins
from dataclasses import dataclass
from typing import Any

import numpy as np

from interdist.replica import faults


@dataclass(frozen=True)
class Divergence:
    """How far the copies of one variable disagree (0.0 when they are equal)."""

    name: str
    max_abs_diff: float
    copies: int


def replica_values(strategy: Any, variable: Any) -> list[np.ndarray]:
    """Every replica's copy of ``variable``, read from its worker now."""
    return [np.asarray(c) for c in strategy.experimental_local_results(variable)]


def replica_divergence(strategy: Any, variables: Any = None) -> dict[str, Divergence]:
    """For each variable of ``strategy`` (or those given), the largest difference between its copies.

    >>> import interdist as idist, numpy as np, warnings
    >>> with idist.MirroredStrategy(["CPU:0", "CPU:1"]) as s, warnings.catch_warnings():
    ...     warnings.simplefilter("ignore")  # the warning that NONE lets copies drift: that is the point here
    ...     with s.scope():
    ...         v = idist.Variable(np.float32(1.0), name="v")   # aggregation NONE: copies may drift
    ...     _ = s.run(lambda: v.assign_add(np.float32(idist.get_replica_context().replica_id_in_sync_group)))
    ...     idist.debug.replica_divergence(s)["v"].max_abs_diff
    1.0
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
        out[key] = Divergence(name, diff, len(copies))
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


def inject(strategy: Any, replica: int, fault: str, at: str = "step", seconds: float = 3.0) -> None:
    """Arm one fault on one replica for the strategy's next program: faults on purpose, for teaching and
    for testing what a failure looks like (``interdist/replica/faults.py``).

    ``fault``: ``"raise"`` (the replica raises ``InjectedFaultError``), ``"slow"`` (it sleeps ``seconds``:
    slow but alive, never reported as failed), ``"freeze"`` (its worker process stops, as under
    SIGSTOP, for ``seconds``: the notebook names it frozen after ``config.settings.frozen_after``),
    ``"kill"`` (its worker process dies: ``WorkerLostError``, and an embedded cluster starts it again).
    ``at``: ``"step"`` (the start of the replica function), ``"collective"`` (before its first
    collective), a collective's name (``"all_reduce"``, ``"all_gather"``, ``"merge_call"``), or
    ``"update"`` (before its first variable update in replica context).

    >>> import interdist as idist, numpy as np
    >>> with idist.MirroredStrategy(["CPU:0", "CPU:1"]) as s:
    ...     idist.debug.inject(s, replica=1, fault="raise", at="all_reduce")
    ...     try:
    ...         s.run(lambda: idist.get_replica_context().all_reduce("SUM", np.float32(1.0)))
    ...     except idist.errors.InjectedFaultError as e:
    ...         caught = (type(e).__name__, e.interdist_replica)
    >>> caught
    ('InjectedFaultError', 1)
    """
    if fault not in faults.FAULTS:
        raise ValueError(f"fault must be one of {faults.FAULTS}, got {fault!r}")
    if not isinstance(at, str) or not at:
        raise TypeError(f"at must be a point name such as {faults.POINTS} or a collective's name, got {at!r}")
    n = strategy.num_replicas_in_sync
    if isinstance(replica, bool) or not isinstance(replica, int):
        raise TypeError(f"replica must be a replica index (int), got {replica!r}")
    if not 0 <= replica < n:
        raise ValueError(f"replica {replica} is not a replica of this strategy (0..{n - 1})")
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not 0 <= seconds <= 3600:
        raise ValueError(f"seconds must be a number of seconds between 0 and 3600, got {seconds!r}")
    if not hasattr(strategy, "_system"):
        raise TypeError(f"inject needs an interdist strategy with replicas on workers, got {type(strategy).__name__}")
    strategy._system(faults.arm, replica, fault, at, float(seconds))
