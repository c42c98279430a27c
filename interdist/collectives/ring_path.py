"""How the collectives meet in a ring all-reduce (``ring.py``): the hellos, and the pair's ring on the transport.

``RingMixin`` is ``Collectives``' (algorithms.py): a large all-reduce of two replicas on one host starts
with a hello each; both offered the same ring: the chunks go through it; else the all-gather-reduce, its
contributions under the negated sequence number (the hellos took the collective's own). ``PairRing`` is the
shared-memory transport's (shared_memory.py): the ring this rank shares with its one peer, made by rank 0 and
named in its hellos, mapped by rank 1.
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from interdist.collectives.base import Packet, Timing, Transport, _parse, frame_layout
from interdist.collectives.ring import RING_ALGORITHM, Ring, exchange, hello, is_hello, kernels, read_hello
from interdist.errors import ReplicaMismatchError
from interdist.reduce_op import ReduceOp


class PairRing:
    """The ring of a pair of replicas on one host (a mixin of ``SharedMemoryTransport``, whose state it uses)."""

    if TYPE_CHECKING:  # SharedMemoryTransport's (shared_memory.py)
        world_size: int
        rank: int
        threshold: int
        inner: Transport
        is_local: Callable[[int], bool]
        _closed: bool
        _lock: threading.Lock
        _ring: Ring | None
        _ring_peer: str
        _ring_failed: bool

    def ring_possible(self) -> bool:
        """Whether this rank offers a ring at all (a hello costs a message round): two replicas, its peer on this
        host, shared memory on, and no ring of this peer's left broken (a replaced peer gets a new one)."""
        if self.world_size != 2 or self._closed or self.threshold < 0 or not self.is_local(1 - self.rank):
            return False
        ring = self._ring
        if ring is not None and ring.broken and self._ring_peer == self.inner.peer_id(1 - self.rank):
            return False
        return not (self.rank == 0 and self._ring_failed)

    def pair_ring(self) -> Ring | None:
        """The ring this rank shares with its one peer on this host, for its hello: rank 0 makes it the first
        time; rank 1 has one once it mapped the one rank 0 named (``attach_ring``). None: none (yet)."""
        if not self.ring_possible():
            return None
        peer = 1 - self.rank
        peer_id = self.inner.peer_id(peer)
        with self._lock:
            if self._ring is not None and self._ring_peer != peer_id:
                self._ring.close()  # the peer's worker was replaced: a new ring for the new process
                self._ring = None
            if self._ring is None and self.rank == 0 and not self._ring_failed:
                self._ring = Ring.create()
                self._ring_failed = self._ring is None
                self._ring_peer = peer_id
            return self._ring

    def attach_ring(self, name: str) -> None:
        """Rank 1: map the ring rank 0 named in its hello (used from the next ring all-reduce on)."""
        if self.rank != 1 or not name or self._closed:
            return
        peer_id = self.inner.peer_id(0)
        with self._lock:
            if self._ring is not None and self._ring.name == name and self._ring_peer == peer_id:
                return
            if self._ring is not None:
                self._ring.close()
            self._ring = Ring.attach(name)
            self._ring_peer = peer_id


