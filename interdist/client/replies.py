"""What a step's replies become: the replies gathered as they come, then one result or one exception.

Both ways of running a program (the same-host control sockets, and Dask comms) gather replies
with ``StepReplies``, so both treat a failure alike: the peers of a lost replica are released,
and once a replica failed the others get ``settings.stuck_grace`` seconds to answer before they are
reported stuck. ``raise_for`` turns the failed replies of a step into the one exception the
notebook sees.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

import cloudpickle

from interdist.config import settings
from interdist.errors import ReplicaError, ReplicaFrozenError, WorkerLostError
from interdist.protocol import Reply, frozen_reply, stuck_reply


class StepReplies:
    """The replies of one step, by rank, as they come in."""

    def __init__(self, step: int, addresses: list[str], busy: dict[int, tuple[int, Any]]) -> None:
        self.step = step
        self.addresses = addresses  # the group's, by rank: to name a lost replica's worker
        self.busy = busy  # the group's: rank -> (step, its pending reply) of a stuck replica
        self.replies: dict[int, Reply] = {}
        self.aborted = False

    def add(self, rank: int, rep: Mapping[str, Any]) -> str | None:
        """Keep ``rank``'s reply; for the first lost one, why the caller must abort the step on the others.

        The lost replica cannot release its peers itself: the caller does it for it.
        """
        self.replies[rank] = cast(Reply, rep)  # a replica's Reply, or a lost_reply for a closed connection
        if rep.get("lost") and not self.aborted:
            self.aborted = True
            return f"replica {rank} was lost with its worker {self.addresses[rank]}"
        return None

    def grace(self) -> float | None:
        """How long to wait for the next reply (``None``: no limit).

        Once a replica has failed, the others get a grace period to come back (released by
        the abort, or by their own collective timeout); one that still does not answer is
        running user code that never returns: report it instead of hanging the notebook.
        """
        return settings.stuck_grace if any(not rep["ok"] for rep in self.replies.values()) else None

    def stuck(self, rank: int, pending: Any) -> None:
        """``rank`` did not answer within the grace period: busy with this step until ``pending`` is done."""
        self.busy[rank] = (self.step, pending)
        self.replies[rank] = stuck_reply(rank, self.step, settings.stuck_grace)

    def frozen(self, rank: int, pending: Any, why: str) -> str:
        """``rank`` is frozen (``client/liveness.py``): busy with this step until ``pending`` is done (if it
        ever resumes); why the caller must abort the step on the others."""
        self.busy[rank] = (self.step, pending)
        self.replies[rank] = frozen_reply(rank, self.step, why)
        self.aborted = True
        return f"replica {rank} is frozen: {why}"

    def in_rank_order(self, world_size: int) -> list[Reply]:
        return [self.replies[r] for r in range(world_size)]


def raise_for(
    replies: list[Reply], step: int, what: str, devices: list[str], addresses: list[str], lost_ranks: dict[int, str]
) -> None:
    """Raise the one exception for a step's failed replies, if any; a lost replica is noted in ``lost_ranks``.

    A lost replica gives ``WorkerLostError``; else the exception of the first replica that failed on its
    own (not a secondary failure: released by a peer's, or stuck), with its remote traceback as a note.
    """
    failed = [(r, rep) for r, rep in enumerate(replies) if not rep["ok"]]
    if not failed:
        return
    lost = [(r, rep) for r, rep in failed if rep.get("lost")]
    if lost:
        for r, _ in lost:
            lost_ranks[r] = addresses[r]
        names = ", ".join(f"replica {r} ({devices[r]}, worker {addresses[r]})" for r, _ in lost)
        raise WorkerLostError(
            f"{names} was lost during step {step} ({what}): its worker died or became unreachable "
            f"({lost[0][1]['type']}: {lost[0][1]['message']}). The other replicas were released."
        )
    frozen = [(r, rep) for r, rep in failed if rep.get("frozen")]
    primary = frozen or [(r, rep) for r, rep in failed if not rep.get("secondary")] or failed
    rank, rep = primary[0]
    if frozen:
        others = [r for r in range(len(replies)) if r != rank]
        raise ReplicaFrozenError(
            f"{rep['message']}. Replicas {others} were released; step {step} ({what}) was not completed. "
            f"Resume the process (SIGCONT) and the strategy goes on once the replica leaves the step, or close "
            "this strategy and create a new one",
            rank,
            step,
        )
    note = (
        f"interdist: raised on replica {rank} ({devices[rank]}) in step {step} ({what})\n"
        f"--- remote traceback (replica {rank}) ---\n{rep['traceback']}"
    )
    stuck = [r for r, rep2 in failed if rep2.get("stuck")]
    if stuck:
        note += (
            f"\ninterdist: replica(s) {stuck} did not return from step {step}: their replica function "
            "is still running (the strategy refuses new steps until it returns)"
        )
    exc: BaseException | None = None
    if rep.get("error") is not None:
        try:
            exc = cloudpickle.loads(rep["error"])
        except Exception:  # noqa: BLE001 - an exception that does not unpickle here: a ReplicaError with its text
            exc = None
    if exc is None:
        exc = ReplicaError(f"replica {rank} raised {rep['type']}: {rep['message']}", rank, step)
    try:
        exc.add_note(note)
        exc.interdist_replica = rank  # type: ignore[attr-defined]  # tags for debugging, on any exception
        exc.interdist_step = step  # type: ignore[attr-defined]  # tags for debugging, on any exception
    except Exception:  # noqa: BLE001, S110 - exceptions with __slots__
        pass
    raise exc
