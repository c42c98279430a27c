"""Handles that cross to a replica turn into that replica's own objects when unpickled."""

from __future__ import annotations

import weakref
from typing import Any

from interdist.replica.replica import current_resolving

# group id -> the notebook's strategy, so that a handle unpickled in the notebook finds it again
_client_strategies: weakref.WeakValueDictionary[str, Any] = weakref.WeakValueDictionary()
_client_variables: weakref.WeakValueDictionary[tuple[str, int], Any] = weakref.WeakValueDictionary()


def register_strategy(group_id: str, strategy: Any) -> None:
    _client_strategies[group_id] = strategy


def register_variable(group_id: str, var_id: int, variable: Any) -> None:
    _client_variables[(group_id, var_id)] = variable


def resolve_strategy(group_id: str) -> Any:
    replica = current_resolving()
    if replica is not None and replica.group_id == group_id:
        return replica.view
    try:
        return _client_strategies[group_id]
    except KeyError:
        raise RuntimeError(
            f"A strategy of replica group {group_id} was used inside another strategy's replica function; "
            "a replica can only use its own strategy"
        ) from None


def resolve_variable(group_id: str, var_id: int, snapshot: Any = None) -> Any:
    replica = current_resolving()
    if replica is not None and replica.group_id == group_id:
        try:
            return replica.variables[var_id]
        except KeyError:
            raise ValueError(f"variable {var_id} does not exist on replica {replica.rank}") from None
    if replica is not None:
        raise ValueError(
            f"A variable created in another strategy's scope (group {group_id}) was used in a replica function "
            f"of group {replica.group_id}; variables belong to the strategy that created them"
        )
    try:
        return _client_variables[(group_id, var_id)]
    except KeyError:
        raise ValueError(f"variable {var_id} of group {group_id} no longer exists") from None
