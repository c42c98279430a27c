"""An in-process cluster with workers named as TF tasks: a Dask scheduler and one nanny per task, named
as the task (``ps-0``, ``worker-0``...); the multi-worker, training and tutorial tests share it."""

from __future__ import annotations

import logging
from typing import Any


class InProcessCluster:
    """A ``LocalCluster`` with no workers of its own, plus nannies with the given names."""

    def __init__(self, names: list[str]) -> None:
        from distributed import LocalCluster

        self.cluster = LocalCluster(
            n_workers=0, host="127.0.0.1", dashboard_address="127.0.0.1:0", silence_logs=logging.ERROR
        )
        self.nannies: list[Any] = []
        try:
            for n in names:
                self.nannies.append(self.cluster.sync(self._add, n))
        except BaseException:
            self.close()
            raise
        self.address = self.cluster.scheduler_address

    async def _add(self, name: str) -> Any:
        from distributed import Nanny

        nanny = Nanny(
            self.cluster.scheduler_address,
            name=name,
            nthreads=1,
            host="127.0.0.1",
            memory_limit=0,
            silence_logs=logging.ERROR,
        )
        await nanny
        return nanny

    def close(self) -> None:
        for n in self.nannies:
            try:
                self.cluster.sync(n.close, timeout=10)
            except Exception:
                pass  # already gone: closing the cluster below is what matters
        self.cluster.close(timeout=20)
