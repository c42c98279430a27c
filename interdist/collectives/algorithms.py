"""The collective algorithms a replica uses, on top of any ``Transport``.

``all_reduce`` has three algorithms, all bitwise identical on every rank:

- all-gather-reduce (the default, and on one host at every size): every rank
  sends its arrays to every peer and reduces all contributions itself, in rank
  order. One round of messages.
- reduce-scatter + all-gather (large batches across hosts): every array is cut into
  ``world_size`` contiguous chunks; rank ``j`` receives chunk ``j`` from every
  rank, reduces it in rank order (``reduce_arrays`` on the chunk: elementwise,
  so each element gets exactly the bits the whole-array reduction gives), then
  sends the reduced chunk to everyone. Each element is reduced by exactly one
  rank and copied as bytes, so every rank ends with the same bytes. Each rank
  moves and adds 1/n of the data instead of all of it, for one more round.
- reduce-broadcast (large batches among 3 or more replicas on one host): every
  rank sends its arrays to one root, which reduces them once, in rank order, and
  sends the result to every rank. Where ``AUTO`` chose it and the replicas are
  pinned round the host's cores, the reduction is split between one owner per core
  (``split.py``).

Which one runs is ``Collectives.algorithm``, the same on every rank (it comes with
the group spec, from the strategy's ``cross_device_ops``: ``cross_device_ops.py``):
``AUTO`` asks the cost model (``cost_model.py``; the thresholds below override it), from the
shapes and whether the group spans hosts only (the same on every rank whenever the call is valid); any other
value forces that algorithm at every size. The first message carries every rank's
shapes and dtypes, so a shape or dtype mismatch raises the same ``ReplicaMismatchError`` (a
``ValueError``) on every rank in every algorithm, naming each replica's shape or dtype: TF never
casts across replicas, it fails.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import Any, TypeVar, cast

import numpy as np

from interdist import config
from interdist._gpu import any_cupy, to_device, to_host
from interdist._reduction import reduce_arrays
from interdist.collectives import cost_model, ring
from interdist.collectives.base import (
    Packet,
    Timing,
    Transport,
    frame_description,
    is_frame,
    pack,
    pack_arrays,
    unpack,
    unpack_arrays,
)
from interdist.collectives.reducing import _BLOCK as _BLOCK  # (this module's API too)
from interdist.collectives.reducing import COLLECTIVE_DTYPES as COLLECTIVE_DTYPES
from interdist.collectives.reducing import _check_collective_dtypes, _dtypes, _reduce_owned, check_batches
from interdist.collectives.ring_path import RingMixin
from interdist.collectives.small import small_all_reduce
from interdist.collectives.split import SplitMixin
from interdist.collectives.two_round import Consumer, TwoRoundMixin
from interdist.collectives.two_round import _bounds as _bounds  # (this module's API too)
from interdist.collectives.two_round import _phase2 as _phase2
from interdist.reduce_op import ReduceOp

# ``AUTO`` asks the cost model (``cost_model.auto_choice``: an alpha-beta model of these three
# algorithms with parameters fitted on this kind of machine by benchmarks/bench_cost_model.py; the
# fit, predicted vs measured, is in docs/performance.md). On one host with 2 cores it picks
# all-gather-reduce for 2 replicas and reduce-broadcast from 3 (measured inside strategy.run, slowest
# replica, medians: 4 replicas 64 KB 1.2 vs 1.6 ms, 1 MB 2.2 vs 2.8 ms, 16 MB 18.7 vs 22.8 ms); across
# hosts reduce-scatter + all-gather for large batches, all-gather-reduce for small ones.
#
# The thresholds AUTO used before, in elements (all arrays together), stay as overrides: when any of
# these is set (by its key, ``interdist.collectives.rs-min-elements`` and the two after it, read when
# this module is imported; or assigned here), AUTO goes by the thresholds, those left unset taking
# their former values (below). Reduce-scatter when the batch has RS_MIN_ELEMENTS
# and either spans hosts or has RS_MIN_ELEMENTS_ONE_HOST; else reduce-broadcast from 3 replicas on
# one host with RB_MIN_ELEMENTS_ONE_HOST; else all-gather-reduce.
RS_MIN_ELEMENTS: int | None = config.get("collectives.rs-min-elements")
RS_MIN_ELEMENTS_ONE_HOST: int | None = config.get("collectives.rs-min-elements-one-host")
RB_MIN_ELEMENTS_ONE_HOST: int | None = config.get("collectives.rb-min-elements-one-host")
_FORMER_THRESHOLDS = (1 << 18, 1 << 62, 1 << 18)  # RS_MIN_ELEMENTS, RS_MIN_ELEMENTS_ONE_HOST, RB_MIN_ELEMENTS_ONE_HOST


def auto_algorithm(elements: int, world_size: int, spans_hosts: bool) -> str:
    """``AUTO``'s all_reduce algorithm for a batch of ``elements`` (the same on every rank: it depends
    on shapes and topology only): the cost model's choice, or the thresholds above when any is set."""
    thresholds = (RS_MIN_ELEMENTS, RS_MIN_ELEMENTS_ONE_HOST, RB_MIN_ELEMENTS_ONE_HOST)
    if all(t is None for t in thresholds):
        return cost_model.auto_choice(elements, world_size, spans_hosts)
    rs, rs_one_host, rb_one_host = (
        former if t is None else t for t, former in zip(thresholds, _FORMER_THRESHOLDS, strict=True)
    )
    if elements >= rs and (elements >= rs_one_host or spans_hosts):
        return RS
    if world_size >= 3 and elements >= rb_one_host and not spans_hosts:
        return RB
    return AG


