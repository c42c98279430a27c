"""The collectives seam: a ``Transport`` moves bytes between ranks; ``Collectives`` builds the ops.

Every backend passes the same contract tests (tests/collectives). The algorithms
here are all-gather based: each rank sends its contribution to every peer and
reduces what it received in rank order. That makes every rank's result bitwise
identical (mirrored copies never drift through float rounding), which a ring
all-reduce does not give for free.
"""

from __future__ import annotations

import pickle
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..reduce_op import ReduceOp
from .mailbox import Mailbox


class Transport(ABC):
    """Point-to-point messages between the ranks of one replica group."""

    name = "abstract"

    def __init__(self, rank: int, world_size: int, mailbox: Mailbox) -> None:
        self.rank = rank
        self.world_size = world_size
        self.mailbox = mailbox

    @abstractmethod
    def send(self, dst: int, step: int, seq: int, payload: bytes) -> None:
        """Deliver ``payload`` into rank ``dst``'s mailbox under (step, seq, self.rank)."""

    def send_many(self, dsts: list[int], step: int, seq: int, payload: bytes) -> None:
        for dst in dsts:
            self.send(dst, step, seq, payload)

    def abort_peers(self, step: int, reason: str) -> None:
        """Release every peer waiting in ``step`` (this rank failed)."""

    def close(self) -> None:
        """Release what the transport holds (connections, shared memory)."""


@dataclass(frozen=True)
class Timing:
    """How long one collective took: waiting for peers versus moving data."""

    wait_s: float
    transfer_s: float
    nbytes: int


def _dumps(obj: Any) -> bytes:
    return pickle.dumps(obj, protocol=5)


class Collectives:
    """The ops a replica uses, on top of a transport. One instance per replica."""

    def __init__(self, transport: Transport, timeout: Callable[[], float]) -> None:
        self.transport = transport
        self.timeout = timeout
        self.last_timing = Timing(0.0, 0.0, 0)

    @property
    def rank(self) -> int:
        return self.transport.rank

    @property
    def world_size(self) -> int:
        return self.transport.world_size

    def exchange(self, step: int, seq: int, obj: Any, what: str) -> list[Any]:
        """All-gather of any picklable object: element ``r`` is rank ``r``'s ``obj``."""
        t0 = time.perf_counter()
        peers = [r for r in range(self.world_size) if r != self.rank]
        payload = _dumps(obj) if peers else b""
        if peers:
            self.transport.send_many(peers, step, seq, payload)
        t1 = time.perf_counter()
        got = self.transport.mailbox.take(step, seq, peers, self.timeout(), what) if peers else {}
        t2 = time.perf_counter()
        out = [obj if r == self.rank else pickle.loads(got[r]) for r in range(self.world_size)]
        t3 = time.perf_counter()
        self.last_timing = Timing(wait_s=t2 - t1, transfer_s=(t1 - t0) + (t3 - t2), nbytes=len(payload))
        return out

    def all_reduce(self, step: int, seq: int, arrays: list[np.ndarray], op: ReduceOp, what: str) -> list[np.ndarray]:
        """Reduce a batch of arrays across ranks; every rank gets the same result."""
        gathered = self.exchange(step, seq, arrays, what)
        return [reduce_arrays([g[i] for g in gathered], op) for i in range(len(arrays))]

    def broadcast(self, step: int, seq: int, obj: Any, root: int, what: str) -> Any:
        """Rank ``root``'s ``obj`` on every rank."""
        t0 = time.perf_counter()
        if self.rank == root:
            peers = [r for r in range(self.world_size) if r != root]
            payload = _dumps(obj)
            self.transport.send_many(peers, step, seq, payload)
            self.last_timing = Timing(0.0, time.perf_counter() - t0, len(payload))
            return obj
        got = self.transport.mailbox.take(step, seq, [root], self.timeout(), what)
        t1 = time.perf_counter()
        out = pickle.loads(got[root])
        self.last_timing = Timing(t1 - t0, time.perf_counter() - t1, len(got[root]))
        return out


def reduce_arrays(values: list[Any], op: ReduceOp) -> np.ndarray:
    """SUM or MEAN of same-shaped arrays, added in rank order (deterministic)."""
    arrays = [np.asarray(v) for v in values]
    shapes = {a.shape for a in arrays}
    if len(shapes) > 1:
        raise ValueError(
            f"Cannot reduce values of different shapes across replicas: {[a.shape for a in arrays]}"
        )
    dtype = np.result_type(*arrays)
    total = np.array(arrays[0], dtype=dtype, copy=True)
    for a in arrays[1:]:
        total = total + a
    total = np.asarray(total, dtype=dtype)
    if op == ReduceOp.MEAN:
        return mean_of_sum(total, len(arrays))
    return total


def mean_of_sum(total: np.ndarray, n: int) -> np.ndarray:
    """``total / n`` as TF's ``_simple_reduce`` computes it for MEAN.

    TF divides with ``/``: floats keep their dtype, integers become float64.
    """
    if not np.issubdtype(total.dtype, np.inexact):
        return np.asarray(total / n, dtype=np.float64)
    return np.asarray(total / np.asarray(n, dtype=total.dtype), dtype=total.dtype)
