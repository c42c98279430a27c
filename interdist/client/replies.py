"""What a step's replies become: the replies gathered as they come, then one result or one exception.

Both ways of running a program (the same-host control sockets, and Dask comms) gather replies
with ``StepReplies``, so both treat a failure alike: the peers of a lost replica are released,
and once a replica failed the others get ``settings.stuck_grace`` seconds to answer before they are
reported stuck. ``raise_for`` turns the failed replies of a step into the one exception the
notebook sees.
"""

from __future__ import annotations

import linecache
import os
import site
import sys
import sysconfig
from collections.abc import Mapping
from types import FrameType, TracebackType
from typing import Any, cast

import cloudpickle

from interdist.client.worker_process import worker_log_path
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
    replies: list[Reply],
    step: int,
    what: str,
    devices: list[str],
    addresses: list[str],
    lost_ranks: dict[int, str],
    call: str = "",
) -> None:
    """Raise the one exception for a step's failed replies, if any; a lost replica is noted in ``lost_ranks``.

    A lost replica gives ``WorkerLostError``; else the exception of the first replica that failed on its
    own (not a secondary failure: released by a peer's, or stuck), of its own class, with the user's
    frames of its remote traceback and, as its last note, one line saying what happened (``call``: the
    step as the user knows it, "run #3 (train_step)").
    """
    __tracebackhide__ = True  # IPython and pytest leave this frame out of the traceback
    failed = [(r, rep) for r, rep in enumerate(replies) if not rep["ok"]]
    if not failed:
        return
    lost = [(r, rep) for r, rep in failed if rep.get("lost")]
    if lost:
        for r, _ in lost:
            lost_ranks[r] = addresses[r]
        names = ", ".join(f"replica {r} ({devices[r]}, worker {addresses[r]})" for r, _ in lost)
        log = worker_log_path()
        outcome = step_outcome(replies, call)
        raise WorkerLostError(
            f"{names} was lost during {call or f'step {step} ({what})'}: its worker died or became unreachable "
            f"({lost[0][1]['type']}: {lost[0][1]['message']}). The other replicas were released."
            + (f" {outcome[0].upper()}{outcome[1:]}." if outcome else "")
            + (f" The embedded workers' own output (tracebacks, Dask's logs) is in {log}" if log else "")
        )
    frozen = [(r, rep) for r, rep in failed if rep.get("frozen")]
    primary = frozen or [(r, rep) for r, rep in failed if not rep.get("secondary")] or failed
    rank, rep = primary[0]
    # No replica lost: each keeps its own copies. Said only when some replica changed a variable (a step that
    # changed nothing was applied nowhere, as before: its error stays one line).
    outcome = step_outcome(replies, call) if any(_updated(r) for r in replies) else ""
    if frozen:
        others = [r for r in range(len(replies)) if r != rank]
        frozen_error = ReplicaFrozenError(
            f"{rep['message']}. Replicas {others} were released; step {step} ({what}) was not completed. "
            f"Resume the process (SIGCONT) and the strategy goes on once the replica leaves the step, or close "
            "this strategy and create a new one",
            rank,
            step,
        )
        if outcome:
            frozen_error.add_note(f"{outcome[0].upper()}{outcome[1:]}.")
        raise frozen_error
    exc: BaseException | None = None
    if rep.get("error") is not None:
        try:
            exc = cloudpickle.loads(rep["error"])
        except Exception:  # noqa: BLE001 - an exception that does not unpickle here: a ReplicaError with its text
            exc = None
        if isinstance(exc, SystemExit) and exc.code is None and exc.args:
            # sys.exit(3) in a replica: the script's exit status (distributed's tblib rebuilds it without its code)
            exc.code = exc.args[0] if len(exc.args) == 1 else exc.args  # type: ignore[assignment]  # as SystemExit(*args)
    summary = failure_summary(replies, rank, call or f"step {step} ({what})")
    notes = []
    tb = remote_traceback(rep.get("frames") or [])
    if exc is None:
        exc = ReplicaError(f"replica {rank} raised {rep['type']}: {rep['message']}", rank, step)
    if tb is None:  # the user's frames as text (not tblib's frames, which IPython shows at the ``def``)
        exc.__traceback__ = None
        notes.append(f"--- remote traceback (replica {rank}) ---\n{rep['traceback'].rstrip()}")
    else:
        exc.__traceback__ = tb
    if outcome:
        notes.append(f"{outcome[0].upper()}{outcome[1:]}.")
    try:
        for note in notes:
            exc.add_note(note)
        exc.add_note(summary)  # the last line of the traceback: what happened, in one line
        exc.interdist_replica = rank  # type: ignore[attr-defined]  # tags for debugging, on any exception
        exc.interdist_step = step  # type: ignore[attr-defined]  # tags for debugging, on any exception
    except Exception:  # noqa: BLE001, S110 - exceptions with __slots__
        pass
    raise exc


