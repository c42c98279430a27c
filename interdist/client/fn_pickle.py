"""The pickled form of a replica function, made once while nothing it captures can have changed.

cloudpickle pickles a notebook function by value: its code, defaults, closure and the globals it
names. For every global that is a package it also scans ``sys.modules`` for imported submodules,
~1 ms a package with the modules a notebook holds (Dask, Bokeh, NumPy), on every ``run``: more
than the whole round trip to the replicas.

The bytes are reused only for a function whose captured values are all immutable in a way an
identity check can see: modules, numbers, strings, ``None``, classes and functions pickled by
reference, tuples of these, functions pickled by value that satisfy the same rule, and interdist's
objects that say what they pickle to (``__interdist_fingerprint__``: a variable or a strategy is a
reference to it on the workers, an optimizer its settings and variables), so a training step that
names its model's variables and its optimizer is pickled once. The
fingerprint is the identity of each of them (so rebinding a global, a default or a closure cell
makes a new pickle; the cache entry holds them, so no identity can be reused by a new object while
it lives) plus the number of imported modules (a new import may add a submodule the function
uses). Anything else (a list, an array, a model, a variable handle) is pickled anew on every call,
as before.
"""

from __future__ import annotations

import copyreg
import io
import itertools
import sys
import threading
import types
import warnings
from collections import OrderedDict
from typing import Any

import cloudpickle
import numpy as np
from cloudpickle import cloudpickle as _cp

from interdist.client.replies import user_stacklevel

_SCALARS = (int, float, complex, str, bytes, bool, type(None), type(Ellipsis))
_MAX_DEPTH = 4
_MAX_TUPLE_DEPTH = 32  # tuples in tuples (each level counts one, as a function does)
# The function's code -> (fingerprint, the objects it names (kept alive), bytes). Keyed by code, not
# by function: ``run_steps(lambda b: ..., it, steps=64)`` in a loop makes a new function each call,
# with the same code and captures, hence the same pickle. The most recent _MAX_ENTRIES are kept.
_MAX_ENTRIES = 128
_cache: OrderedDict[Any, tuple[Any, list[Any], bytes]] = OrderedDict()
_lock = threading.Lock()


def ship_by_value(module: types.ModuleType) -> None:
    """Pickle ``module`` (the user's own, next to the notebook) by value from now on: functions and
    classes defined in it, and the module itself when a replica function names it, travel with the
    function instead of being imported on the worker, where it does not exist. Cached pickles made
    before are dropped (they name the module by import)."""
    cloudpickle.register_pickle_by_value(module)
    with _lock:
        _cache.clear()


def _code_reduce(code: types.CodeType) -> Any:
    """cloudpickle's reduction of a code object, with its file name kept.

    cloudpickle 3.1 names every code object it pickles ``<dynamic-code>`` (for deterministic bytes):
    a replica's traceback then names no file, so neither the worker nor the notebook can show the
    user's line (a notebook cell's source is in the notebook's ``linecache``; IPython showed the
    function's ``def`` line instead of the failing one).
    """
    make, args = _cp._code_reduce(code)
    return make, tuple(code.co_filename if a == "<dynamic-code>" else a for a in args)


#: (code, the ids of the packages it may name) -> (len(sys.modules), those packages (kept: their ids are not
#: reused while the entry lives), the submodules cloudpickle records for it).
_submodule_cache: OrderedDict[Any, tuple[int, tuple[Any, ...], list[types.ModuleType]]] = OrderedDict()


