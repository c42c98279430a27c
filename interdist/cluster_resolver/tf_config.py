"""``TFConfigClusterResolver``: the cluster from the ``TF_CONFIG`` environment variable.

``TF_CONFIG`` is the JSON object TF's multi-worker tooling sets on every task::

    {"cluster": {"chief": ["host0:2222"], "worker": ["host1:2222", "host2:2222"],
                 "ps": ["host3:2222"]},
     "task": {"type": "worker", "index": 1},
     "rpc_layer": "grpc"}

As in TF, the variable is read lazily, on every query, so a resolver created
before ``TF_CONFIG`` is set (or changed) sees the current value.

Validation.  TF parses ``TF_CONFIG`` with ``json.loads`` and otherwise trusts
it; mistakes then surface much later as obscure errors (``'>=' not supported
between 'NoneType' and 'int'`` inside a strategy, ``No such job in cluster:
None``...).  Here every read validates the whole document and raises a
``ValueError`` naming the field.  We stay lenient exactly where TF is, because
real launchers rely on it:

* ``TF_CONFIG`` unset: empty cluster, no task, ``master() == ""``.
* no ``task`` (or ``"task": {}``): ``task_type``/``task_id`` are None.
* a ``task`` without a ``cluster`` (or with an empty one) is not cross-checked.
* an ``evaluator`` task need not be listed in the cluster (the evaluator runs
  beside the training cluster; TF Estimator even forbids listing it).
* ``index`` may be a string of digits (TF applies ``int()``), and sparse job
  keys are strings of digits (JSON has no integer keys).

Stricter than TF (each would make TF fail later, or silently misbehave):
the document is not a JSON object; ``cluster`` is not an object of lists /
objects of address strings; ``task`` is not an object, lacks ``type`` or
``index``, has a non-string ``type`` or a non-integer / negative ``index``;
the task type is missing from a non-empty cluster; the index is not a task of
that job; ``rpc_layer`` / ``environment`` / ``session_master`` are not strings.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from typing import Any, NamedTuple

from interdist.cluster_resolver.base import ClusterResolver, format_master_url
from interdist.cluster_resolver.cluster_spec import ClusterSpec

__all__ = ["TFConfigClusterResolver", "load_tf_config"]

_TF_CONFIG_ENV = "TF_CONFIG"
_SESSION_MASTER_KEY = "session_master"
_STRING_KEYS = ("rpc_layer", "environment", _SESSION_MASTER_KEY)
# The one task type that may run outside the cluster it reads (see above).
_DETACHED_TASK_TYPES = frozenset({"evaluator"})


# What TF's int() accepts from a string, minus exotic Unicode digits and "_".
_INT_STRING = re.compile(r"\s*[+-]?[0-9]+\s*")


def _bad(field: str, problem: str) -> ValueError:
    return ValueError(f"TF_CONFIG field {field!r} {problem}")


def _parse_index(value: object, field: str) -> int:
    # bool is an int subclass, but `"index": true` is surely a mistake.
    if isinstance(value, int) and not isinstance(value, bool):
        index = value
    elif isinstance(value, str) and _INT_STRING.fullmatch(value):
        index = int(value)  # TF's int() accepts "1"; so do we
    else:
        raise _bad(field, f"must be an integer, got {value!r}")
    if index < 0:
        raise _bad(field, f"must be non-negative, got {index}")
    return index


def _validate_cluster(cluster: object) -> dict[str, dict[int, str]]:
    if not isinstance(cluster, dict):
        raise _bad("cluster", f"must be an object mapping job names to tasks, got {cluster!r}")
    out: dict[str, dict[int, str]] = {}
    for job, tasks in cluster.items():
        field = f"cluster.{job}"
        if isinstance(tasks, list):
            pairs = list(enumerate(tasks))
        elif isinstance(tasks, dict):
            pairs = [(_parse_index(k, f"{field} key"), v) for k, v in tasks.items()]
        else:
            raise _bad(
                field,
                f"must be a list of addresses or an object {{index: address}}, got {tasks!r}",
            )
        for i, address in pairs:
            if not isinstance(address, str):
                raise _bad(f"{field}[{i}]", f"must be an address string, got {address!r}")
        out[job] = dict(pairs)
    return out


def _validate_task(task: object, cluster: dict[str, dict[int, str]] | None) -> tuple[str, int] | None:
    if not isinstance(task, dict):
        raise _bad("task", f"must be an object with 'type' and 'index', got {task!r}")
    if not task:
        return None  # TF treats {} exactly like a missing task
    for key in ("type", "index"):
        if key not in task:
            raise _bad("task", f"is missing {key!r}: {task!r}")
    task_type = task["type"]
    if not isinstance(task_type, str) or not task_type:
        raise _bad("task.type", f"must be a non-empty string, got {task_type!r}")
    index = _parse_index(task["index"], "task.index")
    if cluster:
        if task_type not in cluster:
            if task_type not in _DETACHED_TASK_TYPES:
                raise _bad(
                    "task.type",
                    f"is {task_type!r}, which is not a job of the cluster {sorted(cluster)}",
                )
        elif index not in cluster[task_type]:
            raise _bad(
                "task.index",
                f"is {index}, but job {task_type!r} has tasks {sorted(cluster[task_type])}",
            )
    return task_type, index


class _Parsed(NamedTuple):
    config: dict[str, Any]
    task: tuple[str, int] | None


def _read(environ: Mapping[str, str] | None = None) -> _Parsed:
    env = os.environ if environ is None else environ
    raw = env.get(_TF_CONFIG_ENV)
    if raw is None:
        return _Parsed({}, None)
    try:
        config = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ValueError(f"TF_CONFIG is not valid JSON: {exc}") from exc
    if not isinstance(config, dict):
        # ValueError, not TypeError: the *value* of TF_CONFIG is malformed.
        raise ValueError(f"TF_CONFIG must be a JSON object, got {config!r}")
    cluster = _validate_cluster(config["cluster"]) if "cluster" in config else None
    task = _validate_task(config["task"], cluster) if "task" in config else None
    for key in _STRING_KEYS:
        if config.get(key) is not None and not isinstance(config[key], str):
            raise _bad(key, f"must be a string, got {config[key]!r}")
    return _Parsed(config, task)


def load_tf_config(environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Read, parse and validate ``TF_CONFIG`` (``{}`` when it is unset).

    Parameters
    ----------
    environ : mapping, optional
        Where to look up ``TF_CONFIG`` (default ``os.environ``).

    Returns
    -------
    dict
        The parsed document, unchanged.

    Raises
    ------
    ValueError
        Naming the offending field (see the module docstring).

    Examples
    --------
    >>> load_tf_config({"TF_CONFIG": '{"cluster": {"worker": ["w0:1"]}}'})
    {'cluster': {'worker': ['w0:1']}}
    >>> load_tf_config({})
    {}
    """
    return _read(environ).config


