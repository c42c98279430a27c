"""One harness for the collectives tests: the ranks of a group over a named backend.

- In process (``local``, ``shm``): every rank is a thread of this process with its own
  ``Collectives``; ``shm`` wraps the in-process transport, so every packet over
  ``THRESHOLD`` bytes really goes through a POSIX shared-memory segment, mapped and
  unlinked exactly as between worker processes.
- ``dask``: every rank is a replica on a Dask worker of a real cluster; a test body runs
  inside ``strategy.run`` and uses the replica's own engine (``Replica.collective``, the
  replica's ``Collectives`` over the transport the worker took from the registry).

A test body gets an ``Ops`` (the same methods either way) and its result, or the exception
it raised, comes back per rank. Each ``run`` is one step (as a replica's program is).
"""

from __future__ import annotations

import pickle
import sys
import threading
from collections.abc import Callable
from typing import Any, Protocol

import cloudpickle
import numpy as np

from interdist.collectives.algorithms import AUTO, Collectives
from interdist.collectives.base import Transport
from interdist.collectives.local import local_group
from interdist.collectives.shared_memory import SharedMemoryTransport
from interdist.config import settings
from interdist.reduce_op import ReduceOp

# Test bodies and the ops below are pickled to the Dask workers by value (the workers need not import tests/).
cloudpickle.register_pickle_by_value(sys.modules[__name__])

THRESHOLD = 1024  # bytes: a shm packet with more out-of-band buffer bytes goes through a segment


def shm_group(world: int, threshold: int = THRESHOLD) -> list[SharedMemoryTransport]:
    return [SharedMemoryTransport(t, threshold=threshold) for t in local_group(world)]


#: The backends whose ranks can be threads of this process, and how to make a group of each.
IN_PROCESS: dict[str, Callable[[int], list[Any]]] = {"local": local_group, "shm": shm_group}


