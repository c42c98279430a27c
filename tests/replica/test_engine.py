"""The replica engine without Dask: two ``Replica`` objects on the in-process transport.

The engine (``interdist/replica/``) is handed a transport and an event sink by whoever builds it
(the worker plugin on a Dask worker); these tests build it from the reference transport alone,
which is what "Dask-agnostic" promises: a program's collectives, events, failures and aborts work
the same with no cluster at all.
"""

from __future__ import annotations

import pickle
import threading
import time
from typing import Any

import cloudpickle
import numpy as np

import interdist as idist
from interdist import events
from interdist.collectives.local import local_group
from interdist.protocol import GroupSpec, Reply, ValueMeta
from interdist.replica.replica import Replica

GROUP = "engine-test"


def _replicas(world: int, timeout: float = 10.0) -> list[Replica]:
    spec = GroupSpec(world_size=world, devices=[f"/job:localhost/replica:0/task:0/device:CPU:{r}" for r in range(world)],
                     kind="mirrored", timeout=timeout)
    transports = local_group(world)
    sink: list[dict[str, Any]] = []
    return [Replica(GROUP, r, dict(spec), t, sink.append, t.abort_peers)  # type: ignore[arg-type]
            for r, t in enumerate(transports)]


def _execute_all(replicas: list[Replica], step: int, fn: Any) -> list[Reply]:
    fn_bytes, args_bytes = cloudpickle.dumps(fn), cloudpickle.dumps(((), {}))
    replies: list[Reply] = [Reply(ok=False)] * len(replicas)

    def go(r: int) -> None:
        replies[r] = replicas[r].execute(step, fn_bytes, args_bytes, system=False)

    threads = [threading.Thread(target=go, args=(r,)) for r in range(len(replicas))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    return replies


def _value(reply: Reply) -> Any:
    meta = pickle.loads(reply["result"])
    assert isinstance(meta, ValueMeta) and meta.has_value
    return meta.value


def test_all_reduce_in_a_program_without_dask() -> None:
    replicas = _replicas(3)

    def step() -> Any:
        ctx = idist.get_replica_context()
        assert ctx is not None and ctx.num_replicas_in_sync == 3
        return ctx.all_reduce("sum", np.float32(ctx.replica_id_in_sync_group + 1))

    replies = _execute_all(replicas, 1, step)
    assert [r["ok"] for r in replies] == [True, True, True]
    assert [float(_value(r)) for r in replies] == [6.0, 6.0, 6.0]  # 1 + 2 + 3 on every replica
    # Each reply carries its own step's events: RunStarted, the collective (one ``collectives`` record on the
    # wire), RunFinished.
    assert [[m["kind"] for m in r["events"]] for r in replies] == [["run-started", "collectives", "run-finished"]] * 3
    for rank, r in enumerate(replies):
        entered, exited = events.expand(r["events"][1])
        assert type(entered) is events.CollectiveEntered and type(exited) is events.CollectiveExited
        assert (entered.op, entered.seq, entered.nbytes, entered.step, entered.replica) == ("all_reduce", 1, 4, 1, rank)
        assert (exited.op, exited.seq, exited.step, exited.replica) == ("all_reduce", 1, 1, rank)
        assert exited.nbytes >= 4  # what travelled: the value and its frame's header
        assert entered.time <= exited.time and exited.wait_s >= 0 and exited.transfer_s >= 0


def test_a_raising_replica_releases_its_peer_at_once() -> None:
    replicas = _replicas(2, timeout=30.0)

    def step() -> Any:
        ctx = idist.get_replica_context()
        assert ctx is not None
        if ctx.replica_id_in_sync_group == 1:
            raise ValueError("replica 1 fails before the collective")
        return ctx.all_reduce("sum", np.float32(1.0))

    t0 = time.perf_counter()
    replies = _execute_all(replicas, 1, step)
    elapsed = time.perf_counter() - t0
    assert replies[1]["ok"] is False and replies[1]["type"] == "ValueError" and not replies[1]["secondary"]
    # replica 0 was waiting in the all_reduce: the abort released it, long before the 30 s timeout
    assert replies[0]["ok"] is False and replies[0]["type"] == "CollectiveAbortedError" and replies[0]["secondary"]
    assert elapsed < 5.0
    # and the group is usable for the next step
    replies = _execute_all(replicas, 2, lambda: idist.get_replica_context().all_reduce("sum", np.int64(2)))
    assert [int(_value(r)) for r in replies] == [4, 4]
