"""``Strategy``'s variables after a fault: restored on a replaced replica, checked, copied equal again.

When a replica's worker is replaced, the variables are copied to it from a survivor (``_restore_replicas``);
after a fault, the mirrored copies are compared (``_check_copies``, ``DivergedCopiesError``) and
``resync_variables`` makes them equal again. A base of ``VariablesMixin`` (variables.py), on the round trip
of ``dispatch.py``; ``central_storage.py`` overrides ``_restore_replicas``.
"""

from __future__ import annotations

import json
import time
import warnings
from typing import Any

import numpy as np

from interdist import _gpu, events
from interdist.client.replies import user_stacklevel
from interdist.errors import DivergedCopiesError, WorkerLostError
from interdist.protocol import VariableMeta
from interdist.replica import programs
from interdist.strategy.dispatch import ReplicaDispatch


class VariableRepairMixin(ReplicaDispatch):
    """Restoring, checking and resynchronising the replicas' copies of a strategy's variables."""

    # Set by ``Strategy.__init__`` (base.py).
    _var_metas: dict[int, VariableMeta]

    def _restore_replicas(self, ranks: list[int]) -> None:
        """After a worker restart: give the new replicas the variables, and say exactly what they got.

        Mirrored variables (and the optimizers' slots) are copied from a survivor: they were equal. A
        sync-on-read copy was the lost replica's own (a metric's count, a per-replica statistic), held
        nowhere else: it is set back to the value that replica last reported (each step's events carry
        the values of a variable of at most ``events.SMALL_VALUES`` elements), so a SUM neither loses
        nor duplicates its share. A larger one, or one never reported, cannot be restored: it restarts
        from zero (SUM) or a survivor's copy, and the warning and the dashboard name it and the amount lost.
        """
        self._lease.addresses = list(self._group.addresses)
        survivors = [r for r in range(self.num_replicas_in_sync) if r not in ranks]
        if not survivors:
            raise WorkerLostError("every replica of this strategy was lost; its variables are gone")
        source = survivors[0]
        copied: list[str] = []
        mirrored_ids: list[int] = []
        restored: dict[int, list[str]] = {r: [] for r in ranks}
        lost: dict[int, list[str]] = {r: [] for r in ranks}
        for var_id, meta in list(self._var_metas.items()):
            if self._variable_by_id(var_id) is None:
                continue
            value = self._group.read_variable(source, var_id)
            if meta["kind"] != "sync_on_read":
                for r in ranks:
                    self._group.restore_variable(r, var_id, meta, value)
                copied.append(meta["name"])
                mirrored_ids.append(var_id)
                continue
            for r in ranks:
                own, words = self._last_reported(var_id, r, value)
                if own is not None:
                    restored[r].append(f"{meta['name']} = {words}")
                    self._group.restore_variable(r, var_id, meta, own)
                    continue
                fallback = np.zeros_like(value) if meta["aggregation"] == "SUM" else value
                how = "restarts from 0" if meta["aggregation"] == "SUM" else f"took replica {source}'s copy"
                lost[r].append(f"{meta['name']} (sync-on-read {meta['aggregation']}): {words}; it {how}")
                self._group.restore_variable(r, var_id, meta, fallback)
        self._system(programs.share_optimizer_state, source, list(ranks))  # slots too, or the copies drift apart
        step = self._group.step
        for r in ranks:
            recovered = events.ReplicaRecovered(
                self._group_id, step, r, time.time(), self._group.addresses[r], source,
                tuple(copied), tuple(restored[r]), tuple(lost[r]),
            )  # fmt: skip
            self._group.emit(recovered, urgent=True)
        if mirrored_ids:
            self._group.emit(
                events.VariablesRepaired(self._group_id, step, -1, time.time(), tuple(mirrored_ids), source, "recovery")
            )
        message = [
            f"replica(s) {ranks} of this {type(self).__name__} were restarted on new workers: "
            f"{len(copied)} variable(s) and the optimizers' state were copied there from replica {source}"
        ]
        for r in ranks:
            if restored[r]:
                message.append(
                    f"replica {r}'s sync-on-read copies were set back to their last reported values: "
                    + ", ".join(restored[r])
                )
            if lost[r]:
                message.append(f"LOST on replica {r}: " + "; ".join(lost[r]))
        message.append(
            "values the lost replicas held otherwise (run results) are gone; "
            "dataset iterators hand the failed step's batch out again"
        )
        warnings.warn(". ".join(message) + ".", UserWarning, stacklevel=user_stacklevel())

    def _last_reported(self, var_id: int, rank: int, like: Any) -> tuple[Any, str]:
        """Replica ``rank``'s copy of ``var_id`` as its last event reported it (None if that event carried no
        values), shaped as ``like``; and words for it: the value, or why it cannot be known."""
        template = np.asarray(_gpu.to_host(like))
        for e in reversed(self.events.events):
            if e.replica != rank or getattr(e, "var_id", None) != var_id:
                continue
            if not isinstance(e, (events.VariableUpdated, events.VariableCreated)):
                continue
            call = self._group.call_of(e.step)
            when = f"at the end of {call}" if call else f"after engine step {e.step}"
            if not e.values or len(e.values) != template.size:
                return None, (
                    f"its copy (norm {e.norm:.6g} {when}) has more than {events.SMALL_VALUES} elements, "
                    "which the events do not carry"
                )
            value = np.asarray(e.values, dtype=np.float64).astype(template.dtype).reshape(template.shape)
            shown = value.tolist() if value.size > 1 else value.reshape(()).item()
            return value, f"{shown}, its value {when}"
        return None, "it never reported a value"

    def _check_copies(self, fault: str) -> None:
        """After a fault (``fault`` says which): mirrored copies must still be equal. A step that failed may
        have been applied on some replicas only (a late replica, a worker killed mid-collective); say so,
        by name, instead of training on silently different copies."""
        if not any(m.get("kind") == "mirrored" for m in self._var_metas.values()) or self.num_replicas_in_sync < 2:
            return
        sums = [json.loads(m.value) for m in self._system(programs.copy_checksums)]
        differ: list[str] = []
        for var_id in sorted({v for per_rank in sums for v in per_rank}, key=int):
            seen: dict[tuple[str, int], list[int]] = {}
            for rank, per_rank in enumerate(sums):
                if var_id in per_rank:
                    name, layout, crc = per_rank[var_id]
                    seen.setdefault((layout, int(crc)), []).append(rank)
            if len(seen) > 1:
                groups = sorted(seen.values())
                differ.append(f"{name!r} (" + "; ".join(f"replicas {g} hold one value" for g in groups) + ")")
        if differ:
            raise DivergedCopiesError(
                f"after {fault}, the copies of {len(differ)} mirrored variable(s) differ between replicas: "
                f"{', '.join(differ)}. The failed step was applied on some replicas only. Copy one replica's "
                "values to the others with strategy.resync_variables(from_replica=0), or restore a checkpoint."
            )

    def resync_variables(self, from_replica: int = 0) -> list[str]:
        """Copy replica ``from_replica``'s mirrored variables to every other replica; the names copied.

        For copies that differ after a fault (``DivergedCopiesError``). Sync-on-read variables are left
        as they are: their copies differ by design."""
        if isinstance(from_replica, bool) or not isinstance(from_replica, int):
            raise TypeError(f"from_replica must be a replica index (int), got {from_replica!r}")
        if not 0 <= from_replica < self.num_replicas_in_sync:
            raise ValueError(f"from_replica {from_replica} is not a replica of 0..{self.num_replicas_in_sync - 1}")
        group = getattr(self, "_group", None)
        if group is not None:
            # The check of the copies after a fault would raise DivergedCopiesError, which says to call this:
            # this repairs what it would report, so it does not run first
            group.suspect = None
        self._check_usable()
        copied: list[str] = []
        ids: list[int] = []
        for var_id, meta in list(self._var_metas.items()):
            if meta.get("kind") != "mirrored" or self._variable_by_id(var_id) is None:
                continue
            value = self._group.read_variable(from_replica, var_id)
            for r in range(self.num_replicas_in_sync):
                if r != from_replica:
                    self._group.restore_variable(r, var_id, meta, value)
            copied.append(meta["name"])
            ids.append(var_id)
        if ids:  # the dashboard marks them repaired at once, not at the next run's events
            self._group.emit(
                events.VariablesRepaired(
                    self._group_id, self._group.step, -1, time.time(), tuple(ids), from_replica, "resync"
                ),
                urgent=True,
            )
        return copied
