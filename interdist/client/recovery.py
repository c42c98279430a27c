"""Replacing lost replicas: a replica whose worker was restarted (same Dask worker name, new address) rejoins.

``DaskGroup.execute`` calls ``_recover`` before a step when replicas were lost; the strategy then restores
their state (``on_recover``: variables, input iterators). A worker the embedded cluster gave up on
(``worker_process.MAX_FAILED_STARTS``) is named at once instead. A mixin of ``DaskGroup`` (group.py).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

import cloudpickle

from interdist import events
from interdist.client.step_paths import StepPathsMixin
from interdist.client.worker_process import worker_log_path
from interdist.errors import WorkerLostError

logger = logging.getLogger("interdist")


class RecoveryMixin(StepPathsMixin):
    """Rejoining the replicas of lost workers once their replacements are up."""

    # Set by ``DaskGroup.__init__`` (group.py).
    names: list[Any]
    step: int
    lost: dict[int, str]
    _release: dict[int, list[str]]
    on_recover: Callable[[list[int]], None] | None

    def _given_up(self) -> dict[int, str]:
        """The lost ranks whose embedded worker was given up (``worker_process.MAX_FAILED_STARTS``), with why."""
        workers = getattr(getattr(self.client, "cluster", None), "workers", None)
        if not isinstance(workers, dict):
            return {}
        found = {r: getattr(workers.get(self.names[r]), "failure", None) for r in self.lost}
        return {r: why for r, why in found.items() if isinstance(why, str)}

    def _recover(self, timeout: float = 30.0) -> None:
        """Rejoin replicas whose worker was restarted (same Dask worker name, new address)."""
        import time

        deadline = time.monotonic() + timeout
        replacements: dict[int, str] = {}
        silent: BaseException | None = None  # the scheduler's last failure to answer
        for r, addr in sorted(self.lost.items()):
            self.emit(self._now_event(events.ReplicaRestarting, self.step, r, addr), urgent=True)
        while time.monotonic() < deadline:
            given_up = self._given_up()
            if given_up:
                raise WorkerLostError(
                    "; ".join(f"replica {r} of this strategy was lost: its {why}" for r, why in given_up.items())
                    + "\nThe state it held is gone: fix the cause, then create a new strategy"
                )
            try:
                workers = self._liveness._workers()  # bounded: a silent scheduler is asked again, then named
                silent = None
            except Exception as exc:  # noqa: BLE001 - slow or gone: the deadline decides
                logger.debug("interdist: the scheduler did not answer while replicas were replaced: %s", exc)
                workers, silent = None, exc
            if not workers and self.client.status != "running":
                raise WorkerLostError(
                    f"the Dask scheduler of this strategy is unreachable (its client is {self.client.status}), so "
                    "the lost replicas cannot be replaced and the others cannot be reached: create a new strategy"
                )
            by_name = {w.get("name"): addr for addr, w in (workers or {}).items()}
            replacements = {
                r: by_name[self.names[r]]
                for r in self.lost
                if self.names[r] in by_name and by_name[self.names[r]] != self.lost[r]
            }
            if len(replacements) == len(self.lost):
                break
            time.sleep(0.2)
        if len(replacements) != len(self.lost):
            lost = ", ".join(f"replica {r} ({a})" for r, a in sorted(self.lost.items()))
            log = worker_log_path()  # why the embedded cluster could not start it again
            if silent is not None:
                raise WorkerLostError(
                    f"{lost} of this strategy was lost with its worker, and the Dask scheduler did not answer "
                    f"for the {timeout:g} s given to replace it ({type(silent).__name__}: {silent}): check the "
                    "scheduler, then call again, or create a new strategy"
                )
            raise WorkerLostError(
                f"{lost} of this strategy was lost with its worker and no replacement worker came up within "
                f"{timeout:g} s; the state it held is gone: create a new strategy"
                + (f". The embedded cluster's log (why its worker did not start again) is {log}" if log else "")
            )
        for r, addr in replacements.items():
            self.addresses[r] = addr
        self._drop_control()
        self._control_refused = False  # the replacements may be reachable again
        spec = cloudpickle.dumps(self.spec)

        async def go() -> None:
            joined = await asyncio.gather(
                *[
                    self.client.rpc(self.addresses[r]).interdist_join(
                        group=self.group_id, rank=r, spec=spec, peers=self.addresses
                    )
                    for r in replacements
                ]
            )
            for r, answer in zip(replacements, joined, strict=True):
                self.note_core(r, answer)
            await asyncio.gather(
                *[
                    self.client.rpc(self.addresses[r]).interdist_set_peers(group=self.group_id, peers=self.addresses)
                    for r in range(self.world_size)
                    if r not in replacements
                ]
            )

        self.client.sync(go)
        ranks = sorted(replacements)
        self.lost = {}
        self._release = {r: [] for r in range(self.world_size)}
        if self.on_recover is not None:
            self.on_recover(ranks)