def _job_span(spec: ClusterSpec, job: str) -> int:
    indices = spec.task_indices(job)
    return max(indices) + 1 if indices else 0


class TFConfigClusterResolver(ClusterResolver):
    """A resolver reading the cluster and this task from ``TF_CONFIG``.

    Parameters
    ----------
    task_type, task_id, rpc_layer : optional
        Override ``task.type``, ``task.index`` and ``rpc_layer`` of TF_CONFIG.
    environment : str, optional
        Overrides ``environment`` of TF_CONFIG.

    Examples
    --------
    >>> import json, os
    >>> os.environ["TF_CONFIG"] = json.dumps({
    ...     "cluster": {"worker": ["w0:2222", "w1:2222"], "ps": ["p0:2222"]},
    ...     "task": {"type": "worker", "index": 1}, "rpc_layer": "grpc"})
    >>> r = TFConfigClusterResolver()
    >>> r.task_type, r.task_id, r.master()
    ('worker', 1, 'grpc://w1:2222')
    >>> r.master("ps", 0, rpc_layer="")
    'p0:2222'
    >>> r.cluster_spec().as_dict()
    {'worker': ['w0:2222', 'w1:2222'], 'ps': ['p0:2222']}
    >>> del os.environ["TF_CONFIG"]
    >>> r.cluster_spec(), r.master(), r.task_type
    (ClusterSpec({}), '', None)
    """

    def __init__(
        self,
        task_type: str | None = None,
        task_id: int | None = None,
        rpc_layer: str | None = None,
        environment: str | None = None,
    ) -> None:
        self._task_type = task_type
        self._task_id = task_id
        self._rpc_layer = rpc_layer
        self._environment = environment

    @property
    def task_type(self) -> str | None:
        """The constructor's task type, else ``task.type`` of TF_CONFIG, else None."""
        if self._task_type is not None:
            return str(self._task_type)
        task = _read().task
        return None if task is None else task[0]

    @task_type.setter
    def task_type(self, task_type: str | None) -> None:
        self._task_type = task_type

    @property
    def task_id(self) -> int | None:
        """The constructor's task id, else ``task.index`` of TF_CONFIG, else None."""
        if self._task_id is not None:
            return int(self._task_id)
        task = _read().task
        return None if task is None else task[1]

    @task_id.setter
    def task_id(self, task_id: int | None) -> None:
        self._task_id = task_id

    @property
    def rpc_layer(self) -> str | None:
        """The constructor's rpc layer, else ``rpc_layer`` of TF_CONFIG, else None."""
        if self._rpc_layer is not None:
            return self._rpc_layer
        value: str | None = load_tf_config().get("rpc_layer")
        return value

    @rpc_layer.setter
    def rpc_layer(self, rpc_layer: str | None) -> None:
        self._rpc_layer = rpc_layer

    @property
    def environment(self) -> str | None:
        """The constructor's environment, else ``environment`` of TF_CONFIG, else None."""
        if self._environment is not None:
            return self._environment
        value: str | None = load_tf_config().get("environment")
        return value

    def cluster_spec(self) -> ClusterSpec:
        """A :class:`ClusterSpec` of ``cluster`` in TF_CONFIG (empty when absent)."""
        config = load_tf_config()
        if "cluster" not in config:
            return ClusterSpec({})
        return ClusterSpec(config["cluster"])

    def master(
        self,
        task_type: str | None = None,
        task_id: int | None = None,
        rpc_layer: str | None = None,
    ) -> str:
        """Address of the given (default: this) task, as TF computes it.

        In order: ``session_master`` of TF_CONFIG if set; ``""`` when the
        cluster is empty or is a single job with a single task; otherwise the
        address of ``task_type``/``task_id`` (each defaulting to this task's),
        prefixed by ``rpc_layer + "://"`` when an rpc layer is known.

        Raises
        ------
        ValueError
            If TF_CONFIG is malformed, no task is given or configured, or the
            task is not in the cluster.
        """
        config = load_tf_config()
        session_master = config.get(_SESSION_MASTER_KEY)
        if session_master is not None:
            return str(session_master)
        spec = self.cluster_spec()
        jobs = spec.jobs
        # TF measures ``len(job_tasks(job))``, i.e. max index + 1, so a sparse
        # job {3: addr} does not count as "a single task"; an empty job (where
        # TF's job_tasks would crash) counts as zero.
        if not jobs or (len(jobs) == 1 and _job_span(spec, jobs[0]) == 1):
            return ""
        task_type = task_type if task_type is not None else self.task_type
        task_id = task_id if task_id is not None else self.task_id
        rpc_layer = rpc_layer if rpc_layer is not None else self.rpc_layer
        if task_type is None or task_id is None:
            # TF fails here with "No such job in cluster: None"; say why.
            raise ValueError(f"master(): no task_type/task_id given and TF_CONFIG has no 'task' (cluster jobs: {jobs})")
        return format_master_url(spec.task_address(task_type, task_id), rpc_layer)

    def num_accelerators(
        self,
        task_type: str | None = None,
        task_id: int | None = None,
        config_proto: Any = None,
    ) -> dict[str, int]:
        """``{"GPU": n}`` for the GPUs of this host, ``{}`` when there are none."""
        task_type = self.task_type if task_type is None else task_type
        task_id = self.task_id if task_id is None else task_id
        return super().num_accelerators(task_type, task_id, config_proto)
