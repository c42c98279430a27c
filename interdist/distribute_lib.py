"""Module-level functions of ``tf.distribute``."""

from __future__ import annotations

from typing import Any

from interdist import _context
from interdist.strategy import default as _default  # noqa: F401 - installs the default strategy


def get_strategy() -> Any:
    """Returns the current ``Strategy`` object (the default strategy outside any scope)."""
    return _context.get_strategy()


def has_strategy() -> bool:
    """Return if there is a current non-default ``Strategy``."""
    return _context.has_strategy()


def in_cross_replica_context() -> bool:
    """Returns True if in a cross-replica context (inside ``scope()``, outside ``run``)."""
    return _context.in_cross_replica_context()


def get_replica_context() -> Any:
    """Returns the current ``ReplicaContext`` or None (in a cross-replica context)."""
    return _context.get_replica_context()


def get_cross_replica_context() -> Any:
    """Returns the current strategy if in a cross-replica context, else None."""
    return _context.get_cross_replica_context()


def experimental_set_strategy(strategy: Any) -> None:
    """Set a ``Strategy`` as current without ``with strategy.scope()`` (``None`` clears it)."""
    _context.set_global_strategy(strategy)