def failure_summary(replies: list[Reply], rank: int, call: str) -> str:
    """One line for a step that failed on ``rank``: "ValueError on replica 2 of 4 in run #13 (bad_replica);
    replicas 0, 1, 3 released", and why a collective waited in vain when a peer's reply says so."""
    rep = replies[rank]
    n = len(replies)
    parts = [f"{rep['type']} on replica {rank} of {n} in {call}"]
    others = [r for r in range(n) if r != rank]
    also = [r for r in others if not replies[r]["ok"] and not replies[r].get("secondary")]
    if also:
        parts.append("also failed: " + ", ".join(f"replica {r} ({replies[r]['type']})" for r in also))
    for label, ranks in (
        ("released", [r for r in others if replies[r].get("secondary") and not replies[r].get("stuck")]),
        ("finished", [r for r in others if replies[r]["ok"]]),
        ("still running (no new step until it returns)", [r for r in others if replies[r].get("stuck")]),
    ):
        if ranks:
            parts.append(f"{_ranks(ranks)} {label}")
    cause = _collective_cause(replies, rank, call)
    if cause:
        parts.append(cause)
    return "; ".join(parts)


def _updated(rep: Mapping[str, Any]) -> list[str]:
    """The variables a replica's program changed, from the ``variable-updated`` events of its reply (every
    copy written in the program, whether it then returned or failed: ``Replica._emit_variable_updates``)."""
    names: list[str] = []
    for e in rep.get("events", ()) or ():
        if isinstance(e, Mapping) and e.get("kind") == "variable-updated":
            name = str(e.get("name", e.get("var_id", "?"))).split(":")[0]
            if name not in names:
                names.append(name)
    return names


def step_outcome(replies: list[Reply], call: str) -> str:
    """Whether a failed user call's variable updates were applied, for its error: "the step's update WAS
    applied ...: do not run it again", "the step was NOT applied anywhere ...: run it again", or "partly
    applied on replicas ...". "" for the engine's own programs.

    Decided by what the replicas that answered hold relative to before the call: the variables each changed
    (its reply's ``variable-updated`` events). A lost replica's copies are replaced at the next call by those
    of the first replica that was not lost (``_restore_replicas``), so the survivors decide for it. A frozen
    or stuck replica did not answer: what it holds cannot be known (a frozen one may still change variables
    when it resumes, up to its next collective, which the abort stops).
    """
    if not call.startswith(("run #", "run_steps #")) or not replies:
        return ""
    n = len(replies)
    lost = [r for r in range(n) if replies[r].get("lost")]
    unknown = [r for r in range(n) if r not in lost and (replies[r].get("stuck") or replies[r].get("frozen"))]
    known = [r for r in range(n) if r not in lost and r not in unknown]
    the = "the step" if call.startswith("run #") else "the call"
    if not known:
        return f"whether {the} was applied cannot be known: no surviving replica answered ({_ranks(unknown)} did not)"
    source = min(r for r in range(n) if r not in lost)  # whose copies recovery hands the restarted replica
    by = f"the restarted replica gets it by copy from replica {source} at the next call" if lost else ""
    changed = {r: _updated(replies[r]) for r in known}
    finished = all(replies[r]["ok"] for r in known)
    silent = (
        f"; {_ranks(unknown)} did not answer (frozen or still running): what it holds cannot be known, and it may "
        "still change variables when it resumes, up to its next collective"
        if unknown
        else ""
    )
    if not any(changed.values()):
        where = "anywhere" if not unknown else f"on {_ranks(known)}"
        copied = " (the restarted replica gets their copies at the next call)" if lost else ""
        return (
            f"{the} was NOT applied {where}: no {'surviving ' if lost else ''}replica changed a variable in it"
            f"{copied}: run it again{silent}"
        )
    sets = {tuple(sorted(c)) for c in changed.values()}
    if len(sets) == 1 and not unknown:
        names = ", ".join(next(iter(sets)))
        whose = "survivors had it" if lost else "every replica had it"
        if finished:
            return (
                f"{the}'s update WAS applied ({whose}: {_ranks(known)} finished {the} and updated {names}"
                f"{'; ' + by if by else ''}): do not run it again"
            )
        return (
            f"{the}'s update WAS applied up to where it stopped ({whose}: {_ranks(known)} had updated {names} "
            f"before {'they were' if len(known) > 1 else 'it was'} released{'; ' + by if by else ''}); what "
            f"{the} does after that point did not run: do not run it again as it is"
        )
    did = [r for r in known if changed[r]]
    parts = "; ".join(f"replica {r} updated {', '.join(changed[r])}" for r in did)
    untouched = [r for r in known if not changed[r]]
    return (
        f"{the} was partly applied on {_ranks(did)} ({parts})"
        + (f", not on {_ranks(untouched)}" if untouched else "")
        + silent
        + (
            f"; the next call copies replica {source}'s variables to the restarted replica, then"
            if lost
            else "; the next call"
        )
        + f" names the variables whose copies differ (strategy.resync_variables(from_replica={source}) makes "
        "them one): running it again applies it twice where it was applied"
    )


