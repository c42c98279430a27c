"""Closing what a strategy holds when it is garbage-collected without ``close()``.

A strategy registers its close as a finalizer (``weakref.finalize``) through :func:`later`: when the
strategy is collected, the finalizer only queues the close, and a thread of its own runs it. A
finalizer runs wherever the garbage collector happens to run: on the Dask client's event-loop thread
(where a blocking call to the cluster would wait on the very loop it blocks), or on a thread that
holds the pool's lock (``cluster.py``: a second ``acquire`` of it would never return). Queuing
touches neither: ``queue.SimpleQueue.put`` is safe to call from a finalizer.

``close()`` runs the same close at once, in the caller's thread (:func:`now`). :func:`drain` collects
garbage and runs every queued close before returning: a new strategy calls it before starting
workers, so that a dropped strategy's workers are back in the pool and taken again instead of new
ones started beside them. At exit, the closes still queued run in the exiting thread (``drain``,
from ``cluster.shutdown_all``), and so do the finalizers that ``weakref.finalize`` calls then.
"""

from __future__ import annotations

import gc
import logging
import queue
import threading
import weakref
from collections.abc import Callable
from typing import Any

logger = logging.getLogger("interdist")

_queue: queue.SimpleQueue[tuple[Callable[..., Any], tuple[Any, ...]]] = queue.SimpleQueue()
_queued: list[None] = []  # one entry per close ever queued (``list.append`` is atomic: no lock in a finalizer)
_busy = threading.Condition()  # guards _done (never taken by a finalizer)
_done = 0  # closes queued and run to their end
_thread: threading.Thread | None = None
_thread_lock = threading.Lock()


def later(fn: Callable[..., Any], *args: Any) -> None:
    """A strategy's finalizer: queue ``fn(*args)`` for the reclaim thread; never blocks, never raises."""
    # Only this: starting the thread here would take the threading module's locks, which the thread the
    # collector interrupted may hold. ``ensure_thread`` runs when a strategy is made; without the thread
    # (after a fork) the next ``drain`` runs what is queued.
    if not threading.main_thread().is_alive():
        # The interpreter is exiting: ``weakref.finalize`` calls the finalizers left from its exit hook, in
        # the main thread, with the collector off; no thread would run the close after this.
        _run(fn, args)
        return
    _queued.append(None)
    _queue.put((fn, args))


def finalize(owner: object, fn: Callable[..., Any], *args: Any) -> weakref.finalize[..., Any]:
    """``weakref.finalize(owner, later, fn, *args)``: ``fn(*args)`` queued when ``owner`` is collected, run
    by the reclaim thread (started here); :func:`now` runs it at once instead (``close()``)."""
    ensure_thread()
    return weakref.finalize(owner, later, fn, *args)


def now(finalizer: weakref.finalize[..., Any]) -> None:
    """``close()``: run the close a finalizer made with :func:`later` would queue, in this thread, once."""
    info = finalizer.detach()
    if info is None:
        return  # already closed, or already queued by the garbage collector (the reclaim thread closes it)
    _obj, _later, args, _kwargs = info
    fn, *rest = args
    fn(*rest)


def drain(timeout: float = 30.0, collect: bool = True) -> int:
    """Collect garbage (``collect``), then run every queued close here and wait for the one the reclaim
    thread runs; how many ran here."""
    if collect:
        gc.collect()
    target = len(_queued)  # the closes queued so far: each is run here or by the thread
    ran = 0
    while True:
        try:
            fn, args = _queue.get_nowait()
        except queue.Empty:
            break
        _run(fn, args)
        ran += 1
    with _busy:
        _busy.wait_for(lambda: _done >= target, timeout)
    return ran


def _run(fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
    global _done
    try:
        fn(*args)
    except Exception:  # reclaiming must not fail; the cluster may be gone already
        logger.debug("interdist: closing a collected strategy failed", exc_info=True)
    finally:
        with _busy:
            _done += 1
            _busy.notify_all()


def reclaimed() -> int:
    """How many strategies were closed by the garbage collector (their finalizer) in this process."""
    with _busy:
        return _done


def _loop() -> None:
    while True:
        fn, args = _queue.get()
        _run(fn, args)


def ensure_thread() -> None:
    """Start the reclaim thread if it is not running (cluster.py calls it when a strategy is made)."""
    global _thread
    with _thread_lock:
        if _thread is not None and _thread.is_alive():
            return
        _thread = threading.Thread(target=_loop, name="interdist-reclaim", daemon=True)
        _thread.start()
