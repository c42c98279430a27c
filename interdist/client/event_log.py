"""The notebook's log of interdist events (``strategy.events``).

Events come back with each step's reply in their wire form and are expanded into ``interdist.events``
dataclasses only when read, unless a listener (the inline dashboard) wants them at once.

While a live feed is on (``start_live``: the inline dashboard, reading the scheduler's ``interdist``
topic, see ``interdist.dashboard.live``), events also come in as the workers log them, during the step;
each then arrives twice (live, and with the reply), so the log keeps the keys of recent events and drops
what it already has. Without a live feed none of this runs: the step's path is unchanged.
"""

from __future__ import annotations

import itertools
import json
import os
import threading
from collections import deque
from collections.abc import Callable
from typing import Any

from interdist import events
from interdist.chrome_trace import to_chrome_trace
from interdist.events import Event


class EventLog:
    """The events of one strategy's replicas, as they arrive in the notebook.

    Replies (and, while a live feed is on, the workers' batches) bring events in their wire form.
    They are kept so, and turned into ``Event`` objects only when read (``events``, ``since``), or at
    once for a synchronous listener: a fused call of 64 steps brings 128 of them, and building them
    at every call cost the notebook ~0.7 ms of CPU that the replicas, sharing its cores, could use.
    The inline dashboard reads with ``since`` from its own thread, five times a second: the step's
    thread only appends the reply's messages to a list, dashboard or not. Past ``RAW_KEPT`` unread
    events the log keeps them in their compact form (``events.compact``: tuples the garbage collector
    stops tracking), and makes the ``Event`` objects when they are read: 100,000 kept instances made
    every full collection of the notebook's process 72% longer and caused one every ~70,000 events.
    """

    def __init__(self, maxlen: int = 100_000, max_bytes: int | None = None) -> None:
        self._events: deque[tuple[Any, ...]] = deque(maxlen=maxlen)  # compact (``events.compact``)
        # Bounded by memory too: events that carry long texts (a traceback) or sketches weigh more than
        # the few hundred bytes of most; the oldest go first when either bound is reached.
        self.max_bytes = MAX_BYTES if max_bytes is None else max_bytes
        self._sizes: deque[int] = deque()  # each kept event's approximate size, as ``_events``
        self.nbytes = 0  # their sum: the log's approximate memory
        self._raw: list[dict[str, Any]] = []  # wire messages not expanded yet, in arrival order
        self._raw_events = 0  # the events they hold (``events.weight``: a record holds many)
        self._cond = threading.Condition()
        self.listeners: list[Callable[[Event], None]] = []
        self._expanded = 0  # events ever put in ``_events`` (positions for ``since``)
        self._live = 0  # live feeds on (start_live - stop_live)
        self._seen: dict[tuple[Any, ...], None] | None = None  # keys of recent events while live, oldest first

    @property
    def events(self) -> deque[Event]:
        """The last ``maxlen`` events, oldest first (made when read: a new deque at each read)."""
        with self._cond:
            self._expand()
            return deque(map(events.from_compact, self._events), maxlen=self._events.maxlen)

    def since(self, position: int) -> tuple[list[Event], int]:
        """The events kept after ``position``, oldest first, and the position to ask from next time
        (``since(0)``: all that are kept). Events that left the log meanwhile (``maxlen``) are skipped."""
        with self._cond:
            self._expand()
            n = min(self._expanded - position, len(self._events))
            if n <= 0:
                return [], self._expanded
            new = list(itertools.islice(reversed(self._events), n))
            new.reverse()
            return list(map(events.from_compact, new)), self._expanded

    def _expand(self) -> list[tuple[Any, ...]]:  # with the lock held; the events kept now (compact)
        if not self._raw:
            return []
        raw, self._raw = self._raw, []
        self._raw_events = 0
        batch = self._unseen(raw) if self._seen is not None else [e for m in raw for e in events.compact(m)]
        self._keep(batch)
        return batch

    def _keep(self, batch: list[tuple[Any, ...]]) -> None:  # with the lock held
        # The batch at once, not event by event: a loop of small all-reduces brings four events per
        # collective, and their keeping was a fifth of what the notebook spent on each (1.4 us an event).
        events_, sizes, maxlen = self._events, self._sizes, self._events.maxlen or 0
        n = len(batch)
        kept = batch if not maxlen or n <= maxlen else batch[n - maxlen :]
        new_sizes = [_values_bytes(e, 1) for e in kept]
        for _ in range(len(events_) + len(kept) - maxlen if maxlen else 0):  # the oldest, pushed out
            events_.popleft()
            self.nbytes -= sizes.popleft()
        events_.extend(kept)
        sizes.extend(new_sizes)
        self.nbytes += sum(new_sizes)
        while self.nbytes > self.max_bytes and len(events_) > 1:
            events_.popleft()
            self.nbytes -= sizes.popleft()
        self._expanded += n

    def add_msgs(self, msgs: Any) -> None:
        """A reply's event messages, or the notebook's own (``DaskGroup.emit``): kept as they are, unless a
        listener wants the events at once. (While live, the notebook's also come back in the scheduler's
        topic, where it sends them for the Dask pages: expanded with the live ones, that copy is dropped.)"""
        if not msgs:
            return
        listeners = list(self.listeners)
        with self._cond:
            self._raw.extend(msgs)
            self._raw_events += sum(map(events.weight, msgs))
            # bounded: wire messages are expanded (and so counted against ``max_bytes``) once RAW_KEPT events wait,
            # in batches of that size: each is expanded once either way, and no step's thread expands 100,000 at once
            batch = self._expand() if listeners or self._raw_events > min(self._events.maxlen or 0, RAW_KEPT) else []
            self._cond.notify_all()  # one wake-up per reply, not per event
        _tell(listeners, batch)

    # -- the live feed ----------------------------------------------------------------
    def start_live(self) -> None:
        """Events will also come through ``add_live``: from now on each is kept once."""
        with self._cond:
            self._expand()
            if self._live == 0:
                # An event that came with a reply before the feed started may come again in the
                # worker's next batch: the keys of the recent ones are remembered from the start.
                recent = list(self._events)[-MAX_SEEN:]
                self._seen = dict.fromkeys(map(events.compact_key, recent))
            self._live += 1

    def stop_live(self) -> None:
        with self._cond:
            self._expand()  # what came while live is deduplicated as such
            self._live = max(0, self._live - 1)
            if self._live == 0:
                self._seen = None

    def add_live(self, msgs: list[dict[str, Any]]) -> None:
        """Wire messages as a worker logged them (during a step): kept with the replies' ones, each event
        once (the duplicates are dropped when they are expanded). Called on the client's event loop."""
        listeners = list(self.listeners)
        with self._cond:
            if self._seen is None:
                return  # the feed stopped: the replies bring these
            self._raw.extend(msgs)
            self._raw_events += sum(map(events.weight, msgs))
            batch = self._expand() if listeners else []
            self._cond.notify_all()
        _tell(listeners, batch)

    def _unseen(self, msgs: Any) -> list[tuple[Any, ...]]:  # with the lock held, live; compact events
        seen = self._seen
        assert seen is not None
        out: list[tuple[Any, ...]] = []
        for m in msgs:
            for e in events.compact(m):  # (a record of many steps or collectives: its events one by one)
                key = events.compact_key(e)
                if key not in seen:
                    seen[key] = None
                    out.append(e)
        if len(seen) > 2 * MAX_SEEN:  # forget the oldest half: a duplicate comes within seconds
            for key in list(itertools.islice(seen, len(seen) - MAX_SEEN)):
                del seen[key]
        return out

    def add(self, event: Event) -> None:
        with self._cond:
            self._expand()
            self._keep([events.of_event(event)])
            self._cond.notify_all()
        _tell(list(self.listeners), [events.of_event(event)])

    def to_chrome_trace(self, path: str | os.PathLike[str] | None = None) -> dict[str, Any]:
        """The events kept as a Chrome trace for Perfetto (``chrome_trace.to_chrome_trace``); written to ``path``
        (JSON) when given. Open it at https://ui.perfetto.dev or in ``chrome://tracing``."""
        trace = to_chrome_trace(list(self.events))
        if path is not None:
            with open(path, "w", encoding="utf-8") as f:
                json.dump(trace, f)
        return trace

    def report(
        self,
        path: str | os.PathLike[str],
        title: str = "interdist report",
        workers: list[tuple[str, str]] | None = None,
    ) -> Any:
        """Write a one-file HTML report of these events (``interdist.dashboard.report``): the collective
        timeline and timings, the values, logged scalars and the placement, with BokehJS inline (no CDN,
        no kernel needed to open it). ``workers``: each replica's (worker address, device), for the
        placement picture. The path, as a ``pathlib.Path``."""
        from interdist.dashboard.report import write_report  # Bokeh: loaded only for a report

        evs = list(self.events)
        label = f"replica group {evs[0].group}" if evs else "no events"
        return write_report(path, [(label, evs, workers or [])] if evs else [], title=title)

    def wait_for(self, predicate: Callable[[list[Event]], bool], timeout: float = 10.0) -> list[Event]:
        def ready() -> bool:
            self._expand()
            return predicate(list(map(events.from_compact, self._events)))

        with self._cond:
            self._cond.wait_for(ready, timeout)
            self._expand()
            return list(map(events.from_compact, self._events))


