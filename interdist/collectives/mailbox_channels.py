"""``Mailbox``'s channels: the sockets (and lanes) of its peers on this host, read by the thread that waits.

Whoever waits in ``Mailbox.take`` (or sends, in ``wait_writable``) reads the channels, one thread at a
time (``_reading``); packets that come another way and aborts wake it through the doorbell (a pipe).
How long it spins before it blocks (``_spin_budget``, ``_spin``) stays in ``mailbox.py``, with the
``SPIN_*`` settings it reads there at call time. A mixin of ``Mailbox`` (``mailbox.py``), whose
``__init__`` sets the state below; the module docstring there tells the whole design.
"""

from __future__ import annotations

import contextlib
import os
import select
import socket
import threading
import time
from typing import TYPE_CHECKING, Any

from interdist.collectives import lanes
from interdist.collectives.channels import Channel, LanePacket, Parser


class ChannelReader:
    """The channels of a mailbox and the reading of them (under the mailbox's lock, by one waiter)."""

    # Set by ``Mailbox.__init__`` (mailbox.py).
    _lock: threading.RLock
    _cond: threading.Condition
    _messages: dict[tuple[int, int, int], Any]
    _floor: int
    _channels: dict[int, Channel]
    _new_channels: list[Channel]
    _reading: bool
    _poller: Any
    _doorbell: tuple[int, int] | None
    _closed: bool
    _stale_doorbell: tuple[int, int] | None
    _aborted: dict[int, str]
    _finished: dict[int, tuple[int, int, int, int]]
    _lane_ways: list[tuple[lanes.Lane, LanePacket]] | None
    _sleepers: int

    if TYPE_CHECKING:  # ``Mailbox``'s (mailbox.py)

        def _spin_budget(self) -> float: ...

        @staticmethod
        def _spin(poller: Any, ways: list[Channel], spin: float) -> tuple[list[tuple[int, int]], bool]: ...

        def _drop(self, messages: list[Any]) -> None: ...

        @staticmethod
        def _yields() -> bool: ...

    def add_channel(self, sock: socket.socket, parse: Parser, lane_packet: LanePacket | None = None) -> None:
        """From now on, ``sock``'s packets are read by whoever waits in ``take`` (parsed by ``parse``),
        and those of the lane its peer offers on it, if any (made payloads by ``lane_packet``)."""
        channel = Channel(sock, parse, lane_packet)
        with self._lock:
            if self._closed:
                channel.close()
                return
            if self._doorbell is None:
                r, w = os.pipe()
                os.set_blocking(r, False)
                os.set_blocking(w, False)
                self._doorbell = (r, w)
                self._poller = select.poll()
                self._poller.register(r, select.POLLIN)
            self._new_channels.append(channel)
            if self._reading:
                self._ring()
            else:
                self._register_new()
                self._cond.notify_all()  # a waiter on the condition starts reading it

    def has_channels(self) -> bool:
        return bool(self._channels or self._new_channels)

    def _register_new(self) -> None:
        """Under the lock, with no reader polling: poll the channels added since."""
        for c in self._new_channels:
            self._channels[c.fd] = c
            self._lane_ways = None
            self._poller.register(c.fd, select.POLLIN)
        self._new_channels.clear()

    def _ring(self) -> None:
        """Wake the thread polling the channels (under the lock)."""
        if self._doorbell is not None:
            with contextlib.suppress(BlockingIOError, OSError):
                os.write(self._doorbell[1], b"!")

    def _channels_waiting(self) -> bool:
        """Under the lock, with ``_reading`` set: whether a lane holds a packet or a socket (or the doorbell) has
        bytes. Every program begins with this look (``Mailbox.begin_step``), on the way to the user's function:
        with it ``begin_step`` took 4.5 us where reading the channels made it 10 when nothing waited, as
        between most steps (2 replicas, medians of 2,000 programs)."""
        for c in self._channels.values():
            lane = c.lane
            if lane is not None:
                try:
                    if lane.ready():
                        return True
                except (TypeError, ValueError):  # closed meanwhile: the read sees to it
                    return True
        return bool(self._poller.poll(0))

    def _read_channels(self, timeout: float, writable: socket.socket | None = None, spin: float = 0.0) -> None:
        """Wait up to ``timeout`` s for a packet, the doorbell or (``writable``) room to write; store
        what came. ``spin``: poll without sleeping for up to that long first. Called with the lock held
        and ``_reading`` set; returns with the lock held."""
        self._register_new()
        poller = self._poller
        out_fd = -1 if writable is None else writable.fileno()
        if out_fd >= 0:  # (one socket may be a channel too: then it is polled both ways meanwhile)
            poller.register(out_fd, select.POLLOUT | (select.POLLIN if out_fd in self._channels else 0))
        ways = [c for c in self._channels.values() if c.lane is not None]  # channels with a lane
        self._cond.release()
        got: list[tuple[int, int, int, Any]] = []
        gone: list[Channel] = []
        try:
            ready: list[tuple[int, int]] = []
            for c in ways:
                got += c.read_lane()
            if not got:
                ready, came = self._spin(poller, ways, min(spin, timeout)) if spin > 0 else ([], False)
                if not ready and not came:
                    ready = self._block(poller, ways, timeout)
            for fd, _ in ready:
                if self._doorbell is not None and fd == self._doorbell[0]:
                    with contextlib.suppress(BlockingIOError, OSError):
                        os.read(fd, 4096)
                    continue
                channel = self._channels.get(fd)
                if channel is None:
                    continue  # the socket to write to
                packets = channel.read()
                if packets is None:
                    gone.append(channel)
                else:
                    got += packets
            for c in ways:  # (and a gone channel's last packets: sent before it went)
                got += c.read_lane()
        finally:
            if out_fd >= 0:
                with contextlib.suppress(KeyError, ValueError, OSError):
                    if out_fd in self._channels:
                        poller.register(out_fd, select.POLLIN)
                    else:
                        poller.unregister(out_fd)
            self._cond.acquire()
        for c in gone:
            self._channels.pop(c.fd, None)
            self._lane_ways = None
            with contextlib.suppress(KeyError, ValueError, OSError):
                poller.unregister(c.fd)
            c.close()
        if got or gone:
            self._cond.notify_all()
        self._store(got)

    def _store(self, got: list[tuple[int, int, int, Any]]) -> None:
        """Under the lock: keep the packets read for their takes; those of a step that moved on (aborted, or
        never taken) are dropped, outside the lock."""
        dropped = []
        for step, seq, src, payload in got:
            if step < self._floor:
                dropped.append(payload)
            else:
                self._messages[(step, seq, src)] = payload
        if dropped:
            self._cond.release()
            try:
                self._drop(dropped)
            finally:
                self._cond.acquire()

    def _gather_spinning(self, step: int, seq: int, srcs: list[int], out: dict[int, Any]) -> bool:
        """Under the lock, in ``take``, when packets of (step, seq) are missing: spin on the lanes alone (yielding
        the core between looks) until every one of ``srcs`` came into ``out``, for up to the spin budget, and
        with no lock held meanwhile. Packets of other collectives go to the messages. Stops early when a socket
        has bytes (the general wait reads them). What ``_read_channels`` and ``_spin`` do, without going back
        through the lock and the messages at every packet: a 4 KB all-reduce of 4 replicas gets its three
        packets one at a time. False (nothing done) when it does not apply: another thread reads the
        channels, there are channels not registered yet, a channel has no lane, the step was aborted or a
        peer returned (the general wait names those), or no spin (``_spin_budget``)."""
        if self._reading or self._new_channels or self._aborted or self._finished or not self._channels:
            return False
        spin = self._spin_budget()
        if spin <= 0:
            return False
        ways = self._lane_ways
        if ways is None:  # (made again whenever the channels change: a lane, once attached, stays)
            ways = [(c.lane, c.lane_packet) for c in self._channels.values() if c.lane and c.lane_packet]
            if len(ways) < len(self._channels):  # a channel without a lane
                return False
            self._lane_ways = ways
        want = [s for s in srcs if s not in out]
        self._reading = True
        self._cond.release()
        other: list[tuple[int, int, int, Any]] = []
        try:
            end = 0.0
            looks = 0
            while True:
                for lane, make in ways:
                    if lane.ready():
                        for st, sq, src, header, ref, buffers in lane.take():
                            payload = make(header, ref, buffers)
                            if st == step and sq == seq and src in want:
                                out[src] = payload
                                want.remove(src)
                            else:
                                other.append((st, sq, src, payload))
                if not want:
                    break
                if looks % 16 == 0:  # (the first look too: a packet may wait in a socket already)
                    now = time.perf_counter()
                    end = end or now + spin
                    if self._poller.poll(0) or now >= end:
                        break
                elif self._yields():
                    os.sched_yield()  # a runnable process of this core (a peer) goes first
                looks += 1
        except (TypeError, ValueError):  # a lane closed meanwhile (the group is closing)
            pass
        finally:
            self._cond.acquire()
            self._reading = False
            if self._stale_doorbell is not None:
                self._close_stale_doorbell()
            if self._sleepers:
                self._cond.notify_all()  # another waiter may take the reading over
            if other:
                self._store(other)
        return True

    @staticmethod
    def _block(poller: Any, ways: list[Channel], timeout: float) -> list[tuple[int, int]]:
        """Block in ``poll`` (the lanes' senders told to nudge this reader) up to ``timeout`` s, or
        ``lanes.RECHECK_S`` with lanes."""
        if not ways or timeout <= 0:
            return list(poller.poll(max(0.0, timeout) * 1000))
        try:
            for c in ways:
                if c.lane is not None:
                    c.lane.sleep(True)
            lanes.fence()  # then look once more: a sender that published before it saw no sleeper
            if any(c.lane is not None and c.lane.ready() for c in ways):
                return []
            return list(poller.poll(max(0.0, min(timeout, lanes.RECHECK_S)) * 1000))
        except (TypeError, ValueError):  # a lane closed meanwhile
            return []
        finally:
            for c in ways:
                with contextlib.suppress(TypeError, ValueError, AttributeError):
                    c.lane.sleep(False)  # type: ignore[union-attr]

    def _wait(self, timeout: float) -> None:
        """Under the lock: wait up to ``timeout`` s for a put, an abort or (read here) a packet."""
        if (self._channels or self._new_channels) and not self._reading:
            self._reading = True
            try:
                self._read_channels(timeout, spin=self._spin_budget())
            finally:
                self._reading = False
                self._close_stale_doorbell()
                self._cond.notify_all()  # another waiter may take the reading over
        else:
            self._sleepers += 1
            try:
                self._cond.wait(timeout)
            finally:
                self._sleepers -= 1

    def wait_writable(self, sock: socket.socket, timeout: float) -> None:
        """Wait up to ``timeout`` s until ``sock`` takes more bytes, reading this mailbox's channels
        meanwhile (a peer that is itself blocked sending to us is then unblocked)."""
        with self._lock:
            if (self._channels or self._new_channels) and not self._reading:
                self._reading = True
                try:
                    self._read_channels(timeout, writable=sock)
                finally:
                    self._reading = False
                    self._close_stale_doorbell()
                    self._cond.notify_all()
                return
        poller = select.poll()
        poller.register(sock, select.POLLOUT)
        poller.poll(max(0.0, timeout) * 1000)

    def _close_channels(self) -> None:
        with self._lock:
            self._closed = True
            channels = [*self._channels.values(), *self._new_channels]
            self._channels.clear()
            self._lane_ways = None
            self._new_channels.clear()
            doorbell, self._doorbell = self._doorbell, None
            if doorbell is not None and self._reading:
                with contextlib.suppress(OSError):
                    os.write(doorbell[1], b"!")
                self._stale_doorbell = doorbell  # a reader polls it now: it closes it when done
                doorbell = None
        for c in channels:
            c.close()
        if doorbell is not None:
            for fd in doorbell:
                os.close(fd)

    def _close_stale_doorbell(self) -> None:
        """Under the lock, once no reader polls: close a doorbell left by ``_close_channels``."""
        stale, self._stale_doorbell = self._stale_doorbell, None
        for fd in stale or ():
            with contextlib.suppress(OSError):
                os.close(fd)
