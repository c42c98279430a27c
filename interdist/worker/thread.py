"""The replica thread: the one thread on a worker in which a replica's programs run, in order.

Programs arrive on the worker's event loop (Dask comms) or on the control socket's thread; both hand
them to this thread, so a long replica function never blocks the event loop that carries its peers'
collective packets and the aborts that release it.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
from collections.abc import Callable
from typing import Any, TypeVar

logger = logging.getLogger(__name__)

_T = TypeVar("_T")


class ReplicaThread:
    """The one thread a replica's programs run on (they block in collectives, so never on the event loop).

    A queue and a thread rather than a ``ThreadPoolExecutor``: handing a program over and its reply
    back costs one queue put and one ``call_soon_threadsafe``, without the executor's future chain.
    """

    def __init__(self, name: str) -> None:
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._serve, name=name, daemon=True)
        self._thread.start()

    def submit(self, fn: Callable[..., _T], *args: Any) -> asyncio.Future[_T]:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[_T] = loop.create_future()
        self._queue.put((loop, future, fn, args))
        return future

    def call(
        self, fn: Callable[..., Any], args: tuple[Any, ...], done: Callable[[Any, BaseException | None], None]
    ) -> None:
        """Run ``fn(*args)`` after what is queued; ``done(result, error)`` is called on this thread."""
        self._queue.put((None, done, fn, args))

    def _serve(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            loop, future, fn, args = item
            try:
                result, error = fn(*args), None
            except BaseException as e:  # noqa: BLE001 - handed to the awaiting handler
                result, error = None, e
            if loop is None:
                try:
                    future(result, error)
                except Exception:
                    logger.exception("interdist: could not hand back a program's reply")
                continue
            try:
                loop.call_soon_threadsafe(_settle, future, result, error)
            except RuntimeError:  # the event loop closed (the worker is shutting down)
                return

    def shutdown(self) -> None:
        self._queue.put(None)  # after whatever runs now; programs still queued are not waited for


def _settle(future: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    if future.done():
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)
