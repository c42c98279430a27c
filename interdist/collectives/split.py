"""Reduce-broadcast with its reduction split between one owner per core, for replicas pinned round the cores.

Where a group's replicas all sit on one host and are more than its cores, each replica's thread is pinned to
one core, rank ``r`` to core ``r % cores`` (``worker/affinity.py``), and ``AUTO`` picks reduce-broadcast for
large batches from 3 replicas (``two_round.py``). There the root sums every rank's arrays on its own core
while the other cores' replicas wait: at 4 replicas on 2 cores, the 4 MB gradient of ``bench_peers.py``'s
step was summed on core 0 alone (1.5 ms) and copied into the root's segment there (0.8 ms), while core 1
waited (docs/performance.md, "The fourteenth run").

Here the reduction is split between ``owners`` ranks, ``0 .. owners - 1``, one per core: every array is cut
into ``owners`` contiguous chunks, rank ``r`` sends chunk ``j`` of each array to owner ``j`` (one packet per
owner), owner ``j`` reduces chunk ``j`` in rank order (``_reduce_owned`` on the chunk: elementwise, so the
same bits as the root's whole sum) and sends it to every rank, and each rank reads the owners' chunks where
they lie: a consumer with a ``chunks(i, pieces)`` method (the optimizers' fused update) updates from them
without the sum being copied out whole. Each core adds up a share of the gradient, in parallel. An owner
writes its SUM straight into the segment the others read (``SharedMemoryTransport.send_written``: no copy
in); another op, or a chunk small enough to travel in a header, is packed and sent as reduce-broadcast's.
Measured at 4 replicas on 2 cores, alternated processes, medians: the fused SGD step 10.96 -> 9.97 ms, the
4 MB all-reduce 5.93 -> 5.38 ms, the same bits.

The same checks as reduce-broadcast: each owner sees every rank's (shapes, dtypes, op), so a mismatch
raises on every owner and reaches the others as the owners' answer (``ReplicaMismatchError``), before any
consumer runs. The number of owners is the group's, set when the replica joins (``Collectives.owners``, from
``affinity.reduce_owners``: one per core where each core holds two replicas or more, else 1, the plain
reduce-broadcast); it is used only where ``AUTO`` chose reduce-broadcast, never where ``cross_device_ops``
named the algorithm or its root.
"""

from __future__ import annotations

import pickle
import time
from typing import Any

import numpy as np

from interdist import config
from interdist.collectives.base import (
    Timing,
    described_layout,
    is_frame,
    pack,
    pack_arrays,
    unpack_arrays,
)
from interdist.collectives.cost_model import split_pays
from interdist.collectives.cost_phases import RB
from interdist.collectives.reducing import _blocked_sum, _dtypes, _reduce_owned
from interdist.collectives.two_round import CollectivesParts, _bounds, _phase2
from interdist.errors import ReplicaMismatchError
from interdist.reduce_op import ReduceOp

#: The dtype kinds whose chunks reduce as the whole arrays do (``_reduce_owned``'s elementwise adds).
_SPLIT_KINDS = "iufc"
#: A fixed threshold (elements, all arrays together) from which the sum is split, instead of the cost model's
#: ``split_pays`` (``interdist.collectives.split-min-elements``, read when this module is imported; or assigned
#: here). The model splits 4 replicas' sum between 2 owners from about 2.5 MB: below, a message to each owner
#: costs more than the owners' parallel adds save (measured, ``benchmarks/bench_split.py``: 1.44x the root's
#: time at 64 KB, 1.12-1.30x at 1 MB, 0.88-0.90x at 4 MB).
SPLIT_MIN_ELEMENTS: int | None = config.get("collectives.split-min-elements")


