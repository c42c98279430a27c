"""A replica's exception as it travels in a failure reply (``Reply["error"]``): part of the contract (protocol.py).

``dump_exception`` pickles the exception so that the notebook raises the same class: as it is, or, for one that
pickle cannot rebuild, as its class, ``args`` and the attributes that pickle.
"""

from __future__ import annotations

from typing import Any

import cloudpickle


def dump_exception(exc: BaseException) -> bytes | None:
    """A failure reply's ``error``: the pickled exception, or None when it does not pickle back.

    An exception whose ``__init__`` takes other arguments than its ``args`` (``def __init__(self, a, b)``), or
    that holds something unpicklable (a lock), does not rebuild from the usual pickle: it goes as its class, its
    ``args`` and the attributes that pickle (``_rebuild_exception``), so that ``except ThatError`` still catches
    it in the notebook. Only when that fails too does the notebook raise from the reply's text.
    """
    for make in (lambda: exc, lambda: _Skeleton(exc)):
        try:
            data: bytes = cloudpickle.dumps(make())
            cloudpickle.loads(data)
            return data
        except Exception:  # noqa: BLE001 - any failure to round-trip: the next way, then the text only
            continue
    return None


class _Skeleton:
    """Pickles as ``_rebuild_exception(type(exc), exc.args, the attributes of exc that pickle)``."""

    def __init__(self, exc: BaseException) -> None:
        self.exc = exc

    def __reduce__(self) -> Any:
        state = {}
        for name, value in vars(self.exc).items():
            try:
                cloudpickle.dumps(value)
            except Exception:  # noqa: BLE001 - an attribute that does not pickle stays behind
                continue
            state[name] = value
        return (_rebuild_exception, (type(self.exc), self.exc.args, state))


def _rebuild_exception(cls: type[BaseException], args: tuple[Any, ...], state: dict[str, Any]) -> BaseException:
    """An instance of ``cls`` with ``args`` and ``state``, without calling its ``__init__`` (as pickle rebuilds
    objects of other classes)."""
    exc = cls.__new__(cls, *args)
    exc.args = args
    exc.__dict__.update(state)
    return exc
