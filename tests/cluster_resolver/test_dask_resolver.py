"""DaskClusterResolver against small in-process Dask clusters it starts and closes."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

distributed = pytest.importorskip("distributed")

from interdist.cluster_resolver import ClusterSpec, DaskClusterResolver

_CLUSTER_KWARGS: dict[str, Any] = {
    "processes": False,
    "threads_per_worker": 1,
    "dashboard_address": ":0",  # None still serves HTTP on 8787; ":0" picks a free port
    "host": "127.0.0.1",
    "protocol": "tcp://",  # processes=False would otherwise pick inproc://
}


@pytest.fixture(autouse=True)
def closes_everything() -> Iterator[None]:
    """Each test must leave no scheduler, worker, client or loop thread behind."""
    before = {t.ident for t in threading.enumerate()}
    yield
    deadline = time.monotonic() + 10
    while True:
        extra = [
            t.name
            for t in threading.enumerate()
            if t.ident not in before and t.is_alive()
        ]
        if not extra or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert not extra, f"threads left running: {extra}"


@pytest.fixture
def cluster() -> Iterator[Any]:
    with distributed.LocalCluster(n_workers=2, **_CLUSTER_KWARGS) as c:
        yield c
    assert c.status.name == "closed"


def _expected(cluster: Any) -> dict[str, list[str]]:
    workers = sorted(cluster.scheduler.workers)
    return {"chief": [cluster.scheduler_address], "worker": workers}


def test_from_cluster_object(cluster: Any) -> None:
    r = DaskClusterResolver(cluster)
    spec = r.cluster_spec()
    assert spec.as_dict() == _expected(cluster)
    assert spec.jobs == ["chief", "worker"]
    assert all(str(a).startswith("tcp://127.0.0.1:") for a in spec.job_tasks("worker"))
    assert (r.task_type, r.task_id, r.rpc_layer, r.environment) == (
        "chief",
        0,
        None,
        "",
    )
    assert r.master() == cluster.scheduler_address
    assert r.num_accelerators() == {}


def test_from_address(cluster: Any) -> None:
    r = DaskClusterResolver(cluster.scheduler_address, timeout=5)
    assert r.cluster_spec().as_dict() == _expected(cluster)
    assert r.master() == cluster.scheduler_address


def test_from_client(cluster: Any) -> None:
    with distributed.Client(cluster, set_as_default=False) as client:
        r = DaskClusterResolver(client)
        assert r.cluster_spec() == ClusterSpec(_expected(cluster))
        assert r.master() == cluster.scheduler_address


def test_master_of_named_task(cluster: Any) -> None:
    workers = sorted(cluster.scheduler.workers)
    assert DaskClusterResolver(cluster).master("worker", 1) == workers[1]
    r = DaskClusterResolver(cluster, rpc_layer="grpc")
    assert r.master("chief", 0) == "grpc://" + cluster.scheduler_address
    assert r.master("worker", 0, rpc_layer="ucx") == "ucx://" + workers[0]
    with pytest.raises(ValueError, match="No task with index 2"):
        r.master("worker", 2)
    with pytest.raises(ValueError, match="No such job in cluster: 'ps'"):
        r.master("ps", 0)


def test_task_is_settable(cluster: Any) -> None:
    r = DaskClusterResolver(cluster)
    r.task_type, r.task_id = "worker", 1
    assert (r.task_type, r.task_id) == ("worker", 1)


def test_temporary_client_does_not_become_default(cluster: Any) -> None:
    with distributed.Client(cluster) as mine:
        DaskClusterResolver(cluster.scheduler_address).cluster_spec()
        assert distributed.default_client() is mine


@pytest.mark.parametrize("bad", [None, 42, object(), ["tcp://127.0.0.1:1"]])
def test_bad_argument(bad: Any) -> None:
    with pytest.raises(TypeError, match="DaskClusterResolver needs"):
        DaskClusterResolver(bad)


def test_unreachable_address_times_out() -> None:
    r = DaskClusterResolver("tcp://127.0.0.1:9", timeout=0.5)
    with pytest.raises(OSError):
        r.cluster_spec()


def test_ps_and_gpu_workers() -> None:
    """ps by name prefix and by resource; GPUs summed from worker resources."""

    async def main() -> tuple[Any, ...]:
        async with distributed.LocalCluster(
            n_workers=0, asynchronous=True, **_CLUSTER_KWARGS
        ) as c:
            address = c.scheduler_address
            async with (
                distributed.Worker(address, name="ps-0", nthreads=1),
                distributed.Worker(
                    address, name="param", resources={"ps": 1}, nthreads=1
                ),
                distributed.Worker(
                    address, name="w-gpu", resources={"GPU": 2}, nthreads=1
                ),
                distributed.Worker(address, name="w-plain", nthreads=1),
            ):
                by_name = {ws.name: addr for addr, ws in c.scheduler.workers.items()}
                r = DaskClusterResolver(address)
                # A synchronous client cannot run on this event loop's thread.
                spec = await asyncio.to_thread(r.cluster_spec)
                gpus = await asyncio.to_thread(r.num_accelerators)
                gpu_index = sorted([by_name["w-gpu"], by_name["w-plain"]]).index(
                    by_name["w-gpu"]
                )
                one = await asyncio.to_thread(r.num_accelerators, "worker", gpu_index)
                other = await asyncio.to_thread(
                    r.num_accelerators, "worker", 1 - gpu_index
                )
                chief = await asyncio.to_thread(r.num_accelerators, "chief", 0)
                async with distributed.Client(address, asynchronous=True) as aclient:
                    with pytest.raises(ValueError, match="synchronous Client"):
                        DaskClusterResolver(aclient).cluster_spec()
                return spec, by_name, address, gpus, one, other, chief

    spec, by_name, address, gpus, one, other, chief = asyncio.run(main())
    assert spec.as_dict() == {
        "chief": [address],
        "worker": sorted([by_name["w-gpu"], by_name["w-plain"]]),
        "ps": sorted([by_name["ps-0"], by_name["param"]]),
    }
    assert spec.jobs == ["chief", "worker", "ps"]
    assert gpus == {"GPU": 2}
    assert (one, other, chief) == ({"GPU": 2}, {}, {})


def test_no_workers_gives_only_chief() -> None:
    with distributed.LocalCluster(n_workers=0, **_CLUSTER_KWARGS) as c:
        r = DaskClusterResolver(c)
        assert r.cluster_spec().as_dict() == {"chief": [c.scheduler_address]}
        assert r.num_accelerators() == {}
