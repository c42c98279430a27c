"""A liveness check never waits on a scheduler that stopped answering: it gives up within its bound and
finds no frozen replica (the step's own replies come from the replicas; issue 25, item 2)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from interdist.client import liveness


def test_a_silent_scheduler_does_not_hold_a_check(monkeypatch: pytest.MonkeyPatch) -> None:
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(n_workers=1, processes=False, dashboard_address=None) as cluster:
        with distributed.Client(cluster) as client:
            live = liveness.Liveness(client, list(client.scheduler_info()["workers"]))
            assert live.frozen([0]) == {}  # an answering scheduler: checked, nothing frozen

            async def silent(**kwargs: Any) -> dict[str, Any]:
                await asyncio.sleep(3600)  # a SIGSTOPped scheduler: the call never returns
                return {}

            monkeypatch.setattr(client.scheduler, "identity", silent)
            monkeypatch.setattr(liveness, "SCHEDULER_TIMEOUT", 0.5)
            t0 = time.monotonic()
            assert live.frozen([0]) == {}
            assert time.monotonic() - t0 < 5.0  # the bound (0.5 s), with room for a loaded machine


def test_the_pids_of_a_clusters_workers_are_learned() -> None:
    """A cluster interdist did not start (cluster="tcp://..."): the workers' pids are asked of them. The call
    used to pass timeout= to os.getpid, which every worker logged as a TypeError, and no pid was learned."""
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(n_workers=2, processes=True, dashboard_address=None) as cluster:
        with distributed.Client(cluster.scheduler_address) as client:  # an address: no cluster object to ask
            addresses = list(client.scheduler_info()["workers"])
            live = liveness.Liveness(client, addresses)
            live.learn_pids(timeout=30)
            pids = client.run(lambda: __import__("os").getpid())
            assert live._pids == {a: pids[a] for a in addresses}
