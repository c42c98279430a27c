"""``GradientTape``: TF's tape over the user's NumPy code, recorded by autograd.

Inside ``with idist.GradientTape() as tape:`` every read of a trainable variable (an operator, a
ufunc, a NumPy function, ``v.value()``) gives an autograd box instead of an array, so the user's
NumPy code (``x @ w + b``, ``np.exp``, ``np.mean``...) is recorded as it runs; ``tape.gradient(loss,
variables)`` walks the record backwards. The choice of autograd and its figures: docs/autodiff.md.

How the pieces fit:

- a variable class takes :class:`Differentiable` among its bases and asks :func:`recording` at the top
  of ``__array_ufunc__``/``value()``; NumPy functions reach ``Differentiable.__array_function__``;
- a read inside a recording tape is :func:`read`: a new box on each tape that watches the variable,
  all of one variable's boxes sharing one root node (its gradient collects there);
- boxes are :class:`Traced` (autograd's ``ArrayBox`` registered for NumPy arrays, with NumPy's function
  protocol added, so ``np.mean(box)`` is autograd's ``mean``), and ``np.asarray(box)`` is the value,
  detached, as TF's ``.numpy()``;
- every node a tape creates is its own ``VJPNode`` subclass, and one created while the tape is not
  recording (``stop_recording()``, after ``__exit__``) has no parents: gradients do not flow through it,
  as TF records nothing there.

Core layer: NumPy and, imported at the first tape, autograd (a pure-Python package, ~35 ms, ~9 MB).
A GPU replica's copies are CuPy arrays, which autograd cannot differentiate: reading one on a tape
raises ``NotImplementedError`` saying so (docs/autodiff.md).

Examples
--------
>>> import numpy as np, interdist as idist
>>> w = idist.Variable(np.float32(2.0))
>>> with idist.autodiff.GradientTape() as tape:
...     loss = np.mean((w * np.array([1.0, 2.0], np.float32) - 1.0) ** 2)
>>> float(loss), float(tape.gradient(loss, w))
(5.0, 7.0)
"""

from __future__ import annotations

import enum
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

from interdist import _gpu, _nest

__all__ = ["Differentiable", "GradientTape", "Traced", "UnconnectedGradients", "stop_gradient", "value_and_grad"]


class UnconnectedGradients(enum.Enum):
    """What ``gradient`` gives for a source the target does not depend on (TF's enum).

    ``NONE`` (the default) gives ``None``, ``ZERO`` zeros of the source's shape and dtype.

    Examples
    --------
    >>> import numpy as np, interdist as idist
    >>> w, unused = idist.Variable(np.float32(3.0)), idist.Variable(np.float32(1.0))
    >>> with idist.GradientTape(persistent=True) as tape:
    ...     y = w * 2.0
    >>> tape.gradient(y, unused), tape.gradient(y, unused, unconnected_gradients=idist.UnconnectedGradients.ZERO)
    (None, array(0., dtype=float32))
    """

    NONE = "none"
    ZERO = "zero"


class _State(threading.local):
    def __init__(self) -> None:
        self.tapes: list[GradientTape] = []  # recording tapes of this thread, outermost first
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
    _tf_gradients(anp)
    _AG = ns
    return ns


