"""Device strings as TensorFlow prints them.

>>> canonicalize("CPU:1")
'/job:localhost/replica:0/task:0/device:CPU:1'
>>> canonicalize("/gpu:0")
'/job:localhost/replica:0/task:0/device:GPU:0'
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import numpy as np

_SPEC = re.compile(
    r"^(?:/job:(?P<job>[^/]+))?(?:/replica:(?P<replica>\d+))?(?:/task:(?P<task>\d+))?"
    r"(?:/?(?:device:)?(?P<type>[A-Za-z_]+):(?P<index>\d+))?$"
)


@dataclass(frozen=True)
class DeviceSpec:
    job: str = "localhost"
    replica: int = 0
    task: int = 0
    device_type: str = "CPU"
    index: int = 0

    def to_string(self) -> str:
        return f"/job:{self.job}/replica:{self.replica}/task:{self.task}/device:{self.device_type}:{self.index}"


def parse(device: str, job: str = "localhost", task: int = 0) -> DeviceSpec:
    """Parse a full or short device string; ``ValueError`` for anything else."""
    if not isinstance(device, str):
        raise TypeError(f"a device must be a string such as 'CPU:0', but got {type(device).__name__}")
    m = _SPEC.match(device.strip())
    if not m or not device.strip() or m.group("type") is None:
        raise ValueError(
            f"Device {device!r} is not a device string such as 'CPU:0', 'GPU:1' or "
            "'/job:localhost/replica:0/task:0/device:CPU:0'"
        )
    dtype = m.group("type").upper()
    if dtype not in ("CPU", "GPU"):
        raise ValueError(f"Device {device!r}: interdist knows device types CPU and GPU, but got {dtype}")
    return DeviceSpec(
        job=m.group("job") or job,
        replica=int(m.group("replica") or 0),
        task=int(m.group("task") if m.group("task") is not None else task),
        device_type=dtype,
        index=int(m.group("index")),
    )


def canonicalize(device: str, job: str = "localhost", task: int = 0) -> str:
    """The full TF form of ``device``."""
    return parse(device, job, task).to_string()


def host_device(job: str = "localhost", task: int = 0) -> str:
    """The CPU of the notebook's host, where ``Strategy.reduce`` leaves its result."""
    return DeviceSpec(job=job, task=task).to_string()


# -- the destinations of StrategyExtended's reduce_to/broadcast_to (the notebook's and a replica's) --------
BAD_DESTINATIONS = "destinations must be one of a `DistributedValues` object, a tf.Variable object, or a device string."


def refuse_int32_in_batch(dtypes: list[set[Any]]) -> None:
    """``MirroredStrategy``'s ``batch_reduce_to`` (TF 2.21's ``MirroredExtended._batch_reduce_to``): int32 values
    live in host memory, so each goes to its own ``ReductionToOneDevice``, and a batch of two values or more with
    any int32 among them raises this ``ValueError`` (even two int32 values, even on one replica). Other dtypes
    mix freely. ``dtypes``: each value's dtypes (a distributed value's components may differ)."""
    if len(dtypes) > 1 and any(np.dtype(np.int32) in d for d in dtypes):
        raise ValueError(
            "Inputs to batch_reduce_to must be either all on the host or all on the compute devices. (TF's "
            "MirroredStrategy keeps int32 values in host memory and reduces them apart: reduce an int32 value on its "
            "own, or cast it to int64 or a float, as a program on TF must.)"
        )


def refuse_sequence(destinations: object, what: str) -> None:
    """TF 2.21: ``assert not isinstance(destinations, (list, tuple))``."""
    if isinstance(destinations, (list, tuple)):
        raise AssertionError(
            f"{what}() takes one destination (a device string, a variable or a distributed value), "
            f"not a {type(destinations).__name__} of them: {destinations!r}"
        )


def refuse_none(destinations: object, what: str) -> None:
    if destinations is None:
        raise AssertionError(f"{what}() requires destinations (a device string, a variable or a distributed value)")
