"""Central storage's bookkeeping and messages on a replica (CentralStorageStrategy).

A central variable lives on one replica of the group, the holder. ``CentralState`` is one
replica's bookkeeping for its group's central variables: which program and update (epoch)
the holder is at, the values a slower replica may still read, and, off the holder, the values
read in this program. Here too the messages between the holder and the others: a read
(``CentralState.fetch`` asks, ``serve_central_read`` answers on the holder) and
``reduce_to_holder``, each replica's part of an update summed onto the holder. The variable
itself, and the programs that make and write it, are in central_variable.py.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import numpy as np

from interdist._reduction import reduce_arrays
from interdist.collectives.base import Timing, pack, unpack
from interdist.collectives.shared_memory import SharedMemoryTransport
from interdist.errors import CollectiveAbortedError, CollectiveTimeoutError
from interdist.reduce_op import ReduceOp

if TYPE_CHECKING:
    from interdist.replica.central_variable import CentralReplicaVariable
    from interdist.replica.replica import Replica


READ_TAG_BASE = 1 << 40  # mailbox tags of read replies: never a collective's sequence number


REDUCE_TO_HOLDER = "reduce-to-holder"


def central_state(replica: Replica) -> CentralState:
    """The replica's ``CentralState`` (kept on the replica: it goes when the replica goes)."""
    state: CentralState | None = getattr(replica, "central_state", None)
    if state is None:
        state = CentralState(replica)
        replica.central_state = state
    return state


def central_sync(replica: Replica) -> None:
    """Every replica of the group reached this point (a collective all entered): drop old values."""
    state = getattr(replica, "central_state", None)
    if state is not None and state.is_holder:
        state.prune()


