"""``ClusterResolver``: the abstract base, as ``tf.distribute.cluster_resolver.ClusterResolver``.

A resolver answers "what does the cluster look like and who am I in it":
:meth:`ClusterResolver.cluster_spec`, :meth:`ClusterResolver.master`, and the
``task_type`` / ``task_id`` / ``rpc_layer`` properties.  Subclasses that keep
those in ``self._task_type`` / ``self._task_id`` / ``self._rpc_layer`` get the
getters and setters for free, as in TF.

TF's default :meth:`ClusterResolver.num_accelerators` opens a session to list
devices.  interdist has no TF runtime, so it counts the local NVIDIA GPUs
instead (pynvml if importable, else ``nvidia-smi -L``), once per process, and
answers ``{}`` whenever it cannot tell -- it never raises.
"""

from __future__ import annotations

import abc
import contextlib
import functools
import shutil
import subprocess
from typing import Any

from interdist.cluster_resolver.cluster_spec import ClusterSpec

__all__ = ["ClusterResolver", "format_master_url", "local_gpu_count"]

# ``nvidia-smi`` may hang on a wedged driver; a resolver must not.
_NVIDIA_SMI_TIMEOUT_S = 10.0


def format_master_url(master: str, rpc_layer: str | None = None) -> str:
    """Prefix ``master`` with ``rpc_layer + "://"`` when an rpc layer is given.

    Examples
    --------
    >>> format_master_url("host:2222", "grpc")
    'grpc://host:2222'
    >>> format_master_url("host:2222")
    'host:2222'
    """
    # TF tests truthiness, so "" behaves like None.
    if rpc_layer:
        return f"{rpc_layer}://{master}"
    return master


def _count_with_pynvml() -> int | None:
    # Any failure -- no module, a broken install, no driver (NVMLError_*) --
    # means "cannot tell"; the probe must never raise, so catch broadly.
    try:
        import pynvml  # type: ignore[import-not-found,unused-ignore]  # optional, untyped; maybe not installed
    except Exception:  # noqa: BLE001 - a broken install: cannot tell
        return None
    try:
        pynvml.nvmlInit()
    except Exception:  # noqa: BLE001 - no driver (NVMLError_*): cannot tell
        return None
    try:
        return int(pynvml.nvmlDeviceGetCount())
    except Exception:  # noqa: BLE001 - any NVML failure: cannot tell
        return None
    finally:
        with contextlib.suppress(Exception):
            pynvml.nvmlShutdown()


def _count_with_nvidia_smi() -> int | None:
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    try:
        proc = subprocess.run(
            [exe, "-L"],
            capture_output=True,
            text=True,
            timeout=_NVIDIA_SMI_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    if proc.returncode != 0:
        return None
    # One "GPU <i>: <name> (UUID: ...)" line per GPU; MIG devices are indented
    # "  MIG ..." lines under their GPU and are not counted separately.
    return sum(1 for line in proc.stdout.splitlines() if line.startswith("GPU "))


@functools.lru_cache(maxsize=1)
def local_gpu_count() -> int:
    """Number of NVIDIA GPUs visible to this process (0 when unknown).

    Probed lazily on first use and cached: the device set of a host does not
    change during a run, and ``nvidia-smi`` costs a process spawn.

    Examples
    --------
    >>> isinstance(local_gpu_count(), int)
    True
    """
    for probe in (_count_with_pynvml, _count_with_nvidia_smi):
        count = probe()
        if count is not None:
            return max(count, 0)
    return 0


class ClusterResolver(abc.ABC):
    """Abstract class for all cluster resolvers.

    Subclasses implement :meth:`cluster_spec` and :meth:`master`, re-reading
    their source on every call rather than caching (the cluster may change).

    Examples
    --------
    >>> class Fixed(ClusterResolver):
    ...     def cluster_spec(self) -> ClusterSpec:
    ...         return ClusterSpec({"worker": ["w0:2222"]})
    ...     def master(self, task_type=None, task_id=None, rpc_layer=None) -> str:
    ...         return ""
    >>> r = Fixed()
    >>> r.task_type is None, r.environment
    (True, '')
    >>> r.task_type = "worker"
    >>> r.task_type
    'worker'
    """

    @abc.abstractmethod
    def cluster_spec(self) -> ClusterSpec:
        """Return the current :class:`ClusterSpec` of the cluster."""
        raise NotImplementedError()

    @abc.abstractmethod
    def master(
        self,
        task_type: str | None = None,
        task_id: int | None = None,
        rpc_layer: str | None = None,
    ) -> str:
        """Return the name or URL of the session master (``""`` if none)."""
        raise NotImplementedError()

    def num_accelerators(
        self,
        task_type: str | None = None,
        task_id: int | None = None,
        config_proto: Any = None,
    ) -> dict[str, int]:
        """Return ``{"GPU": n}`` for the local GPUs, or ``{}`` when there are none.

        ``task_type``, ``task_id`` and ``config_proto`` are accepted for TF
        compatibility; the default implementation can only see this host.

        Examples
        --------
        >>> from interdist.cluster_resolver import SimpleClusterResolver
        >>> SimpleClusterResolver(ClusterSpec({})).num_accelerators()
        {}
        """
        del task_type, task_id, config_proto  # only the local host is visible
        n = local_gpu_count()
        return {"GPU": n} if n > 0 else {}

    @property
    def environment(self) -> str | None:
        """``"google"`` inside Google, ``""`` elsewhere (always ``""`` here)."""
        return ""

    @property
    def task_type(self) -> str | None:
        """Name of this process's job (``"chief"``, ``"worker"``, ``"ps"``...), or None."""
        return getattr(self, "_task_type", None)

    @task_type.setter
    def task_type(self, task_type: str | None) -> None:
        self._task_type = task_type

    @property
    def task_id(self) -> int | None:
        """Index of this process within its job, or None."""
        return getattr(self, "_task_id", None)

    @task_id.setter
    def task_id(self, task_id: int | None) -> None:
        self._task_id = task_id

    @property
    def rpc_layer(self) -> str | None:
        """Protocol the tasks talk over (e.g. ``"grpc"``), or None."""
        return getattr(self, "_rpc_layer", None)

    @rpc_layer.setter
    def rpc_layer(self, rpc_layer: str | None) -> None:
        self._rpc_layer = rpc_layer
