"""Process-wide settings (``interdist.config``): Dask's config, under the key ``interdist``.

Every setting is a key of ``dask.config`` under ``interdist.`` (docs/settings.md lists them all). Its
default is in ``interdist/interdist.yaml``, loaded into Dask's config when this module is imported (as
distributed loads its own), its type and meaning in ``interdist/interdist-schema.yaml``. Set one as any
Dask setting: ``dask.config.set({"interdist.collectives.timeout": 120})`` in the notebook, the
environment variable ``DASK_INTERDIST__COLLECTIVES__TIMEOUT=120``, or a YAML file in Dask's config
directories (``~/.config/dask/interdist.yaml``).

interdist reads a key where it uses it, through :func:`get`, so a change applies from the next use on
(the few read once, when a module is imported, are named in docs/settings.md). The replicas of a
strategy get the notebook's values when they join it (:func:`snapshot`, :func:`apply`): a worker
process has a Dask config of its own. The ``INTERDIST_*`` environment variables of earlier versions
are still read: while one is set it wins, with a ``DeprecationWarning`` (once per variable) naming the
key that replaces it. ``settings`` keeps the attributes of earlier versions, each reading and setting
its key.

>>> import dask
>>> import interdist
>>> interdist.config.get("collectives.timeout")
60.0
>>> with dask.config.set({"interdist.collectives.timeout": 5}):
...     interdist.config.settings.collective_timeout
5.0
>>> interdist.config.set_logical_cpu_devices(2)
>>> interdist.config.get_logical_cpu_devices()
2
>>> interdist.config.set_logical_cpu_devices(1)
"""

from __future__ import annotations

import os
import sys
import threading
import warnings
from collections.abc import Mapping
from typing import Any, Generic, TypeVar, cast

import dask.config
import yaml

_lock = threading.Lock()
_HERE = os.path.dirname(os.path.abspath(__file__))

#: Every key under ``interdist.``: its type, and the environment variables of earlier versions that still
#: set it (deprecated; the first is the documented one). interdist.yaml and interdist-schema.yaml hold the
#: same keys (tests/test_config.py).
#:
#: >>> import interdist
#: >>> interdist.config.KEYS["collectives.timeout"]
#: (<class 'float'>, ('INTERDIST_COLLECTIVE_TIMEOUT',))
KEYS: dict[str, tuple[type, tuple[str, ...]]] = {
    "logical-cpu-devices": (int, ()),
    "collectives.timeout": (float, ("INTERDIST_COLLECTIVE_TIMEOUT",)),
    "collectives.backend": (str, ("INTERDIST_COLLECTIVES_BACKEND", "INTERDIST_COLLECTIVES")),
    "collectives.shm-threshold": (int, ("INTERDIST_SHM_THRESHOLD",)),
    "collectives.shm-threshold-one-peer": (int, ("INTERDIST_SHM_THRESHOLD_ONE_PEER",)),
    "collectives.spin-us": (float, ("INTERDIST_SPIN_US",)),
    "collectives.ring": (bool, ()),
    "collectives.cost-model": (str, ("INTERDIST_COST_MODEL",)),
    "collectives.rs-min-elements": (int, ("INTERDIST_RS_MIN_ELEMENTS",)),
    "collectives.rs-min-elements-one-host": (int, ("INTERDIST_RS_MIN_ELEMENTS_ONE_HOST",)),
    "collectives.rb-min-elements-one-host": (int, ("INTERDIST_RB_MIN_ELEMENTS_ONE_HOST",)),
    "collectives.split-min-elements": (int, ()),
    "liveness.frozen-after": (float, ("INTERDIST_FROZEN_AFTER",)),
    "liveness.stuck-grace": (float, ("INTERDIST_STUCK_GRACE",)),
    "liveness.interrupt-wait": (float, ("INTERDIST_INTERRUPT_WAIT",)),
    "input.timeout": (float, ("INTERDIST_INPUT_TIMEOUT",)),
    "input.direct-reads": (bool, ("INTERDIST_DIRECT_READS",)),
    "cluster.connect-timeout": (float, ("INTERDIST_CONNECT_TIMEOUT",)),
    "cluster.idle-timeout": (float, ("INTERDIST_CLUSTER_IDLE_TIMEOUT",)),
    "cluster.embedded-tls": (bool, ("INTERDIST_EMBEDDED_TLS",)),
    "cluster.local-control": (bool, ("INTERDIST_LOCAL_CONTROL",)),
    "cluster.worker-log": (str, ("INTERDIST_WORKER_LOG",)),
    "cluster.fork-workers": (bool, ()),
    "cluster.quiet-event-loops": (bool, ()),
    "replica.inline-bytes": (int, ()),
    "replica.lazy-merge-min-bytes": (int, ("INTERDIST_LAZY_MERGE_MIN_BYTES",)),
    "replica.pin-threads": (bool, ()),
    "replica.wait-spin-us": (float, ()),
    "gpu.cluster": (str, ("INTERDIST_GPU_CLUSTER",)),
    "lab.registry-dir": (str, ("INTERDIST_REGISTRY_DIR",)),
}


