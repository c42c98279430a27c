"""Where a replica's incoming collective messages wait for it.

Messages are keyed by (step, seq, src). A receiver blocks with a timeout; an
abort for a step (a peer failed, a worker left, the notebook was interrupted) wakes
every waiter of that step at once (measured: <1 ms), so no replica ever waits for a
peer that will not come. A waiter whose peers' messages are already on their way
gets them first (``ABORT_GRACE``), and a replica that reaches a collective of an
aborted step sends nothing (``Replica.collective``): an update that follows a
collective is then applied by every replica of the step or by none.

Channels: a peer on this host may hand its stream of packets to the mailbox itself
(``add_channel``, a socket). The thread that waits in ``take`` then reads it: one wake-up
per packet (the kernel's, on the socket) instead of two (a serving thread's, then the
waiter's through the condition), and no serving thread's share of the 2 cores. Packets
that come another way (Dask comms, the worker's control thread) and aborts wake that
reader through a pipe (the doorbell). Nobody reads a channel while no one waits: packets
wait in the kernel's socket buffer, and a sender whose peer's buffer is full reads its own
channels while it waits (``wait_writable``), so two replicas sending each other large
messages never wait on each other. A channel's peer may offer a lane (``lanes.py``: small
packets through shared memory, no system call on either side), which the same reader reads:
while it spins it looks at its lanes and polls the sockets every 16 looks; before it blocks it
tells the lanes' senders to nudge it through the socket (``channels.py``). A take whose every
peer has a lane first spins on the lanes alone until all its packets came (``GATHER``), then goes
the general way (the lock and the messages at every packet). The reading of the channels is
``mailbox_channels.py`` (a mixin of ``Mailbox``); how long a waiter spins is here.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from typing import Any

from interdist import config
from interdist.collectives.channels import Channel
from interdist.collectives.mailbox_channels import ChannelReader
from interdist.errors import CollectiveAbortedError, CollectiveTimeoutError, ReplicaMismatchError

Tag = tuple[int, int]  # (step, seq)

#: How long a collective of an aborted step still waits for messages already on their way (seconds).
ABORT_GRACE = 0.25


def _spin_seconds() -> float:
    try:
        return max(0.0, float(config.get("collectives.spin-us"))) / 1e6
    except (TypeError, ValueError):
        return 50e-6


#: Spin, then block (as MPI libraries and NCCL wait): a receiver polls its channels without sleeping
#: for up to ``SPIN_S`` before it blocks in ``poll``. A peer's packet that comes meanwhile costs no
#: wake-up: on the 2-core development machine a sleeping receiver's wake-up (the sender's ``sendmsg``
#: and the kernel's) was ~60 us of a 150 us 4 KB all_reduce between 2 replicas; spinning, 90 us.
#: It spins only when its last wait was short (``SPIN_IF_WAITED_BELOW``: a collective loop, not a
#: peer still computing) and when the group's replicas on this host are no more than
#: ``SPIN_REPLICAS_PER_CORE`` times its cores. ``interdist.collectives.spin-us: 0`` turns it off (read
#: when this module is imported: in a worker, when its process starts).
#: The spin grows with the last wait (1.5 times it, up to ``SPIN_MAX_S``): in a VM, waking a replica
#: blocked in ``poll`` took ~300 us (the sender's ``sendmsg`` ~160 us of it), more than a 50 us spin
#: covers, and two replicas that each block once stay out of step, each waiting for the other's
#: wake-up every time (4 KB all_reduce, 2 replicas: ~300 us per collective). Spinning past one
#: wake-up brings them back in step, where waits are a few us.
SPIN_S = _spin_seconds()
SPIN_MAX_S = 1e-3
SPIN_IF_WAITED_BELOW = max(4 * SPIN_S, SPIN_MAX_S)
#: While it spins, a waiter yields its core between looks (``sched_yield``: to a runnable process of
#: that core, if any, else it goes on at once). On a busy machine the peer (or whoever holds the
#: core) runs meanwhile: 4 KB all_reduce, 2 replicas, one other CPU-bound process: 172 us per
#: collective against 267 us for a plain 50 us spin (interleaved runs, medians); alone, the same.
SPIN_YIELD = True
#: Since a spinning waiter yields its core, it may spin when its group has more replicas on this host
#: than cores: the peer it waits for runs on its core meanwhile. (Before the yield, one core per replica
#: was the rule: a spinning replica held the core its peer needed.) On the 2-core development machine,
#: alternating runs, spinning against not, medians: 4 KB all_reduce, 3 replicas 235-291 against
#: 313-369 us, 4 replicas 404-485 against 649-808 us; barrier, 4 replicas 262-338 against 414-453 us;
#: SGD step and 4 MB all_reduce at 4 replicas within the noise (the waits of a large collective are
#: long: after them it does not spin). Beyond two replicas a core it was not measured, so it sleeps.
SPIN_REPLICAS_PER_CORE = 2
#: A take first spins on its lanes alone until every packet of its collective came, without the lock
#: (``ChannelReader._gather_spinning``); what the general wait did, back through the lock, the messages
#: and the condition at every packet, cost a 4 KB all_reduce of 4 replicas on 2 cores 161 against 131 us
#: (reduce-broadcast), 157 against 127 (all-gather-reduce), 3 replicas 126 against 91 (all-gather-reduce;
#: eight and six alternated rounds, medians; docs/performance.md, "The tenth run"). Off: the general wait
#: only (tests and benchmarks compare the two).
GATHER = True


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        return os.cpu_count() or 1


class Mailbox(ChannelReader):
    def __init__(self) -> None:
        # Held as ``with self._lock`` (the lock's own C methods; the condition's ``__enter__`` and ``__exit__`` are
        # Python, a microsecond of every take), waited on and notified through the condition.
        self._lock = threading.RLock()
        self._cond = threading.Condition(self._lock)
        self._messages: dict[tuple[int, int, int], Any] = {}
        self._aborted: dict[int, str] = {}
        # rank -> (first step, last step of its program, the step it returned in, its collectives there):
        # a peer whose function returned (the notebook says so, ``peer_finished``) sends nothing more.
        self._finished: dict[int, tuple[int, int, int, int]] = {}
        # Called (outside the lock) with each message dropped unread: a step moved on, a take
        # timed out or was aborted half-way. The shared-memory transport frees the sender's
        # segment there, so an abandoned message never pins or leaks one.
        self.on_drop: Callable[[Any], None] | None = None
        self._floor = -(1 << 62)  # the step begun last: packets of earlier steps are dropped on arrival
        self._channels: dict[int, Channel] = {}  # by file descriptor
        self._new_channels: list[Channel] = []  # added while a reader polls: it registers them
        self._reading = False  # a thread polls the channels (one at a time)
        self._poller: Any = None
        self._doorbell: tuple[int, int] | None = None  # (read end, write end) of the wake-up pipe
        self._last_wait = float("inf")  # seconds the last ``take`` waited (``SPIN_S``)
        self._cores = _cores()
        self._closed = False
        self._stale_doorbell: tuple[int, int] | None = None
        self._lane_ways: list[Any] | None = None  # (lane, payload maker) of every channel, when all have lanes
        self._sleepers = 0  # threads waiting on the condition (notified when the reading is free again)

    def put(self, step: int, seq: int, src: int, payload: Any) -> None:
        with self._lock:
            self._messages[(step, seq, src)] = payload
            self._cond.notify_all()
            if self._reading:
                self._ring()

    def abort(self, step: int, reason: str) -> None:
        with self._lock:
            self._aborted.setdefault(step, reason)
            self._cond.notify_all()
            if self._reading:
                self._ring()

    def peer_finished(self, rank: int, first: int, last: int, last_step: int, collectives: int) -> None:
        """Replica ``rank``'s function of the program of steps ``first``..``last`` returned, in step
        ``last_step`` after ``collectives`` collectives there: a take waiting for a later one of its
        packets fails at once (``ReplicaMismatchError``) instead of at its timeout."""
        with self._lock:
            self._finished[rank] = (first, last, last_step, collectives)
            self._cond.notify_all()
            if self._reading:
                self._ring()

    def _never_coming(self, step: int, seq: int, srcs: list[int], out: dict[int, Any]) -> list[str]:
        """Why packets of ``srcs`` for (step, seq) will never come: their replicas returned before."""
        why = []
        for src in srcs:
            f = self._finished.get(src)
            if src in out or f is None or not f[0] <= step <= f[1]:
                continue
            # It sent everything it ever will for this step before it returned (its reply came after),
            # so what is not here after a moment's grace was never sent.
            if step > f[2]:
                why.append(f"replica {src} returned from its function in an earlier step ({f[2]}) of this program")
            else:
                after = f" after {f[3]} collective(s)" if step == f[2] else ""
                why.append(f"replica {src} returned from its function{after} without entering it")
        return why

    # -- spinning (the rest of the channels' reading: mailbox_channels.py) -----------
    def _spin_budget(self) -> float:
        """How long a waiter polls without sleeping before it blocks (``SPIN_S``, more after a longer
        wait: ``SPIN_MAX_S``), 0 for not at all."""
        if SPIN_S <= 0 or self._last_wait >= SPIN_IF_WAITED_BELOW:
            return 0.0
        if len(self._channels) + len(self._new_channels) + 1 > SPIN_REPLICAS_PER_CORE * self._cores:
            return 0.0  # far more of the group's replicas on this host than cores
        return max(SPIN_S, min(SPIN_MAX_S, 1.5 * self._last_wait))

    @staticmethod
    def _yields() -> bool:
        return SPIN_YIELD

    @staticmethod
    def _spin(poller: Any, ways: list[Channel], spin: float) -> tuple[list[tuple[int, int]], bool]:
        """Look at the lanes, and poll the sockets every 16 looks (yielding the core between the others:
        ``SPIN_YIELD``), for up to ``spin`` s without sleeping: what ``poll`` found, and whether a lane
        has a packet."""
        end = time.perf_counter() + spin
        looks = 0
        try:
            while True:
                for c in ways:
                    if c.lane is not None and c.lane.ready():
                        return [], True
                if looks % 16 == 0:
                    ready = poller.poll(0)
                    if ready or time.perf_counter() >= end:
                        return ready, False
                elif SPIN_YIELD:
                    os.sched_yield()  # a runnable process of this core (a peer) goes first
                looks += 1
        except (TypeError, ValueError):  # a lane closed meanwhile
            return [], True

    def aborted(self, step: int) -> str | None:
        return self._aborted.get(step)  # (one dict read: atomic, no lock needed)

    def any_aborted(self) -> bool:
        """Whether some step not yet begun past was aborted (a wait outside ``take`` ends on it)."""
        return bool(self._aborted)

    def begin_step(self, step: int) -> None:
        """Forget what belongs to steps before ``step`` (later steps may already have messages)."""
        self._floor = step
        if self._channels and not self._reading:
            with self._lock:
                if not self._reading:  # read what waits in the channels (packets of steps gone are dropped)
                    self._reading = True
                    try:
                        if self._new_channels or self._channels_waiting():
                            self._read_channels(0.0)
                    finally:
                        self._reading = False
                        self._close_stale_doorbell()
        if not self._messages and not self._aborted and not self._finished:
            return  # the common case between steps without collectives (a fused loop's): no lock
        with self._lock:
            dropped = [self._messages.pop(k) for k in [k for k in self._messages if k[0] < step]]
            for s in [s for s in self._aborted if s < step]:
                del self._aborted[s]
            for r in [r for r, f in self._finished.items() if f[1] < step]:
                del self._finished[r]
        self._drop(dropped)

    def drain(self) -> None:
        """Drop every message and close the channels (the group is closing)."""
        self._close_channels()
        with self._lock:
            dropped = list(self._messages.values())
            self._messages.clear()
        self._drop(dropped)

    def _drop(self, messages: list[Any]) -> None:
        if self.on_drop is None:
            return
        for m in messages:
            try:
                self.on_drop(m)
            except Exception:  # noqa: BLE001, S110 - cleanup of an abandoned message must not fail a step
                pass

    def take(self, step: int, seq: int, srcs: list[int], timeout: float, what: str) -> dict[int, Any]:
        """Wait until a message from every rank in ``srcs`` has arrived for (step, seq)."""
        out: dict[int, Any] = {}
        t0 = time.perf_counter()
        try:
            got = self._take(step, seq, srcs, timeout, what, out)
            self._last_wait = time.perf_counter() - t0
            return got
        except BaseException:
            self._last_wait = float("inf")
            self._drop(list(out.values()))
            raise

    def _take(
        self, step: int, seq: int, srcs: list[int], timeout: float, what: str, out: dict[int, Any]
    ) -> dict[int, Any]:
        deadline = time.monotonic() + timeout
        grace_end: float | None = None
        never_end: float | None = None
        spin_first = True
        with self._lock:
            while True:
                for src in srcs:
                    if src not in out and (step, seq, src) in self._messages:
                        out[src] = self._messages.pop((step, seq, src))
                if len(out) == len(srcs):
                    return out
                if spin_first and GATHER:  # once: the lanes alone, until every packet came (mailbox_channels.py)
                    spin_first = False
                    if self._gather_spinning(step, seq, srcs, out):
                        continue
                if self._finished:
                    never = self._never_coming(step, seq, srcs, out)
                    if never:
                        now = time.monotonic()
                        never_end = now + ABORT_GRACE if never_end is None else never_end
                        if now >= never_end:
                            raise ReplicaMismatchError(f"{what} can never complete: {'; '.join(never)}")
                        self._wait(never_end - now)  # packets still in a channel are read here
                        continue
                reason = self._aborted.get(step)
                if reason is not None:
                    # Messages already on their way still complete the collective: a peer that had
                    # sent its part completes it too, so both apply what follows (or neither does).
                    now = time.monotonic()
                    grace_end = now + ABORT_GRACE if grace_end is None else grace_end
                    if now >= grace_end:
                        raise CollectiveAbortedError(f"{what} was aborted: {reason}")
                    self._wait(grace_end - now)
                    continue
                left = deadline - time.monotonic()
                if left <= 0:
                    missing = sorted(set(srcs) - set(out))
                    raise CollectiveTimeoutError(
                        f"{what} timed out after {timeout:g} s waiting for replica(s) {missing} "
                        f"(arrived: {sorted(out)}); see interdist.config.set_collective_timeout"
                    )
                self._wait(min(left, 0.5))
