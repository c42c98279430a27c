"""The small-collective fast path: raw array frames, mailbox channels with their doorbell, the barrier.

- Frames (``base.pack_arrays``/``unpack_arrays``): the bytes of every dtype and shape come back
  exactly (0-d, empty, non-contiguous, big-endian, in-band and as buffers of their own); what
  cannot be framed is refused, and a mismatch between ranks still names each replica's value.
- Channels (``Mailbox.add_channel``): the thread waiting in ``take`` reads a peer's socket
  itself; a put from another thread, an abort or a new channel wakes it at once (the doorbell);
  packets of a step that moved on are dropped through ``on_drop``; a packet split across reads
  is put together; a sender whose peer's buffer is full reads its own channels meanwhile, so two
  ranks sending each other more than a socket buffer never wait on each other.
- Between Dask workers: the peers' packets come through channels (and an all_reduce is right).
"""

from __future__ import annotations

import socket
import threading
import time
from typing import Any

import numpy as np
import pytest

import interdist as idist
from interdist.collectives import dask_comms, mailbox
from interdist.collectives.algorithms import Collectives
from interdist.collectives.base import FRAME_INBAND_MAX, INBAND_MAX, Packet, is_frame, pack_arrays, unpack_arrays
from interdist.collectives.local import local_group
from interdist.collectives.mailbox import Mailbox
from interdist.errors import CollectiveAbortedError, CollectiveTimeoutError, ReplicaMismatchError
from interdist.reduce_op import ReduceOp

from ._harness import run_threads

# -- frames ---------------------------------------------------------------------------------------

CASES = [
    [np.arange(5, dtype=np.float32)],
    [np.asarray(np.float64(3.5))],  # 0-d
    [np.zeros((0, 3), np.int32), np.zeros(0, np.float16)],  # empty
    [np.arange(24, dtype=np.int64).reshape(4, 6).T, np.arange(40, dtype=np.float32)[::3]],  # non-contiguous
    [np.arange(6, dtype=">f8").reshape(2, 3), np.arange(3, dtype="<i4")],  # byte orders
    [np.array([True, False]), np.arange(4, dtype=np.uint8), (np.arange(3) + 1j).astype(np.complex64)],
    [np.ones(10_000, np.float64), np.arange(7, dtype=np.int16), np.full((300, 20), 2.5, np.float32)],  # 104 KB
    [np.ones(30_000, np.float64), np.arange(7, dtype=np.int16), np.full((300, 20), 2.5, np.float32)],  # buffers
]


@pytest.mark.parametrize("arrays", CASES, ids=range(len(CASES)))
def test_frame_round_trip_is_exact(arrays: list[np.ndarray]) -> None:
    packet = pack_arrays(arrays, "SUM")
    assert packet is not None and is_frame(packet.header)
    whole = sum(a.nbytes for a in arrays) < FRAME_INBAND_MAX
    big = [] if whole else [a for a in arrays if a.nbytes >= INBAND_MAX]
    assert len(packet.buffers) == len(big)  # large arrays of a large frame travel as buffers of their own
    (shapes, dtypes, op), out = unpack_arrays(bytes(packet.header), [bytes(b) for b in packet.buffers])
    assert op == "SUM"
    assert shapes == [a.shape for a in arrays] and dtypes == [a.dtype.str for a in arrays]
    for a, o in zip(arrays, out, strict=True):
        assert o.dtype == a.dtype and o.shape == a.shape and o.tobytes() == a.tobytes()
        assert not o.flags.writeable  # views of received memory


def test_unframeable_arrays_are_refused() -> None:
    assert pack_arrays([np.array(["a", "b"])], "SUM") is None
    assert pack_arrays([np.ones(2), np.array([1, "x"], dtype=object)], "SUM") is None
    assert pack_arrays([np.zeros(2, dtype=[("a", "f4"), ("b", "i4")])], "SUM") is None
    assert pack_arrays([np.ma.masked_array([1.0, 2.0])], "SUM") is None


