"""What every part of ``Strategy`` stands on: its replica group, and the programs sent to it.

``ReplicaDispatch`` declares the state ``Strategy.__init__`` sets (``base.py``) and holds the round
trip every method that reaches the replicas makes: ``_select`` gives each rank its arguments
(components picked, stored values referenced), ``_system`` runs a program on every replica and
``_regroup`` turns the replies back into values (``PerReplica``, ``RemoteValue``, variable handles).

It is a module of its own so that the parts of ``Strategy`` built on this round trip (``variables.py``,
``cross_replica.py``, ``input_distribution.py``) can subclass it, and be type-checked against it,
without importing ``Strategy``: ``Strategy`` inherits them all.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

import numpy as np

from interdist import _context, _nest
from interdist._convert import content_digest, same_object_across
from interdist.client import cluster as cluster_lib
from interdist.client.event_log import EventLog
from interdist.client.group import DaskGroup
from interdist.errors import DivergedCopiesError
from interdist.protocol import ArgRef, StoreRef, ValueMeta, VarRef, registered_variable
from interdist.strategy.extended import StrategyExtended
from interdist.values.distributed import DistributedValues, PerReplica
from interdist.values.distributed_variable import _Handle
from interdist.values.tensor import ArrayValue, RemoteValue, Tensor
from interdist.values.variables import Variable

#: The leaves ``_select`` replaces or checks (everything else goes to every rank as it is).
_SELECTED = (_Handle, DistributedValues, RemoteValue, ArrayValue)


class ReplicaDispatch:
    """The replica group of a strategy, and programs sent to it with each rank's arguments."""

    # Set by ``Strategy.__init__`` (base.py).
    _devices: list[str]
    _closed: bool
    _kind: str
    _lease: cluster_lib.Lease
    _group: DaskGroup
    events: EventLog  # the replicas' and the notebook's events (client/event_log.py)
    _group_id: str
    extended: StrategyExtended

    @property
    def num_replicas_in_sync(self) -> int:
        return len(self._devices)

    def _check_usable(self) -> None:
        if self._closed:
            raise RuntimeError("the strategy was closed (strategy.close()); create a new one")
        group = getattr(self, "_group", None)
        if group is not None and group.suspect is not None:
            fault, group.suspect = group.suspect, None  # first, so the check's own program does not recurse
            try:
                self._check_copies(fault)
            except DivergedCopiesError:
                raise
            except BaseException:
                # The check could not run (a replica still in the failed step: "still running"): it runs
                # at the next call instead, so that a difference is never left unreported.
                if group.suspect is None:
                    group.suspect = fault
                raise

    def _check_copies(self, fault: str) -> None:
        """After a fault: compare the replicas' copies of every variable that must be the same on all of
        them; raise naming those that differ (a hook: strategy/variables.py)."""

    def _require_cross_replica(self, what: str) -> None:
        entry = _context.current()
        if entry.replica_context is not None and not _context.is_default(entry.strategy):
            raise RuntimeError(
                f"Method {what} requires being in cross-replica context, use get_replica_context().merge_call()"
            )

    def _system(self, program: Callable[..., Any], *args: Any, per_rank: list[Any] | None = None) -> list[Any]:
        self._check_usable()
        if per_rank is None:
            same: tuple[tuple[Any, ...], dict[str, Any]] = (args, {})
            rank_args = [same] * self.num_replicas_in_sync
        else:
            rank_args = [(tuple(a), {}) for a in per_rank]
        return self._group.execute(program, rank_args, system=True, what=program.__name__)

    def _select(self, rank: int, structure: Any, keep: bool = False) -> Any:
        """``structure`` as replica ``rank`` receives it: components picked, stored values referenced.

        With ``keep``, the notebook's own objects are kept (to recognise arguments returned unchanged).
        """

        def leaf(x: Any) -> Any:
            if keep:
                return _nest.map_structure(leaf, x.values[rank]) if isinstance(x, DistributedValues) else x
            if isinstance(x, DistributedValues) and not isinstance(x, _Handle):  # (a variable is sent as itself)
                return _nest.map_structure(leaf, self._select_values(x)[rank])
            return self._pick(rank, x)

        return _nest.map_structure(leaf, structure)

    def _per_rank(self, structure: Any) -> tuple[list[Any], list[list[Any]]]:
        """Each rank's ``_select`` of ``structure`` and the flat leaves of its ``keep`` form (``run``'s
        arguments and what ``_regroup`` recognises returned unchanged).

        Plain arguments (no distributed value, variable or replica-held value among the leaves: numbers,
        NumPy arrays, nothing at all) are the same for every rank: one object, so the notebook pickles
        them once and walks them once, where selecting rebuilt every container for every rank. Otherwise
        the leaves are picked for every rank in one pass and each rank's containers rebuilt once: the
        ``_select`` and ``keep`` walks per rank took 21-22 of a ``run``'s microseconds given one
        ``PerReplica`` at 2 replicas, this 5 (12 when the arguments nest). ``structure`` is ``run``'s
        ``(args, kwargs)``. A component that is itself a structure (a ``PerReplica`` of tuples: every batch of a
        distributed dataset) is picked leaf by leaf too: the walks took 120-250 us of each training step. One
        that holds a distributed value goes through those walks."""
        n = self.num_replicas_in_sync
        leaves = _nest.flatten(structure)
        if not any(isinstance(x, _SELECTED) for x in leaves):
            return [structure] * n, [leaves] * n
        picked = [list(leaves) for _ in range(n)]  # what each rank receives, leaf by leaf
        kept = [list(leaves) for _ in range(n)]  # and the notebook's own objects it stands for
        nested = False  # a component is a structure (a distributed dataset's batch: images and labels)
        for i, x in enumerate(leaves):
            if isinstance(x, DistributedValues):
                handle = isinstance(x, _Handle)  # a distributed variable: sent as itself, kept as its copies
                components = x.values if handle else self._select_values(x)
                if handle or not any(_nest.is_nested(c) for c in components):
                    if any(isinstance(c, DistributedValues) for c in components):
                        return self._per_rank_walked(structure)
                    for r in range(n):
                        picked[r][i] = self._pick(r, x if handle else components[r])
                        kept[r][i] = components[r]
                    continue
                for r in range(n):  # each component's leaves picked, its structure rebuilt once (``_select``'s)
                    inner = _nest.flatten(components[r])
                    if any(isinstance(y, DistributedValues) for y in inner):
                        return self._per_rank_walked(structure)
                    picked[r][i] = _nest.pack_sequence_as(components[r], [self._pick(r, y) for y in inner])
                    kept[r][i] = components[r]
                nested = True
            elif isinstance(x, _SELECTED):
                for r in range(n):
                    picked[r][i] = self._pick(r, x)
        if nested:  # (the kept leaves of a selected structure: a component's own leaves in its place)
            kept = [_nest.flatten(k) for k in kept]
        args, kwargs = structure
        if not kwargs and type(args) is tuple and not any(map(_nest.is_nested, args)):  # leaves only: no walk
            return [(tuple(p), {}) for p in picked], kept
        return [_nest.pack_sequence_as(structure, p) for p in picked], kept

    def _per_rank_walked(self, structure: Any) -> tuple[list[Any], list[list[Any]]]:
        """``_per_rank`` by ``_select``'s walks, rank by rank (nested components)."""
        n = self.num_replicas_in_sync
        per_rank = [self._select(r, structure) for r in range(n)]
        return per_rank, [_nest.flatten(self._select(r, structure, keep=True)) for r in range(n)]

    def _pick(self, rank: int, x: Any) -> Any:
        """What rank ``rank`` receives for the leaf ``x`` (not a distributed value): ``_select``'s leaf."""
        if isinstance(x, _Handle):
            if x._strategy is not self:
                raise ValueError(
                    f"The variable {x._name!r} was created in the scope of another strategy "
                    f"({x._strategy!r}); it cannot be used by {self!r}"
                )
            return x
        if isinstance(x, RemoteValue):
            if x._owner is self._group and x._rank == rank:
                return StoreRef(x._key)
            return x.numpy()
        if isinstance(x, Tensor) and type(value := x._get()) is np.ndarray:
            return value  # (pickled at once to be sent: the replica gets its own copy; ``numpy()`` made another)
        if isinstance(x, ArrayValue):
            return x.numpy()
        return x

    def _regroup(self, results: list[Any], originals: list[list[Any]] | None = None) -> Any:
        n = len(results)

        def decode(rank: int, m: Any) -> Any:
            if m is None:
                return None
            if isinstance(m, ArgRef):
                assert originals is not None
                original = originals[rank][m.index]
                if m.meta is None:
                    return original
                if _sent_unchanged(original, m.digest):  # (an array the function may have changed in place)
                    self._group.queue_release(rank, m.meta.key)
                    return original
                return decode(rank, m.meta)
            if isinstance(m, VarRef):
                return self._variable_by_id(m.var_id)
            if m.shape is None:
                return m.value
            return self._remote(rank, m)

        def leaf(*metas: Any) -> Any:
            decoded = [decode(r, m) for r, m in enumerate(metas)]
            if n == 1:
                return decoded[0]
            d0 = decoded[0]
            if all(d is None for d in decoded):
                return None
            if all(d is d0 for d in decoded) and (isinstance(d0, (_Handle, Variable)) or isinstance(metas[0], ArgRef)):
                return d0
            if all(isinstance(m, ValueMeta) and m.shape is None for m in metas) and same_object_across(decoded):
                return d0
            if all(isinstance(m, ValueMeta) and m.shared for m in metas):
                return d0  # merge_call's result returned unchanged: one value, as TF
            return PerReplica(decoded, self)

        try:
            return _nest.map_structure(leaf, *results)
        except ValueError:
            _assert_regroupable(results)  # containers that differ between replicas: TF's AssertionError

        def mixed(*values: Any) -> Any:  # replica 0's leaf, where another replica may hold a container
            if not any(_nest.is_nested(v) for v in values):
                return leaf(*values)
            # TF 2.21 wraps what each replica returned there as it is: PerReplica:{0: 1.0, 1: (1.0, 2.0)}
            return PerReplica([_nest.map_structure(lambda m, r=r: decode(r, m), v) for r, v in enumerate(values)], self)

        # (every container of replica 0 is matched: _assert_regroupable)
        at_leaves = [_nest.flatten_up_to(results[0], r) for r in results]
        return _nest.pack_sequence_as(results[0], [mixed(*values) for values in zip(*at_leaves, strict=True)])

    def _remote(self, rank: int, meta: ValueMeta) -> RemoteValue:
        rv = RemoteValue(meta.key, rank, self._devices[rank], meta.as_dict(), self._group.fetch, owner=self._group)
        weakref.finalize(rv, self._group.finalizer(), rank, meta.key)
        return rv

    def _select_values(self, value: DistributedValues) -> list[Any]:
        """One component per replica: TF picks component i for replica i and ignores extra ones."""
        if len(value.values) < self.num_replicas_in_sync:
            raise ValueError(
                f"{type(value).__name__} has {len(value.values)} component(s) but this strategy has "
                f"{self.num_replicas_in_sync} replica(s): it belongs to another strategy"
            )
        return list(value.values[: self.num_replicas_in_sync])

    def _variable_by_id(self, var_id: int) -> Any:

        return registered_variable(self._group_id, var_id)


