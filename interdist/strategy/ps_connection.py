"""The notebook's connection to the tasks of a ``ParameterServerStrategy``: ``ClientConnection``, and ``_close``,
which drops a strategy's state on its tasks and releases its cluster. Split from ``parameter_server.py``, which
re-exports ``ClientConnection``."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

from interdist.client import cluster as cluster_lib
from interdist.errors import TaskFrozenError, UnavailableError
from interdist.values import ps_variable
from interdist.worker.ps_store import PooledConnection


def _close(lease: cluster_lib.Lease, ps_addresses: list[str], worker_addresses: list[str], store: str) -> None:
    conn = ClientConnection(lease.client)
    # The ps tasks drop the variables, the workers the per-worker datasets and iterators (replica/ps_input.py).
    # All at once and watched: closing must neither fail nor hang because a task is gone or frozen.
    addresses = list(dict.fromkeys([*ps_addresses, *worker_addresses]))
    with contextlib.suppress(Exception):
        conn.call_many(
            [(a, "interdist_ps_drop", {"store": store}) for a in addresses],
            {a: f"the task at {a}" for a in addresses},
            return_exceptions=True,
        )
    for key in [k for k in ps_variable._handles if k[0] == store]:
        ps_variable._handles.pop(key, None)
    cluster_lib.release(lease)


class ClientConnection(PooledConnection):
    """Calls the ps tasks' handlers from the notebook (``client``: its Dask client)."""

    def __init__(self, client: Any) -> None:
        super().__init__(client)
        self.lost: dict[str, UnavailableError] = {}
        self.frozen: dict[str, TaskFrozenError] = {}

    @property
    def client(self) -> Any:
        return self.owner

    def _sync(self, coro_fn: Callable[[], Any]) -> Any:
        return self.owner.sync(coro_fn)