def run_threads(
    transports: list[Any],
    body: Callable[[int, Collectives], Any],
    timeout: float = 5.0,
    close: bool = True,
    algorithm: str = AUTO,
) -> list[Any]:
    """``body(rank, collectives)`` on a thread per rank; each rank's result or exception."""
    colls = [Collectives(t, lambda: timeout, algorithm) for t in transports]
    out: list[Any] = [None] * len(transports)

    def go(r: int) -> None:
        try:
            out[r] = body(r, colls[r])
        except BaseException as e:  # returned to the test
            out[r] = e

    threads = [threading.Thread(target=go, args=(r,)) for r in range(len(transports))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    if close:
        for tr in transports:
            tr.close()
    return out


class Ops(Protocol):
    """What a rank of a test body can do (the same over every backend)."""

    rank: int
    world_size: int

    def all_reduce(self, arrays: list[np.ndarray], op: ReduceOp, algorithm: str | None = None) -> list[np.ndarray]:
        """``algorithm``: force one for this call (the same on every rank), else the group's."""

    def exchange(self, obj: Any) -> list[Any]: ...

    def broadcast(self, obj: Any, root: int) -> Any: ...

    def abort_peers(self, reason: str) -> None: ...

    def last_algorithm(self) -> str: ...


class ThreadOps:
    def __init__(self, colls: Collectives, step: int) -> None:
        self.c, self.step, self.seq = colls, step, 0
        self.rank, self.world_size = colls.rank, colls.world_size

    def _what(self, op: str) -> tuple[int, int, str]:
        self.seq += 1
        return self.step, self.seq, f"{op} #{self.seq} of step {self.step} on replica {self.rank}"

    def all_reduce(self, arrays: list[np.ndarray], op: ReduceOp, algorithm: str | None = None) -> list[np.ndarray]:
        if algorithm is not None:
            self.c.algorithm = algorithm  # this run's Collectives only (run_threads makes new ones)
        step, seq, what = self._what("all_reduce")
        return self.c.all_reduce(step, seq, arrays, op, what)

    def exchange(self, obj: Any) -> list[Any]:
        step, seq, what = self._what("exchange")
        return self.c.exchange(step, seq, obj, what)

    def broadcast(self, obj: Any, root: int) -> Any:
        step, seq, what = self._what("broadcast")
        return self.c.broadcast(step, seq, obj, root, what)

    def abort_peers(self, reason: str) -> None:
        self.c.transport.abort_peers(self.step, reason)

    def last_algorithm(self) -> str:
        return self.c.last_timing.algorithm


class ThreadGroup:
    """``world`` ranks of an in-process backend, as threads of this process."""

    def __init__(self, backend: str, world: int) -> None:
        self.backend = backend
        self.world = world
        self.transports: list[Transport] = IN_PROCESS[backend](world)
        self.step = 0

    def run(self, body: Callable[[Ops], Any], timeout: float = 5.0) -> list[Any]:
        self.step += 1
        step = self.step
        for t in self.transports:
            t.mailbox.begin_step(step)  # as a replica starting a program: messages of earlier steps go
        return run_threads(self.transports, lambda r, c: body(ThreadOps(c, step)), timeout, close=False)

    def close(self) -> None:
        for t in self.transports:
            t.close()


class ReplicaOps:
    """``Ops`` of a replica on a Dask worker: its engine, inside ``strategy.run``."""

    def __init__(self, replica: Any) -> None:
        self.r = replica
        self.rank, self.world_size = replica.rank, replica.world_size

    def all_reduce(self, arrays: list[np.ndarray], op: ReduceOp, algorithm: str | None = None) -> list[np.ndarray]:
        colls = self.r.collectives
        before = colls.algorithm
        if algorithm is not None:
            colls.algorithm = algorithm
        r, arrays = self.r, list(arrays)
        nbytes = sum(a.nbytes for a in arrays)
        try:
            # The engine's all-reduce of the list, as ``ctx.all_reduce`` runs it, without TF's rule for structures
            # (MirroredStrategy refuses int32 among several values: tests/strategy/test_batch_reduce_dtypes.py)
            return list(
                r.collective("all_reduce", nbytes, lambda s, q, w: r.collectives.all_reduce(s, q, arrays, op, w))
            )
        finally:
            colls.algorithm = before

    def exchange(self, obj: Any) -> list[Any]:
        return list(self.r.exchange("exchange", obj))

    def broadcast(self, obj: Any, root: int) -> Any:
        r = self.r
        return r.collective("broadcast", 0, lambda s, q, w: r.collectives.broadcast(s, q, obj, root, w))

    def abort_peers(self, reason: str) -> None:
        self.r.transport.abort_peers(self.r.step, reason)

    def last_algorithm(self) -> str:
        return str(self.r.collectives.last_timing.algorithm)


class ReplicaGroup:
    """``world`` replicas of a ``MirroredStrategy`` on the first workers of ``client``'s cluster."""

    def __init__(self, client: Any, world: int) -> None:
        import interdist as idist

        self.backend = "dask"
        self.world = world
        self.strategy = idist.MirroredStrategy([f"CPU:{i}" for i in range(world)], cluster=client)

    def run(self, body: Callable[[Ops], Any], timeout: float | None = None) -> list[Any]:
        def program() -> np.ndarray:
            import interdist as idist

            ops = ReplicaOps(idist.get_replica_context()._replica)
            try:
                out = body(ops)
            except BaseException as e:  # returned to the test, as the in-process harness does
                out = e
            return np.frombuffer(pickle.dumps(out), np.uint8)

        before = settings.collective_timeout
        if timeout is not None:
            settings.collective_timeout = timeout  # travels with the program to every replica
        try:
            result = self.strategy.run(program)
        finally:
            settings.collective_timeout = before
        return [pickle.loads(np.asarray(v).tobytes()) for v in self.strategy.experimental_local_results(result)]

    def close(self) -> None:
        self.strategy.close()
