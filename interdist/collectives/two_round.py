"""The two-round all_reduce algorithms, for large batches: reduce-broadcast and reduce-scatter + all-gather.

A mixin of ``Collectives`` (``algorithms.py``, whose docstring describes all three algorithms and how
``AUTO`` chooses); the one-round all-gather-reduce, the checks and the helpers these use stay there.
Both end with every rank holding the same bits as all-gather-reduce gives. The second round's packets
go under ``_phase2(seq)``; the small path (``small.py``) sends reduce-broadcast's packets itself and
reads the root's answer with ``_result``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from interdist.collectives.base import Packet, Timing, Transport, is_frame, pack, pack_arrays, unpack, unpack_arrays
from interdist.collectives.cost_phases import RB, RS
from interdist.collectives.reducing import _dtypes, _reduce_owned
from interdist.errors import ReplicaMismatchError
from interdist.reduce_op import ReduceOp

#: ``Collectives.all_reduce_consumed``'s consumer: (the array's index, every rank's array) -> used its sum itself.
Consumer = Callable[[int, list[np.ndarray]], bool]


def _phase2(seq: int) -> int:
    """The mailbox sequence number of a collective's second round (never a real seq, which is >= 0)."""
    return -1 - seq


def _bounds(size: int, n: int) -> list[int]:
    return [size * j // n for j in range(n + 1)]


class CollectivesParts:
    """What the algorithm mixins (this module's, ``split.py``'s) use of ``Collectives`` (algorithms.py)."""

    # Set by ``Collectives.__init__``.
    transport: Transport
    timeout: Callable[[], float]
    last_timing: Timing

    if TYPE_CHECKING:

        @property
        def rank(self) -> int: ...

        @property
        def world_size(self) -> int: ...

        def _peers(self) -> list[int]: ...

        def _take(self, step: int, seq: int, srcs: list[int], what: str) -> tuple[dict[int, Packet], float]: ...

        def _release(self, got: dict[int, Packet]) -> None: ...

        def _open(self, packet: Packet) -> Any: ...

        def _check(self, mine: tuple[list[tuple[int, ...]], list[str], str], metas: dict[int, Any]) -> None: ...

        def _contribution(self, arrays: list[np.ndarray], meta: tuple[Any, list[str], str]) -> Packet: ...

        def _contributions(
            self, got: dict[int, Packet], mine: Packet, meta: tuple[Any, list[str], str]
        ) -> dict[int, list[np.ndarray]]: ...


class TwoRoundMixin(CollectivesParts):
    """Reduce-broadcast and reduce-scatter + all-gather, on ``Collectives``' transport and helpers."""

    root: int  # (set by ``Collectives.__init__``)

    def _reduce_broadcast(
        self,
        step: int,
        seq: int,
        arrays: list[np.ndarray],
        shapes: list[tuple[int, ...]],
        op: ReduceOp,
        what: str,
        consume: Consumer | None = None,
    ) -> list[Any]:
        """Every rank's arrays to ``self.root``, which reduces them once (in rank order: the same bits
        as ``_all_gather_reduce``) and sends the result to every rank; or, when shapes disagree, the
        same ``ValueError`` to every rank. ``consume`` (``Collectives.all_reduce_consumed``): a rank other
        than the root offers it each result as ``[view of the root's packet]`` before copying it."""
        t0 = time.perf_counter()
        root, peers = self.root, self._peers()
        meta = (shapes, _dtypes(arrays), op.value)
        mine = self._contribution(arrays, meta)
        if self.rank != root:
            packet = mine
            self.transport.send_packet([root], step, seq, packet)
            got, wait = self._take(step, _phase2(seq), [root], what)
            try:
                if consume is not None and is_frame(got[root].header):
                    _, sums = unpack_arrays(got[root].header, self.transport.view(got[root]))
                    kind, body = "ok", [None if consume(i, [a]) else np.array(a) for i, a in enumerate(sums)]
                    sums = []
                else:
                    kind, body = self._result(got[root])
            finally:
                self._release(got)
            self.transport.flush(self.timeout())
            self.last_timing = Timing(wait, time.perf_counter() - t0 - wait, packet.nbytes, RB)
            if kind == "error":
                raise ReplicaMismatchError(body)
            return list(body)
        got, wait = self._take(step, seq, peers, what)
        recv: Any = None
        parts: Any = None
        error: ValueError | None = None
        out: list[np.ndarray] = []
        try:
            try:
                recv = self._contributions(got, mine, meta)
            except ValueError as e:
                error = e
            else:
                parts = [arrays if r == root else recv[r] for r in range(self.world_size)]
                out = [_reduce_owned([p[i] for p in parts], op) for i in range(len(arrays))]
        finally:
            recv = parts = None  # views of the senders' segments: gone before they are released
            self._release(got)
        packet = (None if error is not None else pack_arrays(out, op.value)) or pack(
            ("error", str(error)) if error is not None else ("ok", out)
        )  # the result as a raw frame when it can be one
        self.transport.send_packet(peers, step, _phase2(seq), packet)
        self.transport.flush(self.timeout())
        self.last_timing = Timing(wait, time.perf_counter() - t0 - wait, packet.nbytes, RB)
        if error is not None:
            raise error
        return out

    def _result(self, packet: Packet) -> tuple[str, Any]:
        """A reduce-broadcast root's answer: ("ok", the arrays, the caller's own) or ("error", why)."""
        if not is_frame(packet.header):
            return self._open(packet)  # type: ignore[no-any-return]
        _, arrays = unpack_arrays(packet.header, self.transport.view(packet))
        return "ok", [np.array(a) for a in arrays]  # (copies: views of the root's packet)

    def _reduce_scatter_all_gather(
        self, step: int, seq: int, arrays: list[np.ndarray], shapes: list[tuple[int, ...]], op: ReduceOp, what: str
    ) -> list[np.ndarray]:
        t0 = time.perf_counter()
        n, me, peers = self.world_size, self.rank, self._peers()
        flats = [a.reshape(-1) for a in arrays]
        bounds = [_bounds(a.size, n) for a in arrays]

        def chunk(i: int, j: int) -> np.ndarray:
            return flats[i][bounds[i][j] : bounds[i][j + 1]]

        sent = 0
        meta = (shapes, _dtypes(arrays), op.value)
        # A pickle, not a frame: the checks compare the whole arrays' shapes (in ``meta``), not the
        # chunks' (a (4, 4) and a (16,) array have chunks of one shape).
        described = pack(meta)
        for j in peers:  # round 1: chunk j of every array to its owner j
            packet = pack((meta, [chunk(i, j) for i in range(len(arrays))]))
            sent += packet.nbytes
            self.transport.send_packet([j], step, seq, packet)
        got, wait = self._take(step, seq, peers, what)
        recv: Any = None
        parts: Any = None
        try:
            recv = self._contributions(got, described, meta)
            parts = [[chunk(i, me) for i in range(len(arrays))] if r == me else recv[r] for r in range(n)]
            mine = [_reduce_owned([p[i] for p in parts], op) for i in range(len(arrays))]
        finally:
            recv = parts = None
            self._release(got)
        # round 2: every owner's reduced chunk to everyone, copied into place as bytes
        outs = [np.empty(a.size, dtype=m.dtype) for a, m in zip(arrays, mine, strict=True)]
        for i, m in enumerate(mine):
            outs[i][bounds[i][me] : bounds[i][me + 1]] = m
        packet = pack([o[b[me] : b[me + 1]] for o, b in zip(outs, bounds, strict=True)])
        sent += packet.nbytes
        self.transport.send_packet(peers, step, _phase2(seq), packet)
        got, wait2 = self._take(step, _phase2(seq), peers, what)
        try:
            for r, p in got.items():
                parts = unpack(p, self.transport.view(p))
                for i, c in enumerate(parts):
                    outs[i][bounds[i][r] : bounds[i][r + 1]] = c
                c = None
        finally:
            parts = None
            self._release(got)
        self.transport.flush(self.timeout())  # our chunks were read before anyone may change them
        wait += wait2
        self.last_timing = Timing(wait, time.perf_counter() - t0 - wait, sent, RS)
        return [o.reshape(s) for o, s in zip(outs, shapes, strict=True)]
