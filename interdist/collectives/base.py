"""The collectives seam: a ``Transport`` moves packets between ranks; ``Collectives`` builds the ops.

A backend is a ``Transport`` class registered by name (``registry.py``, filled in
``collectives/__init__.py``): ``is_available()`` says whether it can run here (and
``unavailable_reason()`` why not), ``for_worker(...)`` builds the one a replica on a
Dask worker uses. The worker picks it by name (``config.settings.collectives_backend``,
carried in the group spec) through ``registry.get_backend``. Every available backend
passes the same contract tests (tests/collectives/test_contract.py). Every
algorithm here keeps one property: each element of a reduced array is computed
by exactly one rank (or by every rank the same way), adding the ranks'
contributions in rank order, so every rank's result is bitwise identical and
mirrored copies never drift through float rounding (a ring all-reduce does not
give that for free). Batches are all-gathered and reduced on every rank, or,
when large and the group spans hosts, reduce-scattered then all-gathered
(``algorithms.py``).

A message is a ``Packet``: a pickle (protocol 5) header plus the raw buffers of
the arrays in it, out of band. Moving arrays as buffers instead of one pickled
``bytes`` saves a copy on each side (measured 16 MB: pickle.dumps 10 ms and
pickle.loads 10 ms inside a worker) and lets Dask send them as frames
(``to_serialize``: 0.04 ms to frame 16 MB against 2.35 ms for ``bytes``
through msgpack) and the shared-memory transport write them straight into a
segment.
"""

from __future__ import annotations

import math
import pickle
import struct
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple

import numpy as np

if TYPE_CHECKING:
    from interdist.collectives.mailbox import Mailbox


class BackendUnavailableError(RuntimeError):
    """A known collectives backend that cannot run here (its ``unavailable_reason()`` says why)."""


@dataclass
class Packet:
    """One message: a pickle header and its out-of-band buffers.

    ``shm`` is private to the shared-memory transport (where the buffers wait);
    ``shared`` says the buffers are views of memory the sender will reuse, so a
    receiver that keeps the objects must copy them first.
    """

    header: bytes
    buffers: list[Any] = field(default_factory=list)
    shm: Any = None
    shared: bool = False

    @property
    def nbytes(self) -> int:
        return len(self.header) + sum(memoryview(b).nbytes for b in self.buffers)


# Arrays under this stay in the pickle or frame (a Dask frame costs more than a copy of a few KB); a frame
# of them fits a lane's slot (32 KB): 16-28 KB took ~200 us through a segment, 70-84 so (performance.md).
INBAND_MAX = 28 << 10
# A frame whose arrays total less than this carries them all in its header (small.py's path; a lane takes it).
FRAME_INBAND_MAX = 200 << 10


def pack(obj: Any) -> Packet:
    """``obj`` as a header and the raw (contiguous) buffers of its arrays, without copying them."""
    buffers: list[memoryview] = []

    def out_of_band(b: pickle.PickleBuffer) -> bool:
        raw = b.raw()
        if raw.nbytes < INBAND_MAX:
            return True  # pickled in-band
        buffers.append(raw)
        return False

    header = pickle.dumps(obj, protocol=5, buffer_callback=out_of_band)
    return Packet(header, buffers)


def unpack(packet: Packet, buffers: list[Any] | None = None, copy: bool = False) -> Any:
    """Rebuild the object of a packet; ``copy`` gives it private, writable arrays."""
    bufs = packet.buffers if buffers is None else buffers
    # Without ``copy``, arrays that would come back read-only (a received frame, a shared view)
    # are copied anyway: numpy copies them on write only in its own operations, and in-place
    # user code needs writable ones.
    bufs = [bytearray(b) if copy or memoryview(b).readonly else b for b in bufs]
    return pickle.loads(packet.header, buffers=bufs)


