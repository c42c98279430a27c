"""``DistributedIterator``: the notebook's iterator over a distributed dataset, one step's values per ``next``.

After a ``strategy.run`` given its last batch failed because a replica was lost or frozen, the next ``next``
hands out that batch again; after a ``run_steps`` over it failed, it says which batches were seen
(``IteratorLostError``). The iterators whose batches are read on the workers build on it
(``remote_iterator``). Split from ``distributed_dataset.py``, which makes the datasets they iterate.
"""

from __future__ import annotations

import os
import sys
import warnings
from collections.abc import Iterator
from typing import Any

from interdist import _nest
from interdist.errors import IteratorLostError, OutOfRangeError, ReplicaFrozenError, WorkerLostError
from interdist.input.optional import Optional

_TRANSFORMATIONS = {
    "map",
    "batch",
    "unbatch",
    "repeat",
    "shard",
    "take",
    "skip",
    "prefetch",
    "filter",
    "shuffle",
    "cache",
    "with_options",
    "rebatch",
    "apply",
    "flat_map",
    "interleave",
    "padded_batch",
}


class _NoTransformations:
    def __getattr__(self, name: str) -> Any:
        if name in _TRANSFORMATIONS:
            raise AttributeError(
                f"'{type(self).__name__}' object has no attribute '{name}': a distributed dataset cannot be "
                f"transformed further; apply .{name}() to the dataset before distributing it"
            )
        raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")


class PerReplicaSpec:
    """The ``element_spec`` of a per-replica value: the same spec on each replica."""

    def __init__(self, spec: Any, num_replicas: int) -> None:
        self.spec = spec
        self.num_replicas = num_replicas

    def __eq__(self, other: object) -> bool:
        return isinstance(other, PerReplicaSpec) and (self.spec, self.num_replicas) == (other.spec, other.num_replicas)

    def __repr__(self) -> str:
        return f"PerReplicaSpec({', '.join([repr(self.spec)] * self.num_replicas)})"


def _check_open(strategy: Any) -> None:
    """The strategy's own "was closed" error, if it was closed."""
    if getattr(strategy, "_closed", False):
        strategy._check_usable()  # raises, saying so
        raise RuntimeError("the strategy was closed (strategy.close()); create a new one")


