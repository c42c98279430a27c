"""Which replicas are frozen, asked while the notebook waits for a step.

A replica whose process is stopped (SIGSTOP, a debugger holding it, a laptop's suspended VM
process) answers nothing: before this, its peers waited for it until their collective timeout
(60 s by default) and the notebook reported it stuck ten seconds later. A replica that is merely
slow (a long computation) is alive: it must be shown as slow, never failed.

So, while a step runs longer than ``CHECK_EVERY`` seconds, the notebook asks each replica it is
still waiting for:

- on this host (the worker's ``host`` is a local address; its process id is known from the embedded
  cluster's worker processes, or was asked once when the strategy was made): is
  the process stopped (``psutil``'s ``stopped``/``tracing-stop``)? One that stays stopped for
  ``settings.frozen_after`` seconds (5 by default; a profiler's sampling stop lasts milliseconds)
  is frozen;
- on another host: the scheduler's last heartbeat from its worker (sent from the worker's own
  event-loop thread, which a busy replica does not block) is older than ``2 * frozen_after`` plus
  the heartbeat interval: frozen, or cut off.

``frozen(ranks)`` returns, for each frozen rank, the reason the user reads and how long the process
has been seen stopped. That time is measured by continuous observation: a process seen stopped at
one check and again at the next counts from the first; one not checked for a while (between steps,
or a replica resumed and stopped again between two checks) starts a new count, so a second freeze
is never reported early with the first one's age.
"""

from __future__ import annotations

import logging
import socket
import time
from dataclasses import dataclass
from typing import Any

from interdist.config import settings

logger = logging.getLogger("interdist")

#: How often (seconds) a waiting notebook checks the replicas it is still waiting for.
CHECK_EVERY = 1.0
#: How long one check waits for the scheduler's list of workers: a scheduler that stops answering must not
#: stop the wait it is checking for (the step's replies come from the replicas, not through it).
SCHEDULER_TIMEOUT = 2.0
_LOOPBACK = {"127.0.0.1", "localhost", "::1"}


def _local_hosts() -> set[str]:
    hosts = set(_LOOPBACK) | {socket.gethostname()}
    try:
        import psutil

        for addrs in psutil.net_if_addrs().values():
            hosts.update(a.address for a in addrs if a.family in (socket.AF_INET, socket.AF_INET6))
    except Exception:  # noqa: BLE001, S110 - without interface addresses, loopback workers still count
        pass
    return hosts


def _host_of(address: str) -> str:
    """``127.0.0.1`` of ``tls://127.0.0.1:40387`` (``[::1]`` of an IPv6 address without its brackets)."""
    host = address.split("://", 1)[-1].rsplit(":", 1)[0]
    return host.strip("[]")


def _stopped(pid: int) -> bool | None:
    """Whether process ``pid`` of this host is stopped; None if it cannot be told."""
    try:
        import psutil

        status = psutil.Process(pid).status()
    except Exception:  # noqa: BLE001 - gone (the lost-worker path reports it) or not ours to see
        return None
    return status in ("stopped", "tracing-stop")


@dataclass(frozen=True)
class Frozen:
    """A frozen replica: why (the words of the error), and for how long it was seen so."""

    reason: str
    stopped_s: float


