"""``ClusterSpec``: the set of jobs and tasks of a cluster, as ``tf.train.ClusterSpec``.

A cluster is a mapping ``{job_name: tasks}`` where ``tasks`` is either a dense
list of network addresses (task ``i`` is ``tasks[i]``) or a sparse mapping
``{task_index: address}``.  This module reproduces TensorFlow's semantics
exactly, including its quirks (they are what TF users and TF_CONFIG files rely
on):

* ``jobs`` keeps the insertion order of the dict it was built from (TF returns
  ``list(dict.keys())``); a spec copied from another spec has its jobs sorted,
  because TF round-trips the copy through a (sorted) ``ClusterDef`` proto.
* ``as_dict()`` gives a list for a job whose indices are ``0..n-1`` and a dict
  otherwise; an empty job comes back as ``{}`` (not ``[]``).
* ``__eq__`` compares the internal ``{job: {index: address}}`` mapping, so a
  spec equals another spec with the same tasks, or that sparse-style dict, but
  *not* a dict of lists.
* Sparse task indices go through ``int()``, so the string keys JSON forces on
  a TF_CONFIG (``{"worker": {"1": "host:2222"}}``) work.

There is no protobuf here, so ``as_cluster_def`` is not provided, and ``bytes``
job names / addresses are decoded to ``str`` (TF would keep them as ``bytes``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TypeAlias

__all__ = ["ClusterLike", "ClusterSpec"]


def _as_str(value: object, what: str) -> str:
    # TF passes names and addresses through ``compat.as_bytes``, which accepts
    # only ``str`` and ``bytes`` and raises TypeError for anything else.
    if isinstance(value, str):
        return value
    if isinstance(value, bytes):
        return value.decode("utf-8")
    raise TypeError(f"{what} {value!r} must be bytes or unicode")


def _as_index(key: object, job_name: str) -> int:
    # TF does ``int(i)`` on every sparse key: it accepts "1" (JSON object keys
    # are always strings) and fails with ValueError/TypeError otherwise.  We
    # keep those exception types but say which job and key are at fault.
    try:
        return int(key)  # type: ignore[call-overload,no-any-return]  # any key: int() raises, caught below
    except ValueError:
        raise ValueError(f"Task index {key!r} of job {job_name!r} is not an integer") from None
    except TypeError:
        raise TypeError(f"Task index {key!r} of job {job_name!r} must be an integer or a string of one") from None


class ClusterSpec:
    """Represents a cluster as a set of "tasks", organised into "jobs".

    Parameters
    ----------
    cluster : dict or ClusterSpec
        ``{job_name: [address, ...]}`` (dense) or
        ``{job_name: {task_index: address}}`` (sparse), or another
        :class:`ClusterSpec` (copied, jobs sorted by name).

    Raises
    ------
    TypeError
        If ``cluster`` is neither a dict nor a ClusterSpec, if a job's tasks are
        neither a list/tuple nor a dict, or if a job name or address is not a
        string.
    ValueError
        If a sparse task index is a string that is not an integer.

    Examples
    --------
    >>> spec = ClusterSpec({"worker": ["w0:2222", "w1:2222"], "ps": {1: "ps1:2222"}})
    >>> spec.jobs
    ['worker', 'ps']
    >>> spec.as_dict()
    {'worker': ['w0:2222', 'w1:2222'], 'ps': {1: 'ps1:2222'}}
    >>> spec.task_address("worker", 1)
    'w1:2222'
    >>> spec
    ClusterSpec({'ps': {1: 'ps1:2222'}, 'worker': ['w0:2222', 'w1:2222']})
    """

    # Defining __eq__ removes hashing, exactly as on TF's (mutable-looking)
    # ClusterSpec; say so explicitly for type checkers.
    __hash__ = None  # type: ignore[assignment]

    def __init__(self, cluster: ClusterLike) -> None:
        self._cluster_spec: dict[str, dict[int, str]] = {}
        if isinstance(cluster, ClusterSpec):
            # TF copies through a ClusterDef proto whose jobs are sorted.
            for job_name in sorted(cluster._cluster_spec):
                self._cluster_spec[job_name] = dict(sorted(cluster._cluster_spec[job_name].items()))
        elif isinstance(cluster, dict):
            for raw_name, tasks in cluster.items():
                job_name = _as_str(raw_name, "Job name")
                job_tasks: dict[int, str]
                if isinstance(tasks, (list, tuple)):
                    job_tasks = {i: _as_str(addr, "Task address") for i, addr in enumerate(tasks)}
                elif isinstance(tasks, dict):
                    job_tasks = {_as_index(i, job_name): _as_str(addr, "Task address") for i, addr in tasks.items()}
                else:
                    raise TypeError(
                        f"The tasks for job {job_name!r} must be a list or a dictionary from integers to strings."
                    )
                self._cluster_spec[job_name] = job_tasks
        else:
            raise TypeError(
                "`cluster` must be a dictionary mapping one or more job names to "
                "lists of network addresses, or a `ClusterSpec`"
            )

    # -- comparisons / display -------------------------------------------------
    def __bool__(self) -> bool:
        return bool(self._cluster_spec)

    def __eq__(self, other: object) -> bool:
        # TF: ``self._cluster_spec == other``.  Against another spec Python
        # then reflects to ``other.__eq__(dict)``; do that directly here.
        if isinstance(other, ClusterSpec):
            return self._cluster_spec == other._cluster_spec
        return self._cluster_spec == other

    def __ne__(self, other: object) -> bool:
        return not self.__eq__(other)

    def __repr__(self) -> str:
        key_values = self.as_dict()
        items = [f"{k!r}: {key_values[k]!r}" for k in sorted(key_values)]
        return "ClusterSpec({" + ", ".join(items) + "})"

    # -- queries ---------------------------------------------------------------
    def as_dict(self) -> dict[str, list[str] | dict[int, str]]:
        """Return ``{job: tasks}``: a list for dense jobs, a dict for sparse ones.

        Examples
        --------
        >>> ClusterSpec({"w": {0: "a:1", 1: "b:1"}, "ps": {2: "c:1"}}).as_dict()
        {'w': ['a:1', 'b:1'], 'ps': {2: 'c:1'}}
        """
        ret: dict[str, list[str] | dict[int, str]] = {}
        for job in self.jobs:
            indices = self.task_indices(job)
            if not indices:
                ret[job] = {}
            elif max(indices) + 1 == len(indices):
                # Dense: same list as TF's job_tasks(), but with no None holes.
                ret[job] = [self._cluster_spec[job][i] for i in indices]
            else:
                ret[job] = {i: self.task_address(job, i) for i in indices}
        return ret

    @property
    def jobs(self) -> list[str]:
        """Job names, in the order they were given (sorted for a copied spec)."""
        return list(self._cluster_spec.keys())

    def _job(self, job_name: str) -> dict[int, str]:
        try:
            return self._cluster_spec[job_name]
        except KeyError:
            raise ValueError(f"No such job in cluster: {job_name!r}") from None

    def num_tasks(self, job_name: str) -> int:
        """Number of tasks in ``job_name`` (ValueError if there is no such job)."""
        return len(self._job(job_name))

    def task_indices(self, job_name: str) -> list[int]:
        """Sorted valid task indices of ``job_name`` (ValueError if no such job)."""
        return sorted(self._job(job_name).keys())

    def task_address(self, job_name: str, task_index: int) -> str:
        """Address of task ``task_index`` of ``job_name``.

        Raises
        ------
        ValueError
            If there is no such job, or no such task in it.

        Examples
        --------
        >>> ClusterSpec({"worker": ["a:1"]}).task_address("worker", 0)
        'a:1'
        """
        job = self._job(job_name)
        try:
            return job[task_index]
        except KeyError:
            raise ValueError(f"No task with index {task_index!r} in job {job_name!r}") from None

    def job_tasks(self, job_name: str) -> list[str | None]:
        """Addresses of ``job_name`` as a list indexed by task index.

        As in TF, missing indices of a sparse job are ``None``, so the length
        may exceed :meth:`num_tasks`.

        Raises
        ------
        ValueError
            If there is no such job, or (as TF, whose ``max()`` fails) the job
            has no tasks at all.

        Examples
        --------
        >>> ClusterSpec({"ps": {1: "b:1"}}).job_tasks("ps")
        [None, 'b:1']
        """
        job = self._job(job_name)
        if not job:
            raise ValueError(f"Job {job_name!r} has no tasks")
        ret: list[str | None] = [None] * (max(job.keys()) + 1)
        for i, address in job.items():
            ret[i] = address
        return ret


#: What :class:`ClusterSpec` accepts: a spec, or ``{job: [addr, ...]}`` /
#: ``{job: {index: addr}}`` (index keys may be digit strings, as in JSON).
ClusterLike: TypeAlias = ClusterSpec | Mapping[str, Sequence[str] | Mapping[int, str] | Mapping[str, str]]
