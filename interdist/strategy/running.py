"""``Strategy.run`` and ``run_steps``: a function on every replica, one step or many fused into one call.

Each sends the replicas one program (``dispatch.py``'s round trip, through ``DaskGroup.execute``) with
each rank's share of the arguments, and regroups what they return; a step that failed with a lost or
frozen replica gives its input iterators' batch back (``_inputs_failed``). A mixin of ``Strategy``
(base.py), which also holds ``scope`` (entered here through ``_enter_or_check``).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from interdist import _nest
from interdist.client.fn_pickle import cached_dumps
from interdist.errors import ReplicaFrozenError, WorkerLostError
from interdist.input.distributed_dataset import DistributedIterator
from interdist.protocol import pickling_for
from interdist.replica.fused import PickledFunction, fused_steps
from interdist.strategy.dispatch import ReplicaDispatch


class RunOptions:
    """Run options for ``strategy.run`` (accepted for compatibility; interdist runs eagerly).

    Examples
    --------
    >>> import interdist as idist, numpy as np
    >>> with idist.MirroredStrategy(["CPU:0", "CPU:1"]) as s:
    ...     out = s.run(lambda: np.float32(1.0), options=idist.RunOptions(experimental_enable_dynamic_batch_size=False))
    ...     [float(x) for x in s.experimental_local_results(out)]
    [1.0, 1.0]
    """

    def __init__(
        self,
        experimental_enable_dynamic_batch_size: bool = True,
        experimental_bucketizing_dynamic_shape: bool = False,
        experimental_xla_options: Any = None,
    ) -> None:
        self.experimental_enable_dynamic_batch_size = experimental_enable_dynamic_batch_size
        self.experimental_bucketizing_dynamic_shape = experimental_bucketizing_dynamic_shape
        self.experimental_xla_options = experimental_xla_options


class RunMixin(ReplicaDispatch):
    """Running a function on the replicas: ``run``, ``run_steps`` (fused steps)."""

    # Set by ``Strategy.__init__`` (base.py).
    _iterators: weakref.WeakSet[Any]
    _run_variables: list[Any]

    if TYPE_CHECKING:  # ``Strategy``'s (base.py)

        def _enter_or_check(self) -> Any: ...

    def _inputs_failed(self, structure: Any) -> None:
        """A ``run`` given ``structure`` failed with a lost or frozen replica: an iterator whose last batch
        it was hands that batch out again."""
        if not self._iterators:
            return
        leaves = {id(x) for x in _nest.flatten(structure)}
        for iterator in list(self._iterators):
            iterator._step_failed(leaves)

    def _inputs_ran(self, structure: Any) -> None:
        """A ``run`` given ``structure`` returned: a failed step's batch retried by hand is not handed out again."""
        pending = [it for it in list(self._iterators) if it._redeliver]
        if pending:
            leaves = {id(x) for x in _nest.flatten(structure)}
            for iterator in pending:
                iterator._step_ran(leaves)

    def run(self, fn: Callable[..., Any], args: Any = (), kwargs: Any = None, options: Any = None) -> Any:
        """Invokes ``fn`` on each replica, with the given arguments.

        >>> import interdist as idist, numpy as np
        >>> s = idist.MirroredStrategy(["CPU:0", "CPU:1"])
        >>> [float(v) for v in s.experimental_local_results(s.run(lambda x: x * 2.0, args=(np.float32(3.0),)))]
        [6.0, 6.0]
        >>> s.close()
        """
        __tracebackhide__ = True  # a replica's error shows the user's frames, not interdist's
        self._check_usable()
        if not callable(fn):
            raise TypeError(f"run() requires a callable fn, but got {type(fn).__name__}")
        if options is not None and not isinstance(options, RunOptions):
            raise TypeError(f"options must be a tf.distribute.RunOptions, but got {type(options).__name__}")
        args, kwargs = _nest.check_call_args(fn, args, kwargs)  # as TF: ValueError, TypeError
        with self._enter_or_check():
            self._require_cross_replica("run")
            structure = (args, kwargs)
            per_rank, originals = self._per_rank(structure)
            try:
                results = self._group.execute(fn, per_rank, system=False, what=f"run of {_fn_name(fn)}")
            except (WorkerLostError, ReplicaFrozenError):
                self._inputs_failed(structure)
                raise
            if self._iterators:
                self._inputs_ran(structure)
            out = self._regroup(results, originals)
            self._run_variables.clear()  # variables made in the step now live as long as the notebook holds them
            return out

    def run_steps(self, fn: Callable[..., Any], iterator: Any, steps: int, progress: bool = False) -> Any:
        """Run ``fn(batch)`` for the next ``steps`` batches of ``iterator`` in one call to the replicas.

        The fused form of ``for _ in range(steps): strategy.run(fn, args=(next(iterator),))`` (in the
        spirit of Keras' ``steps_per_execution``): same results, every step's events recorded, one
        notebook-worker round trip. Returns the last step's result; raises ``StopIteration`` when the
        iterator has no batch left. Stops early (after fewer steps) at the end of the data.

        ``progress=True`` shows a ``tqdm.auto`` bar of the steps in the cell (a widget in a notebook,
        text on stderr in a script): the loop then goes to the replicas in chunks of
        ``max(1, steps // 20)`` steps, one tick per chunk, with the same results.

        >>> import interdist as idist, numpy as np
        >>> with idist.MirroredStrategy(["CPU:0", "CPU:1"]) as s:
        ...     it = iter(s.experimental_distribute_dataset(idist.data.Dataset.range(8).batch(2)))
        ...     last = s.run_steps(lambda b: b * 10, it, steps=3)
        ...     [v.tolist() for v in map(np.asarray, s.experimental_local_results(last))]
        [[40], [50]]
        """

        self._check_usable()
        if not isinstance(steps, int) or steps < 1:
            raise ValueError(f"run_steps requires steps >= 1, but got {steps!r}")
        last: Any = None
        ran = 0
        if isinstance(iterator, DistributedIterator) and iterator._strategy is self and iterator._redelivers():
            # A step lost with a replica hands its batch out again: first, as ``next`` would (the fused program
            # reads the replicas' iterators, which are past it).
            last, ran = self.run(fn, args=(next(iterator),)), 1
        if ran == steps:
            return last
        if not progress:
            try:
                out, done = self._fused_call(fn, iterator, steps - ran)
            except StopIteration:
                if ran == 0:
                    raise
                return last
            return self._uneven_end(fn, iterator, out if done else last, ran + done, steps)
        from tqdm.auto import tqdm  # only here: progress=False costs no import

        chunk = max(1, steps // 20)
        with tqdm(total=steps, desc=f"run_steps of {_fn_name(fn)}", unit="step", initial=ran) as bar:
            while ran < steps:
                n = min(chunk, steps - ran)
                try:
                    out, done = self._fused_call(fn, iterator, n)
                except StopIteration:
                    if ran == 0:
                        raise
                    break  # the notebook's iterator ran out after the steps already run
                if done:
                    last, ran = out, ran + done
                    bar.update(done)
                if done < n:  # a replica ran out of data: the steps a loop of ``run`` still takes, one by one
                    last = self._uneven_end(fn, iterator, last, ran, steps, bar.update)
                    break
        return last

    def _uneven_end(
        self,
        fn: Callable[..., Any],
        iterator: Any,
        last: Any,
        ran: int,
        steps: int,
        tick: Callable[[int], Any] | None = None,
    ) -> Any:
        """After a fused call that ran fewer than its steps (``ran`` of ``steps`` so far): the steps a loop of
        ``run(fn, args=(next(iterator),))`` still takes, one ``run`` each. Uneven ends: some replicas still hold
        batches, and each step gives the others empty ones, as TF does, until no replica has one left (TF ends
        at the first such step where the element shapes are static: ``next`` says which). No step at all, and
        no batch left: ``StopIteration``."""
        while ran < steps:
            try:
                batch = next(iterator)
            except StopIteration:
                if ran == 0:
                    raise
                break
            last, ran = self.run(fn, args=(batch,)), ran + 1
            if tick is not None:
                tick(1)
        return last

    def _fused_call(self, fn: Callable[..., Any], iterator: Any, steps: int) -> tuple[Any, int]:
        """One call of ``fused_steps`` on the replicas: the last step's result and how many steps ran."""
        # ``fn`` travels inside the program's arguments; a function whose pickle can be reused goes
        # as those bytes (pickling it anew cost ~1 ms a call: client/fn_pickle.py).
        with pickling_for(self._group.group_id, self._group.world_size):  # another strategy's variable: a copy
            packed = cached_dumps(fn)
        fn_arg: Any = fn if packed is None else PickledFunction(packed)
        remote_key = getattr(iterator, "_key", None)
        ours = isinstance(iterator, DistributedIterator) and iterator._strategy is self
        taken = 0  # batches taken from a notebook-side iterator
        if remote_key is not None and getattr(iterator, "_strategy", None) is self:
            # One argument object for every rank: the group pickles it (and ``fn``) once, not per rank.
            per_rank: list[tuple[tuple[Any, ...], dict[str, Any]]] = [
                ((fn_arg, ("remote", remote_key), steps), {})
            ] * self.num_replicas_in_sync
        else:
            batches = []
            for _ in range(steps):
                try:
                    batches.append(next(iterator))
                except StopIteration:
                    break
            taken = len(batches)
            if not batches:
                raise StopIteration("run_steps: the iterator has no batch left")
            per_rank = [
                ((fn_arg, ("shipped", [self._select(r, b) for b in batches]), steps), {})
                for r in range(self.num_replicas_in_sync)
            ]
        __tracebackhide__ = True  # a replica's error shows the user's frames, not interdist's
        try:
            with self._enter_or_check():
                results = self._group.execute(
                    fused_steps, per_rank, system=True, what=f"run_steps of {_fn_name(fn)}", steps=steps
                )
        except BaseException as exc:
            if ours:
                iterator._fused_failed(exc, taken)  # which of its batches the steps used is unknown after a fault
            raise
        done = int(results[0][1].value)
        if ours and remote_key is not None:
            iterator._fused_ran(done)
        if done == 0:
            return None, 0
        out = self._regroup([r[0] for r in results])
        self._run_variables.clear()
        return out, done


def _fn_name(fn: Any) -> str:
    return str(getattr(fn, "__qualname__", getattr(fn, "__name__", type(fn).__name__)))
