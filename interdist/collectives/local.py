"""The reference transport: ranks are threads of one process sharing mailboxes.

Used by the default strategy and by the contract tests; needs nothing but the stdlib.
On a Dask worker it serves a group of one replica only (there is no peer to reach).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from interdist.collectives.base import Packet, Transport
from interdist.collectives.mailbox import Mailbox


class LocalTransport(Transport):
    """Every rank a thread of this process; a packet is put straight into the receiver's mailbox."""

    name = "local"

    def __init__(self, rank: int, world_size: int, mailboxes: list[Mailbox]) -> None:
        super().__init__(rank, world_size, mailboxes[rank])
        self._mailboxes = mailboxes

    @classmethod
    def for_worker(
        cls, worker: Any, group_id: str, rank: int, peers: list[str], mailbox: Mailbox, sockets: bool = True
    ) -> Transport:
        """A group of one replica (nothing leaves the process); a larger group needs a backend that
        crosses processes."""
        if len(peers) != 1:
            raise ValueError(
                f"the 'local' collectives backend connects ranks inside one process, but this group has "
                f"{len(peers)} replicas on Dask workers; use 'dask' (the Dask config key "
                "interdist.collectives.backend)"
            )
        return cls(0, 1, [mailbox])

    def send_packet(
        self,
        dsts: list[int],
        step: int,
        seq: int,
        packet: Packet,
        on_error: Callable[[BaseException], None] | None = None,
        detached: bool = False,
    ) -> None:
        for dst in dsts:
            # Each receiver gets its own writable copy, as if the bytes had crossed a process.
            copy = Packet(packet.header, [bytearray(b) for b in packet.buffers], packet.shm, packet.shared)
            self._mailboxes[dst].put(step, seq, self.rank, copy)

    def abort_peers(self, step: int, reason: str) -> None:
        for r, box in enumerate(self._mailboxes):
            if r != self.rank:
                box.abort(step, reason)


def local_group(world_size: int) -> list[LocalTransport]:
    """Transports for ``world_size`` ranks in this process."""
    boxes = [Mailbox() for _ in range(world_size)]
    return [LocalTransport(r, world_size, boxes) for r in range(world_size)]
