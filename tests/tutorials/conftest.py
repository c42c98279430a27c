"""Fixtures of the tutorial ports. The recorder scripts need TensorFlow: never collected
(``--doctest-modules`` imports every module)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

collect_ignore_glob = ["recorder/*"]


@pytest.fixture
def two_cpus() -> Iterator[None]:
    """``MirroredStrategy()`` makes 2 replicas (TF's 2 logical CPU devices) while the test runs."""
    import interdist as idist

    before = idist.config.get_logical_cpu_devices()
    idist.config.set_logical_cpu_devices(2)
    yield
    idist.config.set_logical_cpu_devices(before)