def test_frame_description_differs_for_every_mismatch() -> None:
    base = pack_arrays([np.ones(4, np.float32)], "SUM")
    others = [
        pack_arrays([np.ones(4, np.float64)], "SUM"),
        pack_arrays([np.ones((2, 2), np.float32)], "SUM"),
        pack_arrays([np.ones(4, np.float32)], "MEAN"),
        pack_arrays([np.ones(4, np.float32), np.ones(1, np.float32)], "SUM"),
    ]
    assert base is not None
    for o in others:
        assert o is not None and o.header[:40] != base.header[:40]


@pytest.mark.parametrize("world", [2, 3])
def test_small_all_reduce_of_many_dtypes_through_frames(world: int) -> None:
    def body(r: int, c: Collectives) -> list[np.ndarray]:
        arrays = [
            np.full((2, 3), r + 1, np.float32),
            np.asarray(np.int64(10 * r)),
            np.arange(6, dtype=np.float64).reshape(3, 2).T * (r + 1),  # non-contiguous
            np.zeros(0, np.int32),
        ]
        return c.all_reduce(1, 1, arrays, ReduceOp.SUM, "t")

    out = run_threads(local_group(world), body)
    total = sum(range(1, world + 1))
    for o in out:
        assert not isinstance(o, BaseException), o
        assert o[0].dtype == np.float32 and o[0].tolist() == [[float(total)] * 3] * 2
        assert o[1].shape == () and int(o[1]) == 10 * sum(range(world))
        assert np.array_equal(o[2], np.arange(6, dtype=np.float64).reshape(3, 2).T * total)
        assert o[3].shape == (0,) and o[3].dtype == np.int32
        assert all(a.flags.writeable for a in o)  # results are the caller's own arrays
    assert all(o[2].tobytes() == out[0][2].tobytes() for o in out)


def test_mismatch_between_a_frame_and_a_pickle_names_each_replica() -> None:
    def body(r: int, c: Collectives) -> Any:
        value = np.ones(3, np.float32) if r == 0 else np.array(["a", "b", "c"])  # rank 1 cannot be framed
        return c.all_reduce(1, 1, [value], ReduceOp.SUM, "t")

    out = run_threads(local_group(2), body)
    for o in out:
        assert isinstance(o, ReplicaMismatchError)
        assert "(replica 0: float32, replica 1: str32)" in str(o)


def test_shape_and_op_mismatch_in_frames_raise_on_every_rank() -> None:
    def shapes(r: int, c: Collectives) -> Any:
        return c.all_reduce(1, 1, [np.ones((2, 2) if r == 0 else (4,), np.float32)], ReduceOp.SUM, "t")

    def ops(r: int, c: Collectives) -> Any:
        return c.all_reduce(1, 1, [np.ones(4, np.float32)], ReduceOp.SUM if r else ReduceOp.MEAN, "t")

    out = run_threads(local_group(2), shapes)
    assert all(isinstance(o, ReplicaMismatchError) and "(2, 2)" in str(o) and "(4,)" in str(o) for o in out)
    out = run_threads(local_group(2), ops)
    assert all(isinstance(o, ReplicaMismatchError) and "reduce ops" in str(o) for o in out)


def test_uint8_is_refused_on_every_rank_as_before() -> None:
    def body(r: int, c: Collectives) -> Any:
        return c.all_reduce(1, 1, [np.ones(3, np.uint8)], ReduceOp.SUM, "t")

    out = run_threads(local_group(2), body)
    assert all(isinstance(o, ValueError) and "dtype uint8" in str(o) for o in out)


def test_barrier_waits_for_every_rank() -> None:
    arrived: list[float] = []

    def body(r: int, c: Collectives) -> float:
        if r == 2:
            time.sleep(0.2)
        arrived.append(time.monotonic())
        c.barrier(1, 1, "barrier")
        assert c.last_timing.algorithm == "barrier"
        return time.monotonic()

    out = run_threads(local_group(3), body)
    assert min(out) >= max(arrived)  # nobody left before the last one came


def test_barrier_times_out_naming_the_missing_rank() -> None:
    def body(r: int, c: Collectives) -> Any:
        if r == 1:
            return None
        return c.barrier(1, 1, "barrier #1")

    out = run_threads(local_group(2), body, timeout=0.3)
    assert isinstance(out[0], CollectiveTimeoutError) and "replica(s) [1]" in str(out[0])