MAX_SEEN = 20_000  # keys kept for deduplication: far more than a few seconds of events
#: The most events kept unexpanded, in wire messages (not yet counted in the byte bound): a few MiB at most.
RAW_KEPT = 4096
#: The most memory (bytes, approximately: ``approx_bytes``) a strategy's event log keeps; the oldest go first.
MAX_BYTES = 48 * 2**20


def approx_bytes(e: Event) -> int:
    """An event's memory, roughly: the object and its fields (CPython: ~56 bytes an object, 24 a float,
    49 + its length a str, 8 a tuple's slot). Cheap: it runs once per event kept."""
    return _values_bytes(events.of_event(e), 1)


def _values_bytes(values: tuple[Any, ...], start: int) -> int:
    """``approx_bytes`` of an event from its fields' values (``values[start:]``: a compact event's)."""
    size = 200
    for v in values[start:]:
        t = type(v)
        if t is str:
            size += 49 + len(v)
        elif t is tuple:
            size += 56 + 32 * len(v) + sum(len(x) for x in v if type(x) is str)
        else:
            size += 24
    return size


def event_key(e: Event) -> tuple[Any, ...]:
    """What makes an event unique: (kind, group, step, replica, seq or var_id, time)."""
    return (e.kind, e.group, e.step, e.replica, getattr(e, "seq", getattr(e, "var_id", None)), e.time)


def _tell(listeners: list[Callable[[Event], None]], batch: list[tuple[Any, ...]]) -> None:
    """Give each listener the events of ``batch`` (compact: made here, once, only when someone listens)."""
    if not listeners or not batch:
        return
    made = list(map(events.from_compact, batch))
    for listener in listeners:
        for event in made:
            try:
                listener(event)
            except Exception:  # noqa: BLE001 - a broken view must not break the strategy
                continue
