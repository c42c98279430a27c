"""The words a person reads for the model's state: a replica's chip, a variable's status.

The model (``model.py``) keeps the state, fed by events; this turns it into text, and nothing else.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from interdist.dashboard.records import ReplicaStatus

if TYPE_CHECKING:
    from interdist.dashboard.model import DashboardModel


def chip(model: DashboardModel, replica: int, now: float | None = None) -> ReplicaStatus:
    """One replica's chip, from its state alone (and, for "waiting", the open collective it is in)."""
    st = model.replica_states.get(replica)
    kind, fn = st.kind, st.fn.rsplit(".", 1)[-1]  # "step", not "make.<locals>.step"
    note = f" · {st.note}" if st.note else ""
    if kind in ("running", "starting") and st.collective is not None:
        oc = model.open.get(st.collective[:2])
        if oc is not None and replica not in oc.exited:
            missing = [r for r in range(model.world_size) if r not in oc.entered]
            where = f"{oc.op} #{oc.seq}"
            if missing:
                return ReplicaStatus(
                    replica,
                    "waiting",
                    f"waiting in {where} for {missing}",
                    f"{model.run_label(st.step)}: {fn} waits for replica(s) {missing}{note}",
                )
            return ReplicaStatus(replica, "running", f"in {where}", f"{model.run_label(st.step)}: {fn}")
    if kind == "starting":
        return ReplicaStatus(
            replica,
            kind,
            f"starting {model.run_label(st.step)}",
            "sent by the notebook; the replica has not started it yet",
        )
    if kind == "running":
        what = f"running {fn}" if not st.system else f"busy: {fn}"
        return ReplicaStatus(replica, kind, what, f"{model.run_label(st.step)}{note}")
    if kind == "done":
        return ReplicaStatus(replica, kind, "done", f"{model.run_label(st.user_step)}{note}")
    if kind == "raised":
        words = f"raised {st.error_type}" + (f": {first_line(st.error, 60)}" if st.error else "")
        return ReplicaStatus(replica, kind, words, f"{st.error_type} in {model.run_label(st.step)}: {st.error}")
    if kind == "released":
        text = "released: " + why_released(st.by, st.error, replica)
        peer = model.replica_states.get(st.by) if st.by is not None else None
        if text.endswith(" unreachable") and peer is not None and peer.kind in ("lost", "restarting", "recovered"):
            # its send failed before the loss was known; the model knows it now: a dead replica is named lost
            text = f"released: replica {st.by} lost"
        return ReplicaStatus(replica, kind, text, f"{model.run_label(st.step)} aborted: {first_line(st.error)}{note}")
    if kind == "frozen":
        now = time.time() if now is None else now
        return ReplicaStatus(
            replica,
            kind,
            f"frozen {max(0.0, now - st.stopped_since):.0f} s",
            f"in {model.run_label(st.step)}: {first_line(st.error)}",
        )
    if kind == "lost":
        return ReplicaStatus(replica, kind, "lost", f"in {model.run_label(st.step)}: {first_line(st.error)}")
    if kind == "restarting":
        return ReplicaStatus(replica, kind, "restarting", f"waiting for a new worker (was {st.worker})")
    if kind == "recovered":
        return ReplicaStatus(replica, kind, "recovered", f"on {st.worker}: {st.note}")
    return ReplicaStatus(replica, "idle", "idle")


def variable(model: DashboardModel, var_id: int) -> tuple[str, str]:
    """(kind, words) for a variable: "agree", "diverged" (since run #n), "repaired", "per-replica"."""
    info = model.variables.get(var_id)
    if info is not None and info.synchronization == "ON_READ":
        return "per-replica", "per replica (sync-on-read)"
    since = model.diverged_since.get(var_id)
    if since is not None:
        return "diverged", f"DIVERGED since {model.run_label(since)}"
    fixed = model.repaired.get(var_id)
    if fixed is not None:
        step, how = fixed
        return "repaired", f"repaired ({how}) {model.run_label(step)}".replace(") run #", ") at run #")
    return "agree", "ok"


def why_released(by: int | None, reason: str, replica: int) -> str:
    """Released: why, in a few words ("replica 1 lost")."""
    if by is None or by < 0:
        return "the notebook was interrupted" if "interrupt" in reason else "the step was aborted"
    if by == replica:
        return "resumed after it was frozen"
    for words, short in (
        ("was lost", "lost"),
        ("frozen", "frozen"),
        ("raised", "raised"),
        ("returned", "returned"),
        ("could not deliver", "unreachable"),  # a send to it failed first: it died, or its host is cut off
        ("could not reach", "unreachable"),
    ):
        if words in reason:
            return f"replica {by} {short}"
    return f"replica {by} failed"


def first_line(text: str, most: int = 90) -> str:
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line if len(line) <= most else line[: most - 1] + "…"
