"""The notebook <-> replica contract: what crosses between them, as types.

Everything a program, a reply or a handle carries is named here, once:

- **group spec** (`GroupSpec`): what every replica of a group knows of it;
- **variable metadata** (`VariableMeta`): what the workers know of a distributed variable;
- **replies** (`Reply`): what a replica answers for one program, and the failure replies the
  notebook's side writes for a replica that was lost or is stuck (`lost_reply`, `stuck_reply`);
- **handle references** (`StoreRef`, `VarRef`, `ArgRef`, `ValueMeta`): how values that stay on the
  workers are named in arguments and replies;
- **resolution**: while a replica unpickles a payload (`resolving`), handles in it turn into that
  replica's own objects (`resolve_strategy`, `resolve_variable`); in the notebook they find the
  notebook's objects again.

This module imports nothing of interdist: the replica engine, the Dask worker binding and the
notebook's side all import it, never the other way round.

>>> lost_reply(OSError("gone"))["lost"]
True
>>> StoreRef("k").key
'k'
"""

from __future__ import annotations

import threading
import weakref
from typing import Any, Protocol, TypedDict

import cloudpickle


class GroupSpec(TypedDict, total=False):
    """What every replica of a group is told when it joins (``interdist_join``)."""

    world_size: int
    devices: list[str]
    kind: str  # the strategy's kind: "mirrored", "central_storage", "default", "parameter_server", ...
    parameter_devices: list[str]
    central_holder: int  # the rank holding CentralStorage's variables
    cross_device_ops: Any  # a CrossDeviceOps instance, or None
    timeout: float | None  # collective timeout in seconds (None: settings.collective_timeout)
    local_control: bool
    # Collectives: the all_reduce algorithm {"algorithm", "root"} (collectives.cross_device_ops.all_reduce_choice)
    # and the transport backend's name in collectives.registry (config.settings.collectives_backend).
    all_reduce: dict[str, Any]
    collectives_backend: str
    # The notebook's settings (interdist.config.snapshot: every key under ``interdist`` in Dask's config),
    # set in the worker's process when the replica joins (interdist.config.apply).
    config: dict[str, Any]
    # The notebook strategy's class and its extended's, as [module, qualname] pairs along their MROs
    # (``__main__`` classes left out): what the replica's view reports as its class (replica/view.py).
    strategy_class: list[list[str]]
    strategy_class_pickle: bytes | None  # the class itself (cloudpickle: by value for a notebook's class)
    strategy_name: str
    extended_class: list[list[str]]
    extended_name: str
    int32_on_host: bool  # MirroredStrategy's batch_reduce_to refuses int32 among several values (device.py)


class VariableMeta(TypedDict, total=False):
    """What the workers (and a checkpoint) know of a distributed variable; enums by name."""

    name: str
    trainable: bool
    synchronization: str  # VariableSynchronization member name
    aggregation: str  # VariableAggregation member name
    kind: str  # "mirrored" | "sync_on_read"
    strategy_kind: str
    shape: list[int]
    dtype: str
    device: str


class CreatedVariable(TypedDict):
    """A variable a replica function created in a step (``ReplicaStrategyView``), as the notebook adopts it."""

    var_id: int
    meta: VariableMeta
    shape: tuple[int, ...]
    dtype: str  # numpy's dtype.str


class Reply(TypedDict, total=False):
    """A replica's answer for one program (``ok`` and then either ``result`` or the failure fields).

    A reply from a replica also carries the step's ``events`` and the variables it ``created``;
    the failure replies the notebook's side writes (``lost_reply``, ``stuck_reply``) have neither.
    """

    ok: bool
    step: int | None
    result: bytes  # the pickled, encoded result
    error: bytes | None  # the pickled exception, when it pickles
    type: str  # the exception's class name
    message: str
    traceback: str
    frames: list[list[Any]]  # the user's frames of a failure, [file, line, function] (user_code.trim_traceback)
    secondary: bool  # a replica released by a peer's failure (CollectiveAbortedError), not a cause
    lost: bool  # the replica's worker is gone or unreachable
    stuck: bool  # the replica did not answer within the grace period after a peer failed
    frozen: bool  # the replica's process is stopped or its worker silent (client/liveness.py)
    warnings: list[str]
    output: list[list[str]]  # what the replica printed in the step: [["stdout" | "stderr", text], ...]
    user_warnings: list[list[Any]]  # the step's warnings: [category "module:qualname", message, filename, lineno]
    collectives: int  # how many collectives the replica entered in the step (absent: none)
    last_step: int  # a fused program's: the step its function returned in (absent: the program's step)
    collective: list[Any]  # [op, seq]: the collective a failed replica was in when it failed
    events: list[dict[str, Any]]  # the events of the step, in their wire form (``Event.to_msg()``)
    created: list[CreatedVariable]
    plain_updates: bytes  # pickled [(key, op, value)]: writes to plain variables (values/variables.py)


