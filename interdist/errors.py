"""Errors interdist raises beyond Python's own.

A replica's own exception reaches the notebook as that exception (its class and
arguments), with a note naming the replica, the step and the remote traceback,
so ``except ValueError`` works as it would with TensorFlow.
"""

from __future__ import annotations

from typing import Any


class InterdistError(RuntimeError):
    """Base class of the engine's own failures.

    A ``RuntimeError``, as TF's errors for a failed runtime are; ``except idist.InterdistError`` catches
    every failure of interdist's own (a lost worker, a collective that timed out), and none of a replica
    function's own exceptions, which reach the notebook as themselves.

    Examples
    --------
    >>> import interdist as idist
    >>> issubclass(idist.WorkerLostError, idist.InterdistError), issubclass(idist.InterdistError, RuntimeError)
    (True, True)
    """


class ReplicaError(InterdistError):
    """A replica failed in a way that cannot be re-raised as its own exception.

    ``replica`` and ``step`` say which replica failed and at which step, where known.

    Examples
    --------
    >>> import interdist as idist
    >>> e = idist.ReplicaError("replica 1 stopped", replica=1, step=3)
    >>> e.replica, e.step, isinstance(e, idist.InterdistError)
    (1, 3, True)
    """

    def __init__(self, message: str, replica: int | None = None, step: int | None = None) -> None:
        super().__init__(message)
        self.replica = replica
        self.step = step


class ReplicaFrozenError(ReplicaError):
    """A replica's process stopped answering while a step waited for it (stopped, or cut off)."""


class DivergedCopiesError(InterdistError):
    """After a fault, the copies of a mirrored variable differ between replicas (a step applied on some only)."""


class InjectedFaultError(InterdistError):
    """Raised in a replica by a fault armed with ``idist.debug.inject(..., fault="raise")``."""


class IteratorLostError(InterdistError):
    """A distributed iterator cannot hand out its next global batch after a fault (an interdist addition).

    ``next`` raises it, every time, on an iterator whose replicas cannot be brought back to the step it
    was at: a replica's worker was lost and its input pipeline does not give the same batches when
    read again (a ``shuffle`` that reshuffles each iteration, ``from_generator``), or a ``run_steps``
    over the iterator failed because a replica was lost or frozen, so which of the batches it took
    were used is unknown. ``delivered`` is the number of global batches it handed out; the message says
    which were not and how to go on (a new iterator). An ``InterdistError`` (a ``RuntimeError``, as TF's
    errors for a failed runtime), not a ``WorkerLostError``: retrying ``next`` does not help.

    Examples
    --------
    >>> import interdist as idist
    >>> e = idist.IteratorLostError("batches from 4 on were not delivered", delivered=4)
    >>> e.delivered, issubclass(idist.IteratorLostError, idist.WorkerLostError)
    (4, False)
    """

    def __init__(self, message: str, delivered: int = 0) -> None:
        super().__init__(message)
        self.delivered = delivered

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (str(self.args[0]) if self.args else "", self.delivered))


class CollectiveTimeoutError(InterdistError, TimeoutError):
    """A collective waited longer than its timeout for some replicas.

    The timeout is ``idist.config.set_collective_timeout`` (60 s unless set). Also a ``TimeoutError``,
    so ``except TimeoutError`` catches it.

    Examples
    --------
    >>> import interdist as idist
    >>> issubclass(idist.CollectiveTimeoutError, TimeoutError), issubclass(idist.CollectiveTimeoutError, RuntimeError)
    (True, True)
    """


class CollectiveAbortedError(InterdistError):
    """A collective was released because a peer replica failed or left.

    The replicas that waited for the failed one raise it, so that none hangs; the notebook reports the
    failed replica's own error first.

    Examples
    --------
    >>> import interdist as idist
    >>> issubclass(idist.CollectiveAbortedError, idist.InterdistError)
    True
    """


class WorkerLostError(InterdistError):
    """The Dask worker that ran a replica is gone.

    Examples
    --------
    >>> import interdist as idist
    >>> try:
    ...     raise idist.WorkerLostError("the worker of replica 1 is gone")
    ... except idist.InterdistError as e:
    ...     print(type(e).__name__, e)
    WorkerLostError the worker of replica 1 is gone
    """


class OutOfRangeError(Exception):
    """An iterator was asked for its next element past the end of its data.

    ``tf.errors.OutOfRangeError`` ("End of sequence") in TF: ``DistributedIterator.get_next()``
    raises it at the end, where ``next(iterator)`` raises ``StopIteration``. Not a
    ``StopIteration`` itself, so that it never ends a generator or a ``for`` loop silently.
    """


class NotADatasetError(TypeError, AttributeError):
    """Something that is not a Dataset was given where one is needed.

    A ``TypeError``, and also an ``AttributeError`` because that is what TensorFlow
    raises there (it looks for a dataset attribute and fails).
    """


class NoGPUError(InterdistError):
    """GPU devices were asked for on a machine where none can be used.

    Examples
    --------
    >>> import interdist as idist
    >>> issubclass(idist.NoGPUError, idist.InterdistError)
    True
    """


class CancelledError(InterdistError):
    """A scheduled function was cancelled before it ran, because an earlier one failed.

    ``tf.errors.CancelledError`` in TF: ``ClusterCoordinator`` cancels the functions
    still queued when it raises a function's error (from ``join``, ``done`` or
    ``schedule``); their ``RemoteValue.fetch`` raises this.
    """


class InternalError(Exception):
    """``tf.errors.InternalError``: TF raises it when a collective op is aborted, for example by
    replicas that passed different dtypes to one all-reduce."""


class ReplicaMismatchError(InternalError, ValueError):
    """Replicas passed values that cannot be combined (different dtypes or shapes) to one collective.

    TF fails these with ``InvalidArgumentError`` (a ``ValueError`` here) on one code path and with
    ``InternalError`` (an aborted collective) on another, depending on the dtype and the reduce
    path; this error is both, so code that catches either of TF's classes catches it.
    """


class UnavailableError(Exception):
    """``tf.errors.UnavailableError``: a task the program needs cannot be reached (its process is gone).

    As in TF (an ``OpError``, not a ``RuntimeError``), ``ClusterCoordinator.schedule``, ``join``,
    ``done``, ``RemoteValue.fetch`` and variable reads raise it when a parameter server is lost;
    ``task`` names it (``/job:ps/replica:0/task:0``). A parameter server's variables die with its
    process: ``ParameterServerStrategy.recover(checkpoint)`` brings them back from a checkpoint.
    """

    def __init__(self, message: str, task: str | None = None) -> None:
        super().__init__(message)
        self.task = task

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (str(self.args[0]) if self.args else "", self.task), dict(self.__dict__))


class TaskFrozenError(UnavailableError):
    """A ``ParameterServerStrategy`` task (``task`` names it) is frozen: its process is stopped (SIGSTOP,
    a debugger, a suspended VM) or has not answered a liveness probe, while a call waited for it.

    A subclass of ``UnavailableError`` because that is TF's class for it: TF's coordination service
    reports a task that stops sending heartbeats as ``UnavailableError`` ("heartbeat timeout"), and a
    call to an unreachable task fails with ``UnavailableError`` too; code that handles a lost task
    handles a frozen one. Unlike a dead task, a frozen one keeps its state: once it resumes (SIGCONT),
    the strategy goes on without ``recover``. The call that raised it did not apply anything.
    """
