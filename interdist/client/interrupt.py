"""Kernel > Interrupt while a step runs: the replicas are released, and the notebook is told how it ended.

``DaskGroup.execute`` catches the ``KeyboardInterrupt`` and raises the one ``_interrupted`` returns; a
replica that could not be interrupted stays in ``DaskGroup.busy`` (``_StillRunning``) until its worker
says it finished the step. A mixin of ``DaskGroup`` (group.py).
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from interdist import events
from interdist.client.step_paths import StepPathsMixin
from interdist.config import settings


class InterruptMixin(StepPathsMixin):
    """Releasing the replicas of an interrupted step."""

    runs: int  # set by ``DaskGroup.__init__`` (group.py)

    if TYPE_CHECKING:  # ``DaskGroup``'s (group.py)

        def flush_events(self) -> None: ...

    def _interrupted(self, step: int, steps: int, what: str, user_call: bool) -> KeyboardInterrupt:
        """The notebook was interrupted while ``step`` ran: release the replicas; the exception to raise.

        Each replica's worker first aborts the step's collectives (a replica that reaches one after that
        sends nothing, so an update that needs a collective is applied by every replica or by none), then
        interrupts the replica function where it runs the user's own code (``worker/thread.py``), and
        answers once the replica is done with the step. A replica that cannot be interrupted (a
        worker of a ``cluster=`` deployment) and is still running is reported, as a stuck one is.
        """
        self._drop_control()  # a control socket may hold half a message: the next step opens fresh ones
        reason = "the notebook was interrupted (KeyboardInterrupt)"
        wait = settings.interrupt_wait

        async def go() -> list[Any]:
            calls = [
                self.client.rpc(addr).interdist_interrupt(
                    group=self.group_id, step=step, last_step=step + steps - 1, reason=reason, wait=wait
                )
                for addr in self.addresses
            ]
            return list(await asyncio.gather(*calls, return_exceptions=True))

        answers: list[Any] = [None] * self.world_size
        try:
            answers = self.client.sync(go, callback_timeout=wait + 5)
        except BaseException:  # noqa: BLE001, S110 - a second interrupt, or workers gone: report what is known
            pass
        running = [r for r, a in enumerate(answers) if a is False]
        unknown = [r for r, a in enumerate(answers) if a is not True and a is not False]
        for r, answer in enumerate(answers):
            if answer is True:  # its worker's word: it left the step (its own events may never come back)
                self.emit(self._now_event(events.ReplicaReleased, step, r, -1, reason))
        self.flush_events()
        for r in running:
            self.busy[r] = (step, _StillRunning(self, r, step))
        kind, _, fn_name = what.partition(" of ")
        call = f"{kind} #{self.runs} of {fn_name}" if user_call else what  # "run #3 of train_step"
        if not running and not unknown:
            return KeyboardInterrupt(f"interdist: {call} interrupted; replicas released; variables intact")
        parts = [f"interdist: {call} interrupted"]
        released = [r for r in range(self.world_size) if r not in running and r not in unknown]
        if released:
            parts.append(f"replica(s) {released} released")
        if running:
            parts.append(
                f"replica(s) {running} still running their replica function, which could not be interrupted "
                "(the strategy refuses new steps until it returns)"
            )
        if unknown:
            parts.append(f"replica(s) {unknown} did not answer (the next step says if their worker is lost)")
        return KeyboardInterrupt("; ".join(parts) + "; variables intact")


class _StillRunning:
    """A replica left running an interrupted step: ``done()`` once its worker says it finished it."""

    def __init__(self, group: InterruptMixin, rank: int, step: int) -> None:
        self._group, self._rank, self._step = group, rank, step

    def done(self) -> bool:
        g = self._group
        try:
            now = g.client.sync(lambda: g.client.rpc(g.addresses[self._rank]).interdist_running(group=g.group_id))
        except Exception:  # noqa: BLE001 - the worker is gone: the next step finds it lost
            return True
        return bool(now != self._step)
