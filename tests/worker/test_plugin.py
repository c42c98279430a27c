"""The Dask binding: all of a worker's interdist state is its ``ReplicaRuntime`` plugin."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from interdist.worker.plugin import PLUGIN_NAME, get_runtime


def test_a_worker_without_the_plugin_is_named() -> None:
    with pytest.raises(RuntimeError, match=r"the worker tcp://10\.0\.0\.9:4000 has no interdist replica runtime"):
        get_runtime(SimpleNamespace(plugins={}, address="tcp://10.0.0.9:4000"))


def test_each_replica_worker_holds_its_replica_in_the_plugin(mirrored2: Any) -> None:
    gid = mirrored2._group_id

    def look(dask_worker: Any, gid: str = gid) -> tuple[str, int, list[str]]:
        from interdist.worker.plugin import get_runtime

        runtime = get_runtime(dask_worker)
        own = [name for name in vars(dask_worker) if "interdist" in name.lower()]
        return type(runtime).__name__, runtime.replicas[gid].rank, own

    found = mirrored2.client.run(look, workers=mirrored2._group.addresses)
    by_rank = sorted(found.values(), key=lambda x: x[1])
    assert [(kind, rank) for kind, rank, _ in by_rank] == [("ReplicaRuntime", 0), ("ReplicaRuntime", 1)]
    assert all(own == [] for _, _, own in by_rank), by_rank  # nothing stuck onto the Worker object
    assert PLUGIN_NAME == "interdist-runtime"
