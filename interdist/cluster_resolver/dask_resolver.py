"""``DaskClusterResolver``: a :class:`ClusterSpec` read from a live Dask cluster.

The Dask scheduler plays TF's ``chief`` (it coordinates; ``master()`` is its
address) and the Dask workers are the ``worker`` job.  Workers meant to hold
variables -- those started with a positive ``ps`` resource
(``dask worker --resources ps=1``) or a ``name`` starting with ``"ps"``
(``Worker(..., name="ps-0")``) -- form the ``ps`` job instead.  Addresses are
Dask's own (``"tcp://10.0.0.5:40123"``), because interdist hands them back to
Dask to pin work on a worker; they already carry their protocol, so the rpc
layer is normally left unset.

Within each job, tasks are the addresses in sorted order, so every process
that resolves the same cluster agrees on task indices.  Jobs with no tasks are
left out (an empty job would make ``job_tasks`` fail, as in TF).

The cluster is queried on every call, as TF asks of resolvers; ``distributed``
is imported only inside methods, so importing this module stays cheap.
"""

from __future__ import annotations

import asyncio
import threading
from typing import TYPE_CHECKING, Any

from interdist.cluster_resolver.base import ClusterResolver, format_master_url
from interdist.cluster_resolver.cluster_spec import ClusterSpec

if TYPE_CHECKING:
    from distributed import Client

__all__ = ["DaskClusterResolver"]

#: Resource / name prefix marking a Dask worker as a parameter server.
PS_MARKER = "ps"
#: Dask resource counted by :meth:`DaskClusterResolver.num_accelerators`.
GPU_RESOURCE = "GPU"


def _query_identity(address: str, timeout: float) -> dict[str, Any]:
    """Ask the scheduler at ``address`` for its identity, on a private event loop.

    Not a temporary ``Client``: a Client that fails to connect leaves its IO
    loop thread running, and a successful one registers itself with the
    scheduler.  A bare rpc on a fresh loop in a fresh thread leaves nothing
    behind, and works whether or not the caller is inside an event loop (but
    must not block the loop that runs the scheduler itself).
    """
    from distributed.core import rpc
    from distributed.security import Security

    async def query() -> dict[str, Any]:
        # Security() reads the dask config, so tls:// schedulers work as for a Client.
        connection_args = Security().get_connection_args("client")  # type: ignore[no-untyped-call]  # unannotated
        async with rpc(  # type: ignore[no-untyped-call]  # distributed is unannotated
            address, timeout=timeout, connection_args=connection_args
        ) as scheduler:
            identity: dict[str, Any] = await scheduler.identity(n_workers=-1)
            return identity

    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            # wait_for bounds a scheduler that accepts but never answers.
            outcome["value"] = asyncio.run(asyncio.wait_for(query(), 2 * timeout))
        except BaseException as exc:  # noqa: BLE001 -- re-raised in the caller's thread
            outcome["error"] = exc

    thread = threading.Thread(target=run, name="interdist-dask-resolver", daemon=True)
    thread.start()
    thread.join()
    if "error" in outcome:
        error: BaseException = outcome["error"]
        if isinstance(error, asyncio.TimeoutError):
            raise OSError(f"Timed out querying the Dask scheduler at {address!r}") from error
        raise error
    result: dict[str, Any] = outcome["value"]
    return result


def _is_client(obj: object) -> bool:
    from distributed import Client

    return isinstance(obj, Client)


def _is_ps(worker_info: dict[str, Any]) -> bool:
    resources = worker_info.get("resources") or {}
    if float(resources.get(PS_MARKER, 0) or 0) > 0:
        return True
    name = worker_info.get("name")
    return name is not None and str(name).startswith(PS_MARKER)


def _gpus(worker_info: dict[str, Any]) -> int:
    resources = worker_info.get("resources") or {}
    return int(resources.get(GPU_RESOURCE, 0) or 0)


