"""``ReplicaRuntime``: the worker plugin that owns each replica's state and runs its programs.

The notebook reaches it directly over Dask comms (handlers ``interdist_*``), not
through the scheduler: a scheduled task costs 11-13 ms of batching, a direct
message ~1 ms (measured, DESIGN.md).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

import cloudpickle
from distributed.diagnostics.plugin import WorkerPlugin

from interdist import _gpu, config, events
from interdist import control as local_control
from interdist.collectives.dask_comms import accept_channel, answer_probe, packet_from_payload
from interdist.collectives.mailbox import Mailbox
from interdist.collectives.registry import worker_transport
from interdist.input import _direct
from interdist.protocol import GroupSpec, Reply, lost_reply
from interdist.replica.central import close_central, serve_central_read
from interdist.replica.central_variable import make_replica_variable
from interdist.replica.replica import Replica
from interdist.replica.user_code import enable_capture
from interdist.worker import affinity, thread
from interdist.worker.control_server import ControlServer
from interdist.worker.thread import ReplicaThread

logger = logging.getLogger("interdist")

PLUGIN_NAME = "interdist-runtime"
LEFT_KEPT = 1024  # groups left that a worker remembers (a late join of one of them is refused)


def get_runtime(worker: Any) -> ReplicaRuntime:
    """The worker's ``ReplicaRuntime`` (all its interdist state), as distributed finds its shuffle plugin."""
    try:
        runtime: ReplicaRuntime = worker.plugins[PLUGIN_NAME]
    except KeyError:
        raise RuntimeError(f"the worker {worker.address} has no interdist replica runtime plugin") from None
    return runtime


