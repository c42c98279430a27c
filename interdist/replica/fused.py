"""Many steps in one program: a training loop over a distributed dataset without a notebook round trip per step.

Each inner step gets its own step number (the notebook reserves them), its own
collectives sequence and its own ``RunStarted``/``RunFinished`` events, so the
dashboard and the failure handling see exactly what a step-by-step loop shows.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import cloudpickle

from interdist import _context, events
from interdist.protocol import resolving
from interdist.replica import faults
from interdist.replica.user_code import call_user

if TYPE_CHECKING:
    from interdist.replica.replica import Replica

_END = object()


class PickledFunction:
    """A replica function already pickled by the notebook (``fn_pickle.cached_dumps``)."""

    __slots__ = ("data",)

    def __init__(self, data: bytes) -> None:
        self.data = data


def fused_steps(replica: Replica, fn: Callable[..., Any], source: tuple[str, Any], steps: int) -> Any:
    """Run ``fn(batch)`` for up to ``steps`` batches; the last step's result and how many ran."""
    if isinstance(fn, PickledFunction):
        with resolving(replica):  # the variables and strategy it names become this replica's
            fn = cloudpickle.loads(fn.data)
    kind, payload = source
    if kind == "remote":
        # Pull this call's batches first, then agree once on how many steps every replica can
        # take (one exchange per call, not per step: per step it cost ~1 ms, measured).
        it, buffer = replica.store[payload], replica.store.setdefault(payload + ":buffer", [])
        while len(buffer) < steps:
            batch = next(it, _END)
            if batch is _END:
                break
            buffer.append(batch)
        # Never more than this call's steps: batches a replica holds beyond them stay for the next call.
        common = min(steps, *replica.exchange("fused_count", len(buffer)))
        kind, payload = "shipped", [buffer.pop(0) for _ in range(common)]
    first = replica.step
    out: Any = None
    done = 0
    name = getattr(fn, "__qualname__", getattr(fn, "__name__", "fn"))
    if replica.injected is not None:  # a user call (idist.debug.inject's "next program"): faults.py
        faults.begin(replica, "run_steps", name)
    group, rank = replica.group_id, replica.rank
    # Steps that emit no event of their own are recorded together, as one ``run-steps`` record
    # (events.RUN_STEPS); a step that does emit (a collective, a variable) gets its own
    # RunStarted/RunFinished around its events, in order, through ``replica.before_emit``.
    pending: list[float] = []  # (start, end) of the steps since ``pending_first``
    pending_first = first
    step, t0, alone = first, 0.0, False

    def flush() -> None:
        nonlocal pending
        if pending:
            replica.emit_msg(events.steps_msg(group, pending_first, rank, name, pending))
            pending = []

    def before_event() -> None:  # this step is about to emit: what came before it goes first
        nonlocal alone
        alone = True
        flush()
        replica.emit_msg(
            {
                "group": group,
                "step": step,
                "replica": rank,
                "time": t0,
                "fn": name,
                "program": "run",
                "kind": events.RunStarted.kind,
            }
        )

    try:
        with _context.enter(replica.view, replica.context):  # once for the call: the same for every step
            for k in range(min(steps, len(payload))):
                batch = payload[k]
                step = first + k
                if k:
                    replica.step, replica.seq = step, 0
                    replica.transport.mailbox.begin_step(step)
                alone = False
                replica.before_emit = before_event
                t0 = time.time()
                if replica.armed_fault is not None:
                    faults.fire(replica, "step")
                out = call_user(fn, (batch,), {})
                t1 = time.time()
                if alone:
                    replica.emit_msg(
                        {
                            "group": group,
                            "step": step,
                            "replica": rank,
                            "time": t1,
                            "fn": name,
                            "program": "run",
                            "duration_s": t1 - t0,
                            "ok": True,
                            "kind": events.RunFinished.kind,
                        }
                    )
                else:
                    replica.before_emit = None
                    if not pending:
                        pending_first = step
                    pending += (t0, t1)
                done += 1
    except BaseException:
        if not alone:
            before_event()  # the failing step's RunStarted (its failure event follows, from Replica.execute)
        raise
    finally:
        replica.before_emit = None
        flush()
    return out, done
