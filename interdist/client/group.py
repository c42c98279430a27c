"""The notebook's side of a replica group: send programs, collect replies, raise one clear error.

One ``DaskGroup`` per strategy. It talks to the ``ReplicaRuntime`` plugin on each
replica's worker directly (``rpc``), never through the scheduler.

This module holds the group's membership, its events and ``execute``; the two paths a program takes
to the replicas (control sockets, Dask comms) are ``step_paths.py``, an interrupted step is
``interrupt.py`` and the replacement of lost replicas ``recovery.py``: mixins of ``DaskGroup``.
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
from collections.abc import Callable
from typing import Any

import cloudpickle

from interdist import control as local_control
from interdist import events
from interdist.client import liveness
from interdist.client.arg_pickle import dump_out_of_band as _dump_out_of_band
from interdist.client.fn_pickle import dumps_fn
from interdist.client.interrupt import InterruptMixin
from interdist.client.recovery import RecoveryMixin
from interdist.client.replica_output import issue_warnings, show_output
from interdist.client.replies import raise_for, user_stacklevel
from interdist.config import settings
from interdist.errors import ReplicaFrozenError, WorkerLostError
from interdist.protocol import (
    CreatedVariable,
    GroupSpec,
    VariableMeta,
    apply_plain_updates,
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


class DaskGroup(RecoveryMixin, InterruptMixin):
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
        self.pinned: dict[int, int] = {}  # rank -> its replica thread's core, where pinned (step_paths.py)
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
                        self.note_core(pending.pop(task), task.result())  # (a worker's own failure to join raises)
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
            sent: events.StepSent | None = None
            if user_call:
                kind, _, fn_name = what.partition(" of ")
                self._calls.append((step, step + steps - 1, f"{kind} #{self.runs} of {fn_name}"))
                del self._calls[:-64]
                # Stamped now, logged once the programs are on their way (``_execute_local``): off the path
                # from the call to the replicas.
                sent = events.StepSent(
                    self.group_id, step, -1, time.time(), fn_name, kind, self.runs, steps, self.world_size
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
                    replies = self._execute_local(conns, step, fn_bytes, args_payload, system, release, steps, sent)
                else:
                    if sent is not None:
                        self.emit(sent)
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
        if self.on_events is not None:  # into the log at once: one lock and one wake-up, not one per replica
            self.on_events([msg for reply in replies for msg in reply.get("events", ())])
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
        issue_warnings(replies)  # and their warnings, under this process's filters
        kind, _, fn_name = what.partition(" of ")
        call = f"{kind} #{self.runs} ({fn_name})" if user_call else f"{what} (step {step})"  # "run #3 (train_step)"
        for r in replies:  # before a failure's exception: a failed call's warnings matter too (an unreached fault)
            for w in r.get("warnings", ()):
                warnings.warn(w, UserWarning, stacklevel=user_stacklevel())
        raise_for(replies, step, what, self.spec["devices"], self.addresses, self.lost, call)
        return [cloudpickle.loads(r["result"]) for r in replies]

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
