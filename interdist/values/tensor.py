"""Array values handed to the notebook: local ``Tensor`` and worker-held ``RemoteValue``.

Both behave like a read-only NumPy array (``np.asarray(v)``, ``v.numpy()``,
operators and ufuncs give NumPy results) and carry the TF ``device`` string.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from typing import Any, cast

import numpy as np
from numpy.lib.mixins import NDArrayOperatorsMixin

from interdist import autodiff
from interdist._gpu import to_host
from interdist.autodiff import Differentiable
from interdist.values.reprs import NOT_READ as _NOT_READ


def _format_numpy(a: np.ndarray) -> str:
    return np.array2string(a, separator=", ", threshold=20) if a.ndim else repr(a.item())


class ArrayValue(Differentiable, NDArrayOperatorsMixin):
    """Common behaviour of values that stand for one array on one device."""

    __array_priority__ = 100
    _tape_auto_watch = False  # a tensor is recorded only once watched (GradientTape.watch)

    def _get(self) -> Any:  # the value (an ndarray, or a Python object that is not numeric)
        raise NotImplementedError  # pragma: no cover - abstract

    @property
    def device(self) -> str:
        raise NotImplementedError  # pragma: no cover - abstract

    def numpy(self) -> Any:
        """The value as a NumPy array (a copy the caller may change)."""
        v = self._get()
        return np.array(v) if isinstance(v, np.ndarray) else v

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        a = np.asarray(self._get())
        if dtype is not None:
            a = a.astype(dtype)
        return a.copy() if copy else a

    def __array_ufunc__(self, ufunc: Any, method: str, *inputs: Any, **kwargs: Any) -> Any:
        if autodiff.recording():  # on a GradientTape: the read is recorded
            return autodiff.apply_ufunc(ufunc, method, inputs, kwargs)
        conv = tuple(np.asarray(x) if isinstance(x, ArrayValue) else x for x in inputs)
        if "out" in kwargs:
            kwargs["out"] = tuple(np.asarray(x) if isinstance(x, ArrayValue) else x for x in kwargs["out"])
        return getattr(ufunc, method)(*conv, **kwargs)

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(np.shape(self._get()))

    @property
    def dtype(self) -> np.dtype[Any]:
        return np.asarray(self._get()).dtype

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("Scalar tensor has no `len()`")
        return self.shape[0]

    def __iter__(self) -> Iterator[Any]:
        return iter(np.asarray(self._get()))

    def __getitem__(self, item: Any) -> Any:
        if autodiff.recording():
            return autodiff.read(self)[item]
        return np.asarray(self._get())[item]

    def __float__(self) -> float:
        return float(np.asarray(self._get()))

    def __int__(self) -> int:
        return int(np.asarray(self._get()))

    def __index__(self) -> int:
        return int(np.asarray(self._get()).__index__())

    def __bool__(self) -> bool:
        return bool(np.asarray(self._get()))

    def __hash__(self) -> int:
        return id(self)

    def _peek(self, limit: int) -> tuple[tuple[int, ...] | None, str | None, Any]:
        """(shape, dtype, value) for a repr (``values/reprs.py``); the value is held here, so read it."""
        v = self._get()
        if isinstance(v, np.ndarray) or np.isscalar(v):
            a = np.asarray(v)
            return a.shape, a.dtype.name, a
        return None, None, v

    def _repr_value(self) -> str:
        v = self._get()
        if isinstance(v, np.ndarray) or np.isscalar(v):
            a = np.asarray(v)
            return f"shape={a.shape}, dtype={a.dtype.name}, numpy={_format_numpy(a)}"
        return f"value={v!r}"

    def __repr__(self) -> str:
        return f"<interdist.Tensor: {self._repr_value()}>"


class Tensor(ArrayValue):
    """A value held in the notebook's process, e.g. the result of ``Strategy.reduce``.

    >>> t = Tensor(np.int32(1))
    >>> t
    <interdist.Tensor: shape=(), dtype=int32, numpy=1>
    >>> int(t + 1), t.device
    (2, '/job:localhost/replica:0/task:0/device:CPU:0')
    """

    def __init__(self, value: Any, device: str = "/job:localhost/replica:0/task:0/device:CPU:0") -> None:
        value = to_host(value)  # a CuPy array (a GPU replica's value) is copied to the notebook's host
        if isinstance(value, ArrayValue) or (hasattr(value, "__array__") and not isinstance(value, np.ndarray)):
            value = np.asarray(value)
        self._value = value if isinstance(value, np.ndarray) or not _numeric(value) else np.asarray(value)
        self._device = device

    def _get(self) -> Any:
        return self._value

    @property
    def device(self) -> str:
        return self._device


def _numeric(v: Any) -> bool:
    return isinstance(v, (int, float, complex, bool, np.generic))


class RemoteValue(ArrayValue):
    """A handle to a value that lives in a replica's worker; fetched on demand, then cached.

    Small values come back with the reply of ``run`` and need no fetch.

    Examples
    --------
    A result larger than ``inline_bytes`` (4 KiB) stays on its worker until it is read:

    >>> import interdist as idist, numpy as np
    >>> with idist.MirroredStrategy(["CPU:0", "CPU:1"]) as s:
    ...     big = s.run(lambda: np.ones(2048, np.float32))
    ...     r = s.experimental_local_results(big)[1]
    ...     type(r).__name__, r.device, r.shape, float(np.asarray(r).sum())
    ('RemoteValue', '/job:localhost/replica:0/task:0/device:CPU:1', (2048,), 2048.0)
    """

    def __init__(
        self,
        key: str,
        rank: int,
        device: str,
        meta: dict[str, Any],
        fetch: Callable[[int, str], Any],
        owner: Any = None,
    ) -> None:
        self._key = key
        self._rank = rank
        self._device = device
        self._meta = meta
        self._fetch = fetch
        self._owner = owner  # the replica group that holds the value
        self._cached: Any = meta.get("value", _MISSING)

    def _get(self) -> Any:
        if self._cached is _MISSING:
            self._cached = to_host(self._fetch(self._rank, self._key))  # GPU replicas' values: NumPy here
        return self._cached

    @property
    def device(self) -> str:
        return self._device

    @property
    def shape(self) -> tuple[int, ...]:
        if "shape" in self._meta:
            return tuple(self._meta["shape"])
        return super().shape

    @property
    def dtype(self) -> np.dtype[Any]:
        if "dtype" in self._meta:
            return cast("np.dtype[Any]", np.dtype(self._meta["dtype"]))  # np.dtype(Any) is typed Any
        return super().dtype

    @property
    def is_fetched(self) -> bool:
        return self._cached is not _MISSING

    def _peek(self, limit: int) -> tuple[tuple[int, ...] | None, str | None, Any]:
        # Fetched only when small: a repr never moves a large array.
        if self.is_fetched:
            return super()._peek(limit)
        shape = self._meta.get("shape")
        if shape is None:
            return None, None, _NOT_READ
        shape = tuple(shape)
        if math.prod(shape) <= limit:
            return super()._peek(limit)
        return shape, str(np.dtype(self._meta["dtype"]).name), _NOT_READ


class _Missing:
    def __repr__(self) -> str:
        return "<not fetched>"


_MISSING = _Missing()
