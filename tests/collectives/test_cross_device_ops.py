"""CrossDeviceOps choose the all_reduce algorithm the replicas run, and say so in the events."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

import interdist as idist
from interdist import events
from interdist.collectives import algorithms
from interdist.collectives.algorithms import AG, AUTO, RB, Collectives
from interdist.collectives.cross_device_ops import all_reduce_choice
from interdist.collectives.local import LocalTransport, local_group
from interdist.reduce_op import ReduceOp

from ._harness import run_threads

CPUS = ["/job:localhost/replica:0/task:0/device:CPU:0", "/job:localhost/replica:0/task:0/device:CPU:1"]


@pytest.mark.parametrize(
    ("cdo", "algorithm", "root"),
    [
        (None, AUTO, 0),
        ("nccl", AUTO, 0),  # not a CrossDeviceOps: fails on use, as in TF (replica/context.py)
        (idist.CrossDeviceOps(), AUTO, 0),
        (idist.HierarchicalCopyAllReduce(), AUTO, 0),
        (idist.HierarchicalCopyAllReduce(num_packs=0), AUTO, 0),
        (idist.NcclAllReduce(), AUTO, 0),
        (idist.ReductionToOneDevice(), RB, 0),
        (idist.ReductionToOneDevice(reduce_to_device="CPU:1"), RB, 1),
        (idist.ReductionToOneDevice(reduce_to_device="/cpu:1"), RB, 1),
        (idist.ReductionToOneDevice(reduce_to_device="GPU:0"), RB, 0),  # not a replica's device
    ],
)
def test_all_reduce_choice(cdo: Any, algorithm: str, root: int) -> None:
    assert all_reduce_choice(cdo, CPUS) == {"algorithm": algorithm, "root": root}


def test_num_packs_errors_as_tf() -> None:
    with pytest.raises(ValueError, match=r"^HierarchicalCopy requires num_packs >= 0, but -1 is specified$"):
        idist.HierarchicalCopyAllReduce(num_packs=-1)
    with pytest.raises(ValueError, match=r"^NCCL all-reduce requires num_packs >= 0, but -1 is specified$"):
        idist.NcclAllReduce(num_packs=-1)


def test_docstrings_do_not_claim_nccl() -> None:
    # NcclAllReduce does not select NCCL: the collectives backend does (docs/gpu.md)
    assert "it does not select NCCL by itself" in (idist.NcclAllReduce.__doc__ or "")
    assert "NCCL" not in (idist.HierarchicalCopyAllReduce.__doc__ or "")


def test_unknown_algorithm_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown all_reduce algorithm 'ring'"):
        Collectives(local_group(2)[0], lambda: 1.0, "ring")
    with pytest.raises(ValueError, match="reduce root 2 is not a rank"):
        Collectives(local_group(2)[0], lambda: 1.0, RB, root=2)


class _Recording(LocalTransport):
    sent: list[tuple[int, int]]

    def send_packet(self, dsts: list[int], *args: Any, **kwargs: Any) -> None:
        self.sent.extend((self.rank, d) for d in dsts)
        super().send_packet(dsts, *args, **kwargs)


@pytest.mark.parametrize("world", [1, 2, 3, 4])
@pytest.mark.parametrize("root", [0, 1])
def test_reduce_broadcast_at_every_size_from_the_root(world: int, root: int) -> None:
    root = min(root, world - 1)
    boxes = local_group(world)[0]._mailboxes
    sent: list[tuple[int, int]] = []
    transports = [_Recording(r, world, boxes) for r in range(world)]
    for t in transports:
        t.sent = sent

    def body(r: int, c: Collectives) -> Any:
        c.root = root
        out = c.all_reduce(1, 1, [np.array([1.0, 2.0, 3.0]) * (r + 1)], ReduceOp.SUM, "t")[0]  # tiny: AUTO is AG
        return out, c.last_timing.algorithm

    out = run_threads(transports, body, algorithm=RB)
    for got, algorithm in out:
        assert algorithm == RB
        assert got.tolist() == [world * (world + 1) / 2 * k for k in (1, 2, 3)]
    # everyone to the root, and the root to everyone: 2(n-1) messages, none between two other ranks
    others = [r for r in range(world) if r != root]
    assert sorted(sent) == sorted([(r, root) for r in others] + [(root, r) for r in others])


def test_tiny_batches_default_to_all_gather_reduce() -> None:
    def body(r: int, c: Collectives) -> str:
        c.all_reduce(1, 1, [np.ones(3)], ReduceOp.SUM, "t")
        return c.last_timing.algorithm

    assert run_threads(local_group(3), body) == [AG] * 3


# -- through the strategy ----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def rtod(mirrored2: Any) -> Iterator[Any]:
    """A ReductionToOneDevice strategy on the two workers of ``mirrored2``."""
    cdo = idist.ReductionToOneDevice()
    s = idist.MirroredStrategy(["CPU:0", "CPU:1"], cross_device_ops=cdo, cluster=mirrored2._lease.client)
    yield s
    s.close()


def _algorithms(s: Any, first: int) -> list[str]:
    exits = [e for e in s.events.events if isinstance(e, events.CollectiveExited) and e.group == s._group_id]
    return [e.algorithm for e in exits if e.op == "all_reduce" and e.step >= first]


def _all_reduce(s: Any, size: int) -> list[np.ndarray]:
    def fn() -> Any:
        r = idist.get_replica_context().replica_id_in_sync_group
        return idist.get_replica_context().all_reduce("SUM", np.arange(size, dtype=np.float32) * np.float32(r + 1))

    return [np.asarray(v) for v in s.experimental_local_results(s.run(fn))]


@pytest.mark.parametrize("size", [3, 300_000])
def test_reduction_to_one_device_runs_reduce_broadcast(mirrored2: Any, rtod: Any, size: int) -> None:
    first = rtod._group.step + 1
    got = _all_reduce(rtod, size)
    assert _algorithms(rtod, first) == [RB, RB]  # one per replica, at every size
    first_default = mirrored2._group.step + 1
    want = _all_reduce(mirrored2, size)
    assert _algorithms(mirrored2, first_default) == [AG, AG]  # the default on one host, 2 replicas
    for g, w in zip(got, want, strict=True):
        assert g.dtype == w.dtype and g.tobytes() == w.tobytes()
    assert np.array_equal(got[0], np.arange(size, dtype=np.float32) * 3)


def test_the_default_keeps_the_thresholds(monkeypatch: pytest.MonkeyPatch) -> None:
    # HierarchicalCopyAllReduce / NcclAllReduce / None: AUTO, so a large batch on 3 replicas of one
    # host is reduce-broadcast and a small one all-gather-reduce (the measured thresholds).
    monkeypatch.setattr(algorithms, "RB_MIN_ELEMENTS_ONE_HOST", 1000)
    out = run_threads(local_group(3), lambda r, c: [
        (c.all_reduce(1, seq, [np.ones(n)], ReduceOp.SUM, "t"), c.last_timing.algorithm)[1]
        for seq, n in ((1, 999), (2, 1000))])
    assert out == [[AG, RB]] * 3
