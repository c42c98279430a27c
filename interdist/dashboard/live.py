"""Events during a step: the notebook reads the scheduler's ``interdist`` topic while a dashboard is open.

A step's events reach ``strategy.events`` with its reply, so without this an inline
dashboard sees nothing of a step until it ends: during a hang its watchdog said "OK"
while the Dask page (fed from the scheduler's topic) showed the stuck collective.
Each worker logs its events to that topic in batches (``worker/plugin.py``, every
250 ms); the scheduler forwards every batch to the clients subscribed to the topic
(``Client.subscribe_topic``), on the client's event loop. ``LiveFeed`` hands the
batches of its strategy's replica group to ``EventLog.add_live``, which drops the
events the replies bring again.

A client has one handler per topic, so one ``_Fanout`` per client subscribes and
hands each batch to every feed on that client (two strategies may share a pooled
cluster's client). Nothing here runs without an open dashboard: the step's path is
the same as before.
"""

from __future__ import annotations

import itertools
import logging
import threading
from collections.abc import Callable
from typing import Any

from interdist import events

logger = logging.getLogger("interdist")

Handler = Callable[[list[dict[str, Any]]], None]


class _Fanout:
    """The topic's handler on one client: unpacks each batch once, and hands it to each feed's group."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self.feeds: dict[int, tuple[str, Handler]] = {}
        self.previous: Any = client._event_handlers.get(events.TOPIC)  # someone else's handler: still called

    def __call__(self, event: Any) -> None:
        if self.previous is not None:
            try:
                self.previous(event)
            except Exception:
                logger.debug("interdist: the previous %s handler failed", events.TOPIC, exc_info=True)
        try:
            _, msg = event
            msgs = events.unpack_batch(msg)
        except Exception:
            logger.debug("interdist: skipped a malformed %s batch", events.TOPIC, exc_info=True)
            return
        if not msgs:
            return
        for group, handler in list(self.feeds.values()):
            mine = [m for m in msgs if m.get("group") == group]  # a worker's batch holds one group, mostly
            if mine:
                try:
                    handler(mine)
                except Exception:
                    logger.debug("interdist: a live feed failed", exc_info=True)


_lock = threading.Lock()
_fanouts: dict[int, _Fanout] = {}  # id(client) -> its handler
_tokens = itertools.count(1)


def subscribe(client: Any, group: str, handler: Handler) -> int:
    """Call ``handler`` with the wire messages of ``group`` in each batch the workers log; a token."""
    with _lock:
        fan = _fanouts.get(id(client))
        if fan is None or fan.client is not client:
            fan = _fanouts[id(client)] = _Fanout(client)
            client.subscribe_topic(events.TOPIC, fan)
        token = next(_tokens)
        fan.feeds[token] = (group, handler)
        return token


def unsubscribe(client: Any, token: int) -> None:
    with _lock:
        fan = _fanouts.get(id(client))
        if fan is None:
            return
        fan.feeds.pop(token, None)
        if fan.feeds:
            return
        del _fanouts[id(client)]
        try:
            if fan.previous is not None:
                client.subscribe_topic(events.TOPIC, fan.previous)
            else:
                client.unsubscribe_topic(events.TOPIC)
        except Exception:  # the client is closing: nothing to unsubscribe from
            logger.debug("interdist: could not unsubscribe from %s", events.TOPIC, exc_info=True)


class LiveFeed:
    """Events of ``strategy``'s replicas into ``strategy.events`` as the workers log them, until ``close``."""

    def __init__(self, strategy: Any) -> None:
        self._log = strategy.events
        self._client: Any = None
        self._token: int | None = None
        client = getattr(getattr(strategy, "_lease", None), "client", None)
        group = getattr(strategy, "_group_id", None)
        if client is None or group is None or not hasattr(client, "subscribe_topic"):
            return  # no scheduler (replicas in the notebook): the replies are all there is
        self._log.start_live()
        try:
            self._token = subscribe(client, str(group), self._log.add_live)
        except Exception:
            self._log.stop_live()
            logger.debug("interdist: no live events (could not subscribe)", exc_info=True)
            return
        self._client = client

    @property
    def active(self) -> bool:
        return self._token is not None

    def close(self) -> None:
        if self._token is None:
            return
        unsubscribe(self._client, self._token)
        self._token = None
        self._log.stop_live()
