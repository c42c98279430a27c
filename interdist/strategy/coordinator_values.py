"""What a ``ClusterCoordinator``'s steps give back to the notebook: ``RemoteValue`` and ``PerWorkerValues``.

A ``RemoteValue`` is the future result of one scheduled step: its value, or the error the worker
raised, rebuilt here from the worker's reply (``_rebuild_error``, which also serves the per-worker
datasets). Kept apart from the scheduling (``coordinator.py``), which fills these values in.
"""

from __future__ import annotations

import threading
from typing import Any

import cloudpickle


class RemoteValue:
    """The future result of a scheduled step (``tf.distribute.experimental.coordinator.RemoteValue``).

    ``ClusterCoordinator.schedule`` returns one at once; ``fetch`` waits for the step's result.

    Examples
    --------
    >>> import interdist as idist
    >>> rv = idist.experimental.coordinator.RemoteValue("step-0")  # as a step just scheduled has
    >>> rv, rv.done()
    (<RemoteValue step-0 pending>, False)

    With a coordinator (skipped: it needs a Dask cluster with ps and worker tasks;
    ``ParameterServerStrategy``'s example runs it):

    >>> rv = coordinator.schedule(lambda: np.float32(2.0))  # doctest: +SKIP
    >>> float(rv.fetch()), rv.done()  # doctest: +SKIP
    (2.0, True)
    """

    def __init__(self, step_id: str) -> None:
        self.step_id = step_id
        self._done = threading.Event()
        self._value: Any = None
        self._error: BaseException | None = None
        self.attempts = 0
        self.worker: str | None = None  # the task that ran it

    def _set(self, value: Any = None, error: BaseException | None = None) -> None:
        self._value, self._error = value, error
        self._done.set()

    def fetch(self) -> Any:
        """Wait for the step and return its result (as NumPy values); raise its error if it failed."""
        self._done.wait()
        if self._error is not None:
            raise self._error
        return self._value

    def get(self) -> Any:
        """The same as ``fetch`` (TF's ``get`` returns the value without copying it to the host)."""
        return self.fetch()

    def done(self) -> bool:
        return self._done.is_set()

    def __repr__(self) -> str:
        state = "done" if self.done() else "pending"
        return f"<RemoteValue {self.step_id} {state}>"


class PerWorkerValues:
    """One value per worker (``tf.distribute.experimental.coordinator.PerWorkerValues``).

    A step given one as an argument gets the value of the worker that runs it (as a
    ``PerWorkerIterator``, a subclass, gives each step its worker's iterator).

    Examples
    --------
    >>> import interdist as idist
    >>> idist.experimental.coordinator.PerWorkerValues((1.0, 2.0))
    PerWorkerValues((1.0, 2.0))
    """

    def __init__(self, values: tuple[Any, ...]) -> None:
        self._values = tuple(values)

    def __repr__(self) -> str:
        return f"PerWorkerValues({self._values!r})"


def _rebuild_error(reply: dict[str, Any], step_id: str, task_index: int) -> BaseException:
    exc: BaseException | None = None
    if reply.get("error") is not None:
        try:
            exc = cloudpickle.loads(reply["error"])
        except Exception:  # noqa: BLE001 - an exception that does not unpickle here: rebuilt from its text
            exc = None
    if exc is None:
        exc = RuntimeError(f"{reply['type']}: {reply['message']}")
    try:
        exc.add_note(
            f"interdist: raised in step {step_id} on worker:{task_index}\n--- remote traceback ---\n"
            f"{reply.get('traceback', '')}"
        )
    except Exception:  # noqa: BLE001, S110 - the note is extra: an exception that refuses it is raised without it
        pass
    return exc
