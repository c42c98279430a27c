"""Which strategy is current, and whether we are in a replica or cross-replica context.

One stack per thread: the notebook's thread, and each replica thread on a worker,
has its own. Bottom layer: it knows strategies only as opaque objects.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class _Entry:
    strategy: Any
    replica_context: Any  # None means cross-replica context
    # Set inside ``extended.update``: which replica's copy a variable op touches.
    update_replica_id: int | None = None


class _State(threading.local):
    def __init__(self) -> None:
        self.stack: list[_Entry] = []
        self.global_strategy: Any = None


_state = _State()
_default_factory: Callable[[], tuple[Any, Any]] | None = None


def set_default_factory(factory: Callable[[], tuple[Any, Any]]) -> None:
    """Install the maker of (default strategy, its default replica context)."""
    global _default_factory
    _default_factory = factory


# The last default entry made, with what it was made from: (default strategy, its replica context, the
# global strategy, the entry). Entries are frozen, so one serves every look outside any scope (four per ``run``).
_default_made: tuple[Any, Any, Any, _Entry] | None = None


def _default_entry() -> _Entry:
    global _default_made
    assert _default_factory is not None, "interdist.strategy.default was not imported"
    strategy, replica_ctx = _default_factory()
    glob = _state.global_strategy
    made = _default_made
    if made is not None and made[0] is strategy and made[1] is replica_ctx and made[2] is glob:
        return made[3]
    entry = _Entry(glob, None) if glob is not None else _Entry(strategy, replica_ctx)
    _default_made = (strategy, replica_ctx, glob, entry)
    return entry


def current() -> _Entry:
    return _state.stack[-1] if _state.stack else _default_entry()


def is_default(strategy: Any) -> bool:
    return bool(getattr(strategy, "_is_default", False))


class enter:  # noqa: N801 - used as the function it was: ``with _context.enter(strategy, ctx):``
    """Push a context for the duration of the ``with`` block. (A class, not a ``contextmanager`` generator:
    ``run`` enters one on each side, and a replica's every variable update one more.)"""

    __slots__ = ("_entry",)

    def __init__(self, strategy: Any, replica_context: Any, update_replica_id: int | None = None) -> None:
        self._entry = _Entry(strategy, replica_context, update_replica_id)

    def __enter__(self) -> None:
        _state.stack.append(self._entry)

    def __exit__(self, *exc: object) -> None:
        _state.stack.pop()


def stack_depth() -> int:
    return len(_state.stack)


def set_global_strategy(strategy: Any) -> None:
    if _state.stack:
        raise RuntimeError("Must not be called inside a `tf.distribute.Strategy` scope.")
    _state.global_strategy = strategy


def get_strategy() -> Any:
    """Returns the current ``Strategy`` (the default strategy outside any scope)."""
    return current().strategy


def has_strategy() -> bool:
    """True when a non-default strategy is current."""
    return not is_default(current().strategy)


def get_replica_context() -> Any:
    """The current ``ReplicaContext``, or ``None`` in a cross-replica context."""
    return current().replica_context


def in_cross_replica_context() -> bool:
    """True inside ``strategy.scope()`` but outside ``strategy.run``."""
    return current().replica_context is None


def get_cross_replica_context() -> Any:
    """The current strategy when in a cross-replica context, else ``None``."""
    entry = current()
    return entry.strategy if entry.replica_context is None else None


def get_update_replica_id() -> int | None:
    return current().update_replica_id


# The ParameterServerStrategy step running in this thread (``replica/ps_step.py``), if any: variables
# read it to send their reads and updates to the ps tasks (``values/ps_variable.py``).
_ps_step = threading.local()


def current_ps_step() -> Any:
    """The parameter-server step running in this thread, or None."""
    return getattr(_ps_step, "ctx", None)


@contextmanager
def ps_step_context(ctx: Any) -> Iterator[Any]:
    prev = getattr(_ps_step, "ctx", None)
    _ps_step.ctx = ctx
    try:
        yield ctx
    finally:
        _ps_step.ctx = prev
