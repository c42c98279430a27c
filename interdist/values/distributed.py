"""``DistributedValues``: one value per replica, held as handles in the notebook."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, cast

import numpy as np
from numpy.lib.mixins import NDArrayOperatorsMixin

from interdist.values import reprs


class DistributedValues:
    """Base class for representing distributed values (one component per replica).

    Use ``strategy.experimental_local_results(v)`` to get the components.

    Examples
    --------
    >>> import interdist as idist, numpy as np
    >>> with idist.MirroredStrategy(["CPU:0", "CPU:1"]) as s:
    ...     v = s.run(lambda: np.float32(idist.get_replica_context().replica_id_in_sync_group))
    ...     isinstance(v, idist.DistributedValues), [float(c) for c in s.experimental_local_results(v)]
    (True, [0.0, 1.0])
    """

    def __init__(self, values: Sequence[Any], strategy: Any = None) -> None:
        if not values:
            raise ValueError("DistributedValues requires at least one component value")
        self._values = tuple(values)
        self._strategy = strategy

    @property
    def values(self) -> tuple[Any, ...]:
        return self._values

    @property
    def _primary(self) -> Any:
        return self._values[0]

    @property
    def _devices(self) -> tuple[str, ...]:
        return tuple(getattr(v, "device", "") for v in self._values)

    def _component(self, replica_id: int) -> Any:
        return self._values[replica_id]

    def numpy(self) -> np.ndarray:
        """All components stacked on a new leading axis (replica-major)."""
        return np.asarray(self)

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        # Stacking is interdist's reading of "a value with one row per replica";
        # TF refuses to convert a PerReplica to one tensor.
        parts = [np.asarray(v) for v in self._values]
        if len({p.shape for p in parts}) > 1:
            raise ValueError(
                f"{type(self).__name__} components have different shapes {[p.shape for p in parts]}; "
                "use strategy.experimental_local_results() to read them one by one"
            )
        out = np.stack(parts)
        return out.astype(dtype) if dtype is not None else out

    def __repr__(self) -> str:
        body = ",\n".join(f"  {i}: {v!r}" for i, v in enumerate(self._values))
        return f"{type(self).__name__}:{{\n{body}\n}}"

    __str__ = __repr__

    def _repr_html_(self) -> str:
        # Small components are read (as the text repr does); large ones show shape and dtype only.
        return reprs.values_html(self, self._values, mirrored=isinstance(self, Mirrored))


class PerReplica(DistributedValues):
    """Holds a map from replica to unsynchronized values.

    What ``strategy.run`` returns where the replicas' results may differ, and what a distributed
    dataset gives per step; ``strategy.reduce`` combines it into one value.

    Examples
    --------
    >>> import interdist as idist, numpy as np
    >>> with idist.MirroredStrategy(["CPU:0", "CPU:1"]) as s:
    ...     per_replica = s.run(lambda: np.float32(idist.get_replica_context().replica_id_in_sync_group + 1))
    ...     total = s.reduce("SUM", per_replica, axis=None)
    >>> per_replica
    PerReplica:{
      0: <interdist.Tensor: shape=(), dtype=float32, numpy=1.0>,
      1: <interdist.Tensor: shape=(), dtype=float32, numpy=2.0>
    }
    >>> float(total)
    3.0
    """


class Mirrored(DistributedValues, NDArrayOperatorsMixin):
    """Holds a map from replica to values which are kept in sync.

    In the notebook it reads as its first (primary) component.

    Examples
    --------
    >>> import interdist as idist, numpy as np
    >>> with idist.MirroredStrategy(["CPU:0", "CPU:1"]) as s:
    ...     with s.scope():
    ...         v = idist.Variable([1.0, 2.0])
    ...     m = v.assign([3.0, 4.0])  # the copies right after the assign
    >>> m
    Mirrored:{
      0: <interdist.Tensor: shape=(2,), dtype=float32, numpy=[3., 4.]>,
      1: <interdist.Tensor: shape=(2,), dtype=float32, numpy=[3., 4.]>
    }
    >>> m.numpy(), m + 1
    (array([3., 4.], dtype=float32), array([4., 5.], dtype=float32))
    """

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        a = np.asarray(self._primary)
        return a.astype(dtype) if dtype is not None else a

    def numpy(self) -> np.ndarray:
        return np.array(self._primary)

    def __array_ufunc__(self, ufunc: Any, method: str, *inputs: Any, **kwargs: Any) -> Any:
        conv = tuple(np.asarray(x) if isinstance(x, Mirrored) else x for x in inputs)
        return getattr(ufunc, method)(*conv, **kwargs)

    @property
    def device(self) -> str:
        return str(getattr(self._primary, "device", ""))

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(np.shape(np.asarray(self._primary)))

    @property
    def dtype(self) -> np.dtype[Any]:
        return np.asarray(self._primary).dtype


def regroup(per_replica: Sequence[Any], wrap: Callable[[list[Any]], Any]) -> Any:
    """One structure per replica -> one structure whose leaves are ``wrap([leaf of each replica])``.

    TF's ``distribute_utils.regroup`` (``always_wrap``), what ``experimental_distribute_values_from_function``
    gives: lists, tuples (namedtuples) and dicts are walked into, following replica 0's structure;
    a leaf of replica 0 takes the other replicas' values as they are (even nests). The replicas'
    structures must agree where replica 0's nests: TF asserts it (``AssertionError``).
    """
    v0 = per_replica[0]
    if isinstance(v0, (list, tuple)):
        for v in per_replica[1:]:
            if type(v) is not type(v0) and not (isinstance(v0, list) and isinstance(v, list)):
                raise AssertionError(
                    f"the replicas' values have different structures: replica 0 gave a {type(v0).__name__}, "
                    f"another a {type(v).__name__} (v[0]: {v0!r}, v[i]: {v!r})"
                )
            if len(v) != len(v0):
                raise AssertionError(
                    f"the replicas' values have different structures: len(v) == {len(v)}, len(v0) == {len(v0)}, "
                    f"v: {v!r}, v0: {v0!r}"
                )
        items = [regroup([v[i] for v in per_replica], wrap) for i in range(len(v0))]
        if isinstance(v0, list):
            return items
        return type(v0)(*items) if hasattr(type(v0), "_fields") else type(v0)(items)
    if isinstance(v0, Mapping):
        for v in per_replica[1:]:
            if not isinstance(v, Mapping):
                raise AssertionError(f"the replicas' values have different structures: v[0]: {v0!r}  v[i]: {v!r}")
            if set(v.keys()) != set(v0.keys()):
                raise AssertionError(
                    f"the replicas' values have different keys: v[0].keys: {set(v0.keys())}  v[i].keys: {set(v.keys())}"
                )
        return cast(Any, type(v0))({k: regroup([v[k] for v in per_replica], wrap) for k in v0})
    return wrap(list(per_replica))
