"""The path of a small all_reduce: a batch whose arrays all travel in the frame's header.

Most all-reduces of a training step are small (a loss, a metric, a few biases): what they cost
is the replicas' Python, not the bytes (4 KB on 2 replicas, 2 cores: the general path's
framing, checks, algorithm choice and reduction took ~28 us of each replica's time per call).
This path sends exactly the packet the all-gather-reduce of ``algorithms.py`` sends (the same raw
frame, at the same step and seq: a peer on either path reads it), and on receipt compares each
peer's frame head, as bytes, with its own: equal, the batch has the same op, dtypes and shapes on
every rank, and the peer's arrays are read straight from its header at this rank's own offsets.
It adds them in rank order, as ``_reduce_owned`` does (the same ufunc loops on the same dtypes:
the same bits). What a batch layout needs is worked out once (``_Plan``, cached per
``Collectives``). Anything else (a frame of another layout, a pickle) goes through
``Collectives._contributions``, which names the mismatch on every rank as before.
"""

from __future__ import annotations

import functools
import time
from typing import TYPE_CHECKING, Any

import numpy as np

from interdist.collectives.base import Packet, Timing, _Layout, frame_layout, pack, pack_arrays
from interdist.collectives.cost_model import AG, RB
from interdist.collectives.reducing import _check_collective_dtypes, _reduce_owned
from interdist.errors import ReplicaMismatchError
from interdist.reduce_op import ReduceOp

if TYPE_CHECKING:
    from interdist.collectives.algorithms import Collectives

_SUM, _MEAN = ReduceOp.SUM, ReduceOp.MEAN
#: ``Timing`` made from a tuple of its four fields in C (a named tuple's own ``__new__`` is Python).
_timing = functools.partial(tuple.__new__, Timing)
_MAX_PLANS = 64


class _Plan:
    """What one batch layout (op, dtypes, shapes) needs on this path, worked out once."""

    __slots__ = ("choices", "dtypes_ok", "fast", "head", "layout", "op", "pieces", "prefix", "size")

    def __init__(self, layout: _Layout, op: ReduceOp) -> None:
        self.layout, self.op = layout, op
        self.prefix, self.size = layout.prefix, layout.end
        # (dtype, count, offset, shape) of each array in the header
        self.pieces = list(zip(layout.dtypes, layout.sizes, layout.offsets, layout.shapes, strict=True))
        # Plain adds (and a true division for a float MEAN) give ``_reduce_owned``'s bits here;
        # 0-d arrays and integer means go through it.
        self.fast = all(len(s) > 0 for s in layout.shapes) and (
            op is _SUM or all(d.kind in "fc" for d in layout.dtypes)
        )
        self.choices: dict[Any, str] = {}  # AUTO's choice, by (spans hosts, the thresholds)
        self.dtypes_ok = False  # ``check_dtypes`` passed
        # One array with elements: the frame's bytes before them, made once (``pack``).
        self.head = layout.prefix + layout.pads[0] if len(layout.shapes) == 1 and layout.sizes[0] else None

    def check_dtypes(self) -> None:
        """TF's collective dtypes only (``_check_collective_dtypes``), once the peers' frames showed that every
        rank has them: raises on every rank alike, and looks only once per layout when they pass."""
        if not self.dtypes_ok:
            _check_collective_dtypes(self.layout.strs, self.layout.op)
            self.dtypes_ok = True

    def pack(self, arrays: list[np.ndarray]) -> bytes:
        if self.head is not None:  # one array: the frame's head, then its bytes
            a = arrays[0]
            body: Any = a if a.flags.c_contiguous else np.ascontiguousarray(a)  # (a buffer: no copy until the join)
            return b"".join((self.head, body))
        parts: list[Any] = [self.prefix]
        for a, pad in zip(arrays, self.layout.pads, strict=True):
            parts.append(pad)
            if a.size:
                parts.append(a if a.flags.c_contiguous else np.ascontiguousarray(a))
        return b"".join(parts)

    def arrays(self, header: Any) -> list[np.ndarray] | None:
        """A peer's arrays, read from its header (views of bytes: read-only), or ``None`` when its
        header is not a frame of this layout."""
        if type(header) is not bytes or len(header) != self.size or not header.startswith(self.prefix):
            return None
        if self.head is not None:
            d, n, off, shape = self.pieces[0]
            return [np.frombuffer(header, d, n, off).reshape(shape)]
        return [
            np.frombuffer(header, d, n, off).reshape(shape) if n else np.empty(shape, d)
            for d, n, off, shape in self.pieces
        ]


