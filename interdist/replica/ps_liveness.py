"""Whether a ParameterServerStrategy task that a call waits for is frozen (issue 17).

A process stopped by SIGSTOP (a debugger, a suspended VM) keeps its sockets: a connection to it is
accepted by the kernel, a message to it is buffered, and nothing ever answers. So every call to a
ps task (and the coordinator's call of a step on a worker task) is watched while it waits
(``ps_step.Connection``): every ``CHECK_EVERY`` seconds a ``Judge`` looks at the task.

- On this host (the task told its process id and host key once, ``whoami``): the process state in
  ``/proc/<pid>/stat``. Stopped (``T``, ``t``) for ``settings.frozen_after`` seconds: frozen. Running:
  never frozen, however long the call takes (slow, alive), unless its event loop has not answered a
  probe for ``settings.collective_timeout`` seconds (every wait is bounded).
- Elsewhere (or pid unknown): a probe (Dask's ``identity`` handler, answered by the task's event
  loop, which a busy step does not block) unanswered for ``2 * settings.frozen_after`` seconds.

A gap between two checks far longer than ``CHECK_EVERY`` means this process was stopped itself: what
was seen before it is forgotten, so a resumed process never blames the task it was waiting for.
"""

from __future__ import annotations

import hashlib
import os
import socket
import time
from typing import Any

from interdist.config import settings

#: Seconds between two looks at a task a call waits for (the first look comes sooner: ``FIRST_CHECK``).
CHECK_EVERY = 1.0
FIRST_CHECK = 0.25
#: A gap this much longer than ``CHECK_EVERY`` between two checks: this process itself was stopped.
_GAP = 2.0

# address -> (pid, host key) of the tasks that told them (``whoami``); learned once per address.
peers: dict[str, tuple[int, str]] = {}
_host_key: str | None = None


def host_key() -> str:
    """Who may read this process's pids in ``/proc``: the host, its boot and the pid namespace."""
    global _host_key
    if _host_key is None:
        parts = [socket.gethostname()]
        try:
            with open("/proc/sys/kernel/random/boot_id") as f:
                parts.append(f.read().strip())
            parts.append(str(os.stat("/proc/self/ns/pid").st_ino))
        except OSError:
            parts.append("no-proc")
        _host_key = hashlib.sha1("|".join(parts).encode(), usedforsecurity=False).hexdigest()[:16]
    return _host_key


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` of this host exists (someone else's counts: it is alive)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # PermissionError: someone else's process, alive
        return True
    return True


def whoami() -> dict[str, Any]:
    """What a task tells about itself: its pid and its host key."""
    return {"pid": os.getpid(), "host": host_key()}


def learn(address: str, info: Any) -> None:
    if isinstance(info, dict) and isinstance(info.get("pid"), int) and isinstance(info.get("host"), str):
        peers[address] = (info["pid"], info["host"])


def local_pid(address: str) -> int | None:
    """The pid of the task at ``address`` if it runs on this host (and told it), else None."""
    known = peers.get(address)
    return known[0] if known is not None and known[1] == host_key() else None


def process_state(pid: int) -> str | None:
    """The state letter of process ``pid`` (``R``, ``S``, ``T``...), ``"gone"`` if there is none,
    None when it cannot be told (no ``/proc``)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        return "gone"
    except OSError:
        return None
    tail = raw[raw.rfind(b")") + 2 :]  # the name, in parentheses, may hold spaces
    return tail[:1].decode() if tail else None


class Judge:
    """The looks at one task while one call waits for it; ``verdict`` says why it is frozen, or None."""

    def __init__(self, address: str) -> None:
        self.address = address
        self.stopped_since: float | None = None
        self.silent_since: float | None = None  # the oldest unanswered probe's start
        self.last_check: float | None = None
        self.gone = False  # its process was seen gone (this host only)
        self.reset = False  # set when this process was found stopped itself: the probe in flight is void

    def probe_bound(self) -> float:
        """How long a probe may go unanswered: short where the process state cannot be seen."""
        return settings.collective_timeout if local_pid(self.address) else 2 * settings.frozen_after

    def look(self, now: float) -> str | None:
        """One look at the process: why it is frozen, or None (``gone`` set when it is gone)."""
        if self.last_check is not None and now - self.last_check > CHECK_EVERY + _GAP:
            self.stopped_since = self.silent_since = None  # this process was stopped: start over
            self.reset = True
        self.last_check = now
        pid = local_pid(self.address)
        if pid is None:
            return None
        state = process_state(pid)
        if state == "gone":
            peers.pop(self.address, None)  # a restarted task at the same address tells its new pid
            self.gone = True
            return None
        if state in ("T", "t"):
            self.stopped_since = self.stopped_since if self.stopped_since is not None else now
            if now - self.stopped_since >= settings.frozen_after:
                return (
                    f"its process (pid {pid}) has been stopped for {now - self.stopped_since:.0f} s (SIGSTOP, a "
                    "debugger, a suspended process): it runs nothing and answers nothing"
                )
        elif state is not None:
            self.stopped_since = None
        return None

    def heard(self, answered: bool, started: float) -> None:
        """A probe started at ``started`` ended: answered, or not."""
        if answered:
            self.silent_since = None
        elif self.silent_since is None:
            self.silent_since = started

    def silence(self, now: float, pending_since: float | None) -> str | None:
        """Why the task is frozen by its silence, if it is (``pending_since``: the probe in flight)."""
        since = self.silent_since if self.silent_since is not None else pending_since
        if since is None or now - since < self.probe_bound():
            return None
        if local_pid(self.address):
            return (
                f"its process (pid {local_pid(self.address)}) runs, but its event loop has not answered for "
                f"{now - since:.0f} s"
            )
        return f"it has not answered a liveness probe for {now - since:.0f} s (stopped, or cut off)"


def still_frozen(address: str, answers: bool | None) -> bool:
    """Whether a task found frozen before still is: stopped by its process state when that can be
    seen, else not answering a short probe (``answers``)."""
    pid = local_pid(address)
    state = process_state(pid) if pid is not None else None
    if state == "gone":
        return False  # dead, not frozen: the call finds it lost
    if state is not None:
        return state in ("T", "t")
    return not answers


def now() -> float:
    return time.monotonic()