class DistributedIterator(_NoTransformations):
    """Iterator over a distributed dataset: each ``next`` is one step's per-replica values.

    After a ``strategy.run`` given this iterator's last batch failed because a replica was lost or
    frozen, the next ``next`` hands out that batch again (unless a later ``run`` used it: a retry), so
    that a loop such as ``for batch in it: try: strategy.run(step, args=(batch,)) except WorkerLostError:
    ...`` sees every batch once.

    Examples
    --------
    >>> import interdist as idist, numpy as np
    >>> with idist.MirroredStrategy(["CPU:0", "CPU:1"]) as s:
    ...     it = iter(s.experimental_distribute_dataset(idist.data.Dataset.range(8).batch(4)))
    ...     first = it.get_next()
    ...     sums = s.run(np.sum, args=(next(it),))  # the second global batch: [4, 5] and [6, 7]
    ...     [np.asarray(x).tolist() for x in s.experimental_local_results(first)]
    ...     float(s.reduce("SUM", sums, axis=None))
    [[0, 1], [2, 3]]
    22.0
    """

    def __init__(self, strategy: Any, steps: Iterator[Any], element_spec: Any) -> None:
        self._strategy = strategy
        self._steps = steps
        self._element_spec = element_spec
        self._last: Any = None  # the batch handed out last (a failed step's, for the next ``next``)
        self._redeliver = False  # the next ``next`` hands out ``_last`` again
        self._broken: str | None = None  # why this iterator cannot go on (IteratorLostError), once it cannot
        self._index = 0  # global batches handed out
        iterators = getattr(strategy, "_iterators", None)
        if iterators is not None:
            iterators.add(self)  # told about failed steps and restarted replicas (strategy/base.py)

    @property
    def element_spec(self) -> Any:
        return self._element_spec

    def __iter__(self) -> DistributedIterator:
        return self

    def __repr__(self) -> str:
        return f"<interdist.{type(self).__name__} over {_replicas(self._strategy)}>"

    def __next__(self) -> Any:
        value = self._repeat()
        if value is not None:
            return value
        value = next(self._steps)
        self._delivered(value)
        return value

    def _repeat(self) -> Any:
        """The checks before each ``next``; a failed step's batch to hand out again, or None."""
        _check_open(self._strategy)
        if self._broken is not None:
            raise IteratorLostError(self._broken, self._index)
        if self._redeliver and self._last is not None:
            self._redeliver = False
            return self._last
        return None

    def _redelivers(self) -> bool:
        """Whether the next ``next`` hands out a failed step's batch again (``run_steps`` runs it first)."""
        return self._redeliver and self._last is not None

    def _delivered(self, value: Any) -> None:
        self._last, self._redeliver = value, False
        self._index += 1

    def _uses_last(self, leaves: set[int]) -> bool:
        return self._last is not None and any(id(x) in leaves for x in _nest.flatten(self._last))

    def _step_failed(self, leaves: set[int]) -> None:
        """A ``run`` whose arguments' leaves are ``leaves`` failed with a lost or frozen replica."""
        if self._uses_last(leaves):
            self._redeliver = True

    def _step_ran(self, leaves: set[int]) -> None:
        """A ``run`` whose arguments' leaves are ``leaves`` returned: a failed step's batch retried."""
        if self._redeliver and self._uses_last(leaves):
            self._redeliver = False

    def _fused_failed(self, exc: BaseException, taken: int) -> None:
        """``run_steps`` over this iterator took ``taken`` batches (-1: unknown) and failed with ``exc``."""
        first = self._index - taken if taken >= 0 else self._index
        if not _is_fault(exc):
            # The replica function's own error: the steps before it ran, as in a loop of ``run``; the batches
            # after it were taken from this iterator all the same (run_steps takes its batches first).
            if taken > 1:
                _skipped_warning(first, self._index)
            return
        took = f"global batches #{first} to #{self._index - 1}" if taken > 0 else f"the global batches from #{first} on"
        self._index = first  # the batches seen for sure
        self._broken = (
            f"run_steps over this distributed iterator failed ({type(exc).__name__}: a replica was lost or frozen) "
            f"after it took {took}: which of its steps were applied is unknown, so those batches were not all "
            "seen. " + _how_to_go_on(first)
        )

    def _replicas_replaced(self, ranks: list[int]) -> None:
        """Replicas ``ranks`` were restarted on new workers (their batches here are the notebook's: nothing to do)."""

    def get_next(self) -> Any:
        """The next step's values; ``OutOfRangeError`` at the end (TF's class), where ``next`` stops."""
        try:
            return next(self)
        except StopIteration:
            raise OutOfRangeError(
                "End of sequence: the distributed iterator is exhausted (use get_next_as_optional() "
                "or a for loop to stop at the end of the data)"
            ) from None

    def get_next_as_optional(self) -> Optional:
        """The next step's values as an ``Optional``: ``has_value()`` is False at the end of the data."""
        try:
            return Optional(next(self), self.element_spec)
        except StopIteration:
            return Optional.empty(self.element_spec)


def _is_fault(exc: BaseException) -> bool:
    """A lost or frozen replica (not an error of the replica function's own)."""
    return isinstance(exc, (WorkerLostError, ReplicaFrozenError))


def _skipped_warning(first: int, end: int) -> None:
    warnings.warn(
        f"run_steps over this distributed iterator failed in its replica function after it took global batches "
        f"#{first} to #{end - 1}: the steps before the failed one ran; the failed step's batch and those after it "
        f"were not run, and the iterator goes on from batch #{end}",
        UserWarning,
        stacklevel=_user_stacklevel(),
    )


def _user_stacklevel() -> int:
    """The ``stacklevel`` of a warning made by the caller that points at the first line outside interdist."""
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    frame: Any = sys._getframe(1)
    level = 1
    while frame is not None and frame.f_code.co_filename.startswith(package):
        frame = frame.f_back
        level += 1
    return level


def _how_to_go_on(delivered: int) -> str:
    return (
        f"It handed out {delivered} global batch(es) (#0 to #{delivered - 1}); the batches from #{delivered} on were "
        "not delivered. To go on, create a new iterator (iter(dist_dataset)): it starts from the first batch, so "
        f"leave out the {delivered} already seen (.skip() on the batched dataset before distributing it)"
        if delivered
        else "It handed out no batch yet: create a new iterator (iter(dist_dataset))"
    )


def _replicas(strategy: Any) -> str:
    n = getattr(strategy, "num_replicas_in_sync", "?")
    return f"{n} replica(s) of {type(strategy).__name__}"
