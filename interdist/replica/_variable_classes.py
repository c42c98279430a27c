"""Which class a replica's variable passes for: the notebook's (``isinstance``) and TF's name (``type(v).__name__``).

Split from variable.py, which re-exports it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeVar

from interdist.protocol import VariableMeta
from interdist.values.distributed_variable import (
    CentralVariable,
    MirroredVariable,
    OneDeviceVariable,
    SyncOnReadVariable,
)

if TYPE_CHECKING:
    from interdist.replica.variable import ReplicaVariable

_V = TypeVar("_V", bound="ReplicaVariable")


def single_copy(meta: VariableMeta) -> bool:
    """A variable of a strategy with one copy (OneDevice: TF's ResourceVariable; CentralStorage: one value)."""
    return meta.get("kind") == "central" or meta.get("strategy_kind") in ("one_device", "central_storage", "default")


def _notebook_class(meta: VariableMeta) -> type:
    """The notebook's class of a variable, which replica code sees through ``isinstance`` (as TF: a
    ``MirroredVariable``/``SyncOnReadVariable`` inside ``run`` stays one)."""
    if meta.get("kind") == "central" or meta.get("strategy_kind") == "central_storage":
        return CentralVariable
    if single_copy(meta):
        return OneDeviceVariable
    return SyncOnReadVariable if meta["kind"] == "sync_on_read" else MirroredVariable


_TF_NAMES = {"mirrored": "MirroredVariable", "sync_on_read": "SyncOnReadVariable"}
_CLASSES: dict[tuple[type, str], type] = {}


def variable_class(base: type[_V], meta: VariableMeta) -> type[_V]:
    """A subclass of ``base`` named as TF names the variable's class inside ``run`` (``type(v).__name__``):
    MirroredVariable / SyncOnReadVariable, ResourceVariable (OneDevice), AggregatingVariable (CentralStorage)."""
    if meta.get("kind") == "central" or meta.get("strategy_kind") == "central_storage":
        name = "AggregatingVariable"
    elif single_copy(meta):
        name = "ResourceVariable"
    else:
        name = _TF_NAMES.get(meta["kind"], "MirroredVariable")
    cls = _CLASSES.get((base, name))
    if cls is None:
        cls = _CLASSES[(base, name)] = type(name, (base,), {"__module__": base.__module__, "__qualname__": name})
    return cls
