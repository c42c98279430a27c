"""Lanes (small packets through shared memory, ``lanes.py``) and the small all_reduce path (``small.py``).

- A lane carries packets in order, refuses what it cannot take (not attached, full, too long), and
  leaves no name in /dev/shm once its receiver mapped it; ``publish`` says whether to nudge.
- ``send_header`` writes straight into the lane a packet took before, falls back to the socket when the
  lane is full, and forgets the lanes when a peer is replaced; "one host" is remembered until then.
- Through a mailbox: the waiting thread reads a peer's lane; a reader blocked in ``poll`` is woken by
  the sender's nudge (not by its periodic look), an abort or a put still release it at once, and
  packets of a step gone are dropped.
- Between Dask workers, small packets go through attached lanes and the sums are right.
- The small path gives the general path's bits, and a mismatch (or a dtype TF cannot reduce, at every
  call) still raises on every rank.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from typing import Any

import numpy as np
import pytest

import interdist as idist
from interdist.collectives import dask_comms, lanes, mailbox
from interdist.collectives.algorithms import AG, RB, RS, Collectives
from interdist.collectives.base import Packet, pack_arrays
from interdist.collectives.local import local_group
from interdist.collectives.mailbox import Mailbox
from interdist.collectives.reducing import _reduce_owned
from interdist.errors import CollectiveAbortedError, ReplicaMismatchError
from interdist.reduce_op import ReduceOp

from ._harness import run_threads

needs_lanes = pytest.mark.skipif(not lanes.available(), reason="lanes need x86-64 and POSIX shared memory")


# -- a lane alone -----------------------------------------------------------------------------------


@needs_lanes
def test_lane_carries_packets_in_order_and_refuses_what_it_cannot_take() -> None:
    sender = lanes.Lane.create()
    assert sender is not None
    try:
        assert not sender.put(1, 1, 0, b"early", b"")  # nobody attached yet
        receiver = lanes.Lane.attach(sender.name)
        assert receiver is not None
        assert not os.path.exists(f"/dev/shm/{sender.name}")  # its name went when its reader mapped it
        assert not receiver.ready() and receiver.take() == []
        for i in range(lanes.SLOTS):
            assert sender.put(1, i, 3, bytes([i]) * (i + 1), b"ref" if i % 2 else b"")
        assert not sender.put(1, 99, 3, b"one too many", b"")  # full until the receiver takes
        assert not sender.put(1, 99, 3, b"x" * lanes.RING, b"")  # never fits the ring
        assert receiver.ready()
        got = receiver.take()
        assert got == [(1, i, 3, bytes([i]) * (i + 1), b"ref" if i % 2 else b"", []) for i in range(lanes.SLOTS)]
        assert sender.put(2, 0, 3, b"x" * lanes.SLOT_DATA, b"")  # room again; a slot's whole length
        assert receiver.take() == [(2, 0, 3, b"x" * lanes.SLOT_DATA, b"", [])]
        assert not sender.receiver_asleep()
        receiver.sleep(True)
        assert sender.receiver_asleep()
        receiver.close()
    finally:
        sender.close()
    assert not any(n == sender.name for n in os.listdir("/dev/shm"))


@needs_lanes
def test_a_packet_longer_than_a_slot_takes_consecutive_slots_round_the_ring() -> None:
    sender = lanes.Lane.create()
    assert sender is not None
    receiver = lanes.Lane.attach(sender.name)
    assert receiver is not None
    rng = np.random.default_rng(0)
    try:
        for rounds in range(3):  # each round starts at another slot: packets wrap round the ring's end
            a = rng.integers(0, 255, 40_000, dtype=np.uint8)
            b = rng.standard_normal(9_000).astype(np.float32)  # 36 KB
            header = bytes(rng.integers(0, 255, 33_000, dtype=np.uint8))  # longer than a slot, no buffers
            assert sender.put(5, 1, 2, b"h", b"r", [a, b])  # 3 slots
            assert sender.put(5, 2, 2, header, b"")  # 2 slots
            assert sender.put(5, 3, 2, b"one", b"")  # 1 slot
            assert sender.count == 6 * (rounds + 1)
            assert not sender.put(5, 4, 2, b"", b"", [np.zeros(3 * lanes.SLOT_BYTES, np.uint8)])  # only 2 free
            got = receiver.take()
            assert [g[:5] for g in got] == [(5, 1, 2, b"h", b"r"), (5, 2, 2, header, b""), (5, 3, 2, b"one", b"")]
            assert got[1][5] == [] and got[2][5] == []
            ga, gb = got[0][5]
            assert bytes(ga) == a.tobytes() and bytes(gb) == b.tobytes()
            gb[:4] = b"\0\0\0\0"  # a private, writable copy: the lane's slots are not it
            assert np.frombuffer(gb, np.float32)[1:].tolist() == b[1:].tolist()
        # The whole ring, less the first slot's head and lengths, is the longest packet
        whole = lanes.RING - lanes._SLOT_HEAD.size - lanes._LENGTH.size
        assert sender.put(6, 0, 2, b"", b"", [np.full(whole, 7, np.uint8)])
        assert not sender.put(6, 1, 2, b"", b"", [])  # full until the receiver takes
        ((*_, (only,)),) = receiver.take()
        assert len(only) == whole and set(only) == {7}
        assert not sender.put(6, 2, 2, b"", b"", [np.zeros(whole + 1, np.uint8)])
        assert not sender.put(6, 3, 2, b"", b"", [b"x"] * (lanes.MAX_BUFFERS + 1))  # too many lengths
        assert sender.put(6, 4, 2, b"", b"", [b"x"] * lanes.MAX_BUFFERS)
        assert [bytes(x) for x in receiver.take()[0][5]] == [b"x"] * lanes.MAX_BUFFERS
        receiver.close()
    finally:
        sender.close()


def test_a_lane_that_cannot_be_mapped_is_none() -> None:
    assert lanes.Lane.attach("idist-0-lane-nonexistent") is None


# -- through a mailbox --------------------------------------------------------------------------------


class _Conn:
    """What ``DaskTransport._post`` and ``_put`` need of a connection."""

    def __init__(self, sock: socket.socket) -> None:
        sock.setblocking(False)
        self.sock = sock
        self.broken = False
        self._write_lock = threading.Lock()


@pytest.fixture
def lane_pair() -> Any:
    """A receiving mailbox, and a sending ``DaskTransport`` (rank 0) whose peer 1 is that mailbox's
    replica over a socket channel with an attached lane."""
    box = Mailbox()
    mine, peer = socket.socketpair()
    dask_comms.accept_channel(box, mine)
    sender = dask_comms.DaskTransport.__new__(dask_comms.DaskTransport)
    sender.rank, sender.mailbox = 0, Mailbox()
    sender._peers, sender._sockets, sender._pending = ["me", "peer"], True, []
    sender._nudge = dask_comms.channel_parts(lanes.NUDGE_STEP, 0, 0, Packet(b""))
    conn = _Conn(peer)
    sender._socks, sender._lanes, sender._ways = {"peer": conn}, {}, {}
    lane = lanes.Lane.create() if lanes.available() else None
    if lane is not None:
        sender._lanes["peer"] = lane
        sender._post(conn, dask_comms.channel_parts(lanes.OFFER_STEP, 0, 0, Packet(lane.name.encode())))
        box.begin_step(0)  # reads the offer: the lane is attached
        assert lane.words[lanes._ATTACHED] == 1
    yield box, sender, lane
    box.drain()
    peer.close()
    if lane is not None:
        lane.close()


@needs_lanes
def test_packets_take_the_lane_unless_the_reader_blocks(lane_pair: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    box, sender, lane = lane_pair
    packet = Packet(b"hello", [], ["seg", 1, 7, [[64, 8]], 0])  # a control packet of a shared segment
    sender.send_packet([1], 1, 1, packet)  # nobody waits yet: the lane
    got = box.take(1, 1, [0], 5.0, "t")
    assert got[0].header == b"hello" and got[0].buffers == [] and got[0].shm == ("seg", 1, 7, ((64, 8),), 0)
    assert lane.count == 1  # it went through the lane, not the socket
    sender.send_packet([1], 1, 2, Packet(b"bufs", [np.arange(8, dtype=np.uint8)]))  # with buffers: the lane too
    assert bytes(box.take(1, 2, [0], 5.0, "t")[0].buffers[0]) == bytes(range(8)) and lane.count == 2
    monkeypatch.setattr(mailbox, "SPIN_S", 0.0)
    threading.Timer(0.1, sender.send_packet, args=([1], 1, 3, Packet(b"late"))).start()
    assert box.take(1, 3, [0], 5.0, "t")[0].header == b"late"
    assert lane.count == 2  # the reader blocked in poll: the socket's packet woke it


@needs_lanes
def test_a_blocked_reader_is_woken_by_the_nudge(lane_pair: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    # A sender that published in the lane just as its reader went to block (it saw it awake) nudges it.
    box, sender, lane = lane_pair
    monkeypatch.setattr(lanes, "RECHECK_S", 10.0)  # only the nudge can wake it in time
    monkeypatch.setattr(mailbox, "SPIN_S", 0.0)

    def racing_sender() -> None:
        while not lane.receiver_blocked():
            time.sleep(0.001)
        assert lane.put(1, 1, 0, b"late", b"") and lane.receiver_asleep()
        sender._post(sender._socks["peer"], sender._nudge)

    threading.Timer(0.1, racing_sender).start()
    t0 = time.monotonic()
    assert box.take(1, 1, [0], 5.0, "t")[0].header == b"late"
    assert time.monotonic() - t0 < 1.0
    assert lane.count == 1 and not lane.receiver_blocked()  # through the lane; awake again


@needs_lanes
@pytest.mark.parametrize("how", ["abort", "put"])
def test_aborts_and_puts_still_release_a_reader_with_lanes(
    lane_pair: Any, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    box, _, _ = lane_pair
    monkeypatch.setattr(lanes, "RECHECK_S", 10.0)
    if how == "abort":
        threading.Timer(0.1, box.abort, args=(1, "replica 0 raised")).start()
    else:
        threading.Timer(0.1, box.put, args=(1, 1, 0, Packet(b"by dask comms"))).start()
    t0 = time.monotonic()
    if how == "abort":
        with pytest.raises(CollectiveAbortedError, match="replica 0 raised"):
            box.take(1, 1, [0], 5.0, "t")
    else:
        assert box.take(1, 1, [0], 5.0, "t")[0].header == b"by dask comms"
    assert time.monotonic() - t0 < 1.0  # ABORT_GRACE included


@needs_lanes
def test_a_spinning_reader_gets_a_lane_packet(lane_pair: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    box, sender, lane = lane_pair
    monkeypatch.setattr(mailbox, "SPIN_S", 1.0)
    monkeypatch.setattr(mailbox, "SPIN_IF_WAITED_BELOW", 4.0)
    box._cores, box._last_wait = 2, 0.0
    threading.Timer(0.05, sender.send_packet, args=([1], 1, 1, Packet(b"while spinning"))).start()
    t0 = time.monotonic()
    assert box.take(1, 1, [0], 5.0, "t")[0].header == b"while spinning"
    assert time.monotonic() - t0 < 0.8 and lane.count == 1  # seen while it spun, not after the 1 s


@needs_lanes
def test_publish_says_whether_the_lane_took_the_packet_and_whether_to_nudge(monkeypatch: pytest.MonkeyPatch) -> None:
    sender = lanes.Lane.create()
    assert sender is not None
    try:
        assert sender.publish(1, 1, 0, b"early", b"") == 0  # nobody attached yet
        receiver = lanes.Lane.attach(sender.name)
        assert receiver is not None
        try:
            assert sender.publish(1, 1, 0, b"one", b"") == 1
            receiver.sleep(True)  # blocked in poll: the socket wakes it, not the lane
            assert sender.publish(1, 2, 0, b"two", b"") == 0
            receiver.sleep(False)
            # it went to sleep between the sender's look and its publishing: published, and nudged
            monkeypatch.setattr(sender, "receiver_asleep", lambda: True)
            assert sender.publish(1, 3, 0, b"three", b"") == 2
            assert [(p[1], p[3]) for p in receiver.take()] == [(1, b"one"), (3, b"three")]
        finally:
            receiver.close()
    finally:
        sender.close()


@needs_lanes
def test_send_header_takes_the_lane_a_packet_took_until_the_peers_change(lane_pair: Any) -> None:
    box, sender, lane = lane_pair
    sender.send_header([1], 1, 1, b"first")  # no lane known for rank 1 yet: send_packet, which finds it
    assert box.take(1, 1, [0], 5.0, "t")[0].header == b"first" and lane.count == 1
    assert sender._ways == {1: (sender._socks["peer"], lane)}
    for seq in range(2, 2 + lanes.SLOTS + 2):  # nobody reads meanwhile: the lane fills, the socket takes the rest
        sender.send_header([1], 1, seq, b"h%d" % seq)
    got = [box.take(1, seq, [0], 5.0, "t")[0].header for seq in range(2, 2 + lanes.SLOTS + 2)]
    assert got == [b"h%d" % seq for seq in range(2, 2 + lanes.SLOTS + 2)] and lane.count == 1 + lanes.SLOTS
    # Rank 1's worker was replaced (worker/plugin.py ``set_peers``): the old peer's lane is not written again.
    sender.peers_replaced(["me", "new peer"])
    assert sender._peers == ["me", "new peer"] and sender._ways == {}
    sent = []
    sender.send_packet = lambda dsts, step, seq, packet, *a, **k: sent.append((dsts, seq, packet.header))
    sender.send_header([1], 1, 99, b"to the new one")
    assert sent == [([1], 99, b"to the new one")] and lane.count == 1 + lanes.SLOTS


def test_one_host_is_remembered_until_the_peers_change() -> None:
    from interdist.collectives.shared_memory import SharedMemoryTransport

    asked: list[int] = []
    local = {1: False, 2: True}

    def is_local(d: int) -> bool:
        asked.append(d)
        return local[d]

    t = SharedMemoryTransport(local_group(3)[0], is_local, threshold=1024)
    assert t.spans_hosts() and t.spans_hosts() and asked == [1, 1]  # "far" is asked again (maybe not probed yet)
    local[1] = True
    assert not t.spans_hosts() and not t.spans_hosts() and asked == [1, 1, 1, 2]  # "one host" is kept
    t.peers_replaced(["a", "b", "c"])  # a replaced peer may be elsewhere
    local[2] = False
    assert t.spans_hosts() and asked == [1, 1, 1, 2, 1, 2]


@needs_lanes
def test_lane_packets_of_a_step_gone_are_dropped(lane_pair: Any) -> None:
    box, sender, _ = lane_pair
    dropped: list[Any] = []
    box.on_drop = dropped.append
    sender.send_packet([1], 1, 1, Packet(b"old"))
    sender.send_packet([1], 3, 1, Packet(b"ahead"))
    box.begin_step(2)
    assert [p.header for p in dropped] == [b"old"]
    assert box.take(3, 1, [0], 5.0, "t")[0].header == b"ahead"


@needs_lanes
def test_a_full_lane_falls_back_to_the_socket(lane_pair: Any) -> None:
    box, sender, lane = lane_pair
    for seq in range(lanes.SLOTS + 3):  # nobody reads meanwhile: the last three take the socket
        sender.send_packet([1], 1, seq, Packet(b"p%d" % seq))
    got = [box.take(1, seq, [0], 5.0, "t")[0].header for seq in range(lanes.SLOTS + 3)]
    assert got == [b"p%d" % seq for seq in range(lanes.SLOTS + 3)] and lane.count == lanes.SLOTS


@pytest.fixture
def lane_peers() -> Any:
    """A receiving mailbox (rank 3's) and three sending ``DaskTransport``s (ranks 0-2), each over a socket
    channel of its own with an attached lane: a collective of four replicas seen from one of them."""
    box = Mailbox()
    senders, lanes_made, socks = [], [], []
    for rank in range(3):
        mine, peer = socket.socketpair()
        socks.append(peer)
        dask_comms.accept_channel(box, mine)
        sender = dask_comms.DaskTransport.__new__(dask_comms.DaskTransport)
        sender.rank, sender.mailbox = rank, Mailbox()
        sender._peers, sender._sockets, sender._pending = ["r0", "r1", "r2", "me"], True, []
        sender._nudge = dask_comms.channel_parts(lanes.NUDGE_STEP, 0, rank, Packet(b""))
        conn = _Conn(peer)
        lane = lanes.Lane.create()
        assert lane is not None
        sender._socks, sender._lanes, sender._ways = {"me": conn}, {"me": lane}, {}
        sender._post(conn, dask_comms.channel_parts(lanes.OFFER_STEP, 0, rank, Packet(lane.name.encode())))
        senders.append(sender)
        lanes_made.append(lane)
    box.begin_step(0)  # reads the offers: the lanes are attached
    assert all(lane.words[lanes._ATTACHED] == 1 for lane in lanes_made)
    yield box, senders, lanes_made
    box.drain()
    for peer in socks:
        peer.close()
    for lane in lanes_made:
        lane.close()


def _spinning(box: Mailbox, monkeypatch: pytest.MonkeyPatch, seconds: float) -> None:
    monkeypatch.setattr(mailbox, "SPIN_S", seconds)
    monkeypatch.setattr(mailbox, "SPIN_IF_WAITED_BELOW", 4 * seconds)
    box._cores, box._last_wait = 2, 0.0


@needs_lanes
def test_a_spinning_reader_gathers_every_peer_without_the_general_wait(
    lane_peers: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The three packets of a collective come one at a time, among packets of the next collective and of a step
    # gone: the waiter gathers the three in one spin (the general wait, which goes back through the lock and
    # the messages at every packet, never runs), keeps the next collective's and drops the old step's.
    box, senders, made = lane_peers
    _spinning(box, monkeypatch, 2.0)
    box.begin_step(5)
    dropped: list[Any] = []
    box.on_drop = dropped.append
    general = []
    read = box._read_channels
    monkeypatch.setattr(box, "_read_channels", lambda *a, **k: (general.append(a), read(*a, **k))[1])

    def send_all() -> None:
        for r in (2, 0, 1):
            time.sleep(0.05)
            senders[r].send_packet([3], 5, 2, Packet(b"next from %d" % r))
            senders[r].send_packet([3], 4, 1, Packet(b"old from %d" % r))
            senders[r].send_packet([3], 5, 1, Packet(b"this from %d" % r))

    threading.Thread(target=send_all).start()
    t0 = time.monotonic()
    got = box.take(5, 1, [0, 1, 2], 5.0, "t")
    assert time.monotonic() - t0 < 1.5  # not the 2 s spin budget: it stopped when the last one came
    assert {r: p.header for r, p in got.items()} == {0: b"this from 0", 1: b"this from 1", 2: b"this from 2"}
    assert general == [] and [lane.count for lane in made] == [3, 3, 3]  # all through the lanes, one spin
    assert sorted(p.header for p in dropped) == [b"old from 0", b"old from 1", b"old from 2"]
    later = box.take(5, 2, [0, 1, 2], 5.0, "t")
    assert {r: p.header for r, p in later.items()} == {0: b"next from 0", 1: b"next from 1", 2: b"next from 2"}


@needs_lanes
@pytest.mark.parametrize("how", ["abort", "put", "socket"])
def test_a_gathering_reader_stops_for_what_does_not_come_by_a_lane(
    lane_peers: Any, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    # While it spins on the lanes, an abort, a packet through Dask comms (the doorbell) or one on a socket (too
    # large for a lane) ends the spin at once: the general wait takes them, not the end of the 5 s budget.
    box, senders, _ = lane_peers
    _spinning(box, monkeypatch, 5.0)
    monkeypatch.setattr(lanes, "RECHECK_S", 10.0)
    senders[0].send_packet([3], 1, 1, Packet(b"first"))  # one of three is there: the rest is awaited spinning
    if how == "abort":
        threading.Timer(0.2, box.abort, args=(1, "replica 2 raised")).start()
    elif how == "put":
        threading.Timer(0.2, box.put, args=(1, 1, 1, Packet(b"by dask comms"))).start()
    else:
        big = Packet(b"big", [np.arange(lanes.SLOT_BYTES + 8, dtype=np.uint8)])  # buffers: the socket
        threading.Timer(0.2, senders[1].send_packet, args=([3], 1, 1, big)).start()
    threading.Timer(0.4, senders[2].send_packet, args=([3], 1, 1, Packet(b"third"))).start()
    t0 = time.monotonic()
    if how == "abort":
        with pytest.raises(CollectiveAbortedError, match="replica 2 raised"):
            box.take(1, 1, [0, 1, 2], 30.0, "t")
    else:
        got = box.take(1, 1, [0, 1, 2], 30.0, "t")
        assert got[0].header == b"first" and got[2].header == b"third"
        assert got[1].header == (b"by dask comms" if how == "put" else b"big")
    assert time.monotonic() - t0 < 2.0  # (ABORT_GRACE included)


# -- between Dask workers ---------------------------------------------------------------------------


def _through_lanes(v: Any) -> tuple[int, float, bytes]:
    ctx = idist.get_replica_context()
    rep = ctx._replica  # type: ignore[union-attr]
    inner = rep.transport.inner
    total = ctx.all_reduce("sum", v)
    for _ in range(100_000):  # connected and offered in the background; the replicas decide together when
        # both lanes are attached (each deciding alone, they would run different numbers of collectives)
        attached = np.float32(bool(inner._lanes) and all(lane.words[lanes._ATTACHED] for lane in inner._lanes.values()))
        if float(ctx.all_reduce("sum", np.asarray([attached]))[0]) == rep.world_size:
            break
        total = ctx.all_reduce("sum", v)
    for _ in range(50):
        total = ctx.all_reduce("sum", v)
    before = sum(lane.count for lane in inner._lanes.values())
    big = np.arange(16_384, dtype=np.float32)  # 64 KB: a packet with a buffer of its own, over three slots
    if rep.rank == 0:  # its peer is out of its last all_reduce and not waiting yet: the packets take the lane
        time.sleep(0.1)
        rep.transport.send_packet([1], rep.step, 999, Packet(b"via the lane"))
        rep.transport.send_packet([1], rep.step, 1000, Packet(b"with a buffer", [big]))
        got = b""
    else:
        time.sleep(0.3)
        got = rep.transport.mailbox.take(rep.step, 999, [0], 10.0, "t")[0].header
        (packet,) = rep.transport.mailbox.take(rep.step, 1000, [0], 10.0, "t").values()
        assert packet.header == b"with a buffer" and bytes(packet.buffers[0]) == big.tobytes()
    return sum(lane.count for lane in inner._lanes.values()) - before, float(np.asarray(total)[0]), got


@needs_lanes
def test_workers_send_small_packets_through_lanes(mirrored2: Any) -> None:
    s = mirrored2
    dv = s.experimental_distribute_values_from_function(
        lambda ctx: np.full(1024, ctx.replica_id_in_sync_group + 1, np.float32)
    )
    out = [tuple(o) for o in s.experimental_local_results(s.run(_through_lanes, args=(dv,)))]
    assert out == [(1 + 3, 3.0, b""), (0, 3.0, b"via the lane")]


# -- the small all_reduce path ------------------------------------------------------------------------


@pytest.mark.parametrize("world", [2, 3])
@pytest.mark.parametrize("op", [ReduceOp.SUM, ReduceOp.MEAN])
def test_small_path_gives_the_general_bits(world: int, op: ReduceOp) -> None:
    def values(r: int) -> list[np.ndarray]:
        rng = np.random.default_rng(r)
        return [
            (rng.normal(size=(7, 3)) * 1e3).astype(np.float32),
            (rng.normal(size=5) * 1e6).astype(np.float64),
            rng.integers(-1000, 1000, size=9).astype(np.int32),
            np.asarray(np.float16(r + 0.3)),  # 0-d
            (rng.normal(size=4)).astype(np.float16)[::2],  # non-contiguous
            (rng.normal(size=(100, 120)) * 1e3).astype(np.float32),  # 48 KB: the frame is longer than a slot
        ]

    def body(r: int, c: Collectives) -> Any:
        out = c.all_reduce(1, 1, values(r), op, "t")
        return out, c.last_timing.algorithm

    got = run_threads(local_group(world), body)
    want = [_reduce_owned([values(r)[i] for r in range(world)], op) for i in range(6)]
    for out, algorithm in got:
        assert algorithm == AG
        for o, w in zip(out, want, strict=True):
            assert o.dtype == w.dtype and o.shape == w.shape and o.tobytes() == w.tobytes()
            assert o.flags.writeable


@pytest.mark.parametrize("world, algorithm", [(4, "auto"), (3, RB)])  # AUTO: reduce-broadcast from 4 on one host
@pytest.mark.parametrize("op", [ReduceOp.SUM, ReduceOp.MEAN])
def test_small_reduce_broadcast_gives_the_general_bits(world: int, algorithm: str, op: ReduceOp) -> None:
    def values(r: int) -> list[np.ndarray]:
        rng = np.random.default_rng(r)
        return [
            (rng.normal(size=(40, 30)) * 1e3).astype(np.float32),
            rng.integers(-1000, 1000, size=9).astype(np.int64),
            np.asarray(np.float64(r + 0.3)),
        ]

    def body(r: int, c: Collectives) -> Any:
        return c.all_reduce(1, 1, values(r), op, "t"), c.last_timing.algorithm

    got = run_threads(local_group(world), body, algorithm=algorithm)
    want = [_reduce_owned([values(r)[i] for r in range(world)], op) for i in range(3)]
    for out, name in got:
        assert name == RB
        for o, w in zip(out, want, strict=True):
            assert o.dtype == w.dtype and o.shape == w.shape and o.tobytes() == w.tobytes()
            assert o.flags.writeable


@pytest.mark.parametrize("op", [ReduceOp.SUM, ReduceOp.MEAN])
def test_the_roots_reply_is_the_frame_pack_arrays_makes(op: ReduceOp) -> None:
    # Arrays the small path adds in place (no 0-d, no integer mean): the root frames the sums with the batch's
    # layout as worked out once, and the replicas read them back as the general path's bits.
    def values(r: int) -> list[np.ndarray]:
        rng = np.random.default_rng(r)
        return [(rng.normal(size=(6, 5)) * 1e3).astype(np.float32), rng.normal(size=7)]

    boxes = local_group(3)
    sent: list[Any] = []
    send_header = boxes[0].send_header
    boxes[0].send_header = lambda dsts, step, seq, header: (
        sent.append((seq, header)),
        send_header(dsts, step, seq, header),
    )  # type: ignore[method-assign]
    got = run_threads(boxes, lambda r, c: c.all_reduce(1, 1, values(r), op, "t"), algorithm=RB)
    want = [_reduce_owned([values(r)[i] for r in range(3)], op) for i in range(2)]
    for out in got:
        assert [o.tobytes() for o in out] == [w.tobytes() for w in want] and all(o.flags.writeable for o in out)
    assert sent == [(-2, pack_arrays(want, op.value).header)]  # the reply to (step 1, seq 1), from the root


@pytest.mark.parametrize("world, algorithm", [(2, "auto"), (4, "auto"), (3, RB)])
def test_small_and_large_frames_disagreeing_raise_on_every_rank(world: int, algorithm: str) -> None:
    def body(r: int, c: Collectives) -> Any:
        value = np.ones(8 if r != 1 else 8000, np.float32)  # rank 1's is not small (not in the header)
        return c.all_reduce(1, 1, [value], ReduceOp.SUM, "t")

    out = run_threads(local_group(world), body, algorithm=algorithm)
    for o in out:
        assert isinstance(o, ReplicaMismatchError) and "(8,)" in str(o) and "(8000,)" in str(o)


@pytest.mark.parametrize("world, algorithm", [(2, "auto"), (4, "auto")])  # all-gather-reduce; reduce-broadcast
def test_a_dtype_tf_cannot_reduce_raises_on_every_rank_every_time(world: int, algorithm: str) -> None:
    # The small path looks at the dtypes once per layout when they pass: one that fails fails at every call.
    def body(r: int, c: Collectives) -> Any:
        out = []
        for seq in (1, 2):
            try:
                c.all_reduce(1, seq, [np.ones(4, np.uint8)], ReduceOp.SUM, "t")
                out.append(None)
            except ValueError as e:
                out.append(str(e))
        out.append(c.all_reduce(1, 3, [np.ones(4, np.int32)], ReduceOp.SUM, "t")[0].tolist())
        return out

    for got in run_threads(local_group(world), body, algorithm=algorithm):
        assert all("dtype uint8" in m for m in got[:2]) and got[2] == [world] * 4


def test_reduce_ops_are_hashed_as_the_same_members_after_pickling() -> None:
    import pickle

    plans = {(ReduceOp.SUM, np.dtype("f4"), (4,)): "plan"}
    assert plans.get((pickle.loads(pickle.dumps(ReduceOp.SUM)), np.dtype("f4"), (4,))) == "plan"
    assert plans.get((ReduceOp.MEAN, np.dtype("f4"), (4,))) is None


def test_small_path_receives_a_general_packet_of_the_same_batch() -> None:
    # A peer whose packet is the same batch as a pickle (the general path's fallback) is still summed.
    boxes = local_group(2)
    c = Collectives(boxes[0], lambda: 5.0)
    mine = np.arange(4, dtype=np.float32)
    meta = ([(4,)], ["<f4"], "SUM")
    from interdist.collectives.base import pack

    boxes[0].mailbox.put(1, 1, 1, pack((meta, [np.full(4, 10, np.float32)])))
    out = c.all_reduce(1, 1, [mine], ReduceOp.SUM, "t")
    assert out[0].tolist() == [10.0, 11.0, 12.0, 13.0]
    sent = boxes[1].mailbox._messages[(1, 1, 0)]
    assert sent.header == pack_arrays([mine], "SUM").header  # what it sent: the frame, as ever


@pytest.mark.parametrize("algorithm", [RS, RB])
def test_forced_algorithms_run_as_named(algorithm: str) -> None:
    def body(r: int, c: Collectives) -> Any:
        out = c.all_reduce(1, 1, [np.full(6, r + 1, np.float32)], ReduceOp.SUM, "t")
        return out[0].tolist(), c.last_timing.algorithm

    out = run_threads(local_group(3), body, algorithm=algorithm)
    assert out == [([6.0] * 6, algorithm)] * 3


def test_a_collectives_events_travel_as_one_record_of_the_dataclasses() -> None:
    # Replica.collective records its two events as rows of a ``collectives`` record (events.COLLECTIVES), sent
    # when another event is emitted, the reply is made or the worker's batch goes out (``flush_events``).
    from interdist import events
    from interdist.replica.replica import Replica

    sink: list[dict[str, Any]] = []
    spec: Any = {"world_size": 1, "devices": ["/job:localhost/replica:0/task:0/device:CPU:0"], "kind": "mirrored"}
    rep = Replica("g", 0, spec, local_group(1)[0], sink.append, lambda s, r: None)
    rep.step = 7
    for _ in range(2):
        out = rep.collective(
            "all_reduce", 12, lambda s, q, w: rep.collectives.all_reduce(s, q, [np.ones(3)], ReduceOp.SUM, w)
        )
        assert out[0].tolist() == [1.0, 1.0, 1.0]
    t = rep.collectives.last_timing
    assert sink == []  # kept as rows until something sends them
    rep.flush_events()
    (record,) = sink
    assert rep.step_events == [record] and record["kind"] == events.COLLECTIVES
    got = events.expand(record)
    times = [e.time for e in got]
    assert times == sorted(times)
    assert got == [
        events.CollectiveEntered("g", 7, 0, times[0], "all_reduce", 1, 12),
        events.CollectiveExited("g", 7, 0, times[1], "all_reduce", 1, 12, got[1].algorithm, "local", got[1].wait_s,
                                got[1].transfer_s),
        events.CollectiveEntered("g", 7, 0, times[2], "all_reduce", 2, 12),
        events.CollectiveExited("g", 7, 0, times[3], "all_reduce", 2, 12, t.algorithm, "local", t.wait_s,
                                t.transfer_s),
    ]  # fmt: skip
    # the record survives the worker's batch to the scheduler (msgpack: its rows come back as lists)
    assert [e for m in events.unpack_batch(events.pack_batch(sink)) for e in events.expand(m)] == got
    assert events.weight(record) == 4
    # another event sends the rows first, in order; a new step starts a new record
    rep.collective("barrier", 0, lambda s, q, w: None)
    rep.emit(events.ScalarLogged("g", 7, 0, 1.0, "loss", 0.5))
    rep.step = 8
    rep.collective("barrier", 0, lambda s, q, w: None)
    rep.step = 9
    rep.collective("barrier", 0, lambda s, q, w: None)
    rep.flush_events()
    kinds = [(m["kind"], m["step"]) for m in sink[1:]]
    assert kinds == [(events.COLLECTIVES, 7), ("scalar-logged", 7), (events.COLLECTIVES, 8), (events.COLLECTIVES, 9)]
    assert [(type(e).__name__, e.seq) for e in events.expand(sink[1])] == [
        ("CollectiveEntered", 3),
        ("CollectiveExited", 3),
    ]


def test_a_long_loop_of_collectives_sends_records_of_at_most_max_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    from interdist import events
    from interdist.replica.replica import Replica

    monkeypatch.setattr(events, "MAX_ROWS", 4)
    sink: list[dict[str, Any]] = []
    spec: Any = {"world_size": 1, "devices": ["/job:localhost/replica:0/task:0/device:CPU:0"], "kind": "mirrored"}
    rep = Replica("g", 0, spec, local_group(1)[0], sink.append, lambda s, r: None)
    rep.step = 3
    for _ in range(9):  # a row each: its two events in one (events.DONE_ROW)
        rep.collective("barrier", 0, lambda s, q, w: None)
    assert [len(m["rows"]) for m in sink] == [4, 4]  # sent as they fill; the last row waits
    rep.flush_events()
    assert [len(m["rows"]) for m in sink] == [4, 4, 1]
    assert [events.weight(m) for m in sink] == [8, 8, 2]
    seqs = [e.seq for m in sink for e in events.expand(m)]
    assert seqs == [k for k in range(1, 10) for _ in range(2)]


def test_a_collective_seen_waiting_sends_its_exit_as_a_row_of_its_own() -> None:
    # The worker's flush while a replica waits in a collective sends its CollectiveEntered alone (the live views
    # show it waiting); its CollectiveExited then comes as a row of its own, not merged into a row sent already.
    from interdist import events
    from interdist.replica.replica import Replica

    sink: list[dict[str, Any]] = []
    spec: Any = {"world_size": 1, "devices": ["/job:localhost/replica:0/task:0/device:CPU:0"], "kind": "mirrored"}
    rep = Replica("g", 0, spec, local_group(1)[0], sink.append, lambda s, r: None)
    rep.step = 2
    rep.collective("barrier", 0, lambda s, q, w: rep.flush_events())  # flushed while "waiting"
    rep.collective("barrier", 0, lambda s, q, w: None)
    rep.flush_events()
    assert [[row[0] for row in m["rows"]] for m in sink] == [
        [events.ENTERED_ROW],
        [events.EXITED_ROW, events.DONE_ROW],
    ]
    got = [e for m in events.unpack_batch(events.pack_batch(sink)) for e in events.expand(m)]
    assert [(type(e).__name__, e.seq) for e in got] == [
        ("CollectiveEntered", 1),
        ("CollectiveExited", 1),
        ("CollectiveEntered", 2),
        ("CollectiveExited", 2),
    ]
    assert [e.time for e in got] == sorted(e.time for e in got)


def test_a_collective_that_raises_or_runs_inside_another_keeps_every_event_in_order() -> None:
    # The open ENTERED row (replica/event_rows.py): a collective that raises leaves its CollectiveEntered alone (no
    # exit: the dashboard shows where it failed); one run within another's call writes the rows at once, the outer
    # one's first; a flush while rows of an earlier step wait sends them as their own record before the open one.
    from interdist import events
    from interdist.replica.replica import Replica

    sink: list[dict[str, Any]] = []
    spec: Any = {"world_size": 1, "devices": ["/job:localhost/replica:0/task:0/device:CPU:0"], "kind": "mirrored"}
    rep = Replica("g", 0, spec, local_group(1)[0], sink.append, lambda s, r: None)
    rep.step = 4

    def fails(s: int, q: int, w: str) -> None:
        raise ValueError("mismatch")

    with pytest.raises(ValueError, match="mismatch"):
        rep.collective("all_reduce", 8, fails)
    rep.collective("barrier", 0, lambda s, q, w: rep.collective("broadcast", 4, lambda *a: None))
    rep.flush_events()
    got = [(type(e).__name__, e.op, e.seq) for m in sink for e in events.expand(m)]
    assert got == [
        ("CollectiveEntered", "all_reduce", 1),
        ("CollectiveEntered", "barrier", 2),
        ("CollectiveEntered", "broadcast", 3),
        ("CollectiveExited", "broadcast", 3),
        ("CollectiveExited", "barrier", 2),
    ]
    sink.clear()
    rep.collective("barrier", 0, lambda s, q, w: None)  # a row of step 4, kept
    rep.step = 5
    rep.collective("barrier", 0, lambda s, q, w: rep.flush_events())  # step 5's, open when the worker flushes
    rep.flush_events()
    assert [(m["step"], [row[0] for row in m["rows"]]) for m in sink] == [
        (4, [events.DONE_ROW]),
        (5, [events.ENTERED_ROW]),
        (5, [events.EXITED_ROW]),
    ]
    assert rep._open is None and rep._rows == []


def test_a_full_record_sent_as_a_collective_opens_inside_another_sends_each_row_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The outer collective's open row goes into the record as the inner one starts, and the record is full: it is
    # sent with the rows before it, and the next record starts with the inner row (not the outer one again).
    from interdist import events
    from interdist.replica.replica import Replica

    monkeypatch.setattr(events, "MAX_ROWS", 1)
    sink: list[dict[str, Any]] = []
    spec: Any = {"world_size": 1, "devices": ["/job:localhost/replica:0/task:0/device:CPU:0"], "kind": "mirrored"}
    rep = Replica("g", 0, spec, local_group(1)[0], sink.append, lambda s, r: None)
    rep.step = 1
    rep.collective("barrier", 0, lambda s, q, w: None)
    rep.collective("barrier", 0, lambda s, q, w: rep.collective("broadcast", 4, lambda *a: None))
    rep.flush_events()
    got = [(type(e).__name__, e.seq) for m in sink for e in events.expand(m)]
    assert got == [
        ("CollectiveEntered", 1),
        ("CollectiveExited", 1),
        ("CollectiveEntered", 2),
        ("CollectiveEntered", 3),
        ("CollectiveExited", 3),
        ("CollectiveExited", 2),
    ]