def _ranks(ranks: list[int]) -> str:
    return ("replica " if len(ranks) == 1 else "replicas ") + ", ".join(str(r) for r in ranks)


def _collective_cause(replies: list[Reply], rank: int, call: str) -> str:
    """Why the collective ``rank`` failed in never completed, from its peers' replies: a replica that
    returned without entering it, or one that waited in another collective."""
    where = replies[rank].get("collective")
    if not where:
        return ""
    op, seq = where[0], int(where[1])
    fn = call.partition("(")[2].rstrip(")") if call.startswith("run") else "its program"
    causes = []
    for r, other in enumerate(replies):
        if r == rank:
            continue
        if other["ok"] and int(other.get("collectives", 0)) < seq:
            done = other.get("collectives", 0)
            after = f" after {done} collective(s)" if done else ""
            causes.append(f"replica {r} returned from {fn}{after} without entering {op} #{seq}")
        elif other.get("collective") and list(other["collective"]) != [op, seq]:
            causes.append(f"replica {r} was in {other['collective'][0]} #{other['collective'][1]}, not {op} #{seq}")
    return "; ".join(causes)


_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
# Where the frames between the user's line and interdist come from, when any do: the standard library
# (contextlib's ``with``, functools), installed packages (IPython's display of a cell's last value,
# numpy's dispatch).
_LIBRARY_DIRS = tuple(
    {
        os.path.join(os.path.abspath(d), "")
        for d in [
            *(sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib", "purelib", "platlib")),
            *site.getsitepackages(),
            site.getusersitepackages(),
        ]
    }
)


def user_stacklevel() -> int:
    """The ``stacklevel`` of a ``warnings.warn`` made by the caller that points at the user's line: the
    first frame that is neither interdist's nor a library's (a notebook cell, a script, a test), past
    the frames of IPython or the standard library that called interdist; where there is none (a
    background thread), the first frame outside interdist.

    It counts frames as ``warnings.warn`` does: importlib's bootstrap frames do not count."""
    frame: FrameType | None = sys._getframe(1)
    level, first_outside = 1, 0
    while frame is not None:
        filename = frame.f_code.co_filename
        if not filename.startswith(_PACKAGE_DIR):
            if not filename.startswith(_LIBRARY_DIRS) and not filename.startswith("<frozen "):
                return level
            first_outside = first_outside or level
        frame = frame.f_back
        while (
            frame is not None and "importlib" in frame.f_code.co_filename and "_bootstrap" in frame.f_code.co_filename
        ):
            frame = frame.f_back  # warnings skips these (the frames of an ``import``)
        level += 1
    return first_outside or level - 1


def remote_traceback(frames: list[list[Any]]) -> TracebackType | None:
    """A traceback of this process whose frames stand for a replica's ``[file, line, function]`` frames.

    Each is a frame of a stub that raises on that line of that file, under the function's name: Python
    and IPython then show the line from this process's ``linecache``, where a notebook cell's source
    is. (The stubs Dask's ``tblib`` builds start at the failing line, so IPython, which shows a
    frame's code from its first line, showed the function's ``def`` with the failing line's number.)
    """
    tb: TracebackType | None = None
    try:
        for filename, lineno, name, *cols in reversed(frames):
            stub = _stub(str(filename), int(lineno), cols)
            # an indented stub sits in an ``if`` on the line before (none before line 1: no indent there)
            source = "\n" * (int(lineno) - 2) + "if 1:\n" + stub if int(lineno) > 1 else stub.lstrip()
            code = compile(source, str(filename), "exec")
            code = code.replace(co_name=str(name), co_qualname=str(name))  # 3.11+
            try:
                exec(code, {"_R": _Remote(), "__name__": "__interdist_remote__"})
            except _Remote as e:
                assert e.__traceback__ is not None
                frame_tb = e.__traceback__.tb_next  # the stub's frame, under this function's
                assert frame_tb is not None
                frame_tb.tb_next = tb
                tb = frame_tb
    except Exception:  # noqa: BLE001 - odd file names or lines: the frames go as text instead
        return None
    return tb


def _stub(filename: str, lineno: int, cols: list[Any]) -> str:
    """A ``raise`` that spans the columns of the remote frame's expression (where the traceback puts its
    ``^^^``), or its whole line (no ``^^^``), padded: ``raise(_R   )``."""
    if len(cols) != 2:
        line = linecache.getline(filename, lineno)
        start = len(line) - len(line.lstrip())
        cols = [start, len(line.rstrip())]
    start, end = int(cols[0]), int(cols[1])
    width = end - start
    if width < 8:
        return "raise _R"
    return " " * start + ("raise _R" if width == 8 else "raise(_R" + " " * (width - 9) + ")")


class _Remote(Exception):  # noqa: N818 - raised by the stubs of remote_traceback only
    pass