def _tf_gradients(anp: Any) -> None:
    """TF's gradients where autograd's differ: at a tie, ``maximum``/``minimum`` give the whole gradient to
    their first argument (TF's ``_MaximumMinimumGrad``), where autograd splits it in halves; ``mean``'s
    gradient keeps the input's dtype (autograd divides by a NumPy int64, which makes float32 float64)."""
    from autograd.extend import defvjp
    from autograd.numpy.numpy_vjps import repeat_to_match_shape, unbroadcast_f

    def mean_vjp(ans: Any, x: Any, axis: Any = None, keepdims: bool = False, **kwargs: Any) -> Any:
        shape, dtype = anp.shape(x), anp.result_type(x)

        def vjp(g: Any) -> Any:
            repeated, reps = repeat_to_match_shape(g, shape, dtype, axis, keepdims)
            return repeated / (dtype.type(reps) if dtype.kind in "fc" else reps)

        return vjp

    from autograd.numpy import numpy_wrapper

    defvjp(getattr(numpy_wrapper, "_primitive_mean", anp.mean), mean_vjp)  # anp.mean wraps it since 1.7

    for fn, first in ((anp.maximum, np.greater_equal), (anp.minimum, np.less_equal)):
        defvjp(
            fn,
            lambda ans, x, y, first=first: unbroadcast_f(x, lambda g: g * first(x, y)),
            lambda ans, x, y, first=first: unbroadcast_f(y, lambda g: g * ~first(x, y)),
        )


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
        return method(self, ufunc, how, *conv, **kwargs)

    return array_ufunc


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


