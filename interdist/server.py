"""``interdist.Server`` and ``python -m interdist.server``: the process of one TF_CONFIG task.

The coordinator task (``chief:0``, else ``worker:0``) runs the Dask scheduler on
the address of its TF_CONFIG entry; it also runs a replica worker of its own,
except a chief in a cluster with ``ps`` tasks (there the chief is TF's
coordinator: the notebook). Every other task runs one Dask worker (in a process
of its own, restarted if it dies, as the embedded clusters' are:
``client/worker_process.py``; never through ``multiprocessing``, so a script
that makes ``Server``s needs no ``if __name__ == "__main__":`` guard) named
``<type>-<index>`` and bound to the address of its entry, connecting to the scheduler. Run one command per machine::

    TF_CONFIG='{"cluster": {...}, "task": {"type": "worker", "index": 0}}' python -m interdist.server

Then, in the notebook: ``interdist.MultiWorkerMirroredStrategy()`` (with the same
TF_CONFIG) or ``cluster="tcp://<chief address>"``.

A cluster between machines should be locked down: give every task the same TLS certificate, key
and CA (``--tls-ca-file ca.pem --tls-cert cert.pem --tls-key key.pem``; Dask's own ``dask
scheduler`` flags), then it speaks ``tls://`` and refuses any client without them. The notebook
connects with ``interdist.MultiWorkerMirroredStrategy(security=Security(...))`` or
``cluster=distributed.Client("tls://...", security=...)``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import signal
import sys
import threading
from typing import Any

from interdist.client import roles
from interdist.client.worker_process import WorkerProcess
from interdist.cluster_resolver import ClusterSpec, TFConfigClusterResolver
from interdist.config import settings


def _split(address: str) -> tuple[str, int]:
    host, _, port = address.split("://", 1)[-1].rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"task address {address!r} is not host:port")
    return host.strip("[]"), int(port)


class Server:
    """An in-process interdist server for one task of a cluster (``tf.distribute.Server``).

    Parameters
    ----------
    server_or_cluster_def : ClusterSpec or dict
        The cluster: ``{"chief": ["host:port"], "worker": [...], "ps": [...]}``.
    job_name, task_index : optional
        This task; may be left out when the cluster has one job / the job one task.
    protocol : str, optional
        Dask's comm protocol (default ``"tcp"``, or ``"tls"`` with ``security``; ``"grpc"``, TF's,
        means the default).
    config : dict, optional
        ``timeout`` (seconds to reach the scheduler, default 30), ``dashboard_address``.
    start : bool
        Start at once (default True).
    security : distributed.security.Security, optional
        TLS credentials for the scheduler and worker of this task (and the clients of the cluster).
        With ``require_encryption`` the task speaks only ``tls://``.

    Raises
    ------
    ValueError
        An unknown job, a task index out of range, or a malformed address.
    TimeoutError
        When a worker task cannot reach the scheduler within ``timeout`` seconds.

    Examples
    --------
    Which task this process is, and where the cluster's scheduler is (``start=False``: nothing runs
    yet; ``server.start()``, or ``start=True``, starts the task, and ``with server:`` stops it at the end):

    >>> import interdist as idist
    >>> cluster = {"chief": ["127.0.0.1:2222"], "worker": ["127.0.0.1:2223"]}
    >>> server = idist.Server(cluster, job_name="worker", task_index=0, start=False)
    >>> server.target, server.is_scheduler, server.runs_worker
    ('tcp://127.0.0.1:2222', False, True)

    A task's worker then serves a strategy of the notebook: ``MultiWorkerMirroredStrategy(cluster=
    server.target)``, or with the same ``TF_CONFIG``.
    """

    def __init__(
        self,
        server_or_cluster_def: Any,
        job_name: str | None = None,
        task_index: int | None = None,
        protocol: str | None = None,
        config: dict[str, Any] | None = None,
        start: bool = True,
        security: Any = None,
    ) -> None:
        spec = (
            server_or_cluster_def
            if isinstance(server_or_cluster_def, ClusterSpec)
            else ClusterSpec(server_or_cluster_def)
        )
        if not spec.jobs:
            raise ValueError("Server needs a cluster with at least one job")
        if job_name is None:
            if len(spec.jobs) != 1:
                raise ValueError(f"job_name must be given for a cluster of several jobs {spec.jobs}")
            job_name = spec.jobs[0]
        if job_name not in spec.jobs:
            raise ValueError(f"job_name {job_name!r} is not a job of the cluster {spec.jobs}")
        indices = spec.task_indices(job_name)
        if task_index is None:
            if len(indices) != 1:
                raise ValueError(f"task_index must be given: job {job_name!r} has tasks {indices}")
            task_index = indices[0]
        if task_index not in indices:
            raise ValueError(f"task_index {task_index} is out of range: job {job_name!r} has tasks {indices}")
        self.cluster_spec, self.job_name, self.task_index = spec, job_name, int(task_index)
        if security is not None and not hasattr(security, "get_connection_args"):
            raise TypeError(f"security must be a distributed.security.Security, got {type(security).__name__}")
        self.security = security
        default = "tls" if getattr(security, "require_encryption", False) else "tcp"
        self.protocol = default if protocol in (None, "grpc", "grpc+verbs") else str(protocol).removesuffix("://")
        if self.protocol == "tcp" and getattr(security, "require_encryption", False):
            raise ValueError("protocol 'tcp' cannot carry a Security that requires encryption: use 'tls'")
        self.config = dict(config or {})
        self.timeout = float(self.config.get("timeout", roles.default_connect_timeout()))
        self.host, self.port = _split(spec.task_address(job_name, self.task_index))
        coord = roles.coordinator_task(spec)
        self.is_scheduler = (job_name, self.task_index) == coord
        self.scheduler_address = f"{self.protocol}://{_join(*_split(spec.task_address(*coord)))}"
        # A chief is a replica (MultiWorkerMirrored) unless the cluster has ps tasks (then it coordinates).
        self.runs_worker = job_name != "chief" or "ps" not in spec.jobs
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._nodes: list[Any] = []
        self._stopped = threading.Event()
        if start:
            self.start()

    @classmethod
    def create_local_server(
        cls, config: dict[str, Any] | None = None, start: bool = True, security: Any = None
    ) -> Server:
        """A one-task server on a free local port (scheduler and one worker)."""
        import socket

        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        return cls({"worker": [f"127.0.0.1:{port}"]}, "worker", 0, config=config, start=start, security=security)

    @property
    def target(self) -> str:
        """The address to give a strategy as ``cluster=``: the Dask scheduler's."""
        return self.scheduler_address

    @property
    def server_def(self) -> dict[str, Any]:
        return {
            "cluster": self.cluster_spec.as_dict(),
            "job_name": self.job_name,
            "task_index": self.task_index,
            "protocol": self.protocol,
        }

    # -- lifecycle -------------------------------------------------------------
    def start(self) -> None:
        """Start the scheduler and/or worker of this task (returns once they are up)."""
        if self._thread is not None:
            return
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="interdist-server", daemon=True)
        self._thread.start()
        try:
            asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(self.timeout + 30)
        except BaseException:
            self.stop()
            raise

    async def _start(self) -> None:
        from distributed import Scheduler

        from interdist.dashboard.pages import register_pages

        worker = None
        if self.runs_worker:
            name = roles.worker_name(self.job_name, self.task_index)
            # The scheduler's task keeps its port for the scheduler; its worker takes any port.
            port = None if self.is_scheduler else self.port
            # interdist's own worker process, not Dask's Nanny: a fresh ``python`` that never runs this
            # process's ``__main__`` again (a nanny's multiprocessing spawn re-ran a script without an
            # ``if __name__ == "__main__":`` guard in every worker), restarted when it dies as a nanny's is,
            # and gone with this process however it ends (client/worker_process.py).
            worker = WorkerProcess(
                self.scheduler_address,
                name=name,
                nthreads=1,
                host=self.host,
                worker_port=port,
                protocol=self.protocol,
                memory_limit=0,
                security=self.security,
                death_timeout=self.timeout,
                restart_clean_exits=False,  # closed by its scheduler (shut down): ended, as a nanny's worker
                # forked from a process that imported the worker's modules once (client/zygote.py)
                preforked=settings.fork_workers,
                silence_logs=logging.ERROR,
                env={"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"},
            )
            worker.prewarm()  # the zygote imports while the scheduler starts
        if self.is_scheduler:
            register_pages()
            dash = self.config.get("dashboard_address", f"{self.host}:0")
            scheduler = Scheduler(
                host=self.host,
                port=self.port,
                protocol=self.protocol,
                dashboard_address=dash,
                dashboard=dash is not None,
                security=self.security,
            )
            await scheduler
            self._nodes.append(scheduler)
        if worker is not None:
            try:
                # the worker itself gives up after ``timeout`` (death_timeout); this bounds its start as well
                await asyncio.wait_for(worker.start(), self.timeout + 20)
            except (TimeoutError, OSError, RuntimeError) as e:
                await _quiet_close(worker)
                coord = roles.coordinator_task(self.cluster_spec)
                raise TimeoutError(
                    f"task {self.job_name}:{self.task_index} could not reach the scheduler of task "
                    f"{coord[0]}:{coord[1]} at {self.scheduler_address} within {self.timeout:g} s "
                    f"({type(e).__name__}: {e})"
                ) from e
            self._nodes.append(worker)

    def join(self) -> None:
        """Block until the server is stopped (``stop()`` or a signal)."""
        self._stopped.wait()

    def stop(self) -> None:
        """Stop the worker and the scheduler of this task."""
        loop, thread = self._loop, self._thread
        if loop is not None and thread is not None and loop.is_running():

            async def close_all() -> None:
                for node in reversed(self._nodes):
                    await _quiet_close(node)

            try:
                asyncio.run_coroutine_threadsafe(close_all(), loop).result(30)
            except Exception:  # noqa: BLE001, S110 - stopping must not fail
                pass
            loop.call_soon_threadsafe(loop.stop)
            thread.join(10)
        self._nodes = []
        self._loop = self._thread = None
        self._stopped.set()

    close = stop

    def __enter__(self) -> Server:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"<interdist.Server {self.job_name}:{self.task_index} scheduler={self.scheduler_address}>"


