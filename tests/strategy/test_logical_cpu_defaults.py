"""Strategies built without devices on a host with N logical CPUs and no GPU, as TF 2.21 builds them.

Recorded with TF 2.21 (``tf.config.set_logical_device_configuration`` with 1, 2 and 4 logical CPUs):

* ``MirroredStrategy()`` takes every logical CPU: N replicas, ``CPU:0`` .. ``CPU:N-1``;
* ``CentralStorageStrategy()`` and ``MultiWorkerMirroredStrategy()`` take ``CPU:0`` alone, whatever N:
  ``num_replicas_in_sync`` 1, ``worker_devices`` ``[.../device:CPU:0]`` (a list for CentralStorage, a
  tuple for MultiWorkerMirrored), ``parameter_devices`` ``(.../device:CPU:0,)``, and a variable made in
  their scope lives on ``.../device:CPU:0`` with one local result there;
* ``CentralStorageStrategy(parameter_device="CPU:1")`` with 2 logical CPUs: one replica on CPU:0,
  ``parameter_devices`` ``("CPU:1",)`` as given, the variable on ``.../device:CPU:1``.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

import interdist as idist

CPU = "/job:localhost/replica:0/task:0/device:CPU:{}"


@pytest.fixture
def logical_cpus(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # no GPU visible: the CPU defaults
    yield
    idist.config.set_logical_cpu_devices(1)


@pytest.mark.parametrize("n", [1, 2, 4])
def test_central_storage_takes_cpu0_alone(logical_cpus: None, n: int) -> None:
    idist.config.set_logical_cpu_devices(n)
    with idist.experimental.CentralStorageStrategy() as s:
        assert s.num_replicas_in_sync == 1
        assert isinstance(s.extended.worker_devices, list)  # a list in TF
        assert list(s.extended.worker_devices) == [CPU.format(0)]
        assert s.extended.parameter_devices == (CPU.format(0),)
        with s.scope():
            v = idist.Variable(np.float32(1.0))
        assert v.device == CPU.format(0)
        assert [x.device for x in s.experimental_local_results(v)] == [CPU.format(0)]
        r = s.run(lambda: idist.get_replica_context().replica_id_in_sync_group)
        assert [int(np.asarray(x)) for x in s.experimental_local_results(r)] == [0]


@pytest.mark.parametrize("n", [1, 2, 4])
def test_multi_worker_mirrored_takes_cpu0_alone(logical_cpus: None, n: int) -> None:
    idist.config.set_logical_cpu_devices(n)
    with idist.MultiWorkerMirroredStrategy() as s:
        assert s.num_replicas_in_sync == 1
        assert s.extended.worker_devices == (CPU.format(0),)
        assert s.extended.parameter_devices == (CPU.format(0),)
        with s.scope():
            v = idist.Variable(np.float32(1.0))
        assert type(v).__name__ == "MirroredVariable" and v.device == CPU.format(0)
        assert [x.device for x in s.experimental_local_results(v)] == [CPU.format(0)]


@pytest.mark.parametrize("n", [1, 2, 4])
def test_mirrored_takes_every_logical_cpu(logical_cpus: None, n: int) -> None:
    idist.config.set_logical_cpu_devices(n)
    with idist.MirroredStrategy() as s:
        assert s.num_replicas_in_sync == n
        assert s.extended.worker_devices == tuple(CPU.format(i) for i in range(n))


def test_central_storage_parameter_device_next_to_the_default(logical_cpus: None) -> None:
    idist.config.set_logical_cpu_devices(2)
    with idist.experimental.CentralStorageStrategy(parameter_device="CPU:1") as s:
        assert s.num_replicas_in_sync == 1
        assert isinstance(s.extended.worker_devices, list)  # a list in TF
        assert list(s.extended.worker_devices) == [CPU.format(0)]
        assert s.extended.parameter_devices == ("CPU:1",)
        with s.scope():
            v = idist.Variable(np.float32(1.0))
        assert v.device == CPU.format(1)


def test_explicit_devices_still_make_n_replicas(logical_cpus: None) -> None:
    idist.config.set_logical_cpu_devices(2)
    with idist.experimental.CentralStorageStrategy(["CPU:0", "CPU:1"]) as s:
        assert s.num_replicas_in_sync == 2
        assert s.extended.parameter_devices == ("/device:CPU:0",)