class Liveness:
    """Frozen-replica checks for the workers at ``addresses`` (by rank) of ``client``'s cluster."""

    def __init__(self, client: Any, addresses: list[str]) -> None:
        self.client = client
        self.addresses = addresses
        # rank -> (first seen stopped, last seen stopped), monotonic: a run of checks that saw it stopped
        self._stopped: dict[int, tuple[float, float]] = {}
        self._local: set[str] | None = None
        self._pids: dict[str, int] = {}

    def learn_pids(self, timeout: float = 10.0) -> None:
        """The workers' process ids (the scheduler does not know them): an embedded cluster's from its
        worker processes, at every check (a restarted worker has a new one); others' asked once, now,
        while every worker answers."""
        if self._embedded_pids():
            return
        try:
            import os

            # Client.run passes unknown keywords to the function (os.getpid(timeout=...) raised TypeError
            # on every worker): the bound goes on the call instead.
            pids = self.client.sync(
                self.client._run, os.getpid, workers=self.addresses, wait=True, callback_timeout=timeout
            )
            self._pids = {a: int(p) for a, p in pids.items()}
        except Exception as exc:  # noqa: BLE001 - without pids, the heartbeat check still works
            logger.debug("interdist: could not learn the workers' pids: %s", exc)

    def _embedded_pids(self) -> dict[str, int]:
        workers = getattr(getattr(self.client, "cluster", None), "workers", None)
        if not isinstance(workers, dict):
            return {}
        return {w.address: w.pid for w in workers.values() if getattr(w, "pid", None) and hasattr(w, "address")}

    def _workers(self) -> dict[str, Any]:
        # client.scheduler_info() waits as long as the scheduler takes: its identity call, bounded instead
        info = self.client.sync(self.client.scheduler.identity, n_workers=-1, callback_timeout=SCHEDULER_TIMEOUT)
        workers: dict[str, Any] = info.get("workers", {})
        return workers

    def frozen(self, ranks: list[int]) -> dict[int, Frozen]:
        """The frozen ranks among ``ranks``, each with why. Never raises (a failed check finds none)."""
        if self._local is None:
            self._local = _local_hosts()
        local = self._local
        pids = self._embedded_pids()
        # A process of this host seen stopped is told by its state alone: the scheduler is then not asked at
        # this check, so one that answers slowly (up to SCHEDULER_TIMEOUT) does not space the checks out and
        # delay naming the freeze (the count of how long it was stopped needs a check about every second).
        # Otherwise it is asked, as before: for a lost worker (gone from it) and remote workers' heartbeats.
        seen_stopped = any(
            _host_of(self.addresses[r]) in local
            and (pid := pids.get(self.addresses[r]) or self._pids.get(self.addresses[r]))
            and _stopped(pid)
            for r in ranks
        )
        workers: dict[str, Any] | None = None
        if not seen_stopped:
            try:
                workers = self._workers()
            except Exception as exc:  # noqa: BLE001 - the scheduler is slow or unreachable: the processes still tell
                logger.debug("interdist: the scheduler did not answer a liveness check: %s", exc)
        now_mono, now = time.monotonic(), time.time()
        found: dict[int, Frozen] = {}
        for rank in ranks:
            address = self.addresses[rank]
            # Without the scheduler's answer, a worker of this host is still watched through its process.
            w = workers.get(address) if workers is not None else {"host": _host_of(address)}
            if w is None:
                continue  # gone from the scheduler: a lost worker, reported as such
            pid = pids.get(self.addresses[rank]) or self._pids.get(self.addresses[rank])
            stopped = _stopped(pid) if pid and str(w.get("host", "")) in local else None
            if stopped is not None:
                if not stopped:
                    self._stopped.pop(rank, None)
                    continue
                first, last = self._stopped.get(rank, (now_mono, now_mono))
                if now_mono - last > 2 * CHECK_EVERY + SCHEDULER_TIMEOUT + 1.0:
                    first = now_mono  # not watched in between: it may have run meanwhile, count anew
                self._stopped[rank] = (first, now_mono)
                seen = now_mono - first
                if seen >= settings.frozen_after:
                    found[rank] = Frozen(
                        f"its worker process (pid {pid}) has been stopped for {seen:.1f} s "
                        "(SIGSTOP, a debugger, a suspended process): it runs nothing and answers nothing",
                        seen,
                    )
                continue
            if workers is None:
                continue  # no heartbeat to read without the scheduler
            last_seen = w.get("last_seen")
            if isinstance(last_seen, (int, float)) and now - last_seen > 2 * settings.frozen_after + 5:
                found[rank] = Frozen(
                    f"its worker at {self.addresses[rank]} has not sent a heartbeat for {now - last_seen:.0f} s "
                    "(frozen, or cut off from the scheduler)",
                    now - last_seen,
                )
        for rank in found:
            self._stopped.pop(rank, None)  # reported: a later freeze is counted from its own start
        return found