def _imported_submodules(code: types.CodeType, values: Any) -> list[types.ModuleType]:
    """``cloudpickle``'s ``_find_imported_submodules(code, values)``, remembered while no module is imported.

    cloudpickle scans all of ``sys.modules`` once for every package a function names (``idist``, ``np``), at every
    pickle: 344 us of the 579 us a training step that captures a model took to pickle, with the modules a notebook
    holds (1,422), on every ``run``. The answer depends only on the code's names, the packages and the modules
    imported; it is looked up again when the number of imported modules changes (the rule of ``cached_dumps``).
    """
    packages = tuple(x for x in values if isinstance(x, types.ModuleType) and getattr(x, "__package__", None))
    if not packages:
        return []
    key = (code, *map(id, packages))
    loaded = len(sys.modules)
    with _lock:
        hit = _submodule_cache.get(key)
    if hit is not None and hit[0] == loaded:
        return list(hit[2])
    found: list[types.ModuleType] = _cp._find_imported_submodules(code, packages)
    with _lock:
        _submodule_cache[key] = (loaded, packages, found)
        _submodule_cache.move_to_end(key)
        while len(_submodule_cache) > _MAX_ENTRIES:
            _submodule_cache.popitem(last=False)
    return list(found)


def _function_state(func: types.FunctionType) -> tuple[dict[str, Any], dict[str, Any]]:
    """cloudpickle 3.1's ``_function_getstate(func)``, with the submodules from ``_imported_submodules``
    (tests/client/test_fn_pickle.py compares the two, so a cloudpickle that changes its layout fails there)."""
    # ("".join: cloudpickle's way around the unpredictable memoization of interned strings.)
    slotstate: dict[str, Any] = {
        "__name__": "".join(func.__name__),
        "__qualname__": "".join(func.__qualname__),
        "__annotations__": func.__annotations__,
        "__kwdefaults__": func.__kwdefaults__,
        "__defaults__": func.__defaults__,
        "__module__": func.__module__,
        "__doc__": func.__doc__,
        "__closure__": func.__closure__,
    }
    f_globals = {k: func.__globals__[k] for k in _cp._extract_code_globals(func.__code__) if k in func.__globals__}
    closure_values = [_cp._get_cell_contents(c) for c in func.__closure__ or ()]
    slotstate["_cloudpickle_submodules"] = _imported_submodules(
        func.__code__, itertools.chain(f_globals.values(), closure_values)
    )
    slotstate["__globals__"] = f_globals
    state = {"".join(k): v for k, v in func.__dict__.items()}
    return state, slotstate


#: (copyreg's table, cloudpickle's, the two merged with ``_code_reduce``), while the first two are unchanged.
_tables: tuple[dict[Any, Any], dict[Any, Any], dict[Any, Any]] | None = None


def _dispatch_table() -> dict[Any, Any]:
    """cloudpickle's ``dispatch_table`` (its reducers over copyreg's) with ``_code_reduce``, as one plain dict.

    cloudpickle's is a ``ChainMap``, whose ``__getitem__`` is Python: the C pickler looks every object's type up in it,
    so a training step's function (its model, optimizer and loss: ~30 objects) spent ~35 us of its pickle there. The
    dict is made again whenever copyreg's table (a library may register a reducer at any time) or cloudpickle's has
    changed since, compared whole (~300 entries in a notebook: ~6 us)."""
    global _tables
    tables = _tables
    if tables is None or tables[0] != copyreg.dispatch_table or tables[1] != cloudpickle.Pickler._dispatch_table:
        ours = dict(copyreg.dispatch_table), dict(cloudpickle.Pickler._dispatch_table)
        tables = _tables = (*ours, {**ours[0], **ours[1], types.CodeType: _code_reduce})
    return tables[2]


class _Pickler(cloudpickle.Pickler):  # type: ignore[misc]  # cloudpickle is untyped
    @property
    def dispatch_table(self) -> dict[Any, Any]:  # (read once, as the C pickler starts)
        return _dispatch_table()

    def _dynamic_function_reduce(self, func: types.FunctionType) -> tuple[Any, ...]:
        """cloudpickle's, with ``_function_state`` for its state."""
        newargs = self._function_getnewargs(func)
        return (_cp._make_function, newargs, _function_state(func), None, None, _cp._function_setstate)