class DaskClusterResolver(ClusterResolver):
    """A resolver describing a running Dask cluster as TF jobs.

    Parameters
    ----------
    client_or_address : distributed.Client, str, or cluster object
        A connected synchronous ``Client``; a scheduler address (connected to
        for each query, then closed); or any object with a
        ``scheduler_address`` attribute, such as a ``LocalCluster``.
    timeout : float
        Seconds to wait when connecting to a scheduler address.
    task_type, task_id : optional
        This process's task; the process driving Dask is the chief.
    rpc_layer : str, optional
        Prefix for :meth:`master` URLs (Dask addresses already have one).

    Raises
    ------
    TypeError
        If ``client_or_address`` is none of the accepted kinds.

    Examples
    --------
    >>> from distributed import LocalCluster
    >>> with LocalCluster(n_workers=2, processes=False, threads_per_worker=1,
    ...                   dashboard_address=":0", host="127.0.0.1",
    ...                   protocol="tcp://") as cluster:
    ...     r = DaskClusterResolver(cluster)
    ...     spec = r.cluster_spec()
    ...     (spec.jobs, spec.num_tasks("worker"), r.master() == cluster.scheduler_address,
    ...      r.task_type, r.task_id, r.num_accelerators())
    (['chief', 'worker'], 2, True, 'chief', 0, {})
    """

    def __init__(
        self,
        client_or_address: Client | str | Any,
        *,
        timeout: float = 10.0,
        task_type: str | None = "chief",
        task_id: int | None = 0,
        rpc_layer: str | None = None,
    ) -> None:
        self._client: Client | None = None
        self._address: str | None = None
        if isinstance(client_or_address, str):
            self._address = client_or_address
        elif _is_client(client_or_address):
            self._client = client_or_address
        elif isinstance(address := getattr(client_or_address, "scheduler_address", None), str):
            self._address = address
        else:
            raise TypeError(
                "DaskClusterResolver needs a distributed.Client, a scheduler address "
                f"string, or an object with a `scheduler_address`; got {client_or_address!r}"
            )
        self._timeout = timeout
        self._task_type = task_type
        self._task_id = task_id
        self._rpc_layer = rpc_layer

    # -- talking to the scheduler ----------------------------------------------
    def _identity(self) -> dict[str, Any]:
        """The scheduler's identity: its ``address`` and every worker's info."""
        if self._client is not None:
            if self._client.asynchronous:
                # An asynchronous client only caches totals, no per-worker info,
                # and cannot be driven synchronously from here.
                raise ValueError(
                    "DaskClusterResolver needs a synchronous Client; pass the "
                    "scheduler address instead of an asynchronous one"
                )
            return dict(self._client.scheduler_info(n_workers=-1))

        assert self._address is not None
        return _query_identity(self._address, self._timeout)

    @staticmethod
    def _spec_from(identity: dict[str, Any]) -> ClusterSpec:
        workers: dict[str, dict[str, Any]] = identity.get("workers", {})
        ps = sorted(addr for addr, info in workers.items() if _is_ps(info))
        plain = sorted(addr for addr, info in workers.items() if not _is_ps(info))
        cluster: dict[str, list[str]] = {"chief": [str(identity["address"])]}
        if plain:
            cluster["worker"] = plain
        if ps:
            cluster["ps"] = ps
        return ClusterSpec(cluster)

    # -- ClusterResolver API -----------------------------------------------------
    def cluster_spec(self) -> ClusterSpec:
        """``{"chief": [scheduler], "worker": [...], "ps": [...]}`` of the cluster now."""
        return self._spec_from(self._identity())

    def master(
        self,
        task_type: str | None = None,
        task_id: int | None = None,
        rpc_layer: str | None = None,
    ) -> str:
        """The scheduler's address, or the named task's when both are given.

        Raises
        ------
        ValueError
            If the named task is not in the cluster.
        """
        if task_type is not None and task_id is not None:
            address = self.cluster_spec().task_address(task_type, task_id)
        else:
            address = str(self._identity()["address"])
        return format_master_url(address, rpc_layer or self._rpc_layer)

    def num_accelerators(
        self,
        task_type: str | None = None,
        task_id: int | None = None,
        config_proto: Any = None,
    ) -> dict[str, int]:
        """``{"GPU": n}`` summing the workers' ``GPU`` resource; ``{}`` when 0.

        With ``task_type`` and ``task_id``, only that task's GPUs are counted
        (the chief, being the scheduler, has none).
        """
        del config_proto  # no TF session to configure
        identity = self._identity()
        workers: dict[str, dict[str, Any]] = identity.get("workers", {})
        if task_type is not None and task_id is not None:
            address = self._spec_from(identity).task_address(task_type, task_id)
            infos = [workers[address]] if address in workers else []
        else:
            infos = list(workers.values())
        total = sum(_gpus(info) for info in infos)
        return {GPU_RESOURCE: total} if total > 0 else {}