class CentralState:
    """One replica's bookkeeping for the central variables of its group."""

    def __init__(self, replica: Replica) -> None:
        self.replica = replica
        self.holder = int(replica.spec.get("central_holder", 0))
        self.is_holder = replica.rank == self.holder
        self.cond = threading.Condition()
        # Made inside a program (a variable's creation) or by a restore between programs.
        self.program = replica.step
        self.running = replica.lock.locked()
        self.epoch = 0
        self.variables: weakref.WeakValueDictionary[int, CentralReplicaVariable] = weakref.WeakValueDictionary()
        # not the holder: values read in this program, and the writes of the update under way
        self.cache: dict[int, np.ndarray] = {}
        self.op_depth = 0
        self.op_writes: dict[int, list[tuple[str, np.ndarray]]] = {}
        self._tags = itertools.count(READ_TAG_BASE)
        self.reads_served = self.reads_from_history = 0  # holder: answers given, and how many from old values
        self._reply_transport: Any = None  # holder: what the answers travel by (see reply)
        self._reply_lock = threading.Lock()
        replica.program_hooks.append(self._on_program)

    # -- programs and updates ----------------------------------------------------
    def _on_program(self, start: bool) -> None:
        with self.cond:
            if start:
                self.program, self.epoch, self.running = self.replica.step, 0, True
                for var in list(self.variables.values()):
                    var._history.clear()
                    var._tag = 0
            else:
                self.running = False
            self.cond.notify_all()
        self.cache.clear()  # no copy outlives the program that read it
        self.op_depth = 0
        self.op_writes = {}

    @contextmanager
    def op(self, update: bool = False) -> Iterator[None]:
        """One update of central variables (a write, or a whole ``extended.update``): counted once."""
        self.op_depth += 1
        try:
            yield
        finally:
            self.op_depth -= 1
            if self.op_depth == 0:
                with self.cond:
                    self.epoch += 1
                    self.cond.notify_all()
                if update:
                    # The function may have written variables this replica did not see written
                    # (an optimizer skips its work where the variable is not held): read anew.
                    self.cache.clear()
                else:
                    for var_id in self.op_writes:
                        self.cache.pop(var_id, None)
                self.op_writes = {}

    def prune(self) -> None:
        """Keep, for each variable, only what a read at the current epoch or later can need."""
        with self.cond:
            e = self.epoch
            for var in list(self.variables.values()):
                if var._history:
                    if var._tag <= e:
                        var._history.clear()
                    else:
                        var._history[:] = [h for h in var._history if h[0] <= e][-1:]

    # -- the holder's side of a read -------------------------------------------------
    def value_at(self, var: CentralReplicaVariable, program: int, epoch: int, timeout: float) -> np.ndarray:
        deadline = time.monotonic() + timeout
        with self.cond:
            while True:
                if self.program == program:
                    if self.epoch >= epoch:
                        self.reads_served += 1
                        self.reads_from_history += var._tag > epoch
                        return var._at(epoch)
                    if not self.running:
                        raise CollectiveAbortedError(
                            f"replica {self.holder} ended step {program} after {self.epoch} update(s) of central "
                            f"variables; a replica waited for update {epoch}"
                        )
                elif self.program < program:
                    if epoch == 0 and not self.running:
                        self.reads_served += 1
                        return var.raw  # the last program's final value: the next one starts from it
                else:
                    raise CollectiveAbortedError(
                        f"replica {self.holder} already runs step {self.program}; a replica asked for a value "
                        f"of step {program}"
                    )
                left = deadline - time.monotonic()
                if left <= 0:
                    raise CollectiveTimeoutError(
                        f"replica {self.holder} did not reach update {epoch} of the central variables in step "
                        f"{program} within {timeout:g} s"
                    )
                self.cond.wait(min(left, 0.5))

    def reply(self, dst: int, step: int, tag: int, packet: Any) -> None:
        """Send an answer to ``dst`` (from a thread beside the replica thread).

        Large values go through shared memory when ``dst`` is on this host, by a transport of
        the answers' own: the replica's one hands out its segments to its replica thread
        alone. Answers are sent one at a time. Detached: the value is never changed in
        place, so nothing waits for its delivery.
        """
        with self._reply_lock:
            if self._reply_transport is None:
                outer = self.replica.transport
                inner = dask_transport(outer)
                if isinstance(outer, SharedMemoryTransport):
                    keep = inner.mailbox.on_drop  # the replica's transport frees dropped messages
                    self._reply_transport = SharedMemoryTransport(inner, outer.is_local, outer.threshold)
                    inner.mailbox.on_drop = keep
                else:
                    self._reply_transport = inner
            self._reply_transport.send_packet([dst], step, tag, packet, detached=True)

    def close(self) -> None:
        """The replica leaves (its own transport is closed right after): free the answers' segments."""
        with self._reply_lock:
            if isinstance(self._reply_transport, SharedMemoryTransport):
                self._reply_transport.close()
            self._reply_transport = None

    # -- the reader's side ---------------------------------------------------------
    def fetch(self, var: CentralReplicaVariable) -> np.ndarray:
        """The holder's value at this replica's point of the program (one message each way)."""
        rep = self.replica
        transport = rep.transport
        step, tag = rep.step, next(self._tags)
        what = (
            f"read of central variable {var.meta['name']!r} from replica {self.holder} by replica {rep.rank} "
            f"in step {step}"
        )
        self._request(var.var_id, step, tag, what)
        got = transport.mailbox.take(step, tag, [self.holder], rep.collectives.timeout(), what)
        packet = got[self.holder]
        try:
            buffers = transport.view(packet)
            status, payload = unpack(packet, buffers, copy=packet.shared)
        finally:
            transport.release(packet)
        if status != "ok":
            raise CollectiveAbortedError(f"{what} failed on replica {self.holder}: {payload}")
        value = np.asarray(payload)
        value.flags.writeable = False  # read-only: read_value hands out copies
        return value

    def _request(self, var_id: int, step: int, tag: int, what: str) -> None:
        inner = dask_transport(self.replica.transport)
        if inner is None:
            raise NotImplementedError(
                "reading a CentralStorageStrategy variable on a replica that does not hold "
                "it needs the Dask transport (replicas on Dask workers)"
            )
        worker, address = inner._worker, inner._peers[self.holder]
        mailbox = self.replica.transport.mailbox
        kwargs = {
            "group": self.replica.group_id,
            "var_id": var_id,
            "program": self.program,
            "epoch": self.epoch,
            "step": step,
            "tag": tag,
            "src": self.replica.rank,
        }

        async def ask() -> None:
            await worker.rpc(address).interdist_central_read(**kwargs)

        def done(f: Any) -> None:
            exc = (
                None
                if not f.cancelled() and f.exception() is None
                else ("cancelled" if f.cancelled() else repr(f.exception()))
            )
            if exc is not None:
                mailbox.abort(step, f"{what}: could not reach replica {self.holder} ({address}): {exc}")

        # Not waited for: the reply comes through this replica's mailbox (abort-aware, with a timeout).
        asyncio.run_coroutine_threadsafe(ask(), worker.loop.asyncio_loop).add_done_callback(done)


