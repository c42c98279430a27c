"""Embedded clusters are locked down: TLS with credentials made for them alone (issue 17, item 2).

Another account on a shared host (a JupyterHub node, an HPC login node) can reach 127.0.0.1; it must
not be able to run code on the replicas or learn a worker's control-socket token.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
import pytest
from distributed import Client
from distributed.core import rpc
from distributed.security import Security

import interdist as idist
from interdist.client.connect import connect  # a refused Client closed at once (see there)


@pytest.fixture(scope="module")
def lease(mirrored2: idist.MirroredStrategy) -> object:
    return mirrored2._lease


def test_scheduler_and_workers_speak_tls(lease: object, mirrored2: idist.MirroredStrategy) -> None:
    assert lease.cluster.scheduler_address.startswith("tls://127.0.0.1:")  # type: ignore[attr-defined]
    assert all(a.startswith("tls://127.0.0.1:") for a in lease.addresses)  # type: ignore[attr-defined]
    # and the strategy works through it
    out = mirrored2.run(lambda: idist.get_replica_context().all_reduce("SUM", np.float32(1.0)))
    assert [float(v) for v in mirrored2.experimental_local_results(out)] == [2.0, 2.0]


@pytest.mark.parametrize("how", ["no credentials", "plain tcp", "credentials of its own"])
def test_a_strangers_client_is_refused(lease: object, how: str) -> None:
    address = lease.cluster.scheduler_address  # type: ignore[attr-defined]
    kwargs: dict[str, object] = {"timeout": "3s", "set_as_default": False}
    if how == "plain tcp":
        address = address.replace("tls://", "tcp://")
    elif how == "credentials of its own":
        kwargs["security"] = Security.temporary()
    with pytest.raises((OSError, TypeError, TimeoutError)):  # no connection, whatever the words
        connect(address, **kwargs)


def test_a_stranger_cannot_ask_a_worker_for_its_control_token(lease: object) -> None:
    """The Dask handler that hands out the control socket's path and token is behind the same TLS."""
    worker = lease.addresses[0]  # type: ignore[attr-defined]

    async def ask(security: Security) -> object:
        async with rpc(worker, timeout=3, connection_args=security.get_connection_args("client")) as r:
            return await r.interdist_control_endpoint()

    for security in (Security(), Security.temporary()):
        with pytest.raises((OSError, TypeError, TimeoutError)):
            asyncio.run(asyncio.wait_for(ask(security), 10))
    # with the cluster's own credentials the same call answers: the refusal above is the TLS, not the call
    answer = asyncio.run(asyncio.wait_for(ask(lease.cluster.security), 10))  # type: ignore[attr-defined]
    assert answer


def test_credentials_are_not_on_the_command_line_or_in_the_environment(lease: object) -> None:
    pids = [w.pid for w in lease.cluster.workers.values()]  # type: ignore[attr-defined]
    assert pids and all(pids)
    from interdist.worker.credentials import contents

    security = lease.cluster.security  # type: ignore[attr-defined]
    assert security.tls_worker_key.startswith("/proc/self/fd/")  # a memfd of this process (credentials.py)
    key = contents(security, "tls_worker_key")  # what the memfd holds
    marker = key.strip().splitlines()[1][:40]  # a line of the key itself
    for pid in pids:
        for part in ("cmdline", "environ"):
            data = Path(f"/proc/{pid}/{part}").read_bytes().decode(errors="replace")
            assert "PRIVATE KEY" not in data and marker not in data, (pid, part)


def test_a_refused_client_leaves_nothing_for_the_garbage_collector(lease: object) -> None:
    """A Client whose connection fails is closed where it failed: finalized later by the collector, in the
    loop thread of a new Client whose start holds Dask's class-wide LoopRunner lock, its close would take
    that lock and deadlock the process (CI hung so in Thread.start)."""
    import threading

    from distributed.utils import LoopRunner

    address = lease.cluster.scheduler_address  # type: ignore[attr-defined]
    with pytest.raises(TypeError, match="TLS") as info:  # no credentials: Dask leaves this one "connecting"
        connect(address, timeout="3s", set_as_default=False)
    half_made, tb = [], info.value.__traceback__
    while tb is not None:
        if isinstance(tb.tb_frame.f_locals.get("self"), Client):
            half_made.append(tb.tb_frame.f_locals["self"])
        tb = tb.tb_next
    assert half_made and all(c.status == "closed" for c in half_made)
    with LoopRunner._lock:  # as a starting Client holds it; not reentrant: a close that took it would hang
        finalize = threading.Thread(target=lambda: [c.__del__() for c in half_made], daemon=True)
        finalize.start()
        finalize.join(10)
        hung = finalize.is_alive()
    finalize.join(60)  # (without the fix it would take the lock now, and end)
    assert not hung