def _dumps(fn: Any) -> bytes:
    """``cloudpickle.dumps(fn)`` with code objects that keep their file names (``_code_reduce``)."""
    with io.BytesIO() as file:
        _Pickler(file).dump(fn)
        return file.getvalue()


def dumps_fn(fn: Any) -> bytes:
    """``cloudpickle.dumps(fn)``, reused while ``fn`` and what it captures are unchanged; a warning (once per line
    of the user's, as warnings go) when it is large (``LARGE_FUNCTION_BYTES``)."""
    data = cached_dumps(fn)
    if data is None:
        data = _dumps(fn)
    if len(data) >= LARGE_FUNCTION_BYTES:
        _warn_large(fn, len(data))
    return data


#: A replica function's pickle from which ``dumps_fn`` warns: it goes to every replica at every call (1 MB takes
#: ~1 ms a replica to send and unpickle on a 2-core machine, more than a whole ``run``'s round trip).
LARGE_FUNCTION_BYTES = 1 << 20


def _warn_large(fn: Any, nbytes: int) -> None:
    """Warn that ``fn`` pickles to ``nbytes``, naming the arrays it captures (closure, defaults, globals)."""
    captured: list[tuple[int, str]] = []
    if isinstance(fn, types.FunctionType):
        cells = zip(fn.__code__.co_freevars, fn.__closure__ or (), strict=False)
        values = [(name, c.cell_contents) for name, c in cells if _filled(c)]
        values += [
            (name, fn.__globals__[name]) for name in _cp._extract_code_globals(fn.__code__) if name in fn.__globals__
        ]
        code, defaults = fn.__code__, fn.__defaults__ or ()
        values += list(
            zip(code.co_varnames[code.co_argcount - len(defaults) : code.co_argcount], defaults, strict=True)
        )
        values += list((fn.__kwdefaults__ or {}).items())
        captured = sorted(((int(v.nbytes), n) for n, v in values if isinstance(v, np.ndarray)), reverse=True)
    name = getattr(fn, "__qualname__", type(fn).__name__)
    what = ", ".join(f"`{n}` ({b / 2**20:.1f} MB)" for b, n in captured[:3] if b >= 1 << 16)
    warnings.warn(
        f"the replica function `{name}` pickles to {nbytes / 2**20:.1f} MB, sent to every replica at every call"
        + (f": it captures {what}" if what else "")
        + ". Hold large values on the replicas instead: a variable made in `strategy.scope()`, or a value a "
        "`strategy.run` returned, passed back as an argument",
        UserWarning,
        stacklevel=user_stacklevel(),
    )


def _filled(cell: Any) -> bool:
    try:
        cell.cell_contents  # noqa: B018 - an empty cell raises
    except ValueError:
        return False
    return True


def cached_dumps(fn: Any) -> bytes | None:
    """``cloudpickle.dumps(fn)`` for a function whose pickle can be reused (see above), else None.
    Such bytes hold no handle to replica values: they unpickle the same anywhere."""
    if not isinstance(fn, types.FunctionType):
        return None  # classes, builtins, callables: pickled by reference or by their own state
    refs: list[Any] = []
    fingerprint = _fingerprint(fn, 0, refs)
    if fingerprint is None:
        return None
    key = (len(sys.modules), fingerprint)
    code = fn.__code__
    with _lock:
        hit = _cache.get(code)
        if hit is not None and hit[0] == key:
            _cache.move_to_end(code)
            reused: bytes = hit[2]
            return reused
    data: bytes = _dumps(fn)
    with _lock:
        _cache[code] = (key, refs, data)
        _cache.move_to_end(code)
        while len(_cache) > _MAX_ENTRIES:
            _cache.popitem(last=False)
    return data