def lost_reply(
    exc: BaseException | None = None, *, type_name: str = "", message: str = "", step: int | None = None
) -> Reply:
    """The reply for a replica whose worker is gone or could not be reached."""
    reply = Reply(
        ok=False,
        lost=True,
        secondary=False,
        error=None,
        traceback="",
        type=type_name or type(exc).__name__,
        message=message or str(exc),
    )
    if step is not None:
        reply["step"] = step
    return reply


def stuck_reply(rank: int, step: int, grace: float) -> Reply:
    """The reply for a replica still running ``grace`` seconds after a peer failed."""
    return Reply(
        ok=False,
        stuck=True,
        secondary=True,
        error=None,
        type="TimeoutError",
        traceback="",
        message=f"replica {rank} did not finish step {step} within {grace:g} s of its peers failing; "
        "it is still running",
    )


def frozen_reply(rank: int, step: int, why: str) -> Reply:
    """The reply for a replica found frozen while the step waited for it (``client/liveness.py``)."""
    return Reply(
        ok=False,
        stuck=True,
        frozen=True,
        error=None,
        type="ReplicaFrozenError",
        traceback="",
        message=f"replica {rank} is frozen in step {step}: {why}",
    )


class ResolvingReplica(Protocol):
    """What resolution needs of the replica unpickling a payload: a ``replica.Replica``, named by what it has
    (this module imports nothing of interdist)."""

    group_id: str
    rank: int
    view: Any  # the strategy as the replica's own code sees it (replica/view.py)
    variables: dict[int, Any]  # var_id -> this replica's variable
    plain_proxies: dict[int, Any]  # the running program's proxies of plain variables (values/variables.py)


# The replica whose payload is being unpickled, so that handles inside it
# (variables, strategies, stored values) resolve to this replica's objects.
_resolving = threading.local()


def current_resolving() -> ResolvingReplica | None:
    return getattr(_resolving, "replica", None)


class _Resolving:
    """``resolving``'s context manager: a class, not a generator (~2 us less; around every collective)."""

    __slots__ = ("prev", "replica")

    def __init__(self, replica: ResolvingReplica) -> None:
        self.replica = replica

    def __enter__(self) -> None:
        self.prev = getattr(_resolving, "replica", None)
        _resolving.replica = self.replica

    def __exit__(self, *exc: object) -> None:
        _resolving.replica = self.prev


def resolving(replica: ResolvingReplica) -> _Resolving:
    """``with resolving(replica):`` handles unpickled inside resolve to ``replica``'s objects."""
    return _Resolving(replica)


class StoreRef:
    """Stands, in a program's arguments, for a value already in the replica's store."""

    __slots__ = ("key",)

    def __init__(self, key: str) -> None:
        self.key = key

    def __reduce__(self) -> Any:
        return (StoreRef, (self.key,))


class VarRef:
    """A variable in a reply: the notebook maps it back to its handle."""

    __slots__ = ("var_id",)

    def __init__(self, var_id: int) -> None:
        self.var_id = var_id

    def __reduce__(self) -> Any:
        return (VarRef, (self.var_id,))


class ValueMeta:
    """A result leaf in a reply: where it is kept and, when small, its value."""

    __slots__ = ("dtype", "has_value", "key", "shape", "shared", "value")

    def __init__(
        self,
        key: str,
        shape: tuple[int, ...] | None,
        dtype: str | None,
        value: Any,
        has_value: bool,
        shared: bool = False,
    ) -> None:
        self.key, self.shape, self.dtype, self.value, self.has_value = key, shape, dtype, value, has_value
        self.shared = shared  # the same object on every replica in TF (a merge_call result)

    def __reduce__(self) -> Any:
        return (ValueMeta, (self.key, self.shape, self.dtype, self.value, self.has_value, self.shared))

    def as_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"key": self.key}
        if self.shape is not None:
            d.update(shape=self.shape, dtype=self.dtype)
        if self.has_value:
            d["value"] = self.value
        return d