class GradientTape:
    """Record operations on variables for automatic differentiation (``tf.GradientTape``).

    >>> import numpy as np, interdist as idist
    >>> w = idist.Variable(np.float32(3.0))
    >>> with idist.GradientTape() as tape:
    ...     loss = w * w
    >>> float(tape.gradient(loss, w))
    6.0
    """

    def __init__(self, persistent: bool = False, watch_accessed_variables: bool = True) -> None:
        self._persistent = bool(persistent)
        self._watch_accessed_variables = bool(watch_accessed_variables)
        self._recording = False
        self._entered = False
        self._used = False
        self._trace_cm: Any = None
        self._trace: Any = None
        self._node_class: Any = None
        self._roots: dict[Any, tuple[Any, Any]] = {}  # key -> (variable or tensor, root node)
        self._explicit: set[Any] = set()  # keys watched with watch()

    # -- context ---------------------------------------------------------------------------------------
    def __enter__(self) -> GradientTape:
        if self._entered:
            raise ValueError("Tape is still recording, This can happen if you try to re-enter an already-active tape.")
        ag = _autograd()
        tape = self

        class _Node(ag.VJPNode):  # type: ignore[misc, name-defined]
            def __init__(self, value: Any, fun: Any, args: Any, kwargs: Any, argnums: Any, parents: Any) -> None:
                if not tape._recording:  # stop_recording(), or after the tape's block: not recorded (as TF)
                    self.parents, self.vjp = (), _no_vjp
                    return
                super().__init__(value, fun, args, kwargs, argnums, parents)

        self._node_class = _Node
        self._trace_cm = ag.trace_stack.new_trace()
        self._trace = self._trace_cm.__enter__()
        self._entered = True
        self._start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop()
        self._trace_cm.__exit__(None, None, None)

    def _start(self) -> None:
        self._recording = True
        _STATE.tapes.append(self)
        _RECORDING[0] += 1

    def _stop(self) -> None:
        if self._recording:
            self._recording = False
            _STATE.tapes.remove(self)
            _RECORDING[0] -= 1

    @contextmanager
    def stop_recording(self) -> Iterator[None]:
        """Operations inside are not recorded (``tf.GradientTape.stop_recording``)."""
        if not self._recording:
            raise ValueError("Tape must be recording when stop_recording is called.")
        self._stop()
        try:
            yield
        finally:
            self._start()

    def reset(self) -> None:
        """Forget everything recorded so far (``tf.GradientTape.reset``)."""
        self._roots.clear()
        self._explicit.clear()
        self._used = False

    # -- watching --------------------------------------------------------------------------------------
    def watch(self, tensor: Any) -> None:
        """Watch variables or interdist tensors (a nest of them): they are recorded when read."""
        for t in _nest.flatten(tensor):
            if is_traced(t):
                continue  # already on a tape: its operations are recorded
            if not isinstance(t, Differentiable):
                raise TypeError(
                    f"GradientTape.watch needs a variable or an interdist Tensor, got {type(t).__name__}: a "
                    "NumPy array is not an object a tape can follow; make it idist.Tensor(x) (or a Variable) "
                    "and compute with that"
                )
            self._explicit.add(t._tape_key())

    def watched_variables(self) -> tuple[Any, ...]:
        """The variables read (and watched) on this tape, in the order first read."""
        return tuple(v for v, _ in self._roots.values() if v._tape_auto_watch)

    def _watches(self, var: Any) -> bool:
        key = var._tape_key()
        if key in self._explicit:
            return True
        return self._watch_accessed_variables and var._tape_auto_watch and bool(getattr(var, "trainable", False))

    def _box(self, var: Any, value: Any) -> Any:
        if not self._watches(var):
            return value
        if _gpu.is_cupy(value):
            raise NotImplementedError(
                f"GradientTape on a GPU replica: {getattr(var, 'name', 'this variable')} is a CuPy array, and "
                "autograd (interdist's autodiff) differentiates NumPy arrays only; run the training step on CPU "
                "replicas, or write its gradients by hand (docs/autodiff.md)"
            )
        if not _floating(value):
            return value  # TF watches floating-point values only; an integer read has no gradient
        key = var._tape_key()
        entry = self._roots.get(key)
        if entry is None:
            root = self._node_class.new_root()
            self._roots[key] = entry = (var, root)
        return _AG.new_box(value, self._trace, entry[1])

    # -- gradients -------------------------------------------------------------------------------------
    def gradient(
        self,
        target: Any,
        sources: Any,
        output_gradients: Any = None,
        unconnected_gradients: UnconnectedGradients | str = UnconnectedGradients.NONE,
    ) -> Any:
        """The gradient of ``target`` (summed over its elements, and over a nest of targets) with respect
        to each of ``sources``, in their structure; ``None`` where a source is not connected."""
        if self._used and not self._persistent:
            raise RuntimeError(
                "A non-persistent GradientTape can only be used to compute one set of gradients (or jacobians)"
            )
        mode = UnconnectedGradients(unconnected_gradients)
        self._used = True
        ag = _AG
        targets = _nest.flatten(target)
        if output_gradients is None:
            outs: list[Any] = [None] * len(targets)
        else:
            outs = _nest.flatten(output_gradients)
            if len(outs) != len(targets):
                raise ValueError(f"output_gradients has {len(outs)} leaves for {len(targets)} targets")
        ends: list[tuple[Any, Any]] = []
        for t, og in zip(targets, outs, strict=True):
            box = _on_trace(t, self._trace)
            if box is None:
                continue
            value = ag.getval(box)
            ends.append((box._node, np.ones_like(value) if og is None else np.asarray(og, np.asarray(value).dtype)))

        flat_sources = _nest.flatten(sources)
        wanted: dict[Any, Any] = {}  # node -> its gradient, once known
        nodes: list[Any] = []
        for s in flat_sources:
            node: Any
            if isinstance(s, Differentiable) and s._tape_parts() is not None:
                node = _Whole(self, s)  # a sharded variable: its shards' gradients, concatenated below
                for part in s._tape_parts() or ():
                    entry = self._roots.get(part._tape_key())
                    if entry is not None:
                        wanted[entry[1]] = None
            elif isinstance(s, Differentiable):
                entry = self._roots.get(s._tape_key())
                node = entry[1] if entry is not None else None
            elif is_traced(s):
                box = _on_trace(s, self._trace)
                node = box._node if box is not None else None
            elif s is None:
                raise TypeError("Cannot convert the argument `type_value`: None to a TensorFlow DType.")
            else:
                raise TypeError(
                    f"GradientTape.gradient: a source must be a variable, an interdist Tensor or a value computed "
                    f"on the tape, got {type(s).__name__}"
                )
            nodes.append(node)
            if node is not None:
                wanted[node] = None
        if ends and wanted:
            _backward(ends, wanted)
        grads = []
        for s, node in zip(flat_sources, nodes, strict=True):
            g = node.gradient(wanted) if isinstance(node, _Whole) else wanted.get(node) if node is not None else None
            dtype = _dtype_of(s)
            if g is None:
                grads.append(np.zeros(_shape_of(s), dtype) if mode is UnconnectedGradients.ZERO else None)
            else:
                grads.append(np.asarray(ag.getval(g), dtype=dtype))
        return _nest.pack_sequence_as(sources, grads) if _nest.is_nested(sources) else grads[0]

    def jacobian(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(
            "GradientTape.jacobian is not implemented in interdist: compute one gradient per output element"
        )

    def batch_jacobian(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError("GradientTape.batch_jacobian is not implemented in interdist")


class _Whole:
    """A sharded variable asked for whole: the concatenation of its shards' gradients (zeros for a shard
    not reached while another is; None when none is)."""

    def __init__(self, tape: GradientTape, var: Any) -> None:
        self.parts = [(part, tape._roots.get(part._tape_key())) for part in var._tape_parts()]

    def gradient(self, wanted: dict[Any, Any]) -> Any:
        grads = [wanted.get(entry[1]) if entry is not None else None for _, entry in self.parts]
        if all(g is None for g in grads):
            return None
        return np.concatenate(
            [
                np.asarray(_AG.getval(g)) if g is not None else np.zeros(part.shape, part.dtype)
                for (part, _), g in zip(self.parts, grads, strict=True)
            ],
            axis=0,
        )


def _no_vjp(g: Any) -> tuple[()]:
    return ()


def _on_trace(x: Any, trace: Any) -> Any:
    """The box of ``x`` that belongs to ``trace`` (boxes of nested tapes wrap each other), or None."""
    while is_traced(x):
        if x._trace == trace:
            return x
        x = x._value
    return None


def _dtype_of(s: Any) -> Any:
    return np.asarray(_AG.getval(s)).dtype if is_traced(s) else np.dtype(s.dtype)


def _shape_of(s: Any) -> tuple[int, ...]:
    return tuple(np.shape(_AG.getval(s))) if is_traced(s) else tuple(s.shape)


class _Sink:
    """One node standing after every target, so a single topological walk serves them all."""

    __slots__ = ("grads", "parents")

    def __init__(self, ends: list[tuple[Any, Any]]) -> None:
        self.parents = tuple(n for n, _ in ends)
        self.grads = tuple(g for _, g in ends)

    def vjp(self, g: Any) -> tuple[Any, ...]:
        return self.grads


def _backward(ends: list[tuple[Any, Any]], wanted: dict[Any, Any]) -> None:
    """autograd's backward pass from several end nodes, keeping the gradient at each wanted node."""
    ag = _AG
    sink = _Sink(ends)
    outgrads: dict[Any, Any] = {sink: (None, False)}
    for node in ag.toposort(sink):
        if node not in outgrads:
            continue
        g = outgrads.pop(node)[0]
        if node in wanted:
            wanted[node] = g
        if not node.parents:
            continue
        for parent, ingrad in zip(node.parents, node.vjp(g), strict=False):
            outgrads[parent] = ag.add_outgrads(outgrads.get(parent), ingrad)


def value_and_grad(fn: Callable[..., Any], sources: Any = None) -> Callable[..., tuple[Any, Any]]:
    """``fn``'s value and its gradient: the functional form of a tape.

    The gradient is taken with respect to ``sources`` (a nest of variables), or, when None, to every
    trainable variable ``fn`` read, in the order first read.

    >>> import numpy as np, interdist as idist
    >>> w = idist.Variable(np.float32(2.0))
    >>> loss, grads = idist.value_and_grad(lambda x: (w * x - 1.0) ** 2)(np.float32(3.0))
    >>> float(loss), [float(g) for g in grads]
    (25.0, [30.0])
    """

    def wrapped(*args: Any, **kwargs: Any) -> tuple[Any, Any]:
        with GradientTape() as tape:
            value = fn(*args, **kwargs)
        wrt = tape.watched_variables() if sources is None else sources
        grads = tape.gradient(value, list(wrt) if sources is None else wrt)
        return detach(value), grads

    return wrapped
