"""The notebook's side of a replica group: send programs, collect replies, raise one clear error.

One ``DaskGroup`` per strategy. It talks to the ``ReplicaRuntime`` plugin on each
replica's worker directly (``rpc``), never through the scheduler.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
import uuid
import warnings
import weakref
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

import cloudpickle

from interdist import control as local_control
from interdist import events
from interdist.client import liveness
from interdist.client.fn_pickle import dumps_fn
from interdist.client.replies import StepReplies, raise_for, show_output, user_stacklevel
from interdist.client.worker_process import worker_log_path
from interdist.config import settings
from interdist.errors import ReplicaFrozenError, WorkerLostError
from interdist.protocol import (
    CreatedVariable,
    GroupSpec,
    Reply,
    VariableMeta,
    apply_plain_updates,
    lost_reply,
    pickling_for,
)
from interdist.worker.plugin import PLUGIN_NAME, ReplicaRuntime

logger = logging.getLogger("interdist")

_registered: weakref.WeakKeyDictionary[Any, bool] = weakref.WeakKeyDictionary()
#: How often (seconds, at most) the notebook's own events go to the scheduler's event log (the Dask pages):
#: as often as the workers send theirs (worker/plugin.py).
FLUSH_EVERY = 0.25
_register_lock = threading.Lock()


def ensure_plugin(client: Any) -> None:
    """Register the worker plugin once per client (new workers get it from the scheduler)."""
    with _register_lock:
        if _registered.get(client):
            return
        client.register_plugin(ReplicaRuntime(), name=PLUGIN_NAME)
        _registered[client] = True


def _dump_out_of_band(obj: Any) -> tuple[bytes, list[memoryview]]:
    """``obj`` pickled with its contiguous arrays' memory left out of band (views, not copies)."""
    buffers: list[Any] = []
    header = cloudpickle.dumps(obj, protocol=5, buffer_callback=buffers.append)
    return header, [b.raw() for b in buffers]