def dask_transport(transport: Any) -> Any:
    """The Dask comms transport under ``transport`` (shared memory wraps it), or None."""
    while transport is not None and not hasattr(transport, "_peers"):
        transport = getattr(transport, "inner", None)
    return transport


def serve_central_read(replica: Replica, var_id: int, program: int, epoch: int, step: int, tag: int, src: int) -> None:
    """The holder's answer to ``CentralState.fetch`` (run in a thread beside the replica thread)."""
    try:
        var = replica.variables[var_id]
        state = var._state
        packet = pack(("ok", state.value_at(var, program, epoch, replica.collectives.timeout())))
    except BaseException as exc:  # noqa: BLE001 - the reader must get an answer
        packet = pack(("error", f"{type(exc).__name__}: {exc}"))
    central_state(replica).reply(src, step, tag, packet)


def close_central(replica: Replica) -> None:
    """The replica leaves: free what its answers to reads hold (shared-memory segments)."""
    state = getattr(replica, "central_state", None)
    if state is not None:
        state.close()


def reduce_to_holder(replica: Replica, arrays: list[np.ndarray], agg: str) -> list[np.ndarray] | list[None]:
    """Reduce each replica's ``arrays`` (SUM, MEAN or ONLY_FIRST_REPLICA) onto the holder.

    The holder gets the results (added in rank order, the bits an all-reduce gives); the
    others send their part and return ``[None, ...]`` at once.
    """
    state = central_state(replica)
    holder, rank, n = state.holder, replica.rank, replica.world_size
    srcs = [0] if agg == "ONLY_FIRST_REPLICA" else list(range(n))
    nbytes = sum(a.nbytes for a in arrays)

    def call(step: int, seq: int, what: str) -> list[np.ndarray] | list[None]:
        coll = replica.collectives
        transport = coll.transport
        t0 = time.perf_counter()
        try:
            if rank != holder:
                sent = 0
                if rank in srcs:
                    packet = pack(arrays)
                    sent = packet.nbytes
                    transport.send_packet([holder], step, seq, packet)
                    transport.flush(coll.timeout())
                coll.last_timing = Timing(0.0, time.perf_counter() - t0, sent, REDUCE_TO_HOLDER)
                return [None] * len(arrays)
            others = [r for r in srcs if r != holder]
            got = transport.mailbox.take(step, seq, others, coll.timeout(), what) if others else {}
            wait = time.perf_counter() - t0
            recv: Any = None
            parts: Any = None
            try:
                recv = {r: unpack(p, transport.view(p)) for r, p in got.items()}
                parts = [arrays if r == holder else recv[r] for r in srcs]
                if agg == "ONLY_FIRST_REPLICA":
                    out = [np.array(a, copy=True) for a in parts[0]]
                else:
                    out = [reduce_arrays([p[i] for p in parts], ReduceOp(agg)) for i in range(len(arrays))]
            finally:
                recv = parts = None  # views of the senders' segments: gone before they are released
                for p in got.values():
                    transport.release(p)
            coll.last_timing = Timing(
                wait, time.perf_counter() - t0 - wait, sum(p.nbytes for p in got.values()), REDUCE_TO_HOLDER
            )
            if len(others) == n - 1:
                state.prune()  # every replica reached this collective
            return out
        except BaseException:
            transport.forget()
            raise

    if n == 1:
        return [reduce_arrays([a], ReduceOp(agg)) if agg != "ONLY_FIRST_REPLICA" else a for a in arrays]
    return replica.collective("reduce_to_holder", nbytes, call)
