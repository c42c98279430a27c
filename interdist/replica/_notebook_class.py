"""How a replica's strategy view reports the notebook's class: ``isinstance`` sees the notebook's strategy.

The class is imported by name (or unpickled) on the worker the first time it is asked for, and the view's
own class is renamed to the notebook's (``type(view).__name__``); used by view.py and extended_view.py.
"""

from __future__ import annotations

import importlib
from typing import Any, TypeVar, cast

import cloudpickle

_T = TypeVar("_T")


def _import_class(path: Any, pickled: bytes | None = None) -> type | None:
    """The notebook's class: unpickled, else the first class of ``path`` (``[module, qualname]`` pairs,
    nearest first) that imports here."""
    if pickled:
        try:
            cls = cloudpickle.loads(pickled)
        except Exception:  # noqa: BLE001 - e.g. a module of the notebook's that this worker lacks
            cls = None
        if isinstance(cls, type):
            return cls
    for module, qualname in path or ():
        try:
            obj: Any = importlib.import_module(module)
            for part in qualname.split("."):
                obj = getattr(obj, part)
        except Exception:  # noqa: BLE001 - a class this worker cannot import: try its base
            continue
        if isinstance(obj, type):
            return obj
    return None


_NAMED: dict[tuple[type, str], type] = {}


def _named(base: type[_T], name: str) -> type[_T]:
    """A subclass of ``base`` called ``name``, so that ``type(view).__name__`` is the notebook class's name."""
    key = (base, name)
    cls = _NAMED.get(key)
    if cls is None:
        cls = _NAMED[key] = type(name, (base,), {"__module__": base.__module__, "__qualname__": name})
    return cast("type[_T]", cls)


class _ReportsNotebookClass:
    """Reports the notebook's class as ``__class__``, so that ``isinstance`` sees the notebook's strategy.

    ``isinstance(x, C)`` consults ``x.__class__`` when ``type(x)`` is not a subclass of ``C`` (as
    ``unittest.mock`` relies on): replica code that branches on ``isinstance(get_strategy(),
    MirroredStrategy)`` takes the notebook's branch. The class is imported by name, lazily, the first
    time it is asked for (the replica layer does not import the strategy layer); a class the worker
    cannot import (one defined in the notebook's ``__main__``) arrives pickled by value (cloudpickle keeps
    its identity across messages, so replica code naming it finds the same class), else stands for its
    nearest importable base.
    ``type(x)`` stays this class (``type(x) is MirroredStrategy`` is False, unlike TF).
    """

    def _class_path(self) -> Any:
        raise NotImplementedError(f"{type(self).__name__} must define _class_path() (the views do)")

    def _class_pickle(self) -> bytes | None:
        return None

    @property  # type: ignore[misc]  # a read-only __class__, for isinstance (see the class docstring)
    def __class__(self) -> type:
        found = self.__dict__.get("_notebook_class")
        if found is None:
            found = _import_class(self._class_path(), self._class_pickle()) or type(self)
            self.__dict__["_notebook_class"] = found
        return cast(type, found)