class DaskGroup:
    """The replicas of one strategy, one per worker address."""

    def __init__(self, client: Any, addresses: list[str], spec: GroupSpec, names: list[Any]) -> None:
        self.client = client
        self.addresses = list(addresses)
        self.names = list(names)  # Dask worker names, to find a restarted worker again
        self.spec = spec.copy()
        self.world_size = len(addresses)
        self.group_id = uuid.uuid4().hex[:12]
        self.step = 0
        self._release: dict[int, list[str]] = {r: [] for r in range(self.world_size)}
        self._lock = threading.RLock()
        self.closed = False
        self.lost: dict[int, str] = {}
        self.busy: dict[int, tuple[int, Any]] = {}  # rank -> (step, its pending reply) of a stuck replica
        self._liveness = liveness.Liveness(client, self.addresses)  # frozen replicas, named while a step waits
        # Set when a step failed or was interrupted (what it was): the next call first checks that the mirrored
        # copies are still equal (strategy/variable_repair.py ``_check_copies``).
        self.suspect: str | None = None
        self._background: set[asyncio.Future[Any]] = set()  # calls not awaited (kept alive until done)
        self.runs = 0  # the user's calls (run, run_steps), as the notebook counts them: "run #3"
        self.on_events: Callable[[Any], None] | None = None  # the strategy's event log (replies', and ``emit``'s)
        self._outbox: list[dict[str, Any]] = []  # the notebook's events not yet sent to the scheduler
        self._outbox_lock = threading.Lock()  # emitted from the notebook's thread and the client's event loop
        self._flushed = 0.0  # when they last were (monotonic)
        self._calls: list[tuple[int, int, str]] = []  # (first step, last step, "run #3 of fn") of recent user calls
        # The strategy's handles for variables created inside a replica function (rank 0's list).
        self.on_created: Callable[[list[CreatedVariable]], None] | None = None
        self.on_recover: Callable[[list[int]], None] | None = None  # restores state on replaced replicas
        # Same-host control sockets, one per rank (local_control.py); None: not set up (or not possible).
        self._control: list[local_control.ControlConnection] | None = None
        self._control_refused = False
        ensure_plugin(client)
        self._join()
        self._liveness.learn_pids()

    # -- the notebook's own events ----------------------------------------------
    def emit(self, event: events.Event, urgent: bool = False) -> None:
        """An event the notebook saw (a call sent, a replica frozen or lost, a recovery): into the strategy's
        log, and to the scheduler's event log for the Dask pages, batched (at once when ``urgent``)."""
        msg = event.to_msg()
        if self.on_events is not None:
            # In its wire form, as the replies' events: the log expands messages only when read, and an
            # event added as an object made it expand all the replies' pending ones at every call (+30 us)
            self.on_events([msg])
        with self._outbox_lock:
            self._outbox.append(msg)
        if urgent or time.monotonic() - self._flushed >= FLUSH_EVERY:
            self.flush_events()

    def flush_events(self) -> None:
        """Send the notebook's pending events to the scheduler, without waiting for it (best effort)."""
        with self._outbox_lock:
            msgs, self._outbox = self._outbox, []
        self._flushed = time.monotonic()
        if not msgs:
            return
        batch = events.pack_batch(msgs)
        client = self.client

        async def send() -> None:
            try:
                await client.scheduler.log_event(topic=events.TOPIC, msg=batch)
            except Exception as exc:  # noqa: BLE001 - the Dask pages miss a batch; the notebook's log has it
                logger.debug("interdist: could not send the notebook's events to the scheduler: %s", exc)

        try:
            client.loop.add_callback(send)
        except Exception as exc:  # noqa: BLE001 - a closed client: nothing to show them on
            logger.debug("interdist: no scheduler for the notebook's events: %s", exc)

    def call_of(self, step: int) -> str | None:
        """ "run #59 of train_step" for a step of one of the last 64 user calls, as the errors name calls."""
        for first, last, label in reversed(self._calls):
            if first <= step <= last:
                return label
        return None

    def _now_event(self, cls: Any, step: int, rank: int, *fields: Any) -> events.Event:
        event: events.Event = cls(self.group_id, step, rank, time.time(), *fields)
        return event

    # -- membership ------------------------------------------------------------
    def _join(self) -> None:
        """Every replica joins the group: watched as a step is (a stopped worker, e.g. one of a pooled
        cluster, gives ReplicaFrozenError within ``frozen_after``), and bounded by the collective timeout."""
        spec = cloudpickle.dumps(self.spec)

        async def go() -> None:
            loop = asyncio.get_running_loop()
            pending = {
                asyncio.ensure_future(
                    self.client.rpc(addr).interdist_join(group=self.group_id, rank=r, spec=spec, peers=self.addresses)
                ): r
                for r, addr in enumerate(self.addresses)
            }
            bound = max(settings.collective_timeout, settings.frozen_after + 5.0)
            deadline = time.monotonic() + bound
            try:
                while pending:
                    done, _ = await asyncio.wait(pending, timeout=liveness.CHECK_EVERY)
                    for task in done:
                        pending.pop(task)
                        task.result()  # a worker's own failure to join, as it was
                    if not pending:
                        return
                    waiting = sorted(pending.values())
                    frozen = await loop.run_in_executor(None, self._liveness.frozen, waiting)
                    if frozen:
                        rank, found = min(frozen.items())
                        raise ReplicaFrozenError(
                            f"replica {rank} ({self.addresses[rank]}) did not join the strategy: {found.reason}; "
                            "resume or end that process, then create the strategy again",
                            replica=rank,
                        )
                    if time.monotonic() > deadline:
                        raise TimeoutError(f"replica(s) {waiting} did not join the strategy within {bound:.0f} s")
            except BaseException:
                # The strategy is not made: the workers that joined leave (their main thread, which runs replica
                # code and takes Ctrl-C, would stay claimed by a group no one uses), and the others are told too
                # without waiting (a stopped one reads it once it resumes, and refuses the join it missed).
                joined = [r for r in range(self.world_size) if r not in pending.values()]
                for r in sorted(pending.values()):
                    leave = self.client.rpc(self.addresses[r]).interdist_leave(group=self.group_id)
                    late = asyncio.ensure_future(leave)
                    self._background.add(late)
                    late.add_done_callback(self._background.discard)
                    late.add_done_callback(lambda t: t.cancelled() or t.exception())  # never "never retrieved"
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(
                        self._to_each(joined, lambda worker: worker.interdist_leave(group=self.group_id)), 5
                    )
                raise
            finally:
                for task in pending:
                    task.cancel()

        self.client.sync(go)

    def leave(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.flush_events()
        self._drop_control()
        # Best effort: closing must not fail because a worker is gone.
        self._broadcast(range(self.world_size), lambda worker: worker.interdist_leave(group=self.group_id))

    def _given_up(self) -> dict[int, str]:
        """The lost ranks whose embedded worker was given up (``worker_process.MAX_FAILED_STARTS``), with why."""
        workers = getattr(getattr(self.client, "cluster", None), "workers", None)
        if not isinstance(workers, dict):
            return {}
        found = {r: getattr(workers.get(self.names[r]), "failure", None) for r in self.lost}
        return {r: why for r, why in found.items() if isinstance(why, str)}

    def _recover(self, timeout: float = 30.0) -> None:
        """Rejoin replicas whose worker was restarted (same Dask worker name, new address)."""
        import time

        deadline = time.monotonic() + timeout
        replacements: dict[int, str] = {}
        silent: BaseException | None = None  # the scheduler's last failure to answer
        for r, addr in sorted(self.lost.items()):
            self.emit(self._now_event(events.ReplicaRestarting, self.step, r, addr), urgent=True)
        while time.monotonic() < deadline:
            given_up = self._given_up()
            if given_up:
                raise WorkerLostError(
                    "; ".join(f"replica {r} of this strategy was lost: its {why}" for r, why in given_up.items())
                    + "\nThe state it held is gone: fix the cause, then create a new strategy"
                )
            try:
                workers = self._liveness._workers()  # bounded: a silent scheduler is asked again, then named
                silent = None
            except Exception as exc:  # noqa: BLE001 - slow or gone: the deadline decides
                logger.debug("interdist: the scheduler did not answer while replicas were replaced: %s", exc)
                workers, silent = None, exc
            if not workers and self.client.status != "running":
                raise WorkerLostError(
                    f"the Dask scheduler of this strategy is unreachable (its client is {self.client.status}), so "
                    "the lost replicas cannot be replaced and the others cannot be reached: create a new strategy"
                )
            by_name = {w.get("name"): addr for addr, w in (workers or {}).items()}
            replacements = {
                r: by_name[self.names[r]]
                for r in self.lost
                if self.names[r] in by_name and by_name[self.names[r]] != self.lost[r]
            }
            if len(replacements) == len(self.lost):
                break
            time.sleep(0.2)
        if len(replacements) != len(self.lost):
            lost = ", ".join(f"replica {r} ({a})" for r, a in sorted(self.lost.items()))
            log = worker_log_path()  # why the embedded cluster could not start it again
            if silent is not None:
                raise WorkerLostError(
                    f"{lost} of this strategy was lost with its worker, and the Dask scheduler did not answer "
                    f"for the {timeout:g} s given to replace it ({type(silent).__name__}: {silent}): check the "
                    "scheduler, then call again, or create a new strategy"
                )
            raise WorkerLostError(
                f"{lost} of this strategy was lost with its worker and no replacement worker came up within "
                f"{timeout:g} s; the state it held is gone: create a new strategy"
                + (f". The embedded cluster's log (why its worker did not start again) is {log}" if log else "")
            )
        for r, addr in replacements.items():
            self.addresses[r] = addr
        self._drop_control()
        self._control_refused = False  # the replacements may be reachable again
        spec = cloudpickle.dumps(self.spec)

        async def go() -> None:
            await asyncio.gather(
                *[
                    self.client.rpc(self.addresses[r]).interdist_join(
                        group=self.group_id, rank=r, spec=spec, peers=self.addresses
                    )
                    for r in replacements
                ]
            )
            await asyncio.gather(
                *[
                    self.client.rpc(self.addresses[r]).interdist_set_peers(group=self.group_id, peers=self.addresses)
                    for r in range(self.world_size)
                    if r not in replacements
                ]
            )

        self.client.sync(go)
        ranks = sorted(replacements)
        self.lost = {}
        self._release = {r: [] for r in range(self.world_size)}
        if self.on_recover is not None:
            self.on_recover(ranks)

    def restore_variable(self, rank: int, var_id: int, meta: VariableMeta, value: Any) -> None:
        """Set replica ``rank``'s copy of a variable to ``value``; its worker's event about the new copy goes
        to the strategy's log (the dashboard's values then show it at once)."""
        msg = self.client.sync(
            lambda: self.client.rpc(self.addresses[rank]).interdist_restore_var(
                group=self.group_id,
                var_id=var_id,
                meta=cloudpickle.dumps(meta),
                value=cloudpickle.dumps(value),
                step=self.step,
            )
        )
        if isinstance(msg, dict) and self.on_events is not None:
            self.on_events([msg])

    # -- execution -------------------------------------------------------------
    def execute(
        self,
        fn: Any,
        per_rank_args: list[tuple[tuple[Any, ...], dict[str, Any]]],
        system: bool,
        what: str,
        steps: int = 1,
    ) -> list[Any]:
        """Run ``fn`` on every replica; the decoded results in rank order, or one exception."""
        __tracebackhide__ = True  # IPython and pytest leave this frame out of the traceback
        if self.closed:
            raise RuntimeError("the strategy was closed (strategy.close()); create a new one")
        # A replica still in an earlier step first (its peers' recovery programs would wait behind it until
        # their collective timeout), then the lost ones replaced.
        for rank, (busy_step, fut) in list(self.busy.items()):
            if fut.done():
                del self.busy[rank]
            else:
                call = self.call_of(busy_step)
                raise RuntimeError(
                    f"replica {rank} ({self.spec['devices'][rank]}) is still running step {busy_step}"
                    + (f" ({call})" if call else "")
                    + ": its replica function has not returned. Wait for it, or close this strategy and create a "
                    "new one"
                )
        if self.lost:
            self._recover()
        with self._lock:
            user_call = what.startswith(("run of ", "run_steps of "))
            if user_call:
                self.runs += 1
            step = self.step + 1
            self.step += steps  # a fused program numbers its inner steps step .. step + steps - 1
            if user_call:
                kind, _, fn_name = what.partition(" of ")
                self._calls.append((step, step + steps - 1, f"{kind} #{self.runs} of {fn_name}"))
                del self._calls[:-64]
                self.emit(
                    events.StepSent(
                        self.group_id, step, -1, time.time(), fn_name, kind, self.runs, steps, self.world_size
                    )
                )
            with pickling_for(self.group_id, self.world_size):  # plain/foreign variables as snapshots
                fn_bytes = dumps_fn(fn)
            conns = self._control_connections()
            # Over the sockets, arrays travel out of band (pickle protocol 5): their memory is written
            # to the socket as it is and read into a buffer the worker's array then uses, one copy
            # each way instead of three (a pickle of the data, and its unpickling).
            dump: Callable[[Any], Any] = _dump_out_of_band if conns is not None else cloudpickle.dumps
            first = per_rank_args[0]
            same = all(a is first for a in per_rank_args)
            with pickling_for(self.group_id, self.world_size):
                shared = dump(first) if same else None
                # The pickles for the Dask path, (pickle, out-of-band buffers) pairs for the control sockets.
                args_payload: list[Any] = [shared if same else dump(a) for a in per_rank_args]
            release = {r: self._release[r] for r in range(self.world_size)}
            self._release = {r: [] for r in range(self.world_size)}
            try:
                if conns is not None:
                    replies = self._execute_local(conns, step, fn_bytes, args_payload, system, release, steps)
                else:
                    replies = self.client.sync(
                        self._execute_async, step, fn_bytes, args_payload, system, release, steps
                    )
            except KeyboardInterrupt:
                # Kernel > Interrupt: abort the step and stop its replica functions, then say how it ended.
                for rank, keys in release.items():  # releasing twice is harmless; never releasing leaks
                    self._release[rank][:0] = keys
                self.suspect = f"the interrupted {what}"
                raise self._interrupted(step, steps, what, user_call) from None
        # The replicas' replies also carry their events and created variables; lost and stuck replies have neither.
        if self.on_events is not None:
            for reply in replies:
                self.on_events(reply.get("events", ()))
        for rank, rep in enumerate(replies):
            if rep.get("lost"):  # the notebook's own evidence: the connection to its worker closed
                why = f"{rep['type']}: {rep['message']}"
                self.emit(self._now_event(events.ReplicaLost, step, rank, self.addresses[rank], why), urgent=True)
        if self.on_created is not None and replies[0].get("created"):
            self.on_created(replies[0]["created"])  # before results (which may be those variables) decode
        if any(not r["ok"] for r in replies):
            self.suspect = what if not user_call else f"the failed {what.split(' of ')[0]} #{self.runs}"
        apply_plain_updates(replies)  # writes to plain variables, made before any failure too
        show_output(replies)  # what the replicas printed, labelled, in this cell, before its result or error
        kind, _, fn_name = what.partition(" of ")
        call = f"{kind} #{self.runs} ({fn_name})" if user_call else f"{what} (step {step})"  # "run #3 (train_step)"
        for r in replies:  # before a failure's exception: a failed call's warnings matter too (an unreached fault)
            for w in r.get("warnings", ()):
                warnings.warn(w, UserWarning, stacklevel=user_stacklevel())
        raise_for(replies, step, what, self.spec["devices"], self.addresses, self.lost, call)
        return [cloudpickle.loads(r["result"]) for r in replies]

    # -- Kernel > Interrupt -------------------------------------------------------
    def _interrupted(self, step: int, steps: int, what: str, user_call: bool) -> KeyboardInterrupt:
        """The notebook was interrupted while ``step`` ran: release the replicas; the exception to raise.

        Each replica's worker first aborts the step's collectives (a replica that reaches one after that
        sends nothing, so an update that needs a collective is applied by every replica or by none), then
        interrupts the replica function where it runs the user's own code (``worker/thread.py``), and
        answers once the replica is done with the step. A replica that cannot be interrupted (a
        worker of a ``cluster=`` deployment) and is still running is reported, as a stuck one is.
        """
        self._drop_control()  # a control socket may hold half a message: the next step opens fresh ones
        reason = "the notebook was interrupted (KeyboardInterrupt)"
        wait = settings.interrupt_wait

        async def go() -> list[Any]:
            calls = [
                self.client.rpc(addr).interdist_interrupt(
                    group=self.group_id, step=step, last_step=step + steps - 1, reason=reason, wait=wait
                )
                for addr in self.addresses
            ]
            return list(await asyncio.gather(*calls, return_exceptions=True))

        answers: list[Any] = [None] * self.world_size
        try:
            answers = self.client.sync(go, callback_timeout=wait + 5)
        except BaseException:  # noqa: BLE001, S110 - a second interrupt, or workers gone: report what is known
            pass
        running = [r for r, a in enumerate(answers) if a is False]
        unknown = [r for r, a in enumerate(answers) if a is not True and a is not False]
        for r, answer in enumerate(answers):
            if answer is True:  # its worker's word: it left the step (its own events may never come back)
                self.emit(self._now_event(events.ReplicaReleased, step, r, -1, reason))
        self.flush_events()
        for r in running:
            self.busy[r] = (step, _StillRunning(self, r, step))
        kind, _, fn_name = what.partition(" of ")
        call = f"{kind} #{self.runs} of {fn_name}" if user_call else what  # "run #3 of train_step"
        if not running and not unknown:
            return KeyboardInterrupt(f"interdist: {call} interrupted; replicas released; variables intact")
        parts = [f"interdist: {call} interrupted"]
        released = [r for r in range(self.world_size) if r not in running and r not in unknown]
        if released:
            parts.append(f"replica(s) {released} released")
        if running:
            parts.append(
                f"replica(s) {running} still running their replica function, which could not be interrupted "
                "(the strategy refuses new steps until it returns)"
            )
        if unknown:
            parts.append(f"replica(s) {unknown} did not answer (the next step says if their worker is lost)")
        return KeyboardInterrupt("; ".join(parts) + "; variables intact")

    # -- the same-host control path (local_control.py) --------------------------
    def _control_connections(self) -> list[local_control.ControlConnection] | None:
        """One control socket per rank when every replica's worker shares this host, else ``None``."""
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
                conns = [local_control.ControlConnection(ep["path"], ep["token"]) for ep in eps]
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
    ) -> list[Reply]:
        """``_execute_async`` over the control sockets, on this thread (no event loop in the path)."""
        timeout = self.spec.get("timeout") or settings.collective_timeout
        got = StepReplies(step, self.addresses, self.busy)

        def on_reply(rank: int, rep: Mapping[str, Any]) -> None:
            reason = got.add(rank, rep)
            if reason is not None:
                self._broadcast(self._others(rank), self._abort_step(step, reason))

        sent: dict[int, local_control.ControlConnection] = {}
        for r, c in enumerate(conns):
            data = local_control.pack(
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
                }
            )
            try:
                c.send(data, step)
                sent[r] = c
            except OSError as exc:
                got.replies[r] = lost_reply(exc)
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

    # -- values ----------------------------------------------------------------
    def _check_open(self) -> None:
        if self.closed:
            raise RuntimeError("the strategy was closed (strategy.close()); create a new one")

    def fetch(self, rank: int, key: str) -> Any:
        self._check_open()
        if rank in self.lost:
            raise WorkerLostError(f"replica {rank} was lost with its worker; its values are gone")
        data = self.client.sync(
            lambda: self.client.rpc(self.addresses[rank]).interdist_fetch(group=self.group_id, keys=[key])
        )
        return cloudpickle.loads(data)[0]

    def read_variable(self, rank: int, var_id: int) -> Any:
        self._check_open()
        if rank in self.lost:
            raise WorkerLostError(f"replica {rank} was lost with its worker; its copy of the variable is gone")
        data = self.client.sync(
            lambda: self.client.rpc(self.addresses[rank]).interdist_read_var(group=self.group_id, var_id=var_id)
        )
        return cloudpickle.loads(data)

    def queue_release(self, rank: int, key: str) -> None:
        # Called from finalizers: only append, never talk to the network here.
        self._release.setdefault(rank, []).append(key)

    def finalizer(self) -> Callable[[int, str], None]:
        ref = weakref.ref(self)

        def release(rank: int, key: str) -> None:
            g = ref()
            if g is not None and not g.closed:
                g.queue_release(rank, key)

        return release


class _StillRunning:
    """A replica left running an interrupted step: ``done()`` once its worker says it finished it."""

    def __init__(self, group: DaskGroup, rank: int, step: int) -> None:
        self._group, self._rank, self._step = group, rank, step

    def done(self) -> bool:
        g = self._group
        try:
            now = g.client.sync(lambda: g.client.rpc(g.addresses[self._rank]).interdist_running(group=g.group_id))
        except Exception:  # noqa: BLE001 - the worker is gone: the next step finds it lost
            return True
        return bool(now != self._step)
