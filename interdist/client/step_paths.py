"""How a step's program reaches the replicas and their replies come back: the two paths of ``DaskGroup.execute``.

When every replica's worker shares the notebook's host, the program goes over one control socket per
rank (``control.py``), answered on the notebook's thread with no event loop in the path
(``_execute_local``); otherwise over Dask comms (``_execute_async``, on the client's event loop). Both
gather the replies with ``StepReplies`` (``replies.py``), release the peers of a replica that failed
(``_abort_step``), tell a replica still waiting which peers already returned (``_finished_notices``)
and name a frozen one. A mixin of ``DaskGroup`` (group.py), with the best-effort messages to the
replicas that the rest of it uses too (``_to_each``, ``_broadcast``).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from interdist import config, events
from interdist import control as local_control
from interdist.client import liveness
from interdist.client.replies import StepReplies
from interdist.config import settings
from interdist.protocol import GroupSpec, Reply, lost_reply


class StepPathsMixin:
    """The control sockets and Dask comms paths of a group's programs, and its messages to the replicas."""

    # Set by ``DaskGroup.__init__`` (group.py).
    client: Any
    addresses: list[str]
    spec: GroupSpec
    world_size: int
    group_id: str
    busy: dict[int, tuple[int, Any]]
    _liveness: liveness.Liveness
    _background: set[asyncio.Future[Any]]
    _control: list[local_control.ControlConnection] | None
    _control_refused: bool
    pinned: dict[int, int]  # rank -> the core its replica's thread runs on, where it is pinned (``note_core``)

    if TYPE_CHECKING:  # ``DaskGroup``'s (group.py)

        def emit(self, event: events.Event, urgent: bool = False) -> None: ...

        def _now_event(self, cls: Any, step: int, rank: int, *fields: Any) -> events.Event: ...

    def _control_connections(self) -> list[local_control.ControlConnection] | None:
        """The control connections, one per rank (with a ``side`` for notices: ``ControlConnection.direct``)
        when every replica's worker shares this host, else ``None``."""
        if not settings.local_control:
            return None  # switched off (interdist.config.settings.local_control): Dask comms for every program
        if self._control is not None:
            return self._control
        if self._control_refused or not local_control.available():
            return None
        conns: list[local_control.ControlConnection] = []
        try:

            async def endpoints() -> list[Any]:
                return list(
                    await asyncio.gather(*[self.client.rpc(a).interdist_control_endpoint() for a in self.addresses])
                )

            eps = self.client.sync(endpoints)
            here = local_control.host_id()
            if all(ep is not None and ep["host"] == here for ep in eps):
                for ep in eps:  # one by one: those made before a failure are closed below
                    conns.append(  # noqa: PERF401
                        local_control.ControlConnection.direct(ep["path"], ep["token"], self.group_id)
                    )
        except Exception:  # noqa: BLE001 - any doubt (old workers, another user's socket): Dask comms
            for c in conns:
                c.close()
            conns = []
        if len(conns) != self.world_size:
            self._control_refused = True
            return None
        self._control = conns
        return conns

    def _drop_control(self) -> None:
        conns, self._control = self._control, None
        for c in conns or ():
            c.close()

    def _execute_local(
        self,
        conns: list[local_control.ControlConnection],
        step: int,
        fn: bytes,
        args: list[tuple[bytes, list[memoryview]]],
        system: bool,
        release: dict[int, list[str]],
        steps: int = 1,
        sent_event: events.Event | None = None,
    ) -> list[Reply]:
        """``_execute_async`` over the control sockets, on this thread (no event loop in the path).
        ``sent_event`` (the call's ``StepSent``) is logged once every program is sent."""
        timeout = self.spec.get("timeout") or settings.collective_timeout
        got = StepReplies(step, self.addresses, self.busy)

        def on_reply(rank: int, rep: Mapping[str, Any]) -> None:
            reason = got.add(rank, rep)
            if reason is not None:
                self._broadcast(self._others(rank), self._abort_step(step, reason))

        sent: dict[int, local_control.ControlConnection] = {}
        order, spin = self._send_plan()
        for r in order:
            c = conns[r]
            # Small programs (the usual ones) skip ``pack``'s walk for large fields: the same bytes.
            small = not args[r][1] and len(fn) < local_control.BLOB_MIN and len(args[r][0]) < local_control.BLOB_MIN
            data = (local_control.pack_inline if small else local_control.pack)(
                {
                    "op": "execute",
                    "group": self.group_id,
                    "step": step,
                    "fn": fn,
                    "args": args[r][0],
                    "bufs": args[r][1],
                    "system": system,
                    "release": release[r],
                    "timeout": timeout,
                    "spin": spin.get(r, 0.0),
                }
            )
            try:
                c.send(data, step)
                sent[r] = c
            except OSError as exc:
                got.replies[r] = lost_reply(exc)
        if sent_event is not None:
            self.emit(sent_event)
        for r in list(got.replies):
            on_reply(r, got.replies[r])

        told: set[tuple[int, int]] = set()

        def on_idle(waiting: list[int]) -> list[int]:
            for rank, notice in self._finished_notices(got, waiting, step, steps, told):
                with contextlib.suppress(OSError):
                    conns[rank].post(local_control.pack({"op": "peer_done", "group": self.group_id, **notice}))
            frozen = self._liveness.frozen(waiting)
            for rank, found in frozen.items():
                self.emit(self._now_event(events.ReplicaFrozen, step, rank, found.stopped_s, found.reason), True)
                reason = got.frozen(rank, conns[rank], found.reason)
                self._broadcast(self._others(rank), self._abort_step(step, reason))
                # The frozen replica too, on its own control socket: it reads the abort as soon as it resumes,
                # so it leaves the step at its next collective instead of waiting there for its peers.
                with contextlib.suppress(OSError):
                    conns[rank].post(local_control.pack({"op": "abort", "group": self.group_id, "step": step,
                                                         "reason": reason}))  # fmt: skip
            return list(frozen)

        for rank in local_control.wait_replies(sent, step, on_reply, got.grace, on_idle, liveness.CHECK_EVERY):
            got.stuck(rank, conns[rank])
        if any(rep.get("lost") for rep in got.replies.values()):
            self._drop_control()  # the next program sets them up again, after recovery
        return got.in_rank_order(self.world_size)

    def note_core(self, rank: int, joined: Any) -> None:
        """What replica ``rank`` answered when it joined: the core its thread is pinned to, if any (a dict with
        ``core``: worker/affinity.py)."""
        core = joined.get("core") if isinstance(joined, dict) else None
        if core is None:
            self.pinned.pop(rank, None)
        else:
            self.pinned[rank] = core
        self._alone = None  # the replicas alone on their cores, found again at the next program

    _alone: dict[int, int] | None = None  # rank -> its core, of the replicas that spin there (``_send_plan``)
    _wait_spin_s = 0.0  # for how long (``interdist.replica.wait-spin-us``, read with ``_alone``)

    def _send_plan(self) -> tuple[list[int], dict[int, float]]:
        """The ranks in the order their programs go, those pinned to the core this thread runs on last; and for
        how long each replica alone on another core waits awake for its next program (``ReplicaThread._spin``).

        A replica woken on the notebook's core takes that core at once (the kernel's wake-up preemption) and runs
        its whole program before the notebook's next ``sendmsg`` returns. Sent first, it held back every program
        after it: an empty ``run`` of 2 replicas pinned to cores 0 and 1 took 382 us (median) when the notebook
        ran on core 0 and 259 when on core 1 (rank 1, sent last, took the notebook's core after rank 0 had its
        program). A replica that shares its core with a peer or the notebook sleeps between programs: spinning,
        it would hold the core they need. The control sockets reach workers on this host only, so the cores are
        this machine's."""
        ranks = list(range(self.world_size))
        cpu = _current_cpu() if self.pinned else None
        if cpu is None:
            return ranks, {}
        if self._alone is None:
            cores = [self.pinned.get(r) for r in ranks]
            self._wait_spin_s = float(config.get("replica.wait-spin-us") or 0.0) / 1e6
            self._alone = {r: c for r, c in self.pinned.items() if cores.count(c) == 1 and self._wait_spin_s > 0}
        spin = {r: self._wait_spin_s for r, core in self._alone.items() if core != cpu}
        return sorted(ranks, key=lambda r: self.pinned.get(r) == cpu), spin

    async def _execute_async(
        self, step: int, fn: bytes, args: list[bytes], system: bool, release: dict[int, list[str]], steps: int = 1
    ) -> list[Reply]:
        async def one(rank: int) -> Reply:
            try:
                reply: Reply = await self.client.rpc(self.addresses[rank]).interdist_execute(
                    group=self.group_id,
                    step=step,
                    fn=fn,
                    args=args[rank],
                    system=system,
                    release=release[rank],
                    timeout=self.spec.get("timeout") or settings.collective_timeout,
                )
                return reply
            except Exception as exc:  # noqa: BLE001 - the worker is gone or unreachable
                return lost_reply(exc)

        tasks = {asyncio.ensure_future(one(r)): r for r in range(self.world_size)}
        got = StepReplies(step, self.addresses, self.busy)
        pending = set(tasks)
        deadline: float | None = None  # when the wait after a failure ends; each reply restarts it
        told: set[tuple[int, int]] = set()
        while pending:
            grace, now = got.grace(), time.monotonic()
            deadline = None if grace is None else (now + grace if deadline is None else deadline)
            wait = liveness.CHECK_EVERY if deadline is None else min(max(0.0, deadline - now), liveness.CHECK_EVERY)
            done, pending = await asyncio.wait(pending, timeout=wait, return_when=asyncio.FIRST_COMPLETED)
            if not done:
                if deadline is not None and time.monotonic() >= deadline:
                    for t in pending:
                        got.stuck(tasks[t], t)
                    break
                waiting = {tasks[t]: t for t in pending}
                for rank, notice in self._finished_notices(got, sorted(waiting), step, steps, told):
                    # best effort, not awaited: the replica may be stopped (its worker answers nothing)
                    notify = asyncio.ensure_future(self._to_each([rank], self._peer_done(notice)))
                    self._background.add(notify)
                    notify.add_done_callback(self._background.discard)
                loop = asyncio.get_running_loop()
                frozen = await loop.run_in_executor(None, self._liveness.frozen, sorted(waiting))
                for rank, found in frozen.items():
                    self.emit(self._now_event(events.ReplicaFrozen, step, rank, found.stopped_s, found.reason), True)
                    why = found.reason
                    pending.discard(waiting[rank])
                    # best effort, not awaited: a stopped worker may not even complete a new connection
                    task = asyncio.ensure_future(
                        self._to_each([rank], self._abort_step(step, f"replica {rank} was frozen"))
                    )
                    self._background.add(task)
                    task.add_done_callback(self._background.discard)
                    await self._to_each(
                        self._others(rank), self._abort_step(step, got.frozen(rank, waiting[rank], why))
                    )
                continue
            deadline = None
            for t in done:
                rank = tasks[t]
                reason = got.add(rank, t.result())
                if reason is not None:
                    await self._to_each(self._others(rank), self._abort_step(step, reason))
        return got.in_rank_order(self.world_size)

    def _peer_done(self, notice: dict[str, int]) -> Callable[[Any], Awaitable[Any]]:
        return lambda worker: worker.interdist_peer_done(group=self.group_id, **notice)

    @staticmethod
    def _finished_notices(
        got: StepReplies, waiting: list[int], step: int, steps: int, told: set[tuple[int, int]]
    ) -> list[tuple[int, dict[str, int]]]:
        """For each replica still running, the replicas whose function already returned (each told once).

        Called when replies stop coming for a while: a replica waiting in a collective that a returned
        peer never entered fails at once, naming it, instead of at its collective timeout.
        """
        out = []
        for done, rep in got.replies.items():
            if not rep.get("ok"):
                continue
            notice = {
                "rank": done,
                "first": step,
                "last": step + steps - 1,
                "last_step": int(rep.get("last_step", step)),
                "collectives": int(rep.get("collectives", 0)),
            }
            for rank in waiting:
                if rank != done and (rank, done) not in told:
                    told.add((rank, done))
                    out.append((rank, notice))
        return out

    # -- best-effort messages to the replicas ------------------------------------
    def _others(self, rank: int) -> list[int]:
        return [r for r in range(self.world_size) if r != rank]

    def _abort_step(self, step: int, reason: str) -> Callable[[Any], Awaitable[Any]]:
        """The call that releases a replica waiting in ``step`` (its collectives raise ``reason``)."""
        return lambda worker: worker.interdist_abort(group=self.group_id, step=step, reason=reason)

    async def _to_each(self, ranks: Iterable[int], call: Callable[[Any], Awaitable[Any]]) -> None:
        """``call`` on the worker of each of ``ranks`` at once; a worker that fails to answer is passed over."""
        await asyncio.gather(*[call(self.client.rpc(self.addresses[r])) for r in ranks], return_exceptions=True)

    def _broadcast(self, ranks: Iterable[int], call: Callable[[Any], Awaitable[Any]]) -> None:
        """``_to_each`` from the notebook's thread, best effort: 5 s at most, and never an error."""

        async def go() -> None:
            await asyncio.wait_for(self._to_each(ranks, call), 5)

        try:
            self.client.sync(go)
        except Exception:  # noqa: BLE001, S110 - best effort: the workers may be gone
            pass


def _current_cpu() -> int | None:
    """The core this thread runs on now (``sched_getcpu``: Linux; None elsewhere)."""
    getcpu = _sched_getcpu()
    cpu = getcpu() if getcpu is not None else -1
    return int(cpu) if cpu >= 0 else None


@functools.cache
def _sched_getcpu() -> Any:
    try:
        import ctypes

        return ctypes.CDLL(None).sched_getcpu
    except (OSError, AttributeError):  # not glibc or musl: no such call
        return None