# -- channels ---------------------------------------------------------------------------------------


def _send(sock: socket.socket, step: int, seq: int, src: int, header: bytes, shm: Any = None) -> None:
    for part in dask_comms.channel_parts(step, seq, src, Packet(header, [], shm)):
        sock.sendall(part)


@pytest.fixture
def box_and_peer() -> Any:
    box = Mailbox()
    mine, peer = socket.socketpair()
    dask_comms.accept_channel(box, mine)
    yield box, peer
    box.drain()
    peer.close()


def test_channel_packet_is_taken_by_the_waiting_thread(box_and_peer: Any) -> None:
    box, peer = box_and_peer
    threading.Timer(0.05, _send, args=(peer, 1, 1, 0, b"hello")).start()
    got = box.take(1, 1, [0], 5.0, "t")
    assert got[0].header == b"hello" and got[0].buffers == [] and got[0].shm is None
    assert box.has_channels()


@pytest.mark.parametrize("header_bytes, buffer_bytes, piece", [(70_000, 3, 9_000), (100, 5 << 20, 1 << 20)])
def test_packet_split_across_reads_is_put_together(
    box_and_peer: Any, header_bytes: int, buffer_bytes: int, piece: int
) -> None:
    box, peer = box_and_peer
    header, buffer = b"x" * header_bytes, np.arange(buffer_bytes, dtype=np.uint8).tobytes()
    later = Packet(b"next", [])
    data = b"".join(
        bytes(p)
        for packet, seq in ((Packet(header, [buffer]), 2), (later, 3))
        for p in dask_comms.channel_parts(1, seq, 0, packet)
    )

    def dribble() -> None:
        for i in range(0, len(data), piece):
            peer.sendall(data[i : i + piece])
            time.sleep(0.005)

    threading.Thread(target=dribble).start()
    got = box.take(1, 2, [0], 5.0, "t")
    assert got[0].header == header and [bytes(b) for b in got[0].buffers] == [buffer]
    assert box.take(1, 3, [0], 5.0, "t")[0].header == b"next"


@pytest.mark.parametrize("how", ["put", "abort", "channel"])
def test_doorbell_wakes_a_reader_at_once(box_and_peer: Any, how: str) -> None:
    box, _ = box_and_peer
    extra = socket.socketpair()

    def later() -> None:
        time.sleep(0.1)
        if how == "put":
            box.put(1, 1, 0, Packet(b"from dask comms"))
        elif how == "abort":
            box.abort(1, "replica 0 raised")
        else:  # a second peer's channel, which then delivers
            dask_comms.accept_channel(box, extra[0])
            _send(extra[1], 1, 1, 0, b"via the new channel")

    threading.Thread(target=later).start()
    t0 = time.monotonic()
    if how == "abort":
        with pytest.raises(CollectiveAbortedError, match="replica 0 raised"):
            box.take(1, 1, [0], 5.0, "t")
        elapsed = time.monotonic() - t0 - 0.25  # ABORT_GRACE
    else:
        got = box.take(1, 1, [0], 5.0, "t")
        assert got[0].header in (b"from dask comms", b"via the new channel")
        elapsed = time.monotonic() - t0
    # woken by the doorbell: well before the 0.5 s poll period of a reader left asleep
    assert elapsed < 0.4
    extra[1].close()


