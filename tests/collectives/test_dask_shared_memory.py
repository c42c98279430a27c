"""Between worker processes: large all_reduce payloads go through shared memory, and no segment is left."""

from __future__ import annotations

import glob
from typing import Any

import numpy as np

import interdist as idist
from interdist.collectives.shared_memory import PREFIX


def _segments() -> set[str]:
    return {p for p in glob.glob(f"/dev/shm/{PREFIX}*") if "-probe-" not in p}  # not the momentary probes


def test_large_all_reduce_between_workers(mirrored2: Any) -> None:
    s = mirrored2
    before = _segments()
    for size, dtype in ((1_000_000, np.float32), (3, np.float32), (300_001, np.int64)):
        dv = s.experimental_distribute_values_from_function(
            lambda ctx, size=size, dtype=dtype: (np.arange(size) % 5 * (ctx.replica_id_in_sync_group + 1)).astype(dtype))
        for op, factor in (("sum", 3), ("mean", 1.5)):
            out = s.experimental_local_results(
                s.run(lambda v, op=op: idist.get_replica_context().all_reduce(op, v), args=(dv,)))
            want = np.arange(size) % 5 * factor
            a, b = (np.asarray(o) for o in out)
            assert np.allclose(a, want) and a.tobytes() == b.tobytes()
            assert a.dtype == (np.dtype(dtype) if op == "sum" or np.dtype(dtype).kind == "f" else np.float64)
    # the receiver unlinks each segment the first time it maps it: nothing in /dev/shm while open
    assert _segments() - before == set()


def test_strategy_close_leaves_no_segment() -> None:
    before = _segments()
    with idist.MirroredStrategy(["CPU:0", "CPU:1", "CPU:2"]) as s:
        dv = s.experimental_distribute_values_from_function(lambda ctx: np.full(200_000, 1.0 + ctx.replica_id_in_sync_group))
        out = s.experimental_local_results(
            s.run(lambda v: idist.get_replica_context().all_reduce("sum", v), args=(dv,)))
        assert all(np.all(np.asarray(o) == 6.0) for o in out)
    assert _segments() - before == set()
