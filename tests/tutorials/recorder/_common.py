"""Shared by the recorders: TF on 2 logical CPU devices, and the NumPy data module one folder up."""

from __future__ import annotations

import os
import sys
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import tensorflow as tf  # noqa: E402

tf.get_logger().setLevel("ERROR")


def two_cpus() -> None:
    """Split the host CPU into 2 logical devices, as ``idist.config.set_logical_cpu_devices(2)`` does."""
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)


def error(e: BaseException) -> dict[str, str]:
    """An exception as recorded: class, module and the message's first lines."""
    message = str(e)[:1500].replace(str(REPO) + "/", "")  # paths relative to the repository
    return {"class": type(e).__name__, "module": type(e).__module__, "message": message}


def floats(x: object) -> list[float] | float:
    """A tensor or array as plain floats (float32 values, printed exactly as float32 widened to float64)."""
    import numpy as np

    a = np.asarray(x)
    return a.astype(np.float64).tolist()