def test_a_waiter_spins_only_after_short_waits_and_with_a_core_for_two(box_and_peer: Any) -> None:
    box, peer = box_and_peer
    box._cores = 2  # this replica and its one peer: a core each
    assert box._spin_budget() == 0.0  # no wait measured yet
    _send(peer, 1, 1, 0, b"already here")
    box.take(1, 1, [0], 5.0, "t")
    assert box._last_wait < mailbox.SPIN_IF_WAITED_BELOW
    # a collective loop: the next packet is near; spin at least SPIN_S, 1.5 times the last wait up to SPIN_MAX_S
    assert box._spin_budget() == max(mailbox.SPIN_S, min(mailbox.SPIN_MAX_S, 1.5 * box._last_wait)) > 0
    box._last_wait = 0.0
    assert box._spin_budget() == mailbox.SPIN_S
    box._last_wait = 0.9 * mailbox.SPIN_IF_WAITED_BELOW  # the peer came a wake-up later: spin past one
    assert box._spin_budget() == mailbox.SPIN_MAX_S > mailbox.SPIN_S
    threading.Timer(0.05, _send, args=(peer, 1, 2, 0, b"late")).start()
    box.take(1, 2, [0], 5.0, "t")
    assert box._spin_budget() == 0.0  # the peer was computing: sleep at once
    _send(peer, 1, 3, 0, b"quick")
    box.take(1, 3, [0], 5.0, "t")
    assert box._spin_budget() > 0.0
    box._cores = 1  # two replicas on one core: the spinning one yields it to its peer between looks
    assert box._spin_budget() > 0.0
    box._new_channels.append(None)  # type: ignore[arg-type]  # (counted only) a third replica on that core
    try:
        assert box._spin_budget() == 0.0  # more than SPIN_REPLICAS_PER_CORE replicas a core: sleep at once
    finally:
        box._new_channels.pop()