class SplitMixin(CollectivesParts):
    """Reduce-broadcast split between ``owners`` ranks, on ``Collectives``' transport and helpers."""

    owners: int  # (set by ``Collectives.__init__``, then by the join: worker/plugin.py)

    def _splits(self, arrays: list[np.ndarray]) -> bool:
        """Whether this batch's reduce-broadcast is split between the owners: a plain numeric batch, owners set,
        and large enough (``SPLIT_MIN_ELEMENTS``, else the cost model's ``split_pays``)."""
        if not (1 < self.owners <= self.world_size and all(a.dtype.kind in _SPLIT_KINDS for a in arrays)):
            return False
        elements = sum(a.size for a in arrays)
        if SPLIT_MIN_ELEMENTS is not None:
            return elements >= SPLIT_MIN_ELEMENTS
        return split_pays(elements, self.world_size, self.owners)

    def _split_reduce_broadcast(
        self,
        step: int,
        seq: int,
        arrays: list[np.ndarray],
        shapes: list[tuple[int, ...]],
        op: ReduceOp,
        what: str,
        consume: Any = None,
    ) -> list[Any]:
        """The module's algorithm. ``consume`` (``Collectives.all_reduce_consumed``'s): its ``chunks(i, pieces)``
        gets array ``i``'s sum as the owners' chunks in order (views, valid during the call) and returns True
        when it used them itself (result ``i`` None); without one, or where it returns False, result ``i`` is
        the sum, made whole."""
        t0 = time.perf_counter()
        me, k = self.rank, self.owners
        flats = [a.reshape(-1) for a in arrays]
        bounds = [_bounds(f.size, k) for f in flats]
        meta = (shapes, _dtypes(arrays), op.value)
        sent = 0
        for j in range(k):  # round 1: chunk j of every array to owner j (a pickle: the whole shapes ride along)
            if j != me:
                packet = pack((meta, [f[b[j] : b[j + 1]] for f, b in zip(flats, bounds, strict=True)]))
                sent += packet.nbytes
                self.transport.send_packet([j], step, seq, packet)
        mine: list[np.ndarray] = []
        error: ValueError | None = None
        wait = 0.0
        if me < k:  # round 2: this owner's chunk of the sum, to every rank
            mine, error, wait, nbytes = self._own_chunk(step, seq, flats, bounds, meta, op, what)
            sent += nbytes
        others = [j for j in range(k) if j != me] if error is None else []  # (an owner that refused: its error)
        got, wait2 = self._take(step, _phase2(seq), others, what)
        out: list[Any] = []
        answers: dict[int, tuple[str, Any]] = {me: ("ok", mine)} if me < k else {}
        pieces: list[np.ndarray] = []
        try:
            for j, p in got.items():
                frame = is_frame(p.header)  # the sum's chunk (views of its segment), else ("error", why)
                answers[j] = ("ok", unpack_arrays(p.header, self.transport.view(p))[1]) if frame else self._open(p)
            refused = [body for kind, body in answers.values() if kind == "error"]
            if error is None and not refused:
                chunks = getattr(consume, "chunks", None)
                for i, (shape, flat) in enumerate(zip(shapes, flats, strict=True)):
                    pieces = [answers[j][1][i] for j in range(k)]
                    if chunks is not None and chunks(i, pieces):
                        out.append(None)
                    else:
                        out.append((np.concatenate(pieces) if flat.size else np.array(pieces[0])).reshape(shape))
        finally:
            answers, pieces = {}, []  # views of the owners' segments: gone before they are released
            self._release(got)
        self.transport.flush(self.timeout())
        wait += wait2
        self.last_timing = Timing(wait, time.perf_counter() - t0 - wait, sent, RB)
        if error is not None:
            raise error
        if refused:
            raise ReplicaMismatchError(refused[0])
        return out

    def _own_chunk(
        self,
        step: int,
        seq: int,
        flats: list[np.ndarray],
        bounds: list[list[int]],
        meta: tuple[Any, list[str], str],
        op: ReduceOp,
        what: str,
    ) -> tuple[list[np.ndarray], ValueError | None, float, int]:
        """An owner's part: every rank's chunk of each array, checked and reduced in rank order, sent to every
        rank (a sum written straight into the segment the peers read, where the transport has one: no copy).
        Returns (its chunks of the result, the error every rank gets, the time waited, the bytes sent)."""
        me, peers = self.rank, self._peers()
        got, wait = self._take(step, seq, peers, what)
        metas: dict[int, Any] = {}
        parts: dict[int, list[np.ndarray]] = {}
        sums: list[np.ndarray] = []
        columns: list[list[np.ndarray]] = []
        try:
            for r, p in got.items():  # views of the senders' memory (read-only), not copies: pickle.loads itself
                if is_frame(p.header):  # a rank that did not split (another batch size: a mismatch, named below)
                    metas[r], parts[r] = unpack_arrays(p.header, self.transport.view(p))
                else:
                    metas[r], parts[r] = pickle.loads(p.header, buffers=self.transport.view(p))
            try:
                self._check(meta, metas)
            except ValueError as e:
                packet = pack(("error", str(e)))
                self.transport.send_packet(peers, step, _phase2(seq), packet)
                return [], e, wait, packet.nbytes
            parts[me] = [f[b[me] : b[me + 1]] for f, b in zip(flats, bounds, strict=True)]
            columns = [[parts[r][i] for r in range(self.world_size)] for i in range(len(flats))]
            if (sent := self._send_sum(step, seq, columns, op, sums)) < 0:
                sums = [_reduce_owned(c, op) for c in columns]
                packet = pack_arrays(sums, op.value) or pack(("ok", sums))
                self.transport.send_packet(peers, step, _phase2(seq), packet)
                sent = packet.nbytes
            return sums, None, wait, sent
        finally:
            metas = parts = {}  # views of the senders' segments: gone before they are released
            columns = []
            self._release(got)

    def _send_sum(self, step: int, seq: int, columns: list[list[np.ndarray]], op: ReduceOp, sums: list[Any]) -> int:
        """A SUM's chunks added up in rank order straight into the segment the peers will read (the transport's
        ``send_written``), appended to ``sums`` (views of it); the bytes sent, or -1 (nothing sent) where it
        cannot: another op, a chunk small enough to travel in the header, no such transport."""
        send_written = getattr(self.transport, "send_written", None)
        if op is not ReduceOp.SUM or send_written is None:
            return -1
        dtypes = [c[0].dtype for c in columns]  # (every rank's the same: the owner checked them)
        shapes: list[tuple[int, ...]] = [(c[0].size,) for c in columns]
        layout = described_layout(dtypes, shapes, op.value)
        if any(layout.inband):
            return -1

        def write(views: list[np.ndarray]) -> None:
            for column, view in zip(columns, views, strict=True):
                _blocked_sum(column, view)
            sums.extend(views)

        specs = [(d, s[0]) for d, s in zip(dtypes, shapes, strict=True)]
        if not send_written(self._peers(), step, _phase2(seq), layout.prefix, specs, write):
            return -1
        return sum(v.nbytes for v in sums)