class ArgRef:
    """A result that is one of the program's own arguments (by identity): the notebook hands back the object it
    passed. An array the function may have changed in place comes with ``digest`` (``content_digest`` of it as
    returned) and ``meta`` (the value, kept as any result): the notebook's object if its digest is the same,
    else the value as returned."""

    __slots__ = ("digest", "index", "meta")

    def __init__(self, index: int, digest: Any = None, meta: ValueMeta | None = None) -> None:
        self.index = index
        self.digest = digest
        self.meta = meta

    def __reduce__(self) -> Any:
        return (ArgRef, (self.index, self.digest, self.meta))


VARIABLE_KEY = "variable:"  # a released key naming a variable whose notebook handle was collected


# group id -> the notebook's strategy, so that a handle unpickled in the notebook finds it again
_client_strategies: weakref.WeakValueDictionary[str, Any] = weakref.WeakValueDictionary()
_client_variables: weakref.WeakValueDictionary[tuple[str, int], Any] = weakref.WeakValueDictionary()


def register_strategy(group_id: str, strategy: Any) -> None:
    _client_strategies[group_id] = strategy


def register_variable(group_id: str, var_id: int, variable: Any) -> None:
    _client_variables[(group_id, var_id)] = variable


def registered_variable(group_id: str, var_id: int) -> Any:
    """The notebook's handle of variable ``var_id`` of group ``group_id``, or None once it was collected."""
    return _client_variables.get((group_id, var_id))


def resolve_strategy(group_id: str) -> Any:
    replica = current_resolving()
    if replica is not None and replica.group_id == group_id:
        return replica.view
    try:
        return _client_strategies[group_id]
    except KeyError:
        raise RuntimeError(
            f"A strategy of replica group {group_id} was used inside another strategy's replica function; "
            "a replica can only use its own strategy"
        ) from None


def resolve_variable(group_id: str, var_id: int, snapshot: Any = None) -> Any:
    replica = current_resolving()
    if replica is not None and replica.group_id == group_id:
        try:
            return replica.variables[var_id]
        except KeyError:
            raise ValueError(f"variable {var_id} does not exist on replica {replica.rank}") from None
    if replica is not None:
        raise ValueError(
            f"A variable created in another strategy's scope (group {group_id}) was used in a replica function "
            f"of group {replica.group_id}; variables belong to the strategy that created them"
        )
    try:
        return _client_variables[(group_id, var_id)]
    except KeyError:
        raise ValueError(f"variable {var_id} of group {group_id} no longer exists") from None


# -- pickling for a replica group ----------------------------------------------------
#
# While the notebook pickles a program for a group, handles that belong elsewhere (a plain
# variable, another strategy's variable) pickle as snapshots the replicas can use
# (values/variables.py, values/distributed_variable.py).
_pickling = threading.local()


class pickling_for:  # noqa: N801 - used as the function it was: ``with pickling_for(group, n):``
    """While the ``with`` block runs, programs are pickled for ``group_id`` (``pickling_target``). A class, not
    a ``contextmanager`` generator: every ``run`` enters it twice."""

    __slots__ = ("_prev", "_target")

    def __init__(self, group_id: str, world_size: int) -> None:
        self._target = (group_id, world_size)
        self._prev: tuple[str, int] | None = None

    def __enter__(self) -> None:
        self._prev = getattr(_pickling, "target", None)
        _pickling.target = self._target

    def __exit__(self, *exc: object) -> None:
        _pickling.target = self._prev


def pickling_target() -> tuple[str, int] | None:
    """(group id, number of replicas) of the group a program is being pickled for, else None."""
    target: tuple[str, int] | None = getattr(_pickling, "target", None)
    return target


# key -> the notebook's plain variable (or OneDevice handle) a program shipped to replicas
_client_plain: weakref.WeakValueDictionary[int, Any] = weakref.WeakValueDictionary()


def register_plain(key: int, variable: Any) -> None:
    _client_plain[key] = variable


def registered_plain(key: int) -> Any:
    return _client_plain.get(key)


def apply_plain_updates(replies: list[Any]) -> None:
    """Apply the writes replicas made to plain variables, replica by replica, in rank order (as TF's
    replica threads, which run one after the other, leave them)."""
    for reply in replies:
        data = reply.get("plain_updates")
        for key, op, value in cloudpickle.loads(data) if data else ():
            variable = _client_plain.get(key)
            if variable is not None:
                variable._apply(op, value)