def _load_defaults() -> None:
    with open(os.path.join(_HERE, "interdist.yaml"), encoding="utf-8") as f:
        dask.config.update_defaults(yaml.safe_load(f))


_load_defaults()


def env_name(key: str) -> str:
    """The environment variable Dask reads for ``interdist.<key>``: ``DASK_INTERDIST__...``.


    >>> import interdist
    >>> interdist.config.env_name("collectives.shm-threshold")
    'DASK_INTERDIST__COLLECTIVES__SHM_THRESHOLD'
    """
    return "DASK_INTERDIST__" + key.upper().replace(".", "__").replace("-", "_")


def _coerce(key: str, kind: type, value: Any, source: str) -> Any:
    if value is None:
        return None
    try:
        if kind is bool:
            if isinstance(value, str):
                return value.strip().lower() not in ("0", "false", "no", "off")
            return bool(value)
        if kind is int and isinstance(value, float) and not value.is_integer():
            raise ValueError(value)
        return kind(value)
    except (TypeError, ValueError):
        raise ValueError(f"{source} must be {kind.__name__}, but is {value!r} (interdist.{key})") from None


_warned: set[str] = set()
_warned_lock = threading.Lock()


def _stacklevel() -> int:
    """``warnings.warn``'s stacklevel for the first frame outside interdist (the user's code, when it is on
    the stack): the warning is then shown as Python shows deprecations of the caller's ``__main__``."""
    frame = sys._getframe(3)  # 0: here, 1: _warn_old, 2: get, 3: get's caller
    level = 3  # warnings.warn's count, from _warn_old
    while frame is not None and frame.f_code.co_filename.startswith(_HERE + os.sep):
        frame, level = frame.f_back, level + 1  # type: ignore[assignment]  # f_back is None at the bottom
    return level


def _warn_old(var: str, key: str) -> None:
    with _warned_lock:
        if var in _warned:
            return
        _warned.add(var)
    warnings.warn(
        f"the environment variable {var} is deprecated: set the Dask config key interdist.{key} instead "
        f"(dask.config.set({{'interdist.{key}': ...}}), or the environment variable {env_name(key)}); "
        f"while {var} is set it wins over them (docs/settings.md)",
        DeprecationWarning,
        stacklevel=_stacklevel(),
    )


def get(key: str) -> Any:
    """The value of ``interdist.<key>`` in Dask's config, of the key's type (``KEYS``), or None.

    An ``INTERDIST_*`` variable of earlier versions that is set (and not empty) wins, with a
    ``DeprecationWarning`` once per variable.

    >>> import dask, interdist
    >>> with dask.config.set({"interdist.collectives.timeout": "90"}):
    ...     interdist.config.get("collectives.timeout")
    90.0
    """
    try:
        kind, old = KEYS[key]
    except KeyError:
        raise KeyError(f"interdist.{key} is not a setting of interdist (docs/settings.md)") from None
    for var in old:
        raw = os.environ.get(var)
        if raw:
            _warn_old(var, key)
            if kind is bool:
                return raw != "0"  # as these variables always were read
            return _coerce(key, kind, raw, var)
    return _coerce(key, kind, dask.config.get("interdist." + key), "interdist." + key)


def snapshot() -> dict[str, Any]:
    """Every key's value here (``INTERDIST_*`` variables included): what the replicas of a strategy get
    when they join it (``GroupSpec["config"]``, :func:`apply`).

    >>> import dask, interdist
    >>> with dask.config.set({"interdist.liveness.stuck-grace": 3}):
    ...     interdist.config.snapshot()["liveness.stuck-grace"]
    3.0
    """
    return {key: get(key) for key in KEYS}


def apply(values: Mapping[str, Any] | None) -> None:
    """Set the keys of a :func:`snapshot` taken in the notebook in this process's Dask config (a worker's,
    when a replica joins a strategy); only those that differ. An ``INTERDIST_*`` variable set here still
    wins over them.

    >>> import dask, interdist
    >>> with dask.config.set({"interdist.liveness.stuck-grace": 10.0}):  # put back at the end of the block
    ...     interdist.config.apply({"liveness.stuck-grace": 2.5})
    ...     interdist.config.get("liveness.stuck-grace")
    2.5
    """
    if not values:
        return
    changed = {}
    for key, value in values.items():
        if dask.config.get("interdist." + key, default=_MISSING) != value:
            changed["interdist." + key] = value
    if changed:
        dask.config.set(changed)  # for good in this process, not only inside a ``with``


_MISSING = object()
_T = TypeVar("_T")


