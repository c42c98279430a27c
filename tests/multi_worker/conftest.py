"""A Dask cluster with workers named as TF tasks (``ps-0``, ``worker-0``, ``worker-1``), shared by the module."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from tests._clusters import InProcessCluster


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="package")
def named_cluster() -> Iterator[InProcessCluster]:
    c = InProcessCluster(["ps-0", "worker-0", "worker-1"])
    yield c
    c.close()
