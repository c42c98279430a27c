"""Shared fixtures. interdist pools its embedded clusters, so the suite starts each size once."""

from __future__ import annotations

from collections.abc import Iterator

import pytest


@pytest.fixture(scope="session", autouse=True)
def _close_clusters() -> Iterator[None]:
    yield
    from interdist.runtime import cluster

    cluster.shutdown_all()


@pytest.fixture(scope="module")
def mirrored2() -> Iterator[object]:
    import interdist as idist

    s = idist.MirroredStrategy(["CPU:0", "CPU:1"])
    yield s
    s.close()