def _assert_regroupable(results: list[Any], path: str = "") -> None:
    """Raise ``AssertionError``, as TF's ``regroup`` does for a ``run``'s results, where a list, tuple or dict that
    replica 0 returned is not matched by another replica's (another type, length or keys), naming both replicas
    and where in the result (``path``). Replica 0's structure leads, as in TF; a leaf of replica 0 where another
    returned a container is not checked here (TF wraps the two as they are: ``_regroup``)."""
    at = f", at {path}" if path else ""
    v0 = results[0]
    for kind in (list, tuple, dict):
        if not isinstance(v0, kind):
            continue
        for i, v in enumerate(results[1:], 1):
            if not isinstance(v, kind):
                raise AssertionError(f"replica 0 returned a {kind.__name__} where replica {i} returned "
                                     f"{_described(v)}{at}")  # fmt: skip
            if kind is dict and set(v) != set(v0):
                raise AssertionError(f"v[0].keys: {set(v0)}  v[i].keys: {set(v)} (replica 0 and replica {i}{at})")
            if kind is not dict and len(v) != len(v0):
                raise AssertionError(
                    f"Values to regroup had different lengths: len(v) == {len(v)}, len(v0) == {len(v0)} "
                    f"(replica {i} against replica 0{at})"
                )
        for key in list(v0) if kind is dict else range(len(v0)):
            _assert_regroupable([v[key] for v in results], f"{path}[{key!r}]")


def _described(leaf: Any) -> str:
    """What a replica returned at a leaf of its reply, for a message: "a float", "an array of shape (2,) float32"."""
    if isinstance(leaf, ValueMeta):
        if leaf.shape is None:
            return f"a {type(leaf.value).__name__}"
        return f"an array of shape {leaf.shape} {np.dtype(leaf.dtype).name}"
    if isinstance(leaf, VarRef):
        return "a variable"
    return "one of its arguments" if isinstance(leaf, ArgRef) else f"a {type(leaf).__name__}"


def _sent_unchanged(original: Any, digest: Any) -> bool:
    """Whether the array the notebook sent (``original``) has the ``content_digest`` a replica returned it with."""
    if isinstance(original, ArrayValue):
        original = original.numpy()
    return isinstance(original, np.ndarray) and content_digest(original) == digest
