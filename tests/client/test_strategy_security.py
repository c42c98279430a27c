"""``security=`` on every strategy (issue 17): MirroredStrategy's embedded cluster speaks TLS with the
credentials given, so a client holding them gets in and one without is refused; OneDeviceStrategy and
CentralStorageStrategy reach that scheduler by address with the same credentials, and not without."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import numpy as np
import pytest
from distributed import Client
from distributed.security import Security

import interdist as idist
from interdist.client.connect import connect  # a refused Client closed at once (see there)
from interdist.experimental import CentralStorageStrategy

SEC = Security.temporary()


@pytest.fixture(scope="module")
def secured() -> Iterator[idist.MirroredStrategy]:
    s = idist.MirroredStrategy(["CPU:0", "CPU:1"], security=SEC)
    yield s
    s.close()


def test_embedded_cluster_takes_the_credentials(secured: idist.MirroredStrategy) -> None:
    address = secured._lease.cluster.scheduler_address
    assert address.startswith("tls://127.0.0.1:")
    with pytest.raises((OSError, TypeError, TimeoutError)):  # no credentials: no connection
        connect(address, timeout="3s", set_as_default=False)
    gc.collect()  # the refused Client's __del__ now, not inside the next Client's loop (it deadlocks there)
    with pytest.raises((OSError, TypeError, TimeoutError)):  # credentials of its own
        connect(address, timeout="3s", set_as_default=False, security=Security.temporary())
    gc.collect()
    with Client(address, timeout="10s", set_as_default=False, security=SEC) as c:  # the same credentials
        assert set(c.scheduler_info(n_workers=-1)["workers"]) == set(secured._lease.addresses)
    out = secured.run(lambda: idist.get_replica_context().all_reduce("SUM", np.float32(1.0)))
    assert [float(v) for v in secured.experimental_local_results(out)] == [2.0, 2.0]


def test_other_strategies_reach_it_by_address(secured: idist.MirroredStrategy) -> None:
    address = secured._lease.cluster.scheduler_address
    with pytest.raises((OSError, TypeError, TimeoutError)):
        idist.OneDeviceStrategy("CPU:0", cluster=address)
    with idist.OneDeviceStrategy("CPU:0", cluster=address, security=SEC) as one:
        assert float(np.asarray(one.run(lambda: np.float32(3.0)))) == 3.0
    with CentralStorageStrategy(["CPU:0", "CPU:1"], cluster=address, security=SEC) as cs:
        with cs.scope():
            v = idist.Variable(np.float32(1.0), aggregation=idist.VariableAggregation.SUM)
        cs.run(lambda: v.assign_add(np.float32(1.0)))
        assert float(np.asarray(v)) == 3.0


def test_a_client_and_security_together_are_refused(secured: idist.MirroredStrategy) -> None:
    address = secured._lease.cluster.scheduler_address
    with Client(address, timeout="10s", set_as_default=False, security=SEC) as c:
        with pytest.raises(ValueError, match="carries its own security"):
            idist.OneDeviceStrategy("CPU:0", cluster=c, security=SEC)
