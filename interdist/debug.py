"""Looking at replicas from the notebook: each copy of a variable, and how far they drift apart."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np


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

    >>> import interdist as idist, numpy as np
    >>> with idist.MirroredStrategy(["CPU:0", "CPU:1"]) as s:
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
