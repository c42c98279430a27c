"""Device-resident all_reduce of GPU replicas: what the ``cuda_ipc``, ``nccl`` and ``gpu`` backends share.

The transport and engines are in ``device_transport.py``; here the parts that need no GPU to run
(and are tested without one): what a process lacks, the group's topology, the tags of the extra
rounds, and the bounded waits.

One all_reduce on the device (``DeviceTransport.device_all_reduce``):

1. the first time (and after a replica's worker was replaced) the replicas tell each other where
   they run (host, GPU, which device paths their process can take): the ``Topology``;
2. ``cost_model.device_choice`` picks the path from that topology and the batch size (the same
   on every rank); ``host`` returns ``None``;
3. the path's engine prepares (``cuda_ipc``: copies the batch into its exchange buffer), and every
   rank sends one small *hello* to every peer at the collective's own (step, seq): its shapes,
   dtypes and reduce op as the host path announces them, the path and what the engine needs
   (IPC handles, the NCCL communicator's generation). The hellos are checked as the host path
   checks its first message: a mismatch raises the same ``ReplicaMismatchError`` on every rank;
4. the engine reduces every array in rank order on the device (``reduce_arrays``: the bits of the
   host path) and returns CuPy arrays.

Every wait is bounded: the hellos are taken from the mailbox (timeout, abort), NCCL's blocking
calls run in a thread with a deadline and ``ncclCommAbort`` (:func:`run_bounded`), and completion
is polled with a deadline (:func:`wait_until`). CuPy is imported only inside these functions and
the engines (``cuda_ipc.py``, ``nccl.py``), never by ``import interdist``.
"""

from __future__ import annotations

import importlib.util
import os
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from interdist.collectives import cost_model
from interdist.errors import CollectiveAbortedError, CollectiveTimeoutError

HOST, CUDA_IPC, NCCL = cost_model.HOST, cost_model.CUDA_IPC, cost_model.NCCL
#: Marks a hello (a host-path message never carries it).
DEVICE_MARK = "interdist-device-1"
INSTALL = "pip install 'interdist[gpu]' (CUDA 12 drivers; 'interdist[cuda13]' for CUDA 13)"
NCCL_INSTALL = (
    "pip install nvidia-nccl-cu12 (or nvidia-nccl-cu13, matching CuPy's CUDA) beside 'interdist[gpu]', "
    "or python -m cupyx.tools.install_library --library nccl --cuda 12.x"
)
_T = TypeVar("_T")


# -- what this process lacks ------------------------------------------------------------------
def cupy_not_installed() -> str:
    """Empty when CuPy is installed here, else what to install. Imports nothing (no CUDA work in a notebook)."""
    return "" if importlib.util.find_spec("cupy") is not None else f"CuPy is not installed: {INSTALL}"


def cupy_missing() -> str:
    """What the device paths need that this process lacks ("" when CuPy imports and CUDA sees a GPU)."""
    not_installed = cupy_not_installed()
    if not_installed:
        return not_installed
    try:
        import cupy
    except Exception as e:  # noqa: BLE001 - ImportError, or CUDA libraries that fail to load: reported as text
        return f"CuPy does not import ({type(e).__name__}: {e}): reinstall it for this CUDA driver, {INSTALL}"
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    try:
        count = int(cupy.cuda.runtime.getDeviceCount())
    except Exception as e:  # noqa: BLE001 - any CUDA failure means no usable GPU; it is reported as text
        return f"CUDA sees no usable GPU ({type(e).__name__}: {e}; CUDA_VISIBLE_DEVICES={visible!r})"
    return "" if count > 0 else f"CUDA sees no GPU (CUDA_VISIBLE_DEVICES={visible!r})"


def nccl_missing() -> str:
    """What NCCL collectives need that this process lacks ("" when CuPy has a working NCCL and a GPU)."""
    missing = cupy_missing()
    if missing:
        return missing
    try:
        from cupy.cuda import nccl
    except Exception as e:  # noqa: BLE001 - a missing libnccl shows as any import error: reported as text
        return f"CuPy's NCCL module does not import ({type(e).__name__}: {e}): {NCCL_INSTALL}"
    if not getattr(nccl, "available", False):
        return f"CuPy finds no NCCL library (cupy.cuda.nccl.available is False): {NCCL_INSTALL}"
    return ""


#: What each device path needs, as the text of what is missing ("" when this process can take it).
PATH_MISSING: dict[str, Callable[[], str]] = {CUDA_IPC: cupy_missing, NCCL: nccl_missing}


def local_identity(paths: tuple[str, ...]) -> dict[str, Any]:
    """Where this replica runs: its host, its GPU (the current CUDA device's PCI bus id), its process,
    and which of ``paths`` it can take."""
    gpu = None
    if not cupy_missing():
        import cupy

        gpu = str(cupy.cuda.Device().pci_bus_id)
    able = [p for p in paths if not PATH_MISSING[p]()]
    return {"host": socket.gethostname(), "gpu": gpu, "pid": os.getpid(), "paths": able}