@pytest.mark.parametrize("how", ["channel", "put", "abort", "timeout"])
def test_a_spinning_waiter_gets_packets_aborts_and_timeouts(
    box_and_peer: Any, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    box, peer = box_and_peer
    monkeypatch.setattr(mailbox, "SPIN_S", 1.0)  # everything below happens while it spins
    monkeypatch.setattr(mailbox, "SPIN_IF_WAITED_BELOW", 4.0)
    box._cores, box._last_wait = 2, 0.0
    assert box._spin_budget() == 1.0
    if how == "channel":
        threading.Timer(0.05, _send, args=(peer, 1, 1, 0, b"while spinning")).start()
    elif how == "put":
        threading.Timer(0.05, box.put, args=(1, 1, 0, Packet(b"while spinning"))).start()
    elif how == "abort":
        threading.Timer(0.05, box.abort, args=(1, "replica 0 raised")).start()
    t0 = time.monotonic()
    if how == "abort":
        with pytest.raises(CollectiveAbortedError, match="replica 0 raised"):
            box.take(1, 1, [0], 5.0, "t")
    elif how == "timeout":
        with pytest.raises(CollectiveTimeoutError):
            box.take(1, 1, [0], 0.2, "t")  # the timeout bounds the spin too
    else:
        assert box.take(1, 1, [0], 5.0, "t")[0].header == b"while spinning"
    assert time.monotonic() - t0 < 0.8  # none waited out the 1 s spin


def test_packets_of_a_step_gone_are_dropped(box_and_peer: Any) -> None:
    box, peer = box_and_peer
    dropped: list[Any] = []
    box.on_drop = dropped.append
    _send(peer, 1, 1, 0, b"old")
    _send(peer, 3, 1, 0, b"ahead")
    box.begin_step(2)  # reads what waits: step 1's packet goes, step 3's stays
    assert [p.header for p in dropped] == [b"old"]
    assert box.take(3, 1, [0], 5.0, "t")[0].header == b"ahead"


def test_closed_peer_channel_is_forgotten_and_timeout_still_applies(box_and_peer: Any) -> None:
    box, peer = box_and_peer
    peer.close()
    with pytest.raises(CollectiveTimeoutError):
        box.take(1, 1, [0], 0.3, "t")
    assert not box.has_channels()


def test_drain_releases_a_reader_that_waits() -> None:
    box = Mailbox()
    mine, peer = socket.socketpair()
    dask_comms.accept_channel(box, mine)
    threading.Timer(0.1, box.drain).start()
    t0 = time.monotonic()
    with pytest.raises(CollectiveTimeoutError):
        box.take(1, 1, [0], 0.4, "t")
    assert time.monotonic() - t0 < 1.5
    assert not box.has_channels()
    peer.close()


def test_two_ranks_sending_more_than_a_socket_buffer_to_each_other() -> None:
    # Rank r's transport writes to rank 1-r's channel; neither reads until it waits for the other's
    # packet, so without reading while blocked (``wait_writable``) both would block in send for ever.
    a, b = socket.socketpair()
    for s in (a, b):
        s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 12)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 12)
    boxes = [Mailbox(), Mailbox()]
    dask_comms.accept_channel(boxes[0], a)
    dask_comms.accept_channel(boxes[1], b)
    conns = [_Conn(a), _Conn(b)]  # what rank 0 writes into a comes out of b (rank 1's channel), and back
    payload = bytes(range(256)) * 4096  # 1 MB
    out: list[Any] = [None, None]

    def rank(r: int) -> None:
        transport = dask_comms.DaskTransport.__new__(dask_comms.DaskTransport)
        transport.mailbox = boxes[r]
        try:
            transport._post(conns[r], dask_comms.channel_parts(1, 1, r, Packet(payload + bytes([r]))))
            out[r] = boxes[r].take(1, 1, [1 - r], 10.0, "t")[1 - r].header
        except BaseException as e:  # returned to the test
            out[r] = e

    threads = [threading.Thread(target=rank, args=(r,)) for r in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    try:
        assert out == [payload + b"\x01", payload + b"\x00"]
    finally:
        for box in boxes:
            box.drain()


class _Conn:
    """What ``DaskTransport._post`` needs of a connection."""

    def __init__(self, sock: socket.socket) -> None:
        sock.setblocking(False)
        self.sock = sock
        self.broken = False
        self._write_lock = threading.Lock()


# -- between Dask workers ---------------------------------------------------------------------------


def _channels_and_sum(v: Any) -> tuple[bool, float]:
    ctx = idist.get_replica_context()
    box = ctx._replica.transport.mailbox  # type: ignore[union-attr]
    deadline = time.monotonic() + 10
    total = ctx.all_reduce("sum", v)
    while not box.has_channels() and time.monotonic() < deadline:  # connected in the background
        total = ctx.all_reduce("sum", v)
    for _ in range(50):
        total = ctx.all_reduce("sum", v)
    return box.has_channels(), float(np.asarray(total)[0])


def test_workers_read_their_peers_channels(mirrored2: Any) -> None:
    s = mirrored2
    dv = s.experimental_distribute_values_from_function(
        lambda ctx: np.full(1024, ctx.replica_id_in_sync_group + 1, np.float32)
    )
    out = [np.asarray(o) for o in s.experimental_local_results(s.run(_channels_and_sum, args=(dv,)))]
    assert [tuple(o.tolist()) for o in out] == [(True, 3.0), (True, 3.0)]


def test_a_frame_under_the_in_band_limit_travels_whole_in_its_header_through_one_lane() -> None:
    """A batch whose arrays come to less than ``FRAME_INBAND_MAX`` bytes travels in its frame's header (the small
    all-reduce's path), and a lane between two replicas of this host takes the largest such frame whole; from that
    size an array of ``INBAND_MAX`` bytes or more travels as a buffer of its own, a smaller one in the header."""
    from interdist.collectives import lanes

    sender = lanes.Lane.create() if lanes.available() else None
    receiver = None if sender is None else lanes.Lane.attach(sender.name)
    try:
        for dtype in (np.float64, np.float32, np.float16, np.int8):
            n = (FRAME_INBAND_MAX - 1) // np.dtype(dtype).itemsize
            packet = pack_arrays([np.ones(n - 7, dtype), np.ones(7, dtype)], "MEAN")
            assert packet is not None and not packet.buffers
            if sender is not None and receiver is not None:
                assert sender.put(1, 0, 0, packet.header, b"")
                assert receiver.take() == [(1, 0, 0, packet.header, b"", [])]
            over = pack_arrays([np.ones(n - 6, dtype), np.ones(7, dtype)], "MEAN")
            assert over is not None and len(over.buffers) == 1 and len(over.header) < INBAND_MAX
            size = np.dtype(dtype).itemsize
            small = (INBAND_MAX - 1) // size
            mixed = pack_arrays([np.ones(n, dtype), np.ones(small, dtype), np.ones(small + 1, dtype)], "SUM")
            assert mixed is not None and len(mixed.buffers) == 2 and len(mixed.header) > small * size
    finally:
        if receiver is not None:
            receiver.close()
        if sender is not None:
            sender.close()