# -- raw array frames --------------------------------------------------------------------------
# A batch of plain numeric arrays (what an all_reduce sends) travels as a small binary
# description and the arrays' raw bytes: no pickle on either side, and the description of
# every rank is compared as bytes (equal: the same op, shapes and dtypes, so the checks
# that name a mismatch run only when there is one). Measured inside one strategy.run, 2
# replicas, 4 KB all_reduce: pickling (meta, arrays) and unpickling it cost 25-40 us of
# the replica thread's time per collective. Arrays under INBAND_MAX (or all of a frame under
# FRAME_INBAND_MAX) travel in the header, larger ones as buffers of their own (shared memory on one host).
#
# Header: MAGIC, then uint32 description length, then the description: uint16 array count,
# uint8 op length, op (ASCII); per array: uint8 dtype-string length, dtype string
# (``dtype.str``, e.g. "<f4"), uint8 in-band flag, uint8 ndim, ndim x int64 shape. Then the
# in-band arrays' bytes, each starting at a multiple of _FRAME_ALIGN.
FRAME_MAGIC = b"IDR1"  # never the start of a pickle (protocol 2+ begins with 0x80)
_FRAME_ALIGN = 16
_U32 = struct.Struct("<I")
_DESC_HEAD = struct.Struct("<HB")
_ARRAY_HEAD = struct.Struct("<BB")
_FRAMEABLE_KINDS = frozenset("biufc")


def _frameable(a: np.ndarray) -> bool:
    d = a.dtype
    return d.kind in _FRAMEABLE_KINDS and d.fields is None and d.subdtype is None and type(a) is np.ndarray


class _Layout:
    """What a frame of one batch layout (op, dtypes, shapes) looks like; built once per layout."""

    __slots__ = (
        "description",
        "dtypes",
        "elements",
        "end",
        "inband",
        "offsets",
        "op",
        "pads",
        "prefix",
        "shapes",
        "sizes",
        "small",
        "strs",
    )

    def __init__(self, op: str, dtypes: list[np.dtype[Any]], shapes: list[tuple[int, ...]]) -> None:
        self.op = op
        desc = [_DESC_HEAD.pack(len(dtypes), len(op)), op.encode("ascii")]
        self.inband: list[bool] = []
        self.sizes = [math.prod(shape) for shape in shapes]
        whole = sum(size * d.itemsize for size, d in zip(self.sizes, dtypes, strict=True)) < FRAME_INBAND_MAX
        for d, shape, size in zip(dtypes, shapes, self.sizes, strict=True):
            dt = d.str.encode("ascii")
            small = whole or size * d.itemsize < INBAND_MAX
            desc += [bytes((len(dt),)), dt, _ARRAY_HEAD.pack(small, len(shape)), struct.pack(f"<{len(shape)}q", *shape)]
            self.inband.append(small)
        self.description = b"".join(desc)
        self.prefix = FRAME_MAGIC + _U32.pack(len(self.description)) + self.description
        self.dtypes, self.shapes, self.strs = dtypes, shapes, [d.str for d in dtypes]
        at = len(self.prefix)
        self.offsets: list[int] = []  # of each in-band array in the header (-1: a buffer of its own)
        self.pads: list[bytes] = []  # the padding before each in-band array
        for d, small, size in zip(dtypes, self.inband, self.sizes, strict=True):
            if not small:
                self.offsets.append(-1)
                continue
            pad = -at % _FRAME_ALIGN
            self.pads.append(b"\0" * pad)
            self.offsets.append(at + pad)
            at += pad + size * d.itemsize
        self.end = at
        self.small = all(self.inband)  # the whole batch in the header: no buffer of its own
        self.elements = sum(self.sizes)


_LAYOUTS: dict[Any, _Layout] = {}  # by (op, dtypes, shapes) on the sending side, by description on the receiving one
_MAX_LAYOUTS = 256


def _layout(key: Any, make: Any) -> _Layout:
    got = _LAYOUTS.get(key)
    if got is None:
        if len(_LAYOUTS) >= _MAX_LAYOUTS:
            _LAYOUTS.clear()
        got = _LAYOUTS[key] = make()
    return got


def frame_layout(arrays: list[np.ndarray], op: str) -> _Layout | None:
    """The layout of ``arrays``' frame with ``op``; ``None`` when one cannot be framed."""
    for a in arrays:
        if not _frameable(a):
            return None
    return described_layout([a.dtype for a in arrays], [a.shape for a in arrays], op)


def described_layout(dtypes: list[np.dtype[Any]], shapes: list[tuple[int, ...]], op: str) -> _Layout:
    """The layout of a frame of arrays of these (frameable) dtypes and shapes with ``op``, before they exist."""
    return _layout((op, *zip(dtypes, shapes, strict=True)), lambda: _Layout(op, dtypes, shapes))


