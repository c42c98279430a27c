"""A Dask cluster with workers named as TF tasks (``ps-0``, ``worker-0``, ``worker-1``), shared by the module."""

from __future__ import annotations

import logging
import socket
from collections.abc import Iterator
from typing import Any

import pytest


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class NamedCluster:
    """A ``LocalCluster`` with no workers of its own, plus nannies with the given names."""

    def __init__(self, names: list[str]) -> None:
        from distributed import LocalCluster

        self.cluster = LocalCluster(n_workers=0, host="127.0.0.1", dashboard_address="127.0.0.1:0",
                                    silence_logs=logging.ERROR)
        self.nannies = [self.cluster.sync(self._add, n) for n in names]
        self.address = self.cluster.scheduler_address

    async def _add(self, name: str) -> Any:
        from distributed import Nanny

        nanny = Nanny(self.cluster.scheduler_address, name=name, nthreads=1, host="127.0.0.1", memory_limit=0,
                      silence_logs=logging.ERROR)
        await nanny
        return nanny

    def close(self) -> None:
        for n in self.nannies:
            try:
                self.cluster.sync(n.close, timeout=10)
            except Exception:  # noqa: BLE001
                pass
        self.cluster.close(timeout=20)


@pytest.fixture(scope="package")
def named_cluster() -> Iterator[NamedCluster]:
    c = NamedCluster(["ps-0", "worker-0", "worker-1"])
    yield c
    c.close()
