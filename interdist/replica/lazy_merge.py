"""``merge_call``'s arguments, gathered only when ``merge_fn`` needs them.

TF hands ``merge_fn`` one ``PerReplica`` per argument holding every replica's value.
interdist's replicas are processes, so "every replica's value" means moving them:
an all-gather puts (N-1) copies of each argument on every replica, where what
``merge_fn`` almost always does with them (an optimizer's
``batch_reduce_to(SUM, grads_and_vars)``) needs one all-reduce.

So large arrays among the arguments stay where they are. Each replica exchanges a
skeleton of its arguments: the arrays of at least ``interdist.replica.lazy-merge-min-bytes`` are replaced by
a ``Held`` (their index, shape and dtype), everything else travels as before. Each
such leaf becomes a ``LazyPerReplica``:

- ``reduce`` / ``reduce_to`` / ``batch_reduce_to`` of it (axis ``None``) is one
  all-reduce of the local values, batched over a ``batch_reduce_to``: bit for bit what
  reducing the gathered values gives (both add in rank order, ``algorithms.py``);
- its own replica's component (``extended.update``'s ``args``, ``merge_fn``'s result
  handed back to each replica) is the local array: nothing moves;
- anything else (``.values``, ``experimental_local_results``, ``gather``, a ``repr``)
  gathers every held array of this ``merge_call`` at once, one exchange, and from then on
  it is an ordinary ``PerReplica``.

Each replica runs ``merge_fn`` (context.py), and a ``merge_fn`` does the same thing on
every replica, so the collectives above happen in the same order everywhere. Every
decision is taken from the skeletons, which every replica holds alike, never from what
this replica held: a replica may hold arrays its peers send (a fault armed at
``"all_reduce"`` holds back small arrays too, so that the reduction it stops is a real
all-reduce: ``faults.holds_back``), and a leaf held by any replica is then reduced by one
all-reduce, or gathered, on every replica alike. Values
from other replicas exist only while ``merge_fn`` runs: a held value kept and read after
``merge_fn`` returned raises a ``RuntimeError`` (the peers have moved on).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from interdist import _gpu, config
from interdist.collectives.algorithms import COLLECTIVE_DTYPES
from interdist.reduce_op import ReduceOp
from interdist.replica import faults
from interdist.values.distributed import PerReplica

if TYPE_CHECKING:
    from interdist.replica.replica import Replica

# Arrays at least this big are held back; smaller ones travel with the skeleton (one exchange
# then does it all, where a held value costs a second collective): ``interdist.replica.lazy-merge-min-bytes``
# (64 KiB), read at each merge_call.


@dataclass(frozen=True)
class Held:
    """What the skeleton carries for an array its replica kept: enough to plan a reduction."""

    index: int
    shape: tuple[int, ...]
    dtype: str


class HeldArgs:
    """One ``merge_call``'s held arrays on this replica, and the one gather of them all."""

    def __init__(self, replica: Replica) -> None:
        self._r = replica
        self.rank = replica.rank
        self.local: list[Any] = []
        self._gathered: list[list[Any]] | None = None
        self.open = True  # merge_fn is running: the peers are at the same merge_call
        self.min_bytes: int = 0 if faults.holds_back(replica) else config.get("replica.lazy-merge-min-bytes")

    def hold(self, x: Any) -> Any:
        """``x`` itself, or a ``Held`` standing for it when it is a large array."""
        if (type(x) is np.ndarray or _gpu.is_cupy(x)) and x.nbytes >= self.min_bytes:
            self.local.append(x)
            return Held(len(self.local) - 1, tuple(x.shape), np.dtype(x.dtype).str)
        return x

    def value(self, rank: int, entry: Any) -> Any:
        """Replica ``rank``'s value at a leaf whose skeleton entry from that replica is ``entry``."""
        if not isinstance(entry, Held):
            return entry
        if rank == self.rank:
            return self.local[entry.index]
        return self.gather()[rank][entry.index]

    def gather(self) -> list[list[Any]]:
        """Every replica's held arrays: one exchange, the first time any replica's are needed."""
        if self._gathered is None:
            if not self.open:
                raise RuntimeError(
                    "the other replicas' values of a merge_call argument were read after merge_fn returned; "
                    "they exist only while merge_fn runs (read them inside merge_fn, e.g. with "
                    "strategy.experimental_local_results)"
                )
            nbytes = int(sum(getattr(a, "nbytes", 0) for a in self.local))
            self._gathered = self._r.exchange("merge_call", self.local, nbytes)
        return self._gathered

    @property
    def gathered(self) -> bool:
        return self._gathered is not None


class LazyPerReplica(PerReplica):
    """A ``PerReplica`` of a ``merge_call`` argument whose other replicas' values are fetched on use."""

    def __init__(self, held: HeldArgs, entries: list[Any]) -> None:  # no super().__init__: nothing gathered yet
        self._held = held
        self._entries = entries
        self._strategy = None
        self._cache: tuple[Any, ...] | None = None

    @property
    def _values(self) -> tuple[Any, ...]:
        if self._cache is None:
            if any(isinstance(e, Held) for e in self._entries):
                self._held.gather()  # on every replica, also the one that held them all itself
            self._cache = tuple(self._held.value(r, e) for r, e in enumerate(self._entries))
        return self._cache

    @_values.setter
    def _values(self, values: tuple[Any, ...]) -> None:
        self._cache = tuple(values)

    def _component(self, replica_id: int) -> Any:
        if replica_id == self._held.rank and self._cache is None:
            return self._held.value(replica_id, self._entries[replica_id])
        return self._values[replica_id]

    def local_dtype(self) -> np.dtype[Any]:
        """The dtype of replica 0's value, without fetching it (``batch_reduce_to``'s check)."""
        e = self._entries[0]
        meta = _array_meta(e)
        return np.dtype(meta[1]) if meta is not None else np.asarray(e).dtype  # a value the skeleton carried

    def reducible(self) -> bool:
        """Can an all-reduce of the local values stand for reducing the gathered ones?

        Only while nothing was gathered, when some replica held its array back and every
        replica's is an array of the same shape and dtype, of a dtype the collectives reduce
        (else the reduction of the gathered values decides, with its errors).
        """
        if self._cache is not None or self._held.gathered or not self._held.open:
            return False
        metas = [_array_meta(e) for e in self._entries]
        m0 = metas[0]
        return (
            m0 is not None
            and any(isinstance(e, Held) for e in self._entries)
            and all(m == m0 for m in metas)
            and np.dtype(m0[1]).name in COLLECTIVE_DTYPES
        )


def _array_meta(entry: Any) -> tuple[tuple[int, ...], str] | None:
    """(shape, dtype) of a skeleton entry that is an array, held back or carried; None for anything else."""
    if isinstance(entry, Held):
        return entry.shape, entry.dtype
    if type(entry) is np.ndarray or _gpu.is_cupy(entry):
        return tuple(entry.shape), np.dtype(entry.dtype).str
    return None


def all_reduce_held(replica: Replica, op: ReduceOp, values: list[LazyPerReplica]) -> list[Any]:
    """One all-reduce of the local values of ``values`` (all ``reducible()``): every replica's results."""
    leaves = [v._component(replica.rank) for v in values]
    nbytes = int(sum(getattr(a, "nbytes", 0) for a in leaves))
    out: list[Any] = replica.collective(
        "all_reduce", nbytes, lambda s, q, w: replica.collectives.all_reduce(s, q, leaves, op, w)
    )
    return out