def _join(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


async def _quiet_close(node: Any) -> None:
    try:
        await asyncio.wait_for(node.close(), 15)
    except Exception:  # noqa: BLE001, S110 - a quiet close: a node already closed or unreachable is fine
        pass


def main(argv: list[str] | None = None) -> int:
    """``python -m interdist.server``: serve the task of ``TF_CONFIG`` until interrupted."""
    # ``interdist-server`` (the console script) or ``python -m interdist.server``
    prog = "interdist-server" if os.path.basename(sys.argv[0]) == "interdist-server" else "python -m interdist.server"
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n")[0])
    parser.add_argument("--tf-config", help="the TF_CONFIG JSON (default: the TF_CONFIG environment variable)")
    parser.add_argument(
        "--timeout",
        type=float,
        default=roles.default_connect_timeout(),
        help="seconds to reach the scheduler (default: interdist.cluster.connect-timeout, 30)",
    )
    parser.add_argument("--dashboard-address", default=None, help="the scheduler's dashboard (default host:0)")
    tls = parser.add_argument_group("TLS (all three, the same files on every task: then only tls:// is spoken)")
    tls.add_argument("--tls-ca-file", help="the CA certificate (PEM) that signed every task's and client's certificate")
    tls.add_argument("--tls-cert", help="this task's certificate (PEM)")
    tls.add_argument("--tls-key", help="this task's private key (PEM)")
    args = parser.parse_args(argv)
    security = None
    given = [args.tls_ca_file, args.tls_cert, args.tls_key]
    if any(given):
        if not all(given):
            parser.error("TLS needs all of --tls-ca-file, --tls-cert and --tls-key")
        for path in given:
            if not os.path.isfile(path):
                parser.error(f"TLS file {path!r} does not exist")
        from distributed.security import Security

        security = Security(  # type: ignore[no-untyped-call]  # distributed is untyped
            require_encryption=True,
            tls_ca_file=args.tls_ca_file,
            tls_scheduler_cert=args.tls_cert,
            tls_scheduler_key=args.tls_key,
            tls_worker_cert=args.tls_cert,
            tls_worker_key=args.tls_key,
            tls_client_cert=args.tls_cert,
            tls_client_key=args.tls_key,
        )
    if args.tf_config is not None:
        os.environ["TF_CONFIG"] = args.tf_config
    if not os.environ.get("TF_CONFIG"):
        parser.error("TF_CONFIG is not set (nor --tf-config given)")
    resolver = TFConfigClusterResolver()
    spec = resolver.cluster_spec()  # validates TF_CONFIG: ValueError naming the field
    if resolver.task_type is None or resolver.task_id is None:
        raise ValueError("TF_CONFIG field 'task' is missing: which task is this process?")
    config: dict[str, Any] = {"timeout": args.timeout}
    if args.dashboard_address:
        config["dashboard_address"] = args.dashboard_address
    server = Server(spec, resolver.task_type, resolver.task_id, config=config, security=security)
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: threading.Thread(target=server.stop, daemon=True).start())
    print(
        json.dumps(
            {
                "task": f"{server.job_name}:{server.task_index}",
                "scheduler": server.target,
                "runs_worker": server.runs_worker,
            }
        ),
        flush=True,
    )
    server.join()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