def pack_arrays(arrays: list[np.ndarray], op: str, layout: _Layout | None = None) -> Packet | None:
    """``arrays`` (NumPy, numeric) as a raw frame with ``op`` (whose ``layout`` may be given);
    ``None`` when one cannot be framed."""
    layout = frame_layout(arrays, op) if layout is None else layout
    if layout is None:
        return None
    parts: list[Any] = [layout.prefix]
    buffers: list[Any] = []
    pads = iter(layout.pads)
    for a, small in zip(arrays, layout.inband, strict=True):
        if not a.flags.c_contiguous:
            a = np.ascontiguousarray(a)
        if small:
            parts.append(next(pads))
            if a.size:
                parts.append(memoryview(a).cast("B") if a.ndim else a.tobytes())  # type: ignore[arg-type]
        else:
            buffers.append(memoryview(a).cast("B"))  # type: ignore[arg-type]
    return Packet(b"".join(parts), buffers)


def is_frame(header: bytes) -> bool:
    """Whether a packet's header is a raw array frame (else a pickle)."""
    return header[:4] == FRAME_MAGIC


def frame_description(header: bytes) -> bytes:
    """The op, dtypes and shapes part of a frame, as bytes (equal on two ranks: the same batch layout)."""
    (n,) = _U32.unpack_from(header, len(FRAME_MAGIC))
    start = len(FRAME_MAGIC) + _U32.size
    return bytes(header[start : start + n])


def _parse(description: bytes) -> _Layout:
    mv = memoryview(description)
    count, oplen = _DESC_HEAD.unpack_from(mv, 0)
    at = _DESC_HEAD.size
    op = bytes(mv[at : at + oplen]).decode("ascii")
    at += oplen
    dtypes: list[np.dtype[Any]] = []
    shapes: list[tuple[int, ...]] = []
    for _ in range(count):
        tlen = mv[at]
        dtypes.append(np.dtype(bytes(mv[at + 1 : at + 1 + tlen]).decode("ascii")))
        at += 1 + tlen
        _, ndim = _ARRAY_HEAD.unpack_from(mv, at)
        at += _ARRAY_HEAD.size
        shapes.append(tuple(struct.unpack_from(f"<{ndim}q", mv, at)))
        at += 8 * ndim
    layout = _Layout(op, dtypes, shapes)
    if layout.description != description:
        raise ValueError("a malformed array frame (its description does not round-trip)")
    return layout


def unpack_arrays(
    header: bytes, buffers: list[Any]
) -> tuple[tuple[list[tuple[int, ...]], list[str], str], list[np.ndarray]]:
    """A frame's (shapes, dtype strings, op) and its arrays: read-only views of ``header`` and ``buffers``."""
    description = frame_description(header)
    layout = _layout(description, lambda: _parse(description))
    arrays: list[np.ndarray] = []
    next_buffer = 0
    for d, shape, size, off in zip(layout.dtypes, layout.shapes, layout.sizes, layout.offsets, strict=True):
        if off >= 0:
            a = np.frombuffer(header, d, size, off) if size else np.empty(0, d)
        else:
            a = np.frombuffer(buffers[next_buffer], d, size)
            next_buffer += 1
        a.flags.writeable = False  # a view of received memory: read it, never change it
        arrays.append(a.reshape(shape))
    return (list(layout.shapes), list(layout.strs), layout.op), arrays