def small_all_reduce(
    coll: Collectives, step: int, seq: int, arrays: list[Any], op: ReduceOp, what: str, algorithm: str
) -> list[np.ndarray] | None:
    """The all-gather-reduce of a batch of plain NumPy arrays that fit a frame's header, or ``None``
    (nothing sent) when the batch is not one: then the caller takes the general path."""
    if len(arrays) == 1:  # the commonest batch (a loss, a metric): its key without a list
        one = arrays[0]
        if type(one) is not np.ndarray:
            return None
        key: tuple[Any, ...] = (op, one.dtype, one.shape)  # (never equal to a longer batch's key: no pairs in it)
    else:
        for a in arrays:
            if type(a) is not np.ndarray:
                return None
        key = (op, *[(a.dtype, a.shape) for a in arrays])
    plans: dict[Any, _Plan | None] = coll.plans
    plan = plans.get(key)
    if plan is None and key not in plans:
        layout = frame_layout(arrays, op.value)
        plan = _Plan(layout, op) if layout is not None and layout.small else None
        if len(plans) >= _MAX_PLANS:
            plans.clear()
        plans[key] = plan
    if plan is None:
        return None
    if algorithm == "auto":
        algorithm = coll.choose(plan.layout.elements, plan.choices)
    if algorithm == RB:
        return _reduce_broadcast(coll, plan, step, seq, arrays, op, what)
    if algorithm != AG:
        return None
    t0 = time.perf_counter()
    transport = coll.transport
    me, n = transport.rank, transport.world_size
    header = plan.pack(arrays)
    peers = coll.peers
    # All header: the transport holds nothing of ours once sent (no ``flush``), and a peer's frame read
    # from its header holds nothing of the transport's (no ``release``).
    transport.send_header(peers, step, seq, header)
    got: dict[int, Packet] = transport.mailbox.take(step, seq, peers, coll.timeout(), what)
    wait = time.perf_counter() - t0
    theirs: dict[int, Any] = {}
    for r, p in got.items():
        got_arrays = plan.arrays(p.header) if p.shm is None and not p.buffers else None
        if got_arrays is None:
            try:
                out = _mismatch(coll, got, Packet(header), arrays, op)
            finally:
                coll._release(got)
            break
        theirs[r] = got_arrays
    else:
        plan.check_dtypes()
        if n == 2 and plan.fast and op is _SUM:  # the commonest: one add per array (in rank order)
            other = theirs[1 - me]
            if len(arrays) == 1:
                out = [np.add(arrays[0], other[0]) if me == 0 else np.add(other[0], arrays[0])]
            else:
                out = [np.add(a, other[i]) if me == 0 else np.add(other[i], a) for i, a in enumerate(arrays)]
        else:
            out = [
                _sum([a if r == me else theirs[r][i] for r in range(n)], op, plan.fast) for i, a in enumerate(arrays)
            ]
    coll.last_timing = _timing((wait, time.perf_counter() - t0 - wait, len(header), AG))
    return out