class _Key(Generic[_T]):
    """An attribute of ``settings`` that reads (:func:`get`) and sets (``dask.config.set``) its key."""

    def __init__(self, key: str) -> None:
        self.key = key

    def __get__(self, obj: object, owner: type | None = None) -> _T:
        return cast(_T, get(self.key))

    def __set__(self, obj: object, value: _T) -> None:
        dask.config.set({"interdist." + self.key: value})


class _Settings:
    """The settings as attributes, as earlier versions had them: ``settings.collective_timeout = 120`` sets
    ``interdist.collectives.timeout`` in Dask's config (an ``INTERDIST_*`` variable that is set wins)."""

    logical_cpu_devices = _Key[int]("logical-cpu-devices")
    # A collective that waits longer than this for its peers raises instead of hanging.
    collective_timeout = _Key[float]("collectives.timeout")
    # A replica waiting this long for its next batch of a Dask read raises instead of hanging.
    input_timeout = _Key[float]("input.timeout")
    # Embedded clusters idle this long after their last strategy closed are shut down.
    cluster_idle_timeout = _Key[float]("cluster.idle-timeout")
    # Collectives backend between the replicas of a group on Dask workers, by its name in
    # interdist.collectives.registry ("dask"; "local" serves one replica; "shm" cannot;
    # "cuda_ipc", "nccl" and "gpu" for GPU replicas).
    collectives_backend = _Key[str]("collectives.backend")
    # After a replica failed, how long the notebook waits for the others before reporting them stuck.
    stuck_grace = _Key[float]("liveness.stuck-grace")
    # A replica whose process stays stopped (SIGSTOP, a debugger) this long while a step waits for it is
    # reported frozen (client/liveness.py), long before the collective timeout.
    frozen_after = _Key[float]("liveness.frozen-after")
    # After Kernel > Interrupt, how long the notebook waits for the replicas to leave the step.
    interrupt_wait = _Key[float]("liveness.interrupt-wait")
    # Values at most this many bytes travel with the reply of ``run`` and are shown by repr.
    inline_bytes = _Key[int]("replica.inline-bytes")
    # Programs go to replicas on the notebook's host over a Unix socket (control.py)
    # instead of Dask comms; False keeps every message on Dask comms.
    local_control = _Key[bool]("cluster.local-control")
    # Embedded clusters speak TLS with credentials made for them alone (Dask's Security.temporary),
    # so no other client on the host (another account on a shared server) can use their workers.
    # False gives plain TCP on 127.0.0.1, as before.
    embedded_tls = _Key[bool]("cluster.embedded-tls")
    # Embedded clusters' CPU workers and interdist.Server's are forked from a process that imported them
    # once (client/zygote.py); False starts each worker as a fresh ``python``.
    fork_workers = _Key[bool]("cluster.fork-workers")
    # interdist's own workers run without Dask's statistical profiler and tick their event loop every second
    # (client/worker_process.py: QUIET_EVENT_LOOPS), as does an embedded cluster's scheduler; False: Dask's own.
    quiet_event_loops = _Key[bool]("cluster.quiet-event-loops")


settings = _Settings()
"""The settings as attributes, as earlier versions had them (each reads and sets its Dask config key).

>>> import dask, interdist
>>> with dask.config.set({"interdist.input.timeout": 12}):
...     interdist.config.settings.input_timeout
12.0
"""


def set_logical_cpu_devices(n: int) -> None:
    """How many CPU devices ``MirroredStrategy()`` uses when no GPU is present (TF's logical devices).


    >>> import interdist
    >>> interdist.config.set_logical_cpu_devices(2)
    >>> interdist.config.get_logical_cpu_devices()
    2
    >>> interdist.config.set_logical_cpu_devices(1)
    """
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise ValueError(f"set_logical_cpu_devices requires a positive int, but got {n!r}")
    with _lock:
        settings.logical_cpu_devices = n


def get_logical_cpu_devices() -> int:
    """The number set by :func:`set_logical_cpu_devices` (default 1).


    >>> import interdist
    >>> interdist.config.get_logical_cpu_devices()
    1
    """
    return settings.logical_cpu_devices


def set_collective_timeout(seconds: float) -> None:
    """Seconds a collective waits for its peers before it raises ``CollectiveTimeoutError``.


    >>> import interdist
    >>> before = interdist.config.get_collective_timeout()
    >>> interdist.config.set_collective_timeout(120)
    >>> interdist.config.get_collective_timeout()
    120.0
    >>> interdist.config.set_collective_timeout(before)
    """
    if not seconds > 0:
        raise ValueError(f"collective timeout must be > 0 seconds, but got {seconds!r}")
    settings.collective_timeout = float(seconds)


def get_collective_timeout() -> float:
    """The current collective timeout in seconds.

    >>> import dask, interdist
    >>> with dask.config.set({"interdist.collectives.timeout": 45}):
    ...     interdist.config.get_collective_timeout()
    45.0
    """
    return settings.collective_timeout