class Transport(ABC):
    """Point-to-point packets between the ranks of one replica group.

    The class is also the backend: the registry holds transport classes, and these
    class methods are all it asks of one (the backend protocol):

    - ``is_available()``: whether the backend can run in this process;
    - ``unavailable_reason()``: why not ("" when it can);
    - ``for_worker(worker, group_id, rank, peers, mailbox, sockets)``: the transport of
      rank ``rank`` of a group whose replicas are the Dask workers ``peers``.

    ``unavailable_error`` is the exception ``registry.get_backend`` raises for a
    known backend that is not available.
    """

    name = "abstract"
    unavailable_error: ClassVar[type[Exception]] = BackendUnavailableError

    @classmethod
    def is_available(cls) -> bool:
        """Whether this backend can run here (``unavailable_reason`` says why not)."""
        return not cls.unavailable_reason()

    @classmethod
    def unavailable_reason(cls) -> str:
        """Why this backend cannot run here; "" when it can."""
        return ""

    @classmethod
    def for_worker(
        cls, worker: Any, group_id: str, rank: int, peers: list[str], mailbox: Mailbox, sockets: bool = True
    ) -> Transport:
        """The transport of rank ``rank`` whose peers are the Dask workers at ``peers`` (``worker`` is this one)."""
        raise ValueError(
            f"the {cls.name!r} collectives backend cannot connect replicas on Dask workers; use 'dask' "
            "(the Dask config key interdist.collectives.backend)"
        )

    def __init__(self, rank: int, world_size: int, mailbox: Mailbox) -> None:
        self.rank = rank
        self.world_size = world_size
        self.mailbox = mailbox

    @abstractmethod
    def send_packet(
        self,
        dsts: list[int],
        step: int,
        seq: int,
        packet: Packet,
        on_error: Callable[[BaseException], None] | None = None,
        detached: bool = False,
    ) -> None:
        """Deliver ``packet`` into each of ``dsts``' mailboxes under (step, seq, self.rank).

        May return before delivery; :meth:`flush` waits for it. Until then the
        buffers of ``packet`` must stay unchanged. ``on_error`` is called (from any
        thread) when a packet sent asynchronously could not be delivered. A ``detached``
        packet (no buffers of the caller's) is not waited for by :meth:`flush`.
        """

    def send_header(self, dsts: list[int], step: int, seq: int, header: bytes) -> None:
        """``send_packet`` of a packet that is all header (a small collective's frame): nothing for :meth:`flush`
        to wait for. Transports with a quicker way for it override this."""
        self.send_packet(dsts, step, seq, Packet(header), detached=True)

    def send(self, dst: int, step: int, seq: int, payload: bytes) -> None:
        """A bytes message (the packet has no buffers)."""
        self.send_packet([dst], step, seq, Packet(payload))
        self.flush()

    def flush(self, timeout: float | None = None) -> None:  # noqa: B027 - an optional hook: a no-op for transports that need none
        """Wait until every packet sent so far was delivered (raises if one could not be)."""

    def peer_id(self, dst: int) -> str:
        """Who ``dst`` is now (changes when a replica's worker is replaced)."""
        return str(dst)

    def spans_hosts(self) -> bool:
        """Whether some peer is on another host (the same answer on every rank)."""
        return False

    def peers_replaced(self, peers: list[str]) -> None:  # noqa: B027 - an optional hook: a no-op for transports that need none
        """A peer's worker was replaced (restarted by its nanny): ``peers`` are the group's addresses now."""

    def forget(self) -> None:  # noqa: B027 - an optional hook: a no-op for transports that need none
        """A collective failed: stop tracking its sends (their errors would blame the next one)."""

    def view(self, packet: Packet) -> list[Any]:
        """The buffers of a received packet (views: valid until :meth:`release`)."""
        return packet.buffers

    def release(self, packet: Packet) -> None:  # noqa: B027 - an optional hook: a no-op for transports that need none
        """The receiver is done with ``packet`` (its buffers may be reused by the sender)."""

    def abort_peers(self, step: int, reason: str) -> None:  # noqa: B027 - an optional hook: a no-op for transports that need none
        """Release every peer waiting in ``step`` (this rank failed)."""

    def close(self) -> None:  # noqa: B027 - an optional hook: a no-op for transports that need none
        """Release what the transport holds (connections, shared memory)."""


class Timing(NamedTuple):
    """How long one collective took: waiting for peers versus moving data.

    (Immutable; a named tuple rather than a frozen dataclass: made once per collective, and a
    frozen dataclass costs ~1.5 us to make here against ~0.5 us.)"""

    wait_s: float
    transfer_s: float
    nbytes: int
    algorithm: str = ""


__all__ = [
    "FRAME_MAGIC",
    "INBAND_MAX",
    "BackendUnavailableError",
    "Packet",
    "Timing",
    "Transport",
    "frame_description",
    "frame_layout",
    "is_frame",
    "pack",
    "pack_arrays",
    "unpack",
    "unpack_arrays",
]
