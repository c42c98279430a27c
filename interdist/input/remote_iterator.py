"""``_RemoteIterator``: a distributed iterator whose batches are read on the replicas' workers.

Each ``next`` asks every replica for global batch ``k`` by its number (``replica_side._next_batch_at``); a
replica restarted after a fault, or at another batch than the others, starts its iterator again at that
batch (``replica_side._rebuild_at``). A step that some replicas' data lacks is padded with empty batches,
where TF pads it, or ends the iteration. Split from ``distributed_dataset.py``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from interdist import _nest
from interdist.errors import IteratorLostError
from interdist.input.distributed_iterator import (
    DistributedIterator,
    PerReplicaSpec,
    _how_to_go_on,
    _is_fault,
    _skipped_warning,
)
from interdist.input.replica_side import _next_batch_at, _rebuild_at, _Status
from interdist.input.spec import TensorSpec
from interdist.protocol import ValueMeta
from interdist.values.distributed import PerReplica
from interdist.values.tensor import Tensor


class _RemoteIterator(DistributedIterator):
    """An iterator whose batches are read on the replicas' workers: ``next`` asks each for batch ``k``."""

    def __init__(self, strategy: Any, key: str, element_spec: Any, recipe: Callable[[int], Any]) -> None:
        super().__init__(strategy, iter(()), element_spec)
        self._key = key
        self._done = False
        self._recipe = recipe  # rank -> how that replica starts this iterator again (_PlanRecipe...)
        self._last_keys: list[list[str | None]] = []  # per rank: where the last batch's parts are kept
        self._resync = False  # after a failed run_steps: take the replicas' position as this iterator's
        self._padding_always = False  # in ``get_next_as_optional``: TF pads a partial step there whatever the spec

    def get_next_as_optional(self) -> Any:
        """As ``DistributedIterator``'s, but a step some replicas lack is always padded (TF 2.21, with static
        element shapes and under CentralStorageStrategy too, where ``next`` ends the data instead)."""
        self._padding_always = True
        try:
            return super().get_next_as_optional()
        finally:
            self._padding_always = False

    def __next__(self) -> Any:
        value = self._repeat()
        if value is not None:
            return value
        if self._done:
            raise StopIteration
        raw = self._fetch()
        results = raw
        if all(r is None for r in results):
            self._done = True
            raise StopIteration
        if (
            any(r is None for r in results)
            and not self._padding_always
            and not _pads_partial_steps(self._strategy, self.element_spec)
        ):
            # TF 2.21 pads a step only when the element shapes are not all static or across workers; otherwise
            # (and always with CentralStorageStrategy) the iteration ends at the first step a replica lacks.
            self._done = True
            raise StopIteration
        if any(r is None for r in results):
            # TF: a replica whose pipeline ran out while others still had a batch gets an empty batch.
            value = _fill_empty(self.element_spec, results, self._strategy)
        else:
            value = self._strategy._regroup(results)
        self._delivered(value)
        self._last_keys = [[m.key if isinstance(m, ValueMeta) else None for m in _nest.flatten(r)] for r in raw]
        return value

    def _fetch(self) -> list[Any]:
        """Every replica's part of batch ``self._index`` (None where a replica's data ran out)."""
        strategy = self._strategy
        for _ in range(3):
            raw: list[Any] = strategy._system(_next_batch_at, self._key, self._index)
            statuses = {r: st for r, st in ((r, _status_of(m)) for r, m in enumerate(raw)) if st is not None}
            if not statuses:
                self._resync = False
                return raw
            _release(strategy, raw)  # the replicas that gave their part keep it for the repeat below
            at = {st.consumed for st in statuses.values() if st.kind == "at"}
            if self._resync and len(statuses) == len(raw) and len(at) == 1:
                # A run_steps that failed in the replica function: its steps before the failure ran, as a
                # loop of ``run`` would have; the iterator goes on after the batches it took, and says so.
                self._resync = False
                position = at.pop()
                if position > self._index + 1:
                    _skipped_warning(self._index, position)
                self._index = position
                continue
            # A restarted worker lacks the iterator (and the notebook's last batch: read again too); a replica
            # at another batch than the others (none that it kept) starts again at this one.
            missing = sorted(r for r, st in statuses.items() if st.kind == "missing")
            if missing:
                self._restart(missing, restore=True)
            elsewhere = sorted(r for r, st in statuses.items() if st.kind != "missing")
            if elsewhere:
                self._restart(elsewhere, restore=False)
        raise IteratorLostError(
            f"the replicas of this distributed iterator still do not agree on global batch #{self._index} after "
            "it was started again on them. " + _how_to_go_on(self._index),
            self._index,
        )

    def _restart(self, ranks: list[int], restore: bool) -> None:
        """Start this iterator again on replicas ``ranks``, at batch ``self._index``; with ``restore``, read the
        batch before it again into the keys the notebook's last batch names (a failed step can run again)."""
        strategy = self._strategy
        n = strategy.num_replicas_in_sync
        keep = restore and self._last is not None and self._index > 0 and len(self._last_keys) == n
        per_rank: list[tuple[Any, ...]] = [(self._key, None, 0, None)] * n
        for r in ranks:
            per_rank[r] = (self._key, self._recipe(r), self._index, self._last_keys[r] if keep else None)
        try:
            answers = strategy._system(_rebuild_at, per_rank=per_rank)
        except Exception as exc:
            if _is_fault(exc):
                raise  # another fault: the next ``next`` tries again
            self._broken = (
                f"this distributed iterator could not be started again on replica(s) {ranks} "
                f"({type(exc).__name__}: {exc}). " + _how_to_go_on(self._index)
            )
            raise IteratorLostError(self._broken, self._index) from exc
        why = [(r, m.value) for r, m in enumerate(answers) if isinstance(m, ValueMeta) and m.value is not None]
        _release(strategy, answers)
        if why:
            rank, reason = why[0]
            self._broken = (
                f"this distributed iterator cannot go on: replica {rank}'s input pipeline had to be started again "
                f"(its worker was lost) and cannot be read again to global batch #{self._index} ({reason}). "
                + _how_to_go_on(self._index)
            )
            raise IteratorLostError(self._broken, self._index)

    def _replicas_replaced(self, ranks: list[int]) -> None:
        if self._broken is not None or self._done:
            return
        try:
            self._restart(ranks, restore=True)
        except Exception:  # noqa: BLE001, S110 - the recovery goes on; ``next`` says why (``_broken``) or tries again
            pass

    def _fused_ran(self, done: int) -> None:
        """``run_steps`` ran ``done`` steps of this iterator's batches on the replicas."""
        self._index += done
        self._last, self._redeliver, self._last_keys = None, False, []

    def _fused_failed(self, exc: BaseException, taken: int) -> None:
        if _is_fault(exc):
            super()._fused_failed(exc, -1)
        else:
            self._resync = True


