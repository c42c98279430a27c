"""Fitting the cost model's parameters to measured all-reduces (``benchmarks/bench_cost_model.py``).

Every term of an algorithm's cost (``cost_phases.py``) is linear in the parameters, so the fit is a non-negative
least squares on the measured times, weighted by their inverse (relative error). ``cost_model.py`` re-exports it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from interdist.collectives.cost_params import _SHM, PARAMETERS, Params
from interdist.collectives.cost_phases import _cost, phases


@dataclass(frozen=True)
class Measurement:
    """One measured all_reduce: the median seconds of ``algorithm`` on ``nbytes`` per replica."""

    algorithm: str
    nbytes: float
    world_size: int
    hosts: int
    seconds: float


def features(m: Measurement, base: Params) -> np.ndarray:
    """How much each parameter (in ``PARAMETERS`` order) contributes to ``m`` per unit of its value
    (on a machine like ``base``: its ``cores`` and ``shared``)."""
    ph = phases(m.algorithm, m.nbytes, m.world_size, m.hosts, base.shared)
    if any(p.overlap for p in ph):
        raise ValueError(
            f"{m.algorithm}'s cost is not linear in the parameters (it overlaps bytes and additions): "
            "it is predicted with fitted parameters, not fitted"
        )
    unit = base.with_vector([0.0] * len(PARAMETERS))
    return np.array([_cost(unit.with_vector(np.eye(len(PARAMETERS))[k]), ph) for k in range(len(PARAMETERS))])


def nnls(a: np.ndarray, y: np.ndarray, iterations: int = 200) -> np.ndarray:
    """Non-negative least squares, ``argmin |a x - y|`` with ``x >= 0`` (Lawson and Hanson's active set)."""
    k = a.shape[1]
    x = np.zeros(k)
    passive = np.zeros(k, dtype=bool)
    w = a.T @ (y - a @ x)
    tol = 1e-12 * max(1.0, float(np.abs(w).max()) if k else 1.0)
    for _ in range(iterations):
        if passive.all() or not (w[~passive] > tol).any():
            break
        j = int(np.argmax(np.where(passive, -np.inf, w)))
        passive[j] = True
        while True:
            z = np.zeros(k)
            z[passive] = np.linalg.lstsq(a[:, passive], y, rcond=None)[0]
            if (z[passive] > 0).all():
                x = z
                break
            neg = passive & (z <= 0)
            step = np.min(x[neg] / (x[neg] - z[neg]))
            x = x + step * (z - x)
            passive &= x > tol * 1e-6
            x[~passive] = 0.0
        w = a.T @ (y - a @ x)
    return x


def fit(
    measurements: Sequence[Measurement],
    base: Params = _SHM,
    name: str | None = None,
    source: str = "fitted",
    free: Sequence[str] | None = None,
) -> Params:
    """The parameters that best predict ``measurements`` (least relative error, all >= 0).

    Only the parameters named in ``free`` (default: all of ``PARAMETERS``) that the measurements
    involve are fitted; the others (the inter link when all ran on one host) keep ``base``'s
    values. ``base.cores`` and ``base.shared`` are used as they are.
    """
    if not measurements:
        raise ValueError("fit needs at least one measurement")
    unknown = set(free or ()) - set(PARAMETERS)
    if unknown:
        raise ValueError(f"unknown parameters {sorted(unknown)}; known: {', '.join(PARAMETERS)}")
    a = np.array([features(m, base) for m in measurements])
    y = np.array([m.seconds for m in measurements], dtype=np.float64)
    if (y <= 0).any():
        raise ValueError("measured times must be > 0")
    used = np.abs(a).sum(axis=0) > 0
    if free is not None:
        used &= np.array([k in free for k in PARAMETERS])
    fixed = base.vector()
    rest = y - a[:, ~used] @ fixed[~used]
    w = 1.0 / y  # relative error: 0.1 ms and 100 ms points count alike
    x = fixed.copy()
    x[used] = nnls(a[:, used] * w[:, None], rest * w)
    return dataclasses.replace(base.with_vector(x, source), name=name or base.name)
