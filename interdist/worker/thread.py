"""The replica thread: the one thread on a worker in which a replica's programs run, in order.

Programs arrive on the worker's event loop (Dask comms), which hands them to this thread, or over the
notebook's control socket, which this thread reads itself while it has nothing to run
(:meth:`ReplicaThread.read_directly`); so a long replica function never blocks the event loop that carries
its peers' collective packets and the aborts that release it.

In an embedded worker (``worker/process.py``) the replica thread is the process's main thread, which
Python lets a signal interrupt: the notebook's Kernel > Interrupt then stops a replica function even
in ``time.sleep`` or a blocking read (:meth:`ReplicaThread.interrupt`). Elsewhere (a worker of a Dask
cluster given with ``cluster=``, whose main thread runs the event loop) each group gets a thread of its
own; a replica function there is released from its collectives but runs on to its end.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import os
import queue
import select
import signal
import socket
import threading
import time
from collections.abc import Callable
from types import FrameType
from typing import Any, TypeVar

from interdist.control import pack, read_message, send_parts
from interdist.protocol import lost_reply
from interdist.replica.user_code import in_user_code

logger = logging.getLogger(__name__)

_T = TypeVar("_T")

#: How long an interrupt keeps trying to reach a replica function that runs interdist's code
#: (a collective, a variable update): it lands as soon as the function is back in the user's code.
INTERRUPT_PATIENCE = 30.0


class ReplicaThread:
    """The one thread a replica's programs run on (they block in collectives, so never on the event loop).

    A queue and a thread rather than a ``ThreadPoolExecutor``: handing a program over and its reply
    back costs one queue put and one ``call_soon_threadsafe``, without the executor's future chain.
    ``start=False``: no thread of its own; the caller's thread serves it (:func:`serve_main_thread`).
    """

    def __init__(self, name: str, start: bool = True) -> None:
        self.name = name
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self.running: int | None = None  # the step of the program that runs now
        self._cancelled: collections.deque[int] = collections.deque(maxlen=64)  # steps interrupted
        self._interrupt: int | None = None  # the step to interrupt as soon as it runs the user's code
        self._ident: int | None = None
        # Connections this thread reads itself while it has nothing to run (``read_directly``): fd -> (socket,
        # handler). The wake pipe tells a thread waiting on them that the queue has something.
        self._direct: dict[int, tuple[socket.socket, Callable[..., None]]] = {}
        self._polling = False
        self._wake: tuple[int, int] | None = None
        self._unpinned: set[int] | None = None  # this thread's cores before ``pin`` (worker/affinity.py)
        self._spin_s = 0.0  # how long to poll for the next program before sleeping, once (``call``'s ``spin``)
        self.caught_spinning = 0  # programs (and queued items) that came while this thread spun
        self.asleep = False  # in the blocking ``poll`` for the next program (any spin ran out), until it returns
        self.core: int | None = None  # the core ``pin`` asked for, until ``unpin``
        if start:
            thread = threading.Thread(target=self.serve, name=name, daemon=True)
            thread.start()

    def submit(self, fn: Callable[..., _T], *args: Any, step: int | None = None) -> asyncio.Future[_T]:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[_T] = loop.create_future()
        self._put((loop, future, fn, args, step, 0.0))
        return future

    def call(
        self,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        done: Callable[[Any, BaseException | None], None],
        step: int | None = None,
        spin: float = 0.0,
    ) -> None:
        """Run ``fn(*args)`` after what is queued; ``done(result, error)`` is called on this thread. ``spin``:
        then poll the direct connections for up to that many seconds before sleeping (``_spin``)."""
        self._put((None, done, fn, args, step, spin))

    def pin(self, core: int) -> None:
        """Run this thread on ``core`` only, from its next item on (worker/affinity.py); :meth:`unpin` undoes it."""
        self.core = core
        self.call(self._set_cores, ({core},), _ignore)

    def unpin(self) -> None:
        """This thread's cores as before :meth:`pin` (after what is queued), if it was pinned."""
        self.core = None
        self.call(self._set_cores, (None,), _ignore)

    def _set_cores(self, cores: set[int] | None) -> None:  # on this thread: sched_setaffinity(0) sets the caller's
        try:
            if cores is None:
                if self._unpinned is not None:
                    os.sched_setaffinity(0, self._unpinned)
                    self._unpinned = None
                return
            if self._unpinned is None:
                self._unpinned = os.sched_getaffinity(0)
            os.sched_setaffinity(0, cores)
        except OSError as exc:  # a core taken from this process meanwhile (its cpuset changed): left as it is
            logger.debug("interdist: could not set the replica thread's cores to %s: %s", cores, exc)

    def _put(self, item: Any) -> None:
        self._queue.put(item)
        if self._polling:  # (set before the thread's last look at the queue: a put after that look rings)
            wake = self._wake
            if wake is not None:
                with contextlib.suppress(BlockingIOError, OSError):
                    os.write(wake[1], b"!")

    def read_directly(
        self, sock: socket.socket, handler: Callable[[dict[str, Any], Callable[..., None]], None]
    ) -> None:
        """Read the messages of ``sock`` on this thread, whenever it has nothing queued to run; each goes to
        ``handler(msg, reply)``, as the control server's thread hands them over (worker/control_server.py).

        The notebook sends its programs over such a connection: the replica thread, waiting in ``poll``, is
        woken by the message itself, where the control server's thread would read it and then wake this
        one (two wake-ups, and a handover of the GIL, per program: 40-60 us of an empty ``run`` here). A
        program that comes while another runs waits in the socket, as it would in the queue; what must be
        read meanwhile (aborts, a peer's notices) comes over the notebook's other connection."""
        if self._wake is None:
            r, w = os.pipe()
            os.set_blocking(r, False)
            os.set_blocking(w, False)
            self._wake = (r, w)
        sock.settimeout(None)
        self._direct[sock.fileno()] = (sock, handler)
        self._put(_NOTHING)  # a thread already waiting in ``queue.get`` looks at the new connection

    def _next(self) -> Any:
        """The next queued item; while none is, read the direct connections (their programs are queued)."""
        while True:
            if not self._direct:
                return self._queue.get()
            self._polling = True
            try:
                try:
                    return self._queue.get_nowait()
                except queue.Empty:
                    pass
                poller = select.poll()
                wake = self._wake
                assert wake is not None
                poller.register(wake[0], select.POLLIN)
                for fd in list(self._direct):
                    poller.register(fd, select.POLLIN)
                spin, self._spin_s = self._spin_s, 0.0
                ready = self._spin(poller, spin) if spin > 0 else []
                if not ready:
                    self.asleep = True
                    ready = poller.poll()
                    self.asleep = False
            finally:
                self._polling = False
            for fd, _ in ready:
                if fd == wake[0]:
                    with contextlib.suppress(BlockingIOError, OSError):
                        os.read(fd, 4096)
                    continue
                self._read_direct(fd)

    def _spin(self, poller: Any, seconds: float) -> list[tuple[int, int]]:
        """Poll without sleeping for up to ``seconds``, yielding the core between looks: what came, if anything.

        The notebook asks for it after a program of a replica alone on a core other than its own
        (``StepPathsMixin._send_plan``). Its next program then finds this thread awake: sleeping in ``poll``,
        the thread cost the notebook's ``sendmsg`` ~20 us (waking an idle core of a VM) and an empty ``run`` of
        2 replicas 281 against 246 us (six alternated rounds, medians). A replica on the notebook's core sleeps:
        spinning, even yielding, it held the core the notebook needed (318 us)."""
        end = time.perf_counter() + seconds
        while True:
            ready: list[tuple[int, int]] = poller.poll(0)
            if ready:
                self.caught_spinning += 1
                return ready
            if time.perf_counter() >= end:
                return []
            os.sched_yield()  # a runnable thread of this core goes first

    def _read_direct(self, fd: int) -> None:
        entry = self._direct.get(fd)
        if entry is None:
            return
        sock, handler = entry

        def reply(msg: Any) -> None:
            try:
                send_parts(sock, pack(msg))
            except OSError:
                pass  # the notebook went away; its group sees the step as lost

        try:
            msg = read_message(sock)
        except Exception as exc:  # noqa: BLE001 - a malformed frame or a reset: drop the connection, not the thread
            logger.warning("interdist: closing a direct control connection: %s", exc)
            msg = None
        if not isinstance(msg, dict):  # the notebook closed it (its strategy closed, or it is gone)
            del self._direct[fd]
            with contextlib.suppress(OSError):
                sock.close()
            return
        try:
            handler(msg, reply)
        except Exception as exc:  # noqa: BLE001 - reported as this step's reply, as the control server does
            reply(lost_reply(exc, step=msg.get("step")))

    def serve(self) -> None:
        """Run the queued programs until :meth:`shutdown` (on the thread that calls it)."""
        self._ident = threading.get_ident()
        while True:
            item = self._next()
            if item is _NOTHING:
                continue
            if item is None:
                for sock, _ in list(self._direct.values()):
                    with contextlib.suppress(OSError):
                        sock.close()
                self._direct.clear()
                return
            loop, future, fn, args, step, spin = item
            self.running = step  # before looking at _cancelled; interrupt() adds first, then looks here
            try:
                if step is not None and step in self._cancelled:
                    # An Exception, not a KeyboardInterrupt: it may be set on a future of the event loop.
                    raise RuntimeError(f"step {step} was interrupted by the notebook before it started")
                result, error = fn(*args), None
            except BaseException as e:  # noqa: BLE001 - handed to the awaiting handler
                result, error = None, e
            finally:
                self.running = None
                self._interrupt = None
            if loop is None:
                try:
                    future(result, error)
                except Exception:
                    logger.exception("interdist: could not hand back a program's reply")
                self._spin_s = spin
                continue
            try:
                loop.call_soon_threadsafe(_settle, future, result, error)
            except RuntimeError:  # the event loop closed (the worker is shutting down)
                return

    def shutdown(self) -> None:
        self._put(None)  # after whatever runs now; programs still queued are not waited for

    # -- the notebook's interrupt ------------------------------------------------
    @property
    def interruptible(self) -> bool:
        """Whether :meth:`interrupt` can stop a running replica function (it runs on the main thread)."""
        return self._ident is not None and self._ident == threading.main_thread().ident and _handler_installed

    def interrupt(self, step: int) -> bool:
        """Stop the program of ``step``: at once if it has not started, else where it runs the user's code.

        True when the program can be interrupted where it runs; False when it can only be waited for.
        """
        self._cancelled.append(step)
        if self.running != step:
            return True  # not started (it will not), or already done
        if not self.interruptible:
            return False
        self._interrupt = step
        ident = self._ident
        assert ident is not None

        def knock() -> None:
            # A signal lands when the main thread runs Python again (a sleep or a blocking read returns at
            # once); the handler raises only in the user's code, so knock until it is there or done.
            deadline = time.monotonic() + INTERRUPT_PATIENCE
            while self.running == step and self._interrupt == step and time.monotonic() < deadline:
                try:
                    signal.pthread_kill(ident, signal.SIGINT)
                except (OSError, ValueError):
                    return
                time.sleep(0.1)

        threading.Thread(target=knock, name="interdist-interrupt", daemon=True).start()
        return True

    def _on_sigint(self, frame: FrameType | None) -> None:
        step = self._interrupt
        if step is not None and self.running == step and in_user_code(frame):
            self._interrupt = None
            raise KeyboardInterrupt(f"interrupted by the notebook (step {step})")