class RingMixin:
    """``Collectives._ring_all_reduce``: the hellos, then the ring or the all-gather-reduce (a mixin of
    ``Collectives``, algorithms.py, whose attributes and methods it uses)."""

    transport: Any
    timeout: Any
    last_timing: Any

    if TYPE_CHECKING:  # Collectives'

        @property
        def rank(self) -> int: ...

        def _take(self, step: int, seq: int, srcs: list[int], what: str) -> tuple[dict[int, Any], float]: ...
        def _release(self, got: dict[int, Any]) -> None: ...
        def _check(self, mine: Any, metas: dict[int, Any]) -> None: ...
        def _all_gather_reduce(self, *args: Any, **kwargs: Any) -> list[Any]: ...

    def _past_hellos(self, step: int, seq: int, got: dict[int, Any], what: str) -> float:
        """In an all-gather-reduce, a peer's hello in ``got`` (it offered a ring this rank does not use) is
        replaced by its contribution, which it sends under ``-seq``; the seconds waited for that."""
        hellos = [r for r, p in got.items() if is_hello(p.header)]
        if not hellos:
            return 0.0
        for r in hellos:
            self.transport.release(got.pop(r))
        more, wait = self._take(step, -seq, hellos, what)
        got.update(more)
        return wait

    def _ring_all_reduce(
        self,
        step: int,
        seq: int,
        arrays: list[np.ndarray],
        shapes: list[tuple[int, ...]],
        op: Any,
        what: str,
        consume: Any = None,
    ) -> list[Any]:
        """The all-reduce (SUM or MEAN) of two replicas on one host: a hello each, then the ring when both offered
        the same one, else the all-gather-reduce (its contributions under ``-seq``: the hellos took ``seq``).

        ``consume`` (``all_reduce_consumed``'s, SUM only): the all-gather-reduce passes it its parts; the ring
        asks its ``ring_update(i, array)`` for a ``RingUpdate`` (None: that array's sum is returned) and
        returns None at each array it updated, committed only once the whole batch went through."""
        t0 = time.perf_counter()
        layout = frame_layout(arrays, op.value)
        if layout is None:  # (eligible batches are framed: float32/float64 NumPy arrays)
            return self._all_gather_reduce(step, seq, arrays, shapes, op, what)
        transport = self.transport
        peer = 1 - self.rank
        mine = transport.pair_ring()
        if mine is not None:
            kernels()  # compiled (or loaded) before the hello, not while the peer waits in the ring (cached after)
        sent = hello(mine, layout.description)
        transport.send_packet([peer], step, seq, Packet(sent), detached=True)
        got, wait = self._take(step, seq, [peer], what)
        header = got[peer].header
        if not is_hello(header):  # the peer sent its contribution (it offers no ring): all-gather-reduce
            return self._all_gather_reduce(step, seq, arrays, shapes, op, what, consume, got=got, t0=t0, waited=wait)
        self._release(got)
        usable, name, description = read_hello(header)
        if description != layout.description:  # the same error on both ranks, as the all-gather-reduce's
            theirs = _parse(description)
            meta = (list(shapes), [a.dtype.str for a in arrays], op.value)
            self._check(meta, {peer: (list(theirs.shapes), list(theirs.strs), theirs.op)})
            raise ReplicaMismatchError(f"{what}: the replicas' batches differ")  # pragma: no cover - _check raised
        if self.rank == 1 and usable and (mine is None or name != mine.name):
            transport.attach_ring(name)  # rank 0's ring: from the next one on
        if mine is None or mine.broken or not usable or name != mine.name:  # (what the two hellos said)
            return self._all_gather_reduce(step, -seq, arrays, shapes, op, what, consume, t0=t0, waited=wait)
        deadline = time.monotonic() + self.timeout()
        aborted = functools.partial(transport.mailbox.aborted, step)
        out: list[Any] = []
        commits = []
        offer = getattr(consume, "ring_update", None)
        # Asked for before the first chunk moves: whatever they raise leaves the ring where both ranks agree.
        updates = [offer(i, a) if offer is not None else None for i, a in enumerate(arrays)]
        for a, update in zip(arrays, updates, strict=True):
            if update is not None:
                exchange(mine, a, update.out, aborted, deadline, what, (update.w, update.lr))
                commits.append(update.commit)
                out.append(None)
                continue
            summed = np.empty_like(a)
            exchange(mine, a, summed, aborted, deadline, what)
            if op is ReduceOp.MEAN:  # as _reduce_owned's: the float sum divided in its dtype
                np.true_divide(summed, np.asarray(2, dtype=summed.dtype), out=summed)
            out.append(summed)
        for commit in commits:  # every array went through: the new copies, all at once
            commit()
        self.last_timing = Timing(wait, time.perf_counter() - t0 - wait, sum(a.nbytes for a in arrays), RING_ALGORITHM)
        return out