def _fingerprint(obj: Any, depth: int, refs: list[Any]) -> tuple[Any, ...] | None:
    """Identities of what pickling ``obj`` captures (each object whose identity is used is appended to
    ``refs``); None when something captured could change unseen."""
    stable = getattr(type(obj), "__interdist_fingerprint__", None)
    if stable is not None and _cp._should_pickle_by_reference(type(obj)):  # (a class of the notebook's: by value)
        # interdist's handles (variables, strategies) pickle as references by ids never reused, and an
        # optimizer as its settings and such references: the key, compared by value, says it all, and
        # the cache does not keep the handle (nor its copies on the workers) alive.
        key = stable(obj)
        return None if key is None else (key,)
    kind = type(obj)
    # Exact types: a subclass (a NamedTuple, an IntEnum member, ``class MyInt(int)``) carries an instance
    # ``__dict__`` and maybe a class of the notebook's, which cloudpickle sends by value and which may change.
    if kind in _SCALARS or (kind.__module__ == "numpy" and isinstance(obj, (np.number, np.bool_))):
        refs.append(obj)  # (a NumPy number is immutable too; a ``np.void`` may be a view into an array)
        return (id(obj),)
    if isinstance(obj, types.ModuleType):
        # A module made in the notebook (``types.ModuleType``, not imported) or shipped (``Strategy.ship``)
        # travels by value, its attributes with it: they may be reassigned unseen.
        if not _cp._should_pickle_by_reference(obj):
            return None
        refs.append(obj)
        return (id(obj),)
    if kind is tuple:
        if depth >= _MAX_TUPLE_DEPTH:
            return None  # a deep nest (a cons list): pickled afresh, as cloudpickle can, not a RecursionError here
        refs.append(obj)
        items = [_fingerprint(x, depth + 1, refs) for x in obj]
        return None if any(p is None for p in items) else (id(obj), *items)
    if isinstance(obj, types.BuiltinFunctionType):
        # ``from math import sqrt``: a module's builtin goes by reference (cloudpickle asks nothing of it:
        # ``_should_pickle_by_reference`` raises for builtins); a builtin bound to an object (``[].append``)
        # carries that object, which may change unseen.
        owner = obj.__self__
        if owner is not None and not isinstance(owner, types.ModuleType):
            return None
        refs.append(obj)
        return (id(obj),)
    if isinstance(obj, (type, types.FunctionType)) and _cp._should_pickle_by_reference(obj):
        refs.append(obj)
        return (id(obj),)
    # A function pickled by value is known by what it is made of (kept in ``refs``), not by its own
    # identity: the cache keeps neither it nor its closure (which may hold a variable) alive.
    if not isinstance(obj, types.FunctionType) or depth >= _MAX_DEPTH:
        return None
    if obj.__dict__ or obj.__kwdefaults__ or not isinstance(obj.__code__, types.CodeType):
        return None
    code = obj.__code__
    # (Annotations are pickled too but left out: they are a new dict per function and change nothing
    # the replica runs.)
    named = (code, obj.__name__, obj.__qualname__, obj.__doc__, obj.__module__)
    refs.extend(named)
    parts: list[Any] = [*map(id, named)]
    for value in obj.__defaults__ or ():
        p = _fingerprint(value, depth + 1, refs)
        if p is None:
            return None
        parts.append(p)
    for cell in obj.__closure__ or ():
        try:
            value = cell.cell_contents
        except ValueError:  # an empty cell (a name bound later in the enclosing function)
            return None
        p = _fingerprint(value, depth + 1, refs)
        if p is None:
            return None
        parts.append(p)
    g = obj.__globals__
    for name in sorted(_cp._extract_code_globals(code)):
        if name not in g:
            parts.append((name, None))  # a builtin, or not yet defined: cloudpickle captures nothing
            continue
        value = g[name]
        if value is obj:
            parts.append((name, "self"))  # recursion
            continue
        p = _fingerprint(value, depth + 1, refs)
        if p is None:
            return None
        parts.append((name, p))
    return tuple(parts)
