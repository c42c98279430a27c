"""What a recording tape gives for a read: autograd's box, and the variables that hand it out.

``recording()`` says whether a tape records in this process; ``_autograd()`` imports autograd at the first
tape and makes :class:`Traced`, its ``ArrayBox`` with NumPy's function protocol and TF's conversions, the
box of NumPy arrays; a :class:`Differentiable` (every variable and tensor class) read on a recording tape is
:func:`read`: a box on each tape that watches it. The tape itself: ``tape``. Part of ``interdist.autodiff``,
which re-exports its public names.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, Protocol

import numpy as np

from interdist import _gpu, _nest
from interdist.autodiff import gradients


class _Tape(Protocol):
    """What a read needs of a recording tape (a ``GradientTape``, which this module does not import)."""

    _recording: bool

    def _box(self, var: Any, value: Any) -> Any: ...


class _State(threading.local):
    def __init__(self) -> None:
        self.tapes: list[_Tape] = []  # recording tapes of this thread, outermost first
        self.dispatching: set[Any] = set()  # NumPy functions being handed to autograd


_STATE = _State()
_RECORDING = [0]  # recording tapes in this process: one list read in every variable read
_AG: Any = None  # autograd's pieces, once imported


def recording() -> bool:
    """Whether a tape records in this process (cheap: variable reads ask it first)."""
    return _RECORDING[0] > 0 and bool(_STATE.tapes)


def _autograd() -> Any:
    """Import autograd once and register :class:`Traced` as its box for NumPy arrays and scalars."""
    global _AG
    if _AG is not None:
        return _AG
    import types

    import autograd.numpy as anp
    from autograd.core import VJPNode, add_outgrads
    from autograd.numpy.numpy_boxes import ArrayBox
    from autograd.tracer import Box, getval, isbox, new_box, trace_primitives_map, trace_stack
    from autograd.util import toposort

    ns = types.SimpleNamespace(
        anp=anp,
        VJPNode=VJPNode,
        add_outgrads=add_outgrads,
        getval=getval,
        isbox=isbox,
        new_box=new_box,
        primitives=trace_primitives_map,
        trace_stack=trace_stack,
        toposort=toposort,
        Box=Box,
    )
    methods = dict(_TRACED_METHODS)
    for name in _BINARY:  # an operand that is a variable is read (boxed) first, as NumPy's dispatch would
        methods[name] = _with_plain_operands(getattr(ArrayBox, name))
    methods["__array_ufunc__"] = _with_plain_ufunc_inputs(ArrayBox.__array_ufunc__)
    traced: Any = type("Traced", (ArrayBox,), dict(methods, __slots__=(), __module__=__name__))
    for t in (np.ndarray, float, np.float64, np.float32, np.float16, np.longdouble, complex, np.complex64):
        traced.register(t)
    ns.Traced = traced
    globals()["Traced"] = traced
    ns.TapeNode = _tape_node(VJPNode)
    gradients.install(anp, ns.TapeNode)  # TF's gradients where autograd's differ
    _AG = ns
    return ns


def _tape_node(vjp_node: Any) -> Any:
    """The one node class of every tape: autograd's ``VJPNode``, knowing its tape (``tape``, taken from its
    parents; set on a root by the tape). A node made while its tape is not recording (``stop_recording()``,
    after the tape's block) has no parents: gradients do not flow through it, as TF records nothing there."""

    class TapeNode(vjp_node):  # type: ignore[misc]
        __slots__ = ("tape",)

        def __init__(self, value: Any, fun: Any, args: Any, kwargs: Any, argnums: Any, parents: Any) -> None:
            tape = self.tape = parents[0].tape
            if not tape._recording:
                self.parents, self.vjp = (), _no_vjp  # type: ignore[misc]
                return
            super().__init__(value, fun, args, kwargs, argnums, parents)

    return TapeNode


def _no_vjp(g: Any) -> tuple[()]:
    return ()


# -- the box: autograd's ArrayBox with NumPy's function protocol and TF's conversions -----------------


def _traced_array_function(self: Any, func: Any, types: Any, args: Any, kwargs: Any) -> Any:
    ag = _AG
    # autograd's own NumPy first (its concatenate/stack take boxes inside lists), then its primitives
    module = {"numpy": ag.anp, "numpy.linalg": ag.anp.linalg, "numpy.fft": ag.anp.fft}.get(func.__module__)
    wrapped = getattr(module, func.__name__, None) if module is not None else None
    if wrapped is None:
        wrapped = ag.primitives.get(func)
    if wrapped is None or wrapped is func or func in _STATE.dispatching:
        # (func in dispatching: autograd handed the call back to NumPy, which handed it here again)
        raise NotImplementedError(
            f"{func.__module__}.{func.__name__} has no gradient in autograd, so a GradientTape cannot record it: "
            "write it with NumPy functions autograd knows (see docs/autodiff.md), or take np.asarray(x) "
            "first to leave the tape"
        )
    _STATE.dispatching.add(func)
    try:
        return wrapped(*_plain_args(args), **_plain_args(kwargs))
    finally:
        _STATE.dispatching.discard(func)


_BINARY = [f"__{r}{op}__" for op in ("add", "sub", "mul", "truediv", "pow", "mod", "matmul") for r in ("", "r")] + [
    "__eq__",
    "__ne__",
    "__gt__",
    "__ge__",
    "__lt__",
    "__le__",
]


def _with_plain_operands(method: Any) -> Any:
    def op(self: Any, other: Any) -> Any:
        return method(self, read(other) if isinstance(other, Differentiable) else other)

    op.__name__ = method.__name__
    return op


def _with_plain_ufunc_inputs(method: Any) -> Any:
    def array_ufunc(self: Any, ufunc: Any, how: str, *inputs: Any, **kwargs: Any) -> Any:
        conv = tuple(read(x) if isinstance(x, Differentiable) else x for x in inputs)
        result = method(self, ufunc, how, *conv, **kwargs)
        if result is NotImplemented and not any(_defers(x) for x in conv):
            # no other operand can take it: say which ufunc, not NumPy's "all returned NotImplemented"
            name = f"numpy.{ufunc.__name__}" + ("" if how == "__call__" else f".{how}")
            raise NotImplementedError(
                f"{name}{' with out=' if 'out' in kwargs else ''} cannot be recorded by a GradientTape (autograd has "
                "no gradient for it): take np.asarray(x) first to leave the tape (see docs/autodiff.md)"
            )
        return result

    return array_ufunc


def _defers(x: Any) -> bool:
    """Whether ``x`` is an operand of another kind with its own ``__array_ufunc__`` (it may take the ufunc)."""
    hook = getattr(type(x), "__array_ufunc__", None)
    return hook not in (None, np.ndarray.__array_ufunc__) and not is_traced(x)


def _traced_array(self: Any, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
    a = np.asarray(_AG.getval(self))
    if dtype is not None and np.dtype(dtype) != a.dtype:
        return a.astype(dtype)
    return np.array(a, copy=True) if copy else a


def _scalar_or_array(value: Any) -> Any:
    a = np.asarray(value)
    return a.item() if a.ndim == 0 else a


def _traced_repr(self: Any) -> str:
    return f"<Traced {np.asarray(_AG.getval(self))!r}>"


_TRACED_METHODS: dict[str, Any] = {
    "__array_function__": _traced_array_function,
    "__array__": _traced_array,
    "numpy": lambda self: np.array(_AG.getval(self), copy=True),
    "__float__": lambda self: float(_AG.getval(self)),
    "__int__": lambda self: int(_AG.getval(self)),
    "__bool__": lambda self: bool(_AG.getval(self)),
    "__format__": lambda self, spec: format(_scalar_or_array(_AG.getval(self)), spec),
    "__repr__": _traced_repr,
    "__str__": lambda self: str(np.asarray(_AG.getval(self))),
    "device": property(lambda self: ""),
}


class Traced:
    """A value recorded by a tape (replaced by autograd's box class at the first tape; see the module).

    What NumPy code on a watched variable gives inside a recording tape; ``np.asarray`` of it is its
    value, detached.

    Examples
    --------
    >>> import numpy as np, interdist as idist
    >>> w = idist.Variable(np.float32(3.0))
    >>> with idist.GradientTape():
    ...     y = w * 2.0
    >>> isinstance(y, idist.autodiff.Traced), y, np.asarray(y)
    (True, <Traced array(6., dtype=float32)>, array(6., dtype=float32))
    """


def is_traced(x: Any) -> bool:
    return _AG is not None and isinstance(x, _AG.Box)


def stop_gradient(x: Any) -> Any:
    """``tf.stop_gradient``: the value, with no path back to the variables it came from.

    Examples
    --------
    >>> import numpy as np, interdist as idist
    >>> w = idist.Variable(np.float32(3.0))
    >>> with idist.GradientTape() as tape:
    ...     y = idist.stop_gradient(w * w) + w  # only the last w carries a gradient
    >>> float(y), float(tape.gradient(y, w))
    (12.0, 1.0)
    """
    return _AG.getval(x) if is_traced(x) else x


def detach(structure: Any) -> Any:
    """A structure with every traced leaf replaced by its value (what leaves a replica function)."""
    if _AG is None or not any(isinstance(x, _AG.Box) for x in _nest.flatten(structure)):
        return structure
    return _nest.map_structure(lambda x: np.asarray(_AG.getval(x)) if isinstance(x, _AG.Box) else x, structure)


# -- variables on a tape --------------------------------------------------------------------------------


class Differentiable:
    """Mixed into every variable and tensor class: NumPy functions on one of them read it as the tape
    sees it (a box while a tape watches it, its value otherwise). Subclasses give ``_tape_value()``,
    the plain value a tape boxes, and ``_tape_key()``, one key for every object standing for the
    same variable in this process.

    Examples
    --------
    >>> import numpy as np, interdist as idist
    >>> w = idist.Variable(np.float32(2.0))
    >>> isinstance(w, idist.autodiff.Differentiable), isinstance(idist.Tensor(1.0), idist.autodiff.Differentiable)
    (True, True)
    >>> with idist.GradientTape() as tape:
    ...     y = np.square(w)  # a NumPy function on a variable: recorded
    >>> float(tape.gradient(y, w))
    4.0
    """

    __slots__ = ()
    _tape_auto_watch = True  # variables are watched when read; tensors only through watch()

    def _tape_value(self) -> Any:
        return np.asarray(self)

    def _tape_key(self) -> Any:
        return id(self)

    def _tape_parts(self) -> list[Any] | None:
        """The parts a tape watches one by one (a sharded variable's shards, read as their concatenation
        along axis 0, as TF takes gradients per shard); None for a variable watched whole."""
        return None

    def __array_function__(self, func: Any, types: Any, args: Any, kwargs: Any) -> Any:
        if func in _SHAPE_ONLY and args and args[0] is self and not kwargs and len(args) == 1:
            return _SHAPE_ONLY[func](tuple(self.shape))  # no read for a shape
        return func(*_plain_args(args), **_plain_args(kwargs))


# NumPy functions of a variable's shape alone: answered from its ``shape``, never by reading its value
# (a read may cross the network, or raise for a sync-on-read variable with aggregation NONE).
_SHAPE_ONLY: dict[Any, Callable[[tuple[int, ...]], Any]] = {
    np.shape: lambda s: s,
    np.ndim: len,
    np.size: lambda s: int(np.prod(s, dtype=np.int64)),
}


def _plain_args(x: Any) -> Any:
    """Arguments with every Differentiable read: boxed on a recording tape, a NumPy array otherwise."""
    if isinstance(x, Differentiable):
        return read(x) if recording() else np.asarray(x)
    if isinstance(x, (list, tuple)):
        return type(x)(_plain_args(v) for v in x) if type(x) in (list, tuple) else x
    if isinstance(x, dict):
        return {k: _plain_args(v) for k, v in x.items()}
    return x


def apply_ufunc(ufunc: Any, method: str, inputs: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """A ufunc on variables while a tape records (called from their ``__array_ufunc__``)."""
    conv = tuple(read(x) if isinstance(x, Differentiable) else x for x in inputs)
    return getattr(ufunc, method)(*conv, **kwargs)


def read(var: Any, value: Any = None) -> Any:
    """``var`` as the recording tapes see it: its value, boxed once per tape that watches it."""
    if not recording():
        return var._tape_value() if value is None else value
    parts = var._tape_parts()
    if parts is not None:
        return np.concatenate([read(part) for part in parts], axis=0)
    if value is None:
        value = var._tape_value()
    for tape in _STATE.tapes:
        if tape._recording:
            value = tape._box(var, value)
    return value


def _floating(value: Any) -> bool:
    kind = np.asarray(_AG.getval(value)).dtype.kind if not _gpu.is_cupy(value) else value.dtype.kind
    return kind in "fc"