def _reduce_broadcast(
    coll: Collectives, plan: _Plan, step: int, seq: int, arrays: list[Any], op: ReduceOp, what: str
) -> list[np.ndarray]:
    """``Collectives._reduce_broadcast`` of a small batch: the same packets (frames to the root, the
    result back as a frame, or a pickled error), with the small path's checks and sums."""
    t0 = time.perf_counter()
    transport, root = coll.transport, coll.root
    me, n = transport.rank, transport.world_size
    header = plan.pack(arrays)
    if me != root:
        transport.send_header([root], step, seq, header)
        got: dict[int, Packet] = transport.mailbox.take(step, -1 - seq, [root], coll.timeout(), what)
        wait = time.perf_counter() - t0
        reply = got[root]
        result = plan.arrays(reply.header) if reply.shm is None and not reply.buffers else None
        if result is not None:  # a frame of this layout: copies, the caller's own
            kind, body = "ok", [np.array(a) for a in result]
        else:
            try:
                kind, body = coll._result(reply)
            finally:
                coll._release(got)
        coll.last_timing = _timing((wait, time.perf_counter() - t0 - wait, len(header), RB))
        if kind == "error":
            raise ReplicaMismatchError(body)
        return list(body)
    peers = coll.peers
    got = transport.mailbox.take(step, seq, peers, coll.timeout(), what)
    wait = time.perf_counter() - t0
    error: ValueError | None = None
    out: list[np.ndarray] = []
    framed = False  # the sums have the batch's dtypes and shapes: the reply is a frame of this layout
    try:
        try:
            theirs = {r: plan.arrays(p.header) if p.shm is None and not p.buffers else None for r, p in got.items()}
            if any(t is None for t in theirs.values()):
                out = _mismatch(coll, got, Packet(header), arrays, op)
            else:
                plan.check_dtypes()
                out = [
                    _sum([a if r == me else theirs[r][i] for r in range(n)], op, plan.fast)  # type: ignore[index]
                    for i, a in enumerate(arrays)
                ]
                framed = plan.fast  # (in place, in the first array's dtype; ``_reduce_owned`` may not be)
        except ValueError as e:
            error = e
        theirs = {}
    finally:
        coll._release(got)
    if framed:  # ``pack_arrays`` of the sums, with the layout already worked out (4 us against 0.4)
        reply_header = plan.pack(out)
        transport.send_header(peers, step, -1 - seq, reply_header)
        nbytes = len(reply_header)
    else:
        reply = (None if error is not None else pack_arrays(out, op.value)) or pack(
            ("error", str(error)) if error is not None else ("ok", out)
        )
        if reply.buffers or reply.shm is not None:
            transport.send_packet(peers, step, -1 - seq, reply)
            transport.flush(coll.timeout())
        else:
            transport.send_header(peers, step, -1 - seq, reply.header)
        nbytes = reply.nbytes
    coll.last_timing = _timing((wait, time.perf_counter() - t0 - wait, nbytes, RB))
    if error is not None:
        raise error
    return out


def _mismatch(coll: Collectives, got: dict[int, Packet], mine: Packet, arrays: list[Any], op: ReduceOp) -> list[Any]:
    """A peer's packet is not a frame of this layout: the general checks (which raise on every rank
    when the batches differ), then the general reduction."""
    meta = ([a.shape for a in arrays], [a.dtype.str for a in arrays], op.value)
    recv = coll._contributions(got, mine, meta)
    parts = [arrays if r == coll.rank else recv[r] for r in range(coll.world_size)]
    return [_reduce_owned([p[i] for p in parts], op) for i in range(len(arrays))]


def _sum(values: list[np.ndarray], op: ReduceOp, fast: bool) -> np.ndarray:
    """``_reduce_owned`` of same-dtype, same-shape arrays (of the same bits), without its checks."""
    if not fast:
        return _reduce_owned(values, op)
    total = np.add(values[0], values[1])  # copy-then-add in one pass: ``_reduce_owned``'s loop
    for v in values[2:]:
        np.add(total, v, out=total)
    if op is _MEAN:
        np.true_divide(total, np.asarray(len(values), dtype=total.dtype), out=total)
    return np.asarray(total)