#: Below this many bytes (the batch), ``all_reduce_consumed`` leaves the batch to ``all_reduce``.
CONSUME_MIN_BYTES = 1 << 20

AUTO = "auto"  # chosen per call by ``auto_algorithm`` above
AG = "all-gather-reduce"
RS = "reduce-scatter-all-gather"
RB = "reduce-broadcast"
ALGORITHMS = (AUTO, AG, RS, RB)

_F = TypeVar("_F", bound=Callable[..., Any])


def _forget_on_error(method: _F) -> _F:
    @functools.wraps(method)
    def wrapper(self: Collectives, *args: Any, **kwargs: Any) -> Any:
        try:
            return method(self, *args, **kwargs)
        except BaseException:
            self.transport.forget()
            raise

    return cast(_F, wrapper)


class Collectives(TwoRoundMixin, RingMixin, SplitMixin):
    """The ops a replica uses, on top of a transport. One instance per replica.

    The two-round all_reduce algorithms (reduce-broadcast, reduce-scatter + all-gather) are its
    mixin's (``two_round.py``).

    ``algorithm`` is the all_reduce algorithm (``AUTO``: by the thresholds) and ``root``
    the rank that reduces in reduce-broadcast; both must be the same on every rank.
    """

    transport: Transport  # (the mixins declare it too; RingMixin as Any)

    def __init__(
        self, transport: Transport, timeout: Callable[[], float], algorithm: str = AUTO, root: int = 0
    ) -> None:
        if algorithm not in ALGORITHMS:
            raise ValueError(f"unknown all_reduce algorithm {algorithm!r}; known: {', '.join(ALGORITHMS)}")
        if not 0 <= root < transport.world_size:
            raise ValueError(f"reduce root {root} is not a rank of a group of {transport.world_size}")
        self.transport = transport
        self.timeout = timeout
        self.algorithm = algorithm
        self.root = root
        self.owners = 1  # the ranks AUTO's reduce-broadcast splits its sum between (split.py; set at the join)
        self.last_timing = Timing(0.0, 0.0, 0)
        self.peers = [r for r in range(transport.world_size) if r != transport.rank]
        self.plans: dict[Any, Any] = {}  # the small path's, by batch layout (small.py)

    @property
    def rank(self) -> int:
        return self.transport.rank

    @property
    def world_size(self) -> int:
        return self.transport.world_size

    def _peers(self) -> list[int]:
        return [r for r in range(self.world_size) if r != self.rank]

    def _take(self, step: int, seq: int, srcs: list[int], what: str) -> tuple[dict[int, Packet], float]:
        t0 = time.perf_counter()
        got = self.transport.mailbox.take(step, seq, srcs, self.timeout(), what) if srcs else {}
        return got, time.perf_counter() - t0

    def _release(self, got: dict[int, Packet]) -> None:
        for p in got.values():
            self.transport.release(p)

    # -- any object -------------------------------------------------------------
    @_forget_on_error
    def exchange(self, step: int, seq: int, obj: Any, what: str) -> list[Any]:
        """All-gather of any picklable object: element ``r`` is rank ``r``'s ``obj``."""
        t0 = time.perf_counter()
        peers = self._peers()
        nbytes = 0
        if peers:
            packet = pack(obj)
            nbytes = packet.nbytes
            self.transport.send_packet(peers, step, seq, packet)
        got, wait = self._take(step, seq, peers, what)
        try:
            out = [obj if r == self.rank else self._open(got[r]) for r in range(self.world_size)]
        finally:
            self._release(got)
        self.transport.flush(self.timeout())
        self.last_timing = Timing(wait, time.perf_counter() - t0 - wait, nbytes)
        return out

    @_forget_on_error
    def barrier(self, step: int, seq: int, what: str) -> None:
        """Return once every rank has reached this collective (an empty message to each peer)."""
        t0 = time.perf_counter()
        peers = self._peers()
        if peers:
            self.transport.send_header(peers, step, seq, b"")  # (into the peers' lanes, once they took one)
        got, wait = self._take(step, seq, peers, what)
        self._release(got)
        self.last_timing = Timing(wait, time.perf_counter() - t0 - wait, 0, "barrier")

    def _open(self, packet: Packet) -> Any:
        """The object of a received packet, owning its memory (shared views are copied out)."""
        buffers = self.transport.view(packet)  # sets packet.shared for views of reused memory
        return unpack(packet, buffers, copy=packet.shared)

    @_forget_on_error
    def broadcast(self, step: int, seq: int, obj: Any, root: int, what: str) -> Any:
        """Rank ``root``'s ``obj`` on every rank."""
        t0 = time.perf_counter()
        if self.rank == root:
            packet = pack(obj)
            self.transport.send_packet(self._peers(), step, seq, packet)
            self.transport.flush(self.timeout())
            self.last_timing = Timing(0.0, time.perf_counter() - t0, packet.nbytes)
            return obj
        got, wait = self._take(step, seq, [root], what)
        try:
            out = self._open(got[root])
        finally:
            self._release(got)
        self.last_timing = Timing(wait, time.perf_counter() - t0 - wait, got[root].nbytes)
        return out

    # -- all_reduce -----------------------------------------------------------
    def all_reduce(self, step: int, seq: int, arrays: list[np.ndarray], op: ReduceOp, what: str) -> list[np.ndarray]:
        """Reduce a batch of arrays across ranks; every rank gets the same result.

        CuPy arrays (GPU replicas) stay on the device under a device backend (cuda_ipc, nccl, gpu:
        ``device_all_reduce``, None when it stages through the host); otherwise they are copied to the
        host, reduced by the algorithms below exactly as NumPy arrays are (the same bits on every rank,
        and as on CPU replicas), and copied back. One replica alone reduces on its device.
        """
        if self.transport.world_size > 1:  # a small batch of NumPy arrays first (small.py): most of them are
            try:
                out = small_all_reduce(self, step, seq, arrays, op, what, self.algorithm)
            except BaseException:
                self.transport.forget()
                raise
            if out is not None:
                return out
        if not any_cupy(arrays):
            return self._all_reduce_host(step, seq, arrays, op, what)
        if self.world_size == 1:
            self.last_timing = Timing(0.0, 0.0, 0, self._alone())
            return [reduce_arrays([a], op) for a in arrays]
        device = getattr(self.transport, "device_all_reduce", None)
        if device is not None and (on_device := device(self, step, seq, arrays, op, what)) is not None:
            return list(on_device)
        out = self._all_reduce_host(step, seq, [to_host(a) for a in arrays], op, what)
        return [to_device(a) for a in out]

    @_forget_on_error
    def _all_reduce_host(
        self, step: int, seq: int, arrays: list[np.ndarray], op: ReduceOp, what: str
    ) -> list[np.ndarray]:
        arrays = [np.asarray(a) for a in arrays]
        if self.world_size == 1:
            self.last_timing = Timing(0.0, 0.0, 0, self._alone())
            return [reduce_arrays([a], op) for a in arrays]
        shapes = [a.shape for a in arrays]
        if self.algorithm == RB:
            return self._reduce_broadcast(step, seq, arrays, shapes, op, what)
        if self.algorithm == RS:
            return self._reduce_scatter_all_gather(step, seq, arrays, shapes, op, what)
        chosen = self.algorithm if self.algorithm != AUTO else self.choose(sum(a.size for a in arrays))
        if chosen == RS:
            return self._reduce_scatter_all_gather(step, seq, arrays, shapes, op, what)
        if chosen == RB:
            if self._splits(arrays):  # one owner per core (split.py)
                return self._split_reduce_broadcast(step, seq, arrays, shapes, op, what)
            return self._reduce_broadcast(step, seq, arrays, shapes, op, what)
        if op in (ReduceOp.SUM, ReduceOp.MEAN) and ring.ring_eligible(self.transport, self.world_size, arrays):
            return self._ring_all_reduce(step, seq, arrays, shapes, op, what)  # (ring_path.py)
        return self._all_gather_reduce(step, seq, arrays, shapes, op, what)

    def choose(self, elements: int, cache: dict[Any, str] | None = None) -> str:
        """``AUTO``'s algorithm for a batch of ``elements``: shapes and topology only, the same on every rank.
        (Whether the group spans hosts is symmetric: if it does, every rank has a peer on another host.)
        ``cache``: the choices made for this many elements, by topology and thresholds."""
        spans = self.transport.spans_hosts()
        if cache is None:
            return auto_algorithm(elements, self.world_size, spans)
        key = (spans, RS_MIN_ELEMENTS, RS_MIN_ELEMENTS_ONE_HOST, RB_MIN_ELEMENTS_ONE_HOST)
        got = cache.get(key)
        if got is None:
            got = cache[key] = auto_algorithm(elements, self.world_size, spans)
        return got

    def _alone(self) -> str:
        """The algorithm a group of one reports (nothing moves): the forced one, else all-gather-reduce."""
        return AG if self.algorithm == AUTO else self.algorithm

    def _check(self, mine: tuple[list[tuple[int, ...]], list[str], str], metas: dict[int, Any]) -> None:
        """Every rank's (shapes, dtypes, reduce op) agree (else the same error on every rank)."""
        check_batches([mine if r == self.rank else metas[r] for r in range(self.world_size)])

    def _contribution(self, arrays: list[np.ndarray], meta: tuple[Any, list[str], str]) -> Packet:
        """What a rank sends of its arrays to be reduced: a raw frame, or a pickle of ``(meta, arrays)``
        when one cannot be framed (then the receivers' checks name the mismatch)."""
        packet = pack_arrays(arrays, meta[2])
        return pack((meta, arrays)) if packet is None else packet

    def _contributions(
        self, got: dict[int, Packet], mine: Packet, meta: tuple[Any, list[str], str]
    ) -> dict[int, list[np.ndarray]]:
        """The peers' arrays (views of what they sent: read them before ``_release``), once every rank's
        (shapes, dtypes, op) were found to agree; else the same ``ReplicaMismatchError`` on every rank."""
        same = is_frame(mine.header)
        description = frame_description(mine.header) if same else b""
        arrays: dict[int, list[np.ndarray]] = {}
        metas: dict[int, Any] = {}
        for r, p in got.items():
            buffers = self.transport.view(p)
            if is_frame(p.header):
                same = same and frame_description(p.header) == description
                metas[r], arrays[r] = unpack_arrays(p.header, buffers)
            else:
                same = False
                metas[r], arrays[r] = unpack(p, buffers)
        if same:  # the same description as bytes: the same op, shapes and dtypes everywhere
            _check_collective_dtypes(meta[1], meta[2])
        else:
            self._check(meta, metas)
        return arrays

    @_forget_on_error
    def all_reduce_consumed(
        self, step: int, seq: int, arrays: list[np.ndarray], op: ReduceOp, what: str, consume: Consumer
    ) -> list[np.ndarray | None] | None:
        """``all_reduce`` of a batch of large host arrays whose sums ``consume`` may use up where they are made:
        ``consume(i, parts)`` gets every rank's array ``i`` in rank order (the peers': views of what they
        sent, valid only during the call) and returns True when it used their sum itself (then the result's
        ``i`` is None) or False (then the result's ``i`` is the reduced array, as ``all_reduce`` gives it).
        Where all-gather-reduce runs, after every rank's batch was found to agree (so a mismatch still fails
        every rank before anything is consumed); where reduce-broadcast runs, on the ranks other than the
        root, with ``parts`` the root's sum alone (a view of its packet); where it is split between owners
        (``split.py``), on every rank through ``consume.chunks(i, pieces)``, the owners' chunks. Where the ring
        of two replicas runs (``ring.py``), ``consume.ring_update(i, array)`` (if it has one) offers a
        ``ring.RingUpdate`` instead, committed once the whole batch went through (result ``i`` None), or None
        (result ``i`` the sum). None (nothing sent) anywhere else: the caller takes ``all_reduce``."""
        if self.world_size < 2 or op is not ReduceOp.SUM or any(type(a) is not np.ndarray for a in arrays):
            return None  # (a consumer is given the parts of a sum: a MEAN's division would be its own)
        if sum(a.nbytes for a in arrays) < CONSUME_MIN_BYTES:
            return None  # the small path's, or not worth it
        algorithm = self.algorithm if self.algorithm != AUTO else self.choose(sum(a.size for a in arrays))
        shapes = [a.shape for a in arrays]
        if algorithm == AG:
            if ring.ring_eligible(self.transport, self.world_size, arrays):  # (updates into new copies: ring.py)
                return self._ring_all_reduce(step, seq, arrays, shapes, op, what, consume)
            return self._all_gather_reduce(step, seq, arrays, shapes, op, what, consume)
        if algorithm == RB:  # the ranks other than the root: the root's sum, read where it sent it
            if self.algorithm == AUTO and self._splits(arrays):  # every rank: the owners' chunks (split.py)
                return self._split_reduce_broadcast(step, seq, arrays, shapes, op, what, consume)
            return self._reduce_broadcast(step, seq, arrays, shapes, op, what, consume)
        return None

    def _all_gather_reduce(
        self,
        step: int,
        seq: int,
        arrays: list[np.ndarray],
        shapes: list[tuple[int, ...]],
        op: ReduceOp,
        what: str,
        consume: Consumer | None = None,
        got: dict[int, Packet] | None = None,
        t0: float | None = None,
        waited: float = 0.0,
    ) -> list[Any]:
        t0 = time.perf_counter() if t0 is None else t0
        meta = (shapes, _dtypes(arrays), op.value)
        packet = self._contribution(arrays, meta)
        peers = self._peers()
        wait = waited
        if got is None:
            self.transport.send_packet(peers, step, seq, packet)
            got, wait = self._take(step, seq, peers, what)
            wait += self._past_hellos(step, seq, got, what)  # a peer that offered a ring (ring_path.py)
        else:  # this rank offered a ring and the peer sent its contribution instead (_ring_all_reduce)
            self.transport.send_packet(peers, step, -seq, packet)
        recv: Any = None
        parts: Any = None
        try:
            # Reduce straight from the received buffers (shared memory: no copy in between).
            recv = self._contributions(got, packet, meta)
            parts = [arrays if r == self.rank else recv[r] for r in range(self.world_size)]
            out: list[Any] = []
            for i in range(len(arrays)):
                column = [p[i] for p in parts]
                out.append(None if consume is not None and consume(i, column) else _reduce_owned(column, op))
                column = []
        finally:
            recv = parts = None  # views of the senders' segments: gone before they are released
            self._release(got)
        self.transport.flush(self.timeout())
        self.last_timing = Timing(wait, time.perf_counter() - t0 - wait, packet.nbytes, AG)
        return out
