"""TF tasks (``chief``, ``worker:1``, ``ps:0``) mapped onto the workers of a Dask cluster.

A task is found by its Dask worker **name** first (``interdist.server`` names
workers ``chief``, ``worker-0``, ``ps-0``; ``dask worker --name worker-0`` does
the same by hand), else by **address** (a resolver built from Dask lists Dask
addresses; a server binds its worker to the address of its TF_CONFIG entry).
The scheduler is the coordinator task's: ``chief:0`` when the cluster has a
chief, else ``worker:0`` (TF's rule for who acts as chief).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from interdist import config
from interdist.client.connect import connect
from interdist.cluster_resolver import DaskClusterResolver


def default_connect_timeout() -> float:
    """Seconds to wait for a scheduler or a task's worker when none is given: ``interdist.cluster.connect-timeout``."""
    return float(config.get("cluster.connect-timeout"))


@dataclass(frozen=True)
class TaskWorker:
    """One TF task and the Dask worker that plays it."""

    job: str
    index: int
    address: str  # the Dask worker's address
    name: Any  # the Dask worker's name


def worker_name(job: str, index: int) -> str:
    """The Dask worker name interdist gives task ``job:index`` (``chief`` for the chief)."""
    return "chief" if job == "chief" and index == 0 else f"{job}-{index}"


def _host_port(address: str) -> str:
    return address.split("://", 1)[-1].rstrip("/")


def coordinator_task(spec: Any) -> tuple[str, int]:
    """The task whose machine runs the Dask scheduler: ``chief:0``, else ``worker:0``."""
    jobs = spec.jobs
    if "chief" in jobs and spec.task_indices("chief"):
        return "chief", min(spec.task_indices("chief"))
    if "worker" in jobs and spec.task_indices("worker"):
        return "worker", min(spec.task_indices("worker"))
    raise ValueError(
        f"the cluster {spec.as_dict()} has neither a 'chief' nor a 'worker' task to run the Dask scheduler"
    )


def scheduler_address(resolver: Any) -> tuple[str, str]:
    """(Dask scheduler address, the task it belongs to) for a cluster resolver."""

    if isinstance(resolver, DaskClusterResolver):
        return resolver.master(), "the Dask scheduler"
    spec = resolver.cluster_spec()
    job, index = coordinator_task(spec)
    address = spec.task_address(job, index)
    # TF's rpc layer (grpc) is not Dask's; a bare host:port means Dask's default, tcp.
    return (address if "://" in address else f"tcp://{address}"), f"{job}:{index}"


def _with_scheme(address: str, security: Any) -> str:
    """``tls://`` for a TF_CONFIG address given with ``security`` that requires encryption."""
    if getattr(security, "require_encryption", False) and address.startswith("tcp://"):
        return "tls://" + address[len("tcp://") :]
    return address


def open_client(cluster: Any, resolver: Any, timeout: float, security: Any = None) -> tuple[Any, bool]:
    """A ``distributed.Client`` to the cluster: (client, whether we opened it and must close it).

    ``security`` (a ``distributed.security.Security``): the TLS credentials for a scheduler reached by
    address (``cluster="tls://..."`` or TF_CONFIG); None takes Dask's config, as a ``Client`` does."""
    from distributed import Client

    if security is not None and not hasattr(security, "get_connection_args"):
        raise TypeError(f"security must be a distributed.security.Security, got {type(security).__name__}")
    if security is not None and cluster is not None and not isinstance(cluster, str):
        raise ValueError(
            "security= applies to a scheduler reached by address; a Client or cluster object carries its own"
        )

    if isinstance(cluster, Client):
        return cluster, False
    if cluster is not None and not isinstance(cluster, str):
        if not hasattr(cluster, "scheduler_address"):
            raise TypeError(
                "cluster must be None, a scheduler address, a distributed.Client or a Dask cluster "
                f"object, but got {type(cluster).__name__}"
            )
        return connect(cluster, set_as_default=False, timeout=f"{timeout}s"), True
    if isinstance(cluster, str):
        address, task = cluster, "the Dask scheduler"
    else:
        address, task = scheduler_address(resolver)
        address = _with_scheme(address, security)
    try:
        client = connect(address, set_as_default=False, timeout=f"{timeout}s", security=security)
        return client, True
    except TypeError as e:
        if "TLS" not in str(e):
            raise
        raise ConnectionError(
            f"the Dask scheduler at {address} speaks TLS and this process has no credentials for it: pass "
            "security=distributed.security.Security(tls_ca_file=..., tls_client_cert=..., tls_client_key=..., "
            "require_encryption=True)"
        ) from e
    except (OSError, TimeoutError) as e:
        raise TimeoutError(
            f"could not reach {task} (Dask scheduler at {address}) within {timeout:g} s: {type(e).__name__}: {e}"
        ) from e


def find_task_workers(client: Any, spec: Any, tasks: list[tuple[str, int]], timeout: float) -> list[TaskWorker]:
    """The Dask worker of each task, waiting up to ``timeout`` seconds for late ones.

    Raises
    ------
    TimeoutError
        Naming every task that has no worker after ``timeout`` seconds.
    """
    deadline = time.monotonic() + timeout
    while True:
        workers = client.scheduler_info(n_workers=-1)["workers"]
        by_name = {str(w.get("name")): addr for addr, w in workers.items()}
        by_addr = {_host_port(addr): addr for addr in workers}
        names = {addr: w.get("name") for addr, w in workers.items()}
        named = [by_name.get(worker_name(j, i)) or by_name.get(f"{j}-{i}") for j, i in tasks]
        if all(named):
            found: list[str | None] = list(named)
        else:
            # By address only when names do not cover every task: a mix could pick one worker twice.
            found = [by_addr.get(_host_port(spec.task_address(j, i))) for j, i in tasks]
        present = [a for a in found if a]
        if len(present) == len(tasks):  # every task found
            return [TaskWorker(j, i, a, names[a]) for (j, i), a in zip(tasks, present, strict=True)]
        if time.monotonic() >= deadline:
            missing = [
                f"{j}:{i} ({spec.task_address(j, i)}, Dask worker name {worker_name(j, i)!r})"
                for (j, i), a, n in zip(tasks, found, named, strict=True)
                if a is None and n is None
            ]
            raise TimeoutError(
                f"task(s) {', '.join(missing)} could not be reached: no such worker joined the Dask scheduler "
                f"{client.scheduler.address} within {timeout:g} s (start it with `python -m interdist.server` "
                "and its TF_CONFIG, or `dask worker <scheduler> --name <job>-<index>`)"
            )
        time.sleep(0.1)
