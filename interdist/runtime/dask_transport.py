"""Worker-to-worker messages over Dask's own comms (TLS/UCX/auth come with them)."""

from __future__ import annotations

import asyncio
from typing import Any

from distributed.utils import sync

from ..collectives.base import Transport
from ..collectives.mailbox import Mailbox


class DaskTransport(Transport):
    name = "dask"

    def __init__(self, worker: Any, group_id: str, rank: int, peers: list[str], mailbox: Mailbox) -> None:
        super().__init__(rank, len(peers), mailbox)
        self._worker = worker
        self._group_id = group_id
        self._peers = peers

    def send(self, dst: int, step: int, seq: int, payload: bytes) -> None:
        self.send_many([dst], step, seq, payload)

    def send_many(self, dsts: list[int], step: int, seq: int, payload: bytes) -> None:
        async def go() -> None:
            await asyncio.gather(*[
                self._worker.rpc(self._peers[d]).interdist_coll(
                    group=self._group_id, step=step, seq=seq, src=self.rank, payload=payload)
                for d in dsts
            ])

        sync(self._worker.loop, go)

    def abort_peers(self, step: int, reason: str) -> None:
        async def go() -> None:
            calls = [
                self._worker.rpc(addr).interdist_abort(group=self._group_id, step=step, reason=reason)
                for r, addr in enumerate(self._peers) if r != self.rank
            ]
            await asyncio.wait_for(asyncio.gather(*calls, return_exceptions=True), 5)

        try:
            sync(self._worker.loop, go)
        except Exception:  # noqa: BLE001 - a peer that is gone needs no release
            pass
