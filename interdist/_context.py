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


def _default_entry() -> _Entry:
    assert _default_factory is not None, "interdist.strategy.default was not imported"
    strategy, replica_ctx = _default_factory()
    if _state.global_strategy is not None:
        return _Entry(_state.global_strategy, None)
    return _Entry(strategy, replica_ctx)


def current() -> _Entry:
    return _state.stack[-1] if _state.stack else _default_entry()


def is_default(strategy: Any) -> bool:
    return bool(getattr(strategy, "_is_default", False))


@contextmanager
def enter(strategy: Any, replica_context: Any, update_replica_id: int | None = None) -> Iterator[None]:
    """Push a context for the duration of the ``with`` block."""
    _state.stack.append(_Entry(strategy, replica_context, update_replica_id))
    try:
        yield
    finally:
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
