"""A ``distributed.Client`` made so that, when its connection fails, nothing is left for the collector.

A Client whose constructor fails stays half made in the exception's frames, its loop thread started.
When the garbage collector finalizes it later, ``Client.__del__`` closes it, and that close takes the
class-wide lock of Dask's ``LoopRunner``. The collector runs in whichever thread an allocation
triggers it: if that is the loop thread of a new Client whose start holds the same lock while it
waits for that thread, the process deadlocks. CI saw it: a Client refused by a TLS scheduler, then
``MultiWorkerMirroredStrategy(..., security=...)`` hanging for ever in ``Thread.start``. So the
half-made Client is closed at once, in the caller's thread, and its finalizer has nothing left to do.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any

logger = logging.getLogger("interdist")


def connect(*args: Any, **kwargs: Any) -> Any:
    """``distributed.Client(*args, **kwargs)``; when it raises, the half-made Client is closed first."""
    from distributed import Client

    try:
        return Client(*args, **kwargs)  # type: ignore[no-untyped-call]  # distributed is untyped
    except BaseException as exc:
        close_half_made(exc)
        raise


def close_half_made(exc: BaseException) -> None:
    """Close every ``distributed.Client`` whose method is among ``exc``'s frames (its constructor's)."""
    from distributed import Client

    tb = exc.__traceback__
    seen: set[int] = set()
    while tb is not None:
        candidate = tb.tb_frame.f_locals.get("self")
        if isinstance(candidate, Client) and id(candidate) not in seen:
            seen.add(id(candidate))
            with contextlib.suppress(Exception):
                candidate.close(timeout=5)  # type: ignore[no-untyped-call]  # distributed is untyped
            logger.debug("interdist: closed a Client whose connection failed (%s)", type(exc).__name__)
        tb = tb.tb_next
