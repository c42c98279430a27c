"""``GradientTape``: TF's tape, recording what the user's NumPy code does with the variables it reads.

Entering a tape imports autograd (``boxes._autograd``) and opens a trace; while it records, each read of a
variable it watches is a box (``boxes.read``); ``gradient`` walks the record backwards from the targets,
once for them all. ``value_and_grad`` is its functional form. Part of ``interdist.autodiff``, which
re-exports its public names.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

from interdist import _gpu, _nest
from interdist.autodiff import boxes
from interdist.autodiff.boxes import _RECORDING, _STATE, Differentiable, _autograd, _floating, detach, is_traced


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
        self._roots: dict[Any, tuple[Any, Any]] = {}  # key -> (variable or tensor, root node)
        self._explicit: set[Any] = set()  # keys watched with watch()

    # -- context ---------------------------------------------------------------------------------------
    def __enter__(self) -> GradientTape:
        if self._entered:
            raise ValueError("Tape is still recording, This can happen if you try to re-enter an already-active tape.")
        ag = _autograd()
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
            root = boxes._AG.TapeNode.new_root()
            root.tape = self
            self._roots[key] = entry = (var, root)
        return boxes._AG.new_box(value, self._trace, entry[1])

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
        ag = boxes._AG
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
                np.asarray(boxes._AG.getval(g)) if g is not None else np.zeros(part.shape, part.dtype)
                for (part, _), g in zip(self.parts, grads, strict=True)
            ],
            axis=0,
        )


def _on_trace(x: Any, trace: Any) -> Any:
    """The box of ``x`` that belongs to ``trace`` (boxes of nested tapes wrap each other), or None."""
    while is_traced(x):
        if x._trace == trace:
            return x
        x = x._value
    return None


def _dtype_of(s: Any) -> Any:
    return np.asarray(boxes._AG.getval(s)).dtype if is_traced(s) else np.dtype(s.dtype)


def _shape_of(s: Any) -> tuple[int, ...]:
    return tuple(np.shape(boxes._AG.getval(s))) if is_traced(s) else tuple(s.shape)


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
    ag = boxes._AG
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