_NOTHING = object()  # a queue item that only wakes the thread (a new direct connection to look at)


def _ignore(result: Any, error: BaseException | None) -> None:
    pass


def _settle(future: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    if future.done():
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)


# -- the main thread of an embedded worker --------------------------------------
_main: ReplicaThread | None = None
_main_claimed = False
_handler_installed = False
_claim_lock = threading.Lock()


def serve_main_thread() -> None:
    """Serve replica programs on this, the process's main thread, until :func:`stop_main_thread`.

    SIGINT reaches a replica function only as the notebook's interrupt (:meth:`ReplicaThread.interrupt`);
    any other SIGINT is ignored (the worker belongs to the notebook, not to a terminal).
    """
    global _main, _handler_installed
    if threading.current_thread() is not threading.main_thread():
        raise RuntimeError("serve_main_thread() must be called from the main thread")
    with _claim_lock:
        if _main is None:
            _main = ReplicaThread("interdist-replica-main", start=False)
        main = _main

    def on_sigint(signum: int, frame: FrameType | None) -> None:
        main._on_sigint(frame)

    signal.signal(signal.SIGINT, on_sigint)
    _handler_installed = True
    main.serve()


def stop_main_thread() -> None:
    """Let :func:`serve_main_thread` return: at once when idle, else once the program it runs is
    interrupted (the worker is closing: its notebook is gone or closed it) or done."""
    with _claim_lock:
        main = _main
    if main is None:
        return
    main.shutdown()
    step = main.running
    if step is not None:
        main.interrupt(step)


def claim(name: str) -> ReplicaThread:
    """The thread for a new replica group: the main thread when it serves programs and is free, else a new one."""
    global _main_claimed
    with _claim_lock:
        if _main is not None and not _main_claimed:
            _main_claimed = True
            _main._cancelled.clear()  # step numbers of the group before
            return _main
    return ReplicaThread(name)


def give_back(executor: ReplicaThread) -> None:
    """A group is done with ``executor``: the main thread serves the next group, any other thread ends."""
    global _main_claimed
    with _claim_lock:
        if executor is _main:
            executor.unpin()  # (queued before the next group's items: it serves them with every core again)
            _main_claimed = False
            return
    executor.shutdown()