@dataclass(frozen=True)
class Topology:
    """Where the replicas of a group run (rank order), as they told each other."""

    identities: tuple[dict[str, Any], ...]

    @property
    def hosts(self) -> int:
        return len({i["host"] for i in self.identities})

    def _gpus(self) -> list[tuple[str, Any]]:
        return [(i["host"], i["gpu"]) for i in self.identities]

    @property
    def shared_gpu(self) -> bool:
        """Every replica on the same GPU of one host."""
        gpus = self._gpus()
        return gpus[0][1] is not None and len(set(gpus)) == 1

    @property
    def distinct_gpus(self) -> bool:
        """Every replica on a GPU of its own."""
        gpus = self._gpus()
        return all(g is not None for _, g in gpus) and len(set(gpus)) == len(gpus)

    def unable(self, path: str) -> list[int]:
        """The ranks whose process cannot take ``path`` (CuPy, a GPU or NCCL missing there)."""
        return [r for r, i in enumerate(self.identities) if path not in i["paths"]]

    def candidates(self, paths: tuple[str, ...]) -> list[str]:
        """Those of ``paths`` this group can take."""
        out = []
        for p in paths:
            fits = self.shared_gpu if p == CUDA_IPC else self.distinct_gpus if p == NCCL else False
            if p == HOST or (fits and not self.unable(p)):
                out.append(p)
        return out

    def why_not(self, path: str) -> str:
        """Why this group cannot take ``path``."""
        where = ", ".join(f"replica {r}: {i['gpu'] or 'no GPU'} on {i['host']}" for r, i in enumerate(self.identities))
        if path == CUDA_IPC and not self.shared_gpu:
            return f"'cuda_ipc' connects replicas that share one GPU, and these do not ({where}); use 'nccl' or 'gpu'"
        if path == NCCL and not self.distinct_gpus:
            return (
                f"NCCL needs one GPU per replica (it refuses two ranks on one GPU), and these share ({where}); "
                "use 'cuda_ipc' for replicas on one GPU, or 'gpu'"
            )
        unable = self.unable(path)
        return f"replica(s) {unable} cannot use {path!r}: {PATH_MISSING[path]() or 'see their workers'}"


def device_tag(seq: int, phase: int) -> int:
    """The mailbox sequence number of a device path's extra rounds (the hello uses the collective's own).

    Far below the host algorithms' second round (``-1 - seq``): the two never meet."""
    return -(1 << 40) - 8 * seq - phase


# -- bounded waits ------------------------------------------------------------------------------
#: How long a blocking call may still take to return after it was given up on (``give_up`` releases it).
GIVE_UP_WAIT = 5.0


def _raise_for(what: str, timeout: float, reason: str | None) -> None:
    if reason is not None:
        raise CollectiveAbortedError(f"{what} was aborted: {reason}")
    raise CollectiveTimeoutError(
        f"{what} timed out after {timeout:g} s on the device (a peer never joined this NCCL call, or its GPU "
        "work never finished); see interdist.config.set_collective_timeout"
    )


def wait_until(
    done: Callable[[], bool],
    timeout: float,
    aborted: Callable[[], str | None],
    give_up: Callable[[], None],
    what: str,
) -> None:
    """Poll ``done`` (a CUDA event's query) until it holds; at the deadline or an abort of the step,
    call ``give_up`` (``ncclCommAbort``) and raise ``CollectiveTimeoutError`` or ``CollectiveAbortedError``."""
    deadline = time.monotonic() + timeout
    pause = 2e-5
    while not done():
        reason = aborted()
        if reason is not None or time.monotonic() >= deadline:
            give_up()
            _raise_for(what, timeout, reason)
        time.sleep(pause)
        pause = min(pause * 2, 2e-3)


def run_bounded(
    call: Callable[[], _T],
    timeout: float,
    aborted: Callable[[], str | None],
    give_up: Callable[[], None] | None,
    what: str,
) -> _T:
    """``call()`` (a blocking NCCL call) in a helper thread, waited for at most ``timeout`` seconds and
    only while the step is not aborted; else ``give_up`` (which releases the call: the thread is given
    ``GIVE_UP_WAIT`` seconds to return) and raise. ``give_up`` None: nothing can release the call (a
    communicator being created), its thread is left behind."""
    box: dict[str, Any] = {}
    finished = threading.Event()

    def run() -> None:
        try:
            box["value"] = call()
        except BaseException as e:  # noqa: BLE001 - handed to the waiting thread, raised there
            box["error"] = e
        finally:
            finished.set()

    threading.Thread(target=run, name="interdist-device-call", daemon=True).start()
    deadline = time.monotonic() + timeout
    pause = 5e-5
    while not finished.wait(pause):
        reason = aborted()
        if reason is not None or time.monotonic() >= deadline:
            if give_up is not None:
                give_up()
                finished.wait(GIVE_UP_WAIT)
            _raise_for(what, timeout, reason)
        pause = min(pause * 2, 5e-3)
    if "error" in box:
        raise box["error"]
    return box["value"]  # type: ignore[no-any-return]


__all__ = [
    "CUDA_IPC",
    "DEVICE_MARK",
    "HOST",
    "NCCL",
    "PATH_MISSING",
    "Topology",
    "cupy_missing",
    "cupy_not_installed",
    "device_tag",
    "local_identity",
    "nccl_missing",
    "run_bounded",
    "wait_until",
]
