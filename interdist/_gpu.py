"""Array-module helpers: NumPy on CPU replicas, CuPy on GPU replicas.

Nothing here imports CuPy unless a GPU is asked for: a CuPy array can only
exist once ``cupy`` is in ``sys.modules``, so :func:`is_cupy` looks there and
never imports it. Every function takes NumPy values (and Python values) and
returns them unchanged, so CPU code paths stay exactly as they were.

Placement rules (docs/gpu.md):

- A replica on a ``GPU`` device keeps its values (results, variables) as CuPy
  arrays on its worker's GPU, which the worker sees as CUDA device 0 (its
  ``CUDA_VISIBLE_DEVICES`` names that GPU first, as dask-cuda arranges).
- NumPy arrays given to a program on a GPU replica are copied to the device
  first (:func:`inputs_to_device`), as TF places a replica's inputs on its
  device. Python numbers and NumPy scalars stay host values.
- Whatever reaches the notebook is NumPy (:func:`to_host`): the notebook needs
  neither CuPy nor a GPU.
"""

from __future__ import annotations

import os
import sys
import threading
from types import ModuleType
from typing import Any

import numpy as np

from interdist import _nest
from interdist.errors import NoGPUError


def cupy_module() -> ModuleType | None:
    """``cupy`` if it was imported already (never imports it)."""
    return sys.modules.get("cupy")


def is_cupy(x: Any) -> bool:
    """Whether ``x`` is a CuPy array (cheap: no import)."""
    cp = sys.modules.get("cupy")
    return cp is not None and isinstance(x, cp.ndarray)


def any_cupy(values: Any) -> bool:
    cp = sys.modules.get("cupy")
    return cp is not None and any(isinstance(v, cp.ndarray) for v in values)


def xp_of(*values: Any) -> ModuleType:
    """The array module of ``values``: ``cupy`` when one of them is a CuPy array, else ``numpy``."""
    cp = sys.modules.get("cupy")
    if cp is not None and any(isinstance(v, cp.ndarray) for v in values):
        return cp
    return np


def to_host(x: Any) -> Any:
    """A CuPy array as a NumPy array (a copy, with ``.get()``); anything else unchanged."""
    return x.get() if is_cupy(x) else x


def tree_to_host(structure: Any) -> Any:
    """:func:`to_host` on every leaf of a nested structure."""

    return _nest.map_structure(to_host, structure)


def to_device(x: Any) -> Any:
    """A NumPy array (or anything array-like) as a CuPy array on the current GPU."""
    import cupy

    return x if isinstance(x, cupy.ndarray) else cupy.asarray(x)


def same_place(values: list[Any]) -> list[Any]:
    """``values`` all on the device when one of them is a CuPy array (host values are copied there)."""
    if not any_cupy(values):
        return values
    import cupy

    return [cupy.asarray(v) for v in values]


def copy(x: Any) -> Any:
    """A private copy of an array where it is: ``np.array(x, copy=True)`` for NumPy values."""
    if is_cupy(x):
        return x.copy()
    return np.array(x, copy=True)


def asarray(x: Any, dtype: Any = None) -> Any:
    """``np.asarray(x, dtype)``, keeping CuPy arrays on the device."""
    if is_cupy(x):
        return x if dtype is None else x.astype(dtype, copy=False)
    return np.asarray(x, dtype=dtype)


def host_copy(x: Any) -> Any:
    """A NumPy copy of an array wherever it is (what a read hands to the notebook)."""
    return x.get() if is_cupy(x) else np.array(x, copy=True)


def is_gpu_device(device: str) -> bool:
    """Whether a (canonical or short) device string names a GPU."""
    return "GPU:" in device.upper()


def inputs_to_device(structure: Any) -> Any:
    """NumPy arrays in ``structure`` copied to the current GPU (other leaves unchanged)."""

    def leaf(x: Any) -> Any:
        if isinstance(x, np.ndarray) and x.dtype.kind in "biufc":
            return to_device(x)
        return x

    return _nest.map_structure(leaf, structure)


def place(value: Any, device: str) -> Any:
    """A private copy of ``value`` on ``device`` (CuPy for GPU devices)."""
    if is_gpu_device(device):
        a = to_device(value)
        return a.copy() if a is value else a
    return np.array(to_host(value), copy=True)


# -- this process's GPU --------------------------------------------------------
def require_gpu(where: str = "this process") -> dict[str, Any]:
    """Check that CuPy imports and sees a GPU here; describe it, or raise ``NoGPUError``.

    Selects CUDA device 0 (a GPU worker's own GPU: its ``CUDA_VISIBLE_DEVICES``
    lists it first).
    """
    try:
        import cupy
    except Exception as e:
        raise NoGPUError(
            f"GPU replicas need CuPy in {where}: pip install 'interdist[gpu]' "
            f"(or a cupy-cuda12x / cupy-cuda13x wheel matching the driver); import cupy failed: "
            f"{type(e).__name__}: {e}"
        ) from e
    try:
        count = int(cupy.cuda.runtime.getDeviceCount())
    except Exception as e:
        raise NoGPUError(
            f"{where} has no usable GPU: CUDA reports {type(e).__name__}: {e} "
            f"(CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES')!r})"
        ) from e
    if count < 1:
        raise NoGPUError(f"{where} sees no GPU (CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES')!r})")
    cupy.cuda.Device(0).use()
    props = cupy.cuda.runtime.getDeviceProperties(0)
    name = props["name"]
    return {
        "name": name.decode() if isinstance(name, bytes) else str(name),
        "devices": count,
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "pci_bus_id": cupy.cuda.Device(0).pci_bus_id,
        "cupy": cupy.__version__,
        "pid": os.getpid(),
    }


_thread = threading.local()


def use_device0() -> None:
    """Make CUDA device 0 (the worker's GPU) current in this thread, once per thread."""
    if not getattr(_thread, "bound", False):
        import cupy

        cupy.cuda.Device(0).use()
        _thread.bound = True


def probe_worker() -> dict[str, Any]:
    """Run on a Dask worker (``client.run``): :func:`require_gpu`, errors returned as text, never raised."""
    try:
        return {"ok": True, **require_gpu("the worker")}
    except NoGPUError as e:
        return {"ok": False, "error": str(e)}