def _status_of(meta: Any) -> _Status | None:
    """The ``_Status`` a replica answered instead of a batch, or None."""
    if isinstance(meta, ValueMeta) and meta.shape is None and isinstance(meta.value, _Status):
        return meta.value
    return None


def _release(strategy: Any, raw: list[Any]) -> None:
    """Let the replicas drop the values of replies the notebook does not keep."""
    group = getattr(strategy, "_group", None)
    if group is None:
        return
    for rank, reply in enumerate(raw):
        for m in _nest.flatten(reply):
            if isinstance(m, ValueMeta):
                group.queue_release(rank, m.key)


def _replica_spec(spec: Any) -> Any:
    return spec.spec if isinstance(spec, PerReplicaSpec) else spec


def _pads_partial_steps(strategy: Any, element_spec: Any) -> bool:
    """TF's ``_enable_get_next_as_optional``: whether a step some replicas lack is padded (else it ends the data).

    Not with CentralStorageStrategy (checked with TF 2.21); across workers always; on one host only when
    some dimension of the element spec is unknown (``batch`` without ``drop_remainder``).
    """
    if strategy._kind == "central_storage":
        return False
    if getattr(strategy, "_input_split_by_worker", False) and strategy.num_replicas_in_sync > 1:
        return True
    return any(None in _replica_spec(s).shape for s in _nest.flatten(element_spec))


def _dummy_batch(spec: TensorSpec) -> Any:
    """TF's ``_dummy_tensor_fn``: zeros of ``spec``'s shape with unknown dimensions 0, and the first dimension 0
    when the shape is fully known. So a ``(None, None, 1)`` spec gives ``(0, 0, 1)`` and a ``(2, None, 1)`` one
    gives ``(2, 0, 1)`` (TF 2.21 does both), whatever shape the other replicas' batches have.
    """
    dims = [0 if d is None else d for d in spec.shape]
    if dims and None not in spec.shape:
        dims[0] = 0
    return np.zeros(dims, spec.dtype)


def _fill_empty(element_spec: Any, results: list[Any], strategy: Any) -> Any:
    """One step's values where some replicas' pipelines ran out: theirs are dummy batches, on their devices."""
    present = next(r for r in results if r is not None)
    nothing = _nest.map_structure(lambda _: None, present)
    regrouped = strategy._regroup([r if r is not None else nothing for r in results])
    devices = list(strategy.extended.worker_devices)

    def fill(value: Any, spec: Any) -> Any:
        if not isinstance(value, PerReplica):
            return value
        dummy = _dummy_batch(_replica_spec(spec))
        parts = [v if v is not None else Tensor(dummy.copy(), devices[r]) for r, v in enumerate(value.values)]
        return PerReplica(parts, strategy)

    return _nest.map_structure(fill, regrouped, element_spec)
