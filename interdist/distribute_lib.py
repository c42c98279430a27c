"""Module-level functions of ``tf.distribute``."""

from __future__ import annotations

from typing import Any

from interdist import _context
from interdist.strategy import default as _default  # noqa: F401 - installs the default strategy


def get_strategy() -> Any:
    """Returns the current ``Strategy`` object (the default strategy outside any scope).

    Inside ``strategy.scope()``, and in a replica function of ``strategy.run``, it is that strategy.

    Examples
    --------
    >>> import interdist as idist
    >>> type(idist.get_strategy()).__name__
    '_DefaultStrategy'
    >>> with idist.MirroredStrategy(["CPU:0", "CPU:1"]) as s:
    ...     with s.scope():
    ...         inside = idist.get_strategy() is s
    ...     in_replicas = s.run(lambda: idist.get_strategy().num_replicas_in_sync)
    >>> inside, in_replicas
    (True, 2)
    """
    return _context.get_strategy()


def has_strategy() -> bool:
    """Return if there is a current non-default ``Strategy``.

    Examples
    --------
    >>> import interdist as idist
    >>> idist.has_strategy()
    False
    >>> with idist.MirroredStrategy(["CPU:0", "CPU:1"]) as s, s.scope():
    ...     idist.has_strategy()
    True
    """
    return _context.has_strategy()


def in_cross_replica_context() -> bool:
    """Returns True if in a cross-replica context (inside ``scope()``, outside ``run``).

    Examples
    --------
    >>> import interdist as idist
    >>> with idist.MirroredStrategy(["CPU:0", "CPU:1"]) as s:
    ...     with s.scope():
    ...         in_scope = idist.in_cross_replica_context()
    ...     in_run = s.run(idist.in_cross_replica_context)
    >>> idist.in_cross_replica_context(), in_scope, in_run
    (False, True, False)
    """
    return _context.in_cross_replica_context()


def get_replica_context() -> Any:
    """Returns the current ``ReplicaContext`` or None (in a cross-replica context).

    Outside any strategy's scope it is the default strategy's replica context (replica 0 of 1), as
    in TF.

    Examples
    --------
    >>> import interdist as idist
    >>> idist.get_replica_context()
    ReplicaContext(replica_id_in_sync_group=0)
    >>> with idist.MirroredStrategy(["CPU:0", "CPU:1"]) as s:
    ...     with s.scope():
    ...         in_scope = idist.get_replica_context()
    ...     ids = s.run(lambda: idist.get_replica_context().replica_id_in_sync_group)
    ...     in_scope, [int(i) for i in s.experimental_local_results(ids)]
    (None, [0, 1])
    """
    return _context.get_replica_context()


def get_cross_replica_context() -> Any:
    """Returns the current strategy if in a cross-replica context, else None."""
    return _context.get_cross_replica_context()


def experimental_set_strategy(strategy: Any) -> None:
    """Set a ``Strategy`` as current without ``with strategy.scope()`` (``None`` clears it).

    Examples
    --------
    >>> import interdist as idist
    >>> with idist.MirroredStrategy(["CPU:0", "CPU:1"]) as s:
    ...     idist.experimental_set_strategy(s)
    ...     current = idist.get_strategy() is s
    ...     idist.experimental_set_strategy(None)
    >>> current, idist.has_strategy()
    (True, False)
    """
    _context.set_global_strategy(strategy)
