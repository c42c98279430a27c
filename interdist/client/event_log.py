"""The notebook's log of interdist events (``strategy.events``).

Events come back with each step's reply in their wire form and are expanded into ``interdist.events``
dataclasses only when read, unless a listener (the inline dashboard) wants them at once.
"""

from __future__ import annotations

import json
import os
import threading
from collections import deque
from collections.abc import Callable
from typing import Any

from interdist import events
from interdist.events import Event


class EventLog:
    """The events of one strategy's replicas, as they arrive in the notebook.

    Replies bring events in their wire form. Without listeners they are kept so and turned into
    ``Event`` objects only when ``events`` is read: a fused call of 64 steps brings 128 of them,
    and building them at every call cost the notebook ~0.7 ms of CPU that the replicas, sharing
    its cores, could use.
    """

    def __init__(self, maxlen: int = 100_000) -> None:
        self._events: deque[Event] = deque(maxlen=maxlen)
        self._raw: list[dict[str, Any]] = []  # wire messages not expanded yet, in arrival order
        self._cond = threading.Condition()
        self.listeners: list[Callable[[Event], None]] = []

    @property
    def events(self) -> deque[Event]:
        """The last ``maxlen`` events, oldest first."""
        with self._cond:
            self._expand()
            return self._events

    def _expand(self) -> None:  # with the lock held
        if self._raw:
            raw, self._raw = self._raw, []
            self._events.extend(e for m in raw for e in events.expand(m))

    def add_msgs(self, msgs: Any) -> None:
        if not msgs:
            return
        listeners = list(self.listeners)
        batch: list[Event] = []
        with self._cond:
            if listeners:
                self._expand()
                batch = [e for m in msgs for e in events.expand(m)]
                self._events.extend(batch)
            else:
                self._raw.extend(msgs)
                if len(self._raw) > (self._events.maxlen or 0):
                    self._expand()  # bounded: never more unexpanded than the log keeps
            self._cond.notify_all()  # one wake-up per reply, not per event
        _tell(listeners, batch)

    def add(self, event: Event) -> None:
        with self._cond:
            self._expand()
            self._events.append(event)
            self._cond.notify_all()
        _tell(list(self.listeners), [event])

    def to_chrome_trace(self, path: str | os.PathLike[str] | None = None) -> dict[str, Any]:
        """The events kept as a Chrome trace for Perfetto (``events.to_chrome_trace``); written to ``path``
        (JSON) when given. Open it at https://ui.perfetto.dev or in ``chrome://tracing``."""
        trace = events.to_chrome_trace(list(self.events))
        if path is not None:
            with open(path, "w", encoding="utf-8") as f:
                json.dump(trace, f)
        return trace

    def wait_for(self, predicate: Callable[[list[Event]], bool], timeout: float = 10.0) -> list[Event]:
        def ready() -> bool:
            self._expand()
            return predicate(list(self._events))

        with self._cond:
            self._cond.wait_for(ready, timeout)
            self._expand()
            return list(self._events)


def _tell(listeners: list[Callable[[Event], None]], batch: list[Event]) -> None:
    for listener in listeners:
        for event in batch:
            try:
                listener(event)
            except Exception:  # noqa: BLE001 - a broken view must not break the strategy
                continue
