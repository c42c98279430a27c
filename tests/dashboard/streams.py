"""Small hand-made event streams with round numbers, so expected view data can be written out literally."""

from __future__ import annotations

from interdist import events as ev

G = "g"
CPU = "/job:localhost/replica:0/task:0/device:CPU:{}"


def created(replica: int, var_id: int, name: str, checksum: float, t: float, sync: str = "ON_WRITE",
            device: str | None = None, step: int = 1) -> ev.VariableCreated:
    return ev.VariableCreated(G, step, replica, t, var_id, name, (2,), "float32", device or CPU.format(replica),
                              sync, "MEAN", abs(checksum), checksum, (checksum / 2, checksum / 2))


def updated(replica: int, step: int, var_id: int, name: str, checksum: float, t: float) -> ev.VariableUpdated:
    return ev.VariableUpdated(G, step, replica, t, var_id, name, CPU.format(replica), abs(checksum), checksum,
                              (checksum / 2, checksum / 2))


def training_stream() -> list[ev.Event]:
    """Two replicas, variables w (mirrored) and s (sync-on-read), two steps with one all_reduce each.

    Replica 1's copy of w differs from step 3 on (a divergence).
    """
    out: list[ev.Event] = [
        created(0, 1, "w", 1.0, 100.0), created(1, 1, "w", 1.0, 100.0),
        created(0, 2, "s", 0.0, 100.0, sync="ON_READ"), created(1, 2, "s", 0.0, 100.0, sync="ON_READ"),
    ]
    for step, t in ((2, 101.0), (3, 102.0)):
        for r in (0, 1):
            out.append(ev.RunStarted(G, step, r, t, "step", "run"))
            out.append(ev.CollectiveEntered(G, step, r, t + 0.1 * (r + 1), "all_reduce", 1, 1000))
        for r in (0, 1):
            # replica 0 arrived first (t+0.1) and waits 0.1 s for replica 1; the transfer takes 0.05 s
            wait = 0.1 if r == 0 else 0.0
            out.append(ev.CollectiveExited(G, step, r, t + 0.25, "all_reduce", 1, 1000, "ring", "dask", wait, 0.05))
        for r in (0, 1):
            w = 2.0 if step == 2 or r == 0 else 2.5
            out.append(updated(r, step, 1, "w", w, t + 0.3))
            out.append(updated(r, step, 2, "s", float(r + step), t + 0.3))
            out.append(ev.RunFinished(G, step, r, t + 0.5, "step", "run", 0.5, True))
    return out


def hang_stream() -> list[ev.Event]:
    """Three replicas; at step 7 replicas 0 and 2 enter an all_gather, replica 1 never does."""
    return [
        ev.RunStarted(G, 7, r, 100.0, "step", "run") for r in (0, 1, 2)
    ] + [
        ev.CollectiveEntered(G, 7, 0, 100.0, "all_gather", 1, 64),
        ev.CollectiveEntered(G, 7, 2, 101.0, "all_gather", 1, 64),
    ]