class ReplicaRuntime(WorkerPlugin):
    """Registered on every worker; holds the replicas (of any number of groups) placed there."""

    name = PLUGIN_NAME
    idempotent = True

    def setup(self, worker: Any) -> None:
        self.worker = worker
        if getattr(worker, "nanny", None):
            # A worker process of its own (a nanny's, on this host or another): replicas' prints go back
            # with their replies, labelled. Not a worker in the notebook's process (processes=False),
            # whose prints already reach the cell, and whose streams belong to the notebook.
            enable_capture()
        self.replicas: dict[str, Replica] = {}
        self.mailboxes: dict[str, Mailbox] = {}
        self.executors: dict[str, ReplicaThread] = {}
        # Groups left (most recent last): a join that arrives after its group's leave (a worker stopped while
        # its strategy was being made, resumed after the notebook gave up) is refused, not kept for ever.
        self.left: dict[str, None] = {}
        worker.handlers.update(
            {
                "interdist_join": self.join,
                "interdist_leave": self.leave,
                "interdist_execute": self.execute,
                "interdist_fetch": self.fetch,
                "interdist_release": self.release,
                "interdist_coll": self.coll,
                "interdist_abort": self.abort,
                "interdist_peer_done": self.peer_done_handler,
                "interdist_interrupt": self.interrupt,
                "interdist_running": self.running,
                "interdist_shm_probe": self.shm_probe,
                "interdist_ping": self.ping,
                "interdist_read_var": self.read_var,
                "interdist_set_peers": self.set_peers,
                "interdist_restore_var": self.restore_var,
                "interdist_central_read": self.central_read,
                "interdist_control_endpoint": self.control_endpoint,
            }
        )
        self._control: ControlServer | None = None  # the same-host control socket (local_control.py), made on first ask
        self._outbox: list[dict[str, Any]] = []
        from tornado.ioloop import PeriodicCallback

        self._flusher = PeriodicCallback(self._flush, 250)
        self._flusher.start()

    def teardown(self, worker: Any) -> None:
        self._flusher.stop()
        if self._control is not None:
            self._control.close()
            self._control = None
        self._flush()
        for ex in self.executors.values():
            thread.give_back(ex)
        self.executors.clear()
        self.replicas.clear()

    def _mailbox(self, group: str) -> Mailbox:
        box = self.mailboxes.get(group)
        if box is None:
            # setdefault: the event loop and a control socket's thread may both ask first
            box = self.mailboxes.setdefault(group, Mailbox())
        return box

    def _emit(self, msg: dict[str, Any]) -> None:
        # Batched: one log_event per flush, not per event. Sending each event on its
        # own through the scheduler cost ~1 ms of a 2.7 ms step on 2 cores (measured).
        self._outbox.append(msg)

    def _flush(self) -> None:
        for replica in list(self.replicas.values()):
            replica.flush_events()  # its collectives' rows so far (a replica waiting in one is seen now)
        if not self._outbox:
            return
        batch, self._outbox = self._outbox, []
        try:
            self.worker.log_event(events.TOPIC, events.pack_batch(batch))
        except Exception:
            logger.exception("interdist: could not log %d events", len(batch))

    # -- handlers --------------------------------------------------------------
    async def ping(self) -> str:
        address: str = self.worker.address
        return address

    async def join(self, group: str, rank: int, spec: bytes, peers: list[str]) -> str | dict[str, Any]:
        if group in self.left:
            return "LEFT"  # left before this worker joined it: its strategy was not made (nobody waits for this)
        spec_d: GroupSpec = cloudpickle.loads(spec)
        config.apply(spec_d.get("config"))  # the notebook's settings, read here from now on
        old = self.replicas.get(group)
        if old is not None:
            _close_transport(old)
        # The backend the notebook chose (config.settings.collectives_backend), through the registry.
        transport = worker_transport(
            spec_d.get("collectives_backend"),
            self.worker,
            group,
            rank,
            list(peers),
            self._mailbox(group),
            sockets=bool(spec_d.get("local_control", True)),
        )
        self.replicas[group] = Replica(group, rank, spec_d, transport, self._emit, transport.abort_peers)
        inner = getattr(transport, "inner", transport)
        if hasattr(inner, "connect_peers"):
            inner.connect_peers()  # in the background: the peers' control sockets, before the first packet
        self.replicas[group].worker = self.worker  # replica programs that read Dask collections use its client
        if group not in self.executors:
            self.executors[group] = thread.claim(f"interdist-replica-{rank}")
            core = affinity.replica_core(rank, list(peers), self.replicas[group].on_gpu)
            if core is not None:
                self.executors[group].pin(core)
        if self.executors[group].core is not None:  # pinned round the cores: one owner of a large sum per core
            self.replicas[group].collectives.owners = affinity.pinned_owners(list(peers))
        return {"joined": True, "core": self.executors[group].core}  # the notebook sends to its own core's last

    async def leave(self, group: str) -> str:
        self.left[group] = None
        while len(self.left) > LEFT_KEPT:
            del self.left[next(iter(self.left))]
        replica = self.replicas.pop(group, None)
        self.mailboxes.pop(group, None)
        ex = self.executors.pop(group, None)
        if ex is not None:
            thread.give_back(ex)
        if replica is not None:
            # Unlinks what no peer mapped yet and unmaps the rest (safe while the replica's
            # thread still runs: a mapping in use goes when its last view does).
            _close_transport(replica)
        return "OK"

    def _replica(self, group: str) -> Replica:
        try:
            return self.replicas[group]
        except KeyError:
            raise KeyError(
                f"worker {self.worker.address} holds no replica of group {group} "
                "(the worker was restarted, or the strategy was closed)"
            ) from None

    async def control_endpoint(self) -> dict[str, Any] | None:
        """Where a notebook on this host can send programs without the event loops (local_control.py)."""

        if not local_control.available():
            return None
        if self._control is None:
            self._control = ControlServer(self._handle_control)
        return self._control.endpoint()

    def _handle_control(self, msg: dict[str, Any], reply: Callable[[Mapping[str, Any]], None]) -> None:
        """A program that came over the control socket: as ``execute``, replying from the replica thread;
        a peer's collective packet: as ``coll``; or a reader's request for rows of a chunk held here."""
        if msg.get("op") == "coll":
            self._mailbox(msg["group"]).put(msg["step"], msg["seq"], msg["src"], packet_from_payload(msg["payload"]))
            return
        if msg.get("op") == "channel":  # a peer's packets: read by the replica thread itself from now on
            accept_channel(self._mailbox(msg["group"]), msg["socket"])
            return
        if msg.get("op") == "direct":  # the notebook's programs: read by the group's replica thread from now on
            group = msg["group"]
            if group not in self.executors:
                raise KeyError(f"worker {self.worker.address} holds no replica of group {group}")
            self.executors[group].read_directly(msg["socket"], self._handle_control)
            return
        if msg.get("op") == "abort":  # the notebook found a replica of this worker frozen: read when it resumes
            self._mailbox(msg["group"]).abort(msg["step"], msg["reason"])
            return
        if msg.get("op") == "peer_done":  # a peer's function returned: collectives it never entered fail now
            self.peer_done(msg["group"], msg["rank"], msg["first"], msg["last"], msg["last_step"], msg["collectives"])
            return
        if msg.get("op") == "rows":  # a replica on this host reads rows of a chunk this worker holds
            reply(_direct.serve_rows(self.worker, msg))
            return
        if msg.get("op") != "execute":
            raise ValueError(f"unknown control request {msg.get('op')!r}")
        group, step = msg["group"], msg["step"]
        replica = self._replica(group)
        if msg.get("timeout") is not None:
            replica.spec["timeout"] = msg["timeout"]
        if msg.get("release"):
            replica.release(list(msg["release"]))

        def done(result: Any, error: BaseException | None) -> None:
            out: Reply = lost_reply(error) if error is not None else result  # else replica.execute's reply
            out["step"] = step
            reply(out)

        # Out-of-band buffers: arrays unpickled over them must be writable, as any argument is.
        buffers = [b if isinstance(b, bytearray) else bytearray(b) for b in msg.get("bufs") or ()]
        self.executors[group].call(
            replica.execute,
            (step, msg["fn"], msg["args"], msg["system"], buffers),
            done,
            step=step,
            spin=msg.get("spin") or 0.0,  # then wait for the next program awake (``ReplicaThread._spin``)
        )

    async def execute(
        self,
        group: str,
        step: int,
        fn: bytes,
        args: bytes,
        system: bool,
        release: list[str] | None = None,
        timeout: float | None = None,
    ) -> Reply:
        replica = self._replica(group)
        if timeout is not None:
            # The notebook's interdist.config.set_collective_timeout travels with each program.
            replica.spec["timeout"] = timeout
        if release:
            replica.release(release)
        return await self.executors[group].submit(replica.execute, step, fn, args, system, step=step)

    async def fetch(self, group: str, keys: list[str]) -> bytes:
        replica = self._replica(group)
        data: bytes = cloudpickle.dumps([_gpu.to_host(replica.store[k]) for k in keys])
        return data

    async def read_var(self, group: str, var_id: int) -> bytes:
        # Variables are replaced, never changed in place, so reading the reference is safe
        # while the replica thread runs.
        data: bytes = cloudpickle.dumps(_gpu.to_host(self._replica(group).variables[var_id].raw))
        return data

    async def set_peers(self, group: str, peers: list[str]) -> str:
        """A peer's worker was replaced (restarted by its nanny): talk to the new address."""
        self._replica(group).transport.peers_replaced(list(peers))
        return "OK"

    async def restore_var(self, group: str, var_id: int, meta: bytes, value: bytes, step: int = -1) -> Any:
        """Give a replica its copy of a variable (from a surviving replica, ``resync_variables``, a restore);
        the event that describes the copy now (its wire form), for the dashboard: numbered ``step``."""

        replica = self._replica(group)
        given = cloudpickle.loads(value)
        replica.variables[var_id] = make_replica_variable(
            replica, var_id, cloudpickle.loads(meta), _gpu.place(given, replica.device)
        )
        numbered = step if step >= 0 else max(replica.step, 0)
        event = replica.variable_event(var_id, numbered) if given is not None else None
        if event is None:  # a central variable's placeholder holds no value to describe
            return None
        msg = event.to_msg()
        self._emit(msg)  # to the scheduler's event log too (the Dask pages)
        return msg

    async def central_read(
        self, group: str, var_id: int, program: int, epoch: int, step: int, tag: int, src: int
    ) -> str:
        """A replica asks this one, the holder of a central variable, for its value (replica/central.py).

        Answered from a thread (the holder may first have to reach that update), into the
        asker's mailbox; this reply only acknowledges the request.
        """

        replica = self._replica(group)
        asyncio.get_running_loop().run_in_executor(
            None, serve_central_read, replica, var_id, program, epoch, step, tag, src
        )
        return "OK"

    async def release(self, group: str, keys: list[str]) -> str:
        replica = self.replicas.get(group)
        if replica is not None:
            replica.release(keys)
        return "OK"

    async def coll(self, group: str, step: int, seq: int, src: int, payload: Any) -> None:
        self._mailbox(group).put(step, seq, src, packet_from_payload(payload))

    async def shm_probe(self, name: str, token: str) -> bool:
        return answer_probe(name, token)

    async def abort(self, group: str, step: int, reason: str) -> None:
        self._mailbox(group).abort(step, reason)

    def peer_done(self, group: str, rank: int, first: int, last: int, last_step: int, collectives: int) -> None:
        """Replica ``rank`` of ``group`` returned from the program of steps ``first``..``last``."""
        if group in self.replicas:  # a group closed here meanwhile needs nothing
            self._mailbox(group).peer_finished(int(rank), int(first), int(last), int(last_step), int(collectives))

    async def peer_done_handler(
        self, group: str, rank: int, first: int, last: int, last_step: int, collectives: int
    ) -> None:
        self.peer_done(group, rank, first, last, last_step, collectives)

    async def interrupt(self, group: str, step: int, last_step: int, reason: str, wait: float) -> bool:
        """The notebook was interrupted in steps ``step``..``last_step`` (one program): abort them, then stop
        the program where it runs the user's code. True once this replica is done with it (within ``wait`` s).

        The abort comes first: a replica that reaches a collective of the step after it sends nothing
        (``Replica.collective``), so no peer completes an update without it.
        """
        box = self._mailbox(group)
        for s in range(step, last_step + 1):
            box.abort(s, reason)
        ex = self.executors.get(group)
        if ex is None:
            return True
        interruptible = ex.interrupt(step)
        # A thread that cannot be interrupted still gets a moment: the abort may be all it waited for.
        deadline = time.monotonic() + (wait if interruptible else min(wait, 1.0))
        while ex.running == step and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        return ex.running != step

    async def running(self, group: str) -> int | None:
        """The step whose program this replica runs now (``None``: idle)."""
        ex = self.executors.get(group)
        return None if ex is None else ex.running


def _close_transport(replica: Replica) -> None:

    try:
        close_central(replica)  # central storage's answers to reads have segments of their own
        replica.transport.close()
    except Exception:  # closing must not fail because a peer is gone
        logger.exception("interdist: could not close the transport of replica %s", replica.rank)
