"""Rows of a persisted Dask array read straight from the memory of the worker that holds each chunk.

A replica's read of rows through Dask (``_dask._compute_here``) moves every chunk it
touches whole, worker to worker (~300 MB/s measured here), to take part of it: on 2
replicas half of each chunk, on 4 a quarter. When the chunks are already in memory
(a persisted array) and their holders share this host, the reader instead asks each
holder for just its rows, over the holder's control socket (``control.py``):
the holder slices its chunk and writes the rows; chunks this worker holds are sliced
in place. Where that is not possible (not persisted, another host, chunks split along
columns, object dtypes, a chunk that moved) the read goes through Dask as before.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from typing import Any, cast

import numpy as np
from dask.core import flatten

from interdist import control as local_control

logger = logging.getLogger("interdist")

#: Rows and windows read this way in this process (for tests and the curious).
stats = {"rows": 0, "windows": 0, "fallbacks": 0}
_local = threading.local()  # each reading thread keeps its own connections (request, then reply)
_rid = itertools.count(1)
SLOW_READ_S = 5.0  # a direct read slower than this is logged with where its time went


def _conn(worker: Any, addr: str) -> local_control.ControlConnection | None:
    conns: dict[str, local_control.ControlConnection | None] = getattr(_local, "conns", None) or {}
    _local.conns = conns
    if addr in conns:  # ``None``: this holder cannot be reached directly; do not try again
        conn = conns[addr]
        if conn is None or not conn.broken:
            return conn
    conn = conns[addr] = local_control.connect_from_worker(worker, addr)
    return conn


def close_connections() -> None:
    """Close this thread's connections (at the end of its read loop)."""
    conns = getattr(_local, "conns", None) or {}
    _local.conns = {}
    for c in conns.values():
        if c is not None:
            c.close()


def read_rows(worker: Any, leaves: list[Any], rows: np.ndarray, client: Any) -> list[np.ndarray] | None:
    """The given (sorted, unique) rows of every leaf, or ``None`` when this path cannot read them."""
    t0 = time.monotonic()
    try:
        out = [_read_leaf(worker, leaf, rows, client) for leaf in leaves]
    except Exception as exc:  # noqa: BLE001 - any doubt: read through Dask
        logger.debug("interdist: direct row read not possible (%r); reading through Dask", exc)
        close_connections()  # a reply may still be on its way: never read it as the next one's
        out = [None]
    took = time.monotonic() - t0
    if took > SLOW_READ_S:
        logger.warning(
            "interdist: a direct read of %d rows took %.1f s (phases: %s)",
            len(rows),
            took,
            getattr(_local, "phases", {}),
        )
    if any(o is None for o in out):
        stats["fallbacks"] += 1
        return None
    stats["rows"] += len(rows)
    stats["windows"] += 1
    return cast("list[np.ndarray]", out)  # no ``None`` among them: checked above


def _read_leaf(worker: Any, leaf: Any, rows: np.ndarray, client: Any) -> np.ndarray | None:
    if any(len(c) != 1 for c in leaf.chunks[1:]) or np.dtype(leaf.dtype).hasobject:
        return None
    # One key per row chunk (checked: one column chunk).
    keys = list(flatten(leaf.__dask_keys__()))  # type: ignore[no-untyped-call]  # dask.core is unannotated
    starts = np.concatenate([[0], np.cumsum(leaf.chunks[0])]).astype(np.int64)
    bounds = np.searchsorted(rows, starts)  # rows[bounds[j]:bounds[j+1]] fall in chunk j
    wanted = [j for j in range(len(keys)) if bounds[j + 1] > bounds[j]]
    # The scheduler's own who_has (Client.who_has takes futures, and a plan carries keys).
    t = time.monotonic()
    who = client.sync(client.scheduler.who_has, keys=[keys[j] for j in wanted])
    phases = _local.phases = {"who_has": round(time.monotonic() - t, 3)}
    out = np.empty((len(rows), *leaf.shape[1:]), np.dtype(leaf.dtype))
    requests: dict[str, list[tuple[int, dict[str, Any]]]] = {}
    for j in wanted:
        holders = list(who.get(keys[j], ()))
        if not holders:
            return None  # not in memory (not persisted, or released): Dask computes it
        idx = rows[bounds[j] : bounds[j + 1]] - starts[j]
        contiguous = int(idx[-1]) - int(idx[0]) + 1 == len(idx)
        if worker.address in holders:
            value = worker.data[keys[j]]
            target = out[bounds[j] : bounds[j + 1]]
            if contiguous:
                target[...] = value[int(idx[0]) : int(idx[-1]) + 1]
            else:
                np.take(value, idx, axis=0, out=target)
            continue
        msg: dict[str, Any] = {"op": "rows", "rid": next(_rid), "key": keys[j]}
        if contiguous:
            msg.update(lo=int(idx[0]), hi=int(idx[-1]) + 1)
        else:
            msg["index"] = idx.astype(np.int64).tobytes()
        requests.setdefault(holders[0], []).append((j, msg))
    for addr, reqs in requests.items():
        t = time.monotonic()
        conn = _conn(worker, addr)
        phases[f"connect {addr}"] = round(time.monotonic() - t, 3)
        t = time.monotonic()
        if conn is None:
            return None  # another host: Dask moves the chunks
        for j, msg in reqs:
            # One request at a time: with several written ahead, the holder could block writing a
            # large reply that this thread does not read yet, while this thread blocks writing a
            # request that the holder does not read yet (seen: a 60 s stall).
            local_control.send_parts(conn.sock, local_control.pack(msg))
            rep = local_control.read_message(conn.sock)
            if rep is None:
                conn.broken = True
                return None
            if rep.get("rid") != msg["rid"] or not rep.get("ok"):
                if rep.get("rid") != msg["rid"]:
                    conn.close()  # out of step: start again with a fresh connection
                return None
            piece = np.frombuffer(rep["data"], np.dtype(rep["dtype"])).reshape(rep["shape"])
            out[bounds[j] : bounds[j + 1]] = piece
        phases[f"rows from {addr}"] = round(time.monotonic() - t, 3)
    return out


def serve_rows(worker: Any, msg: dict[str, Any]) -> dict[str, Any]:
    """The holder's side: this worker's rows of one chunk, as one contiguous buffer."""
    try:
        value = np.asarray(worker.data[msg["key"]])
        if "lo" in msg:
            part = np.ascontiguousarray(value[msg["lo"] : msg["hi"]])
        else:
            part = np.take(value, np.frombuffer(msg["index"], np.int64), axis=0)
        if part.dtype.hasobject:
            raise TypeError("object arrays are read through Dask")
        data = part.data.cast("B") if part.size else b""  # ``part.data``: a memoryview of the array
        return {"rid": msg["rid"], "ok": True, "dtype": part.dtype.str, "shape": list(part.shape), "data": data}
    except Exception as exc:  # noqa: BLE001 - the reader falls back to Dask
        return {"rid": msg["rid"], "ok": False, "message": repr(exc)}
