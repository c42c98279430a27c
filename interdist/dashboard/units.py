"""Numbers as people read them: 1.2 MB, 340 MB/s, 2.5 ms, 80 µs; and the part of a device string that differs.

Plain functions on numbers and strings (no Bokeh), shared by the model's summary and the views.
"""

from __future__ import annotations

import math
from collections.abc import Iterable


def fmt_bytes(n: float) -> str:
    """``fmt_bytes(1536) == "1.5 KB"``: decimal units (as network speeds are given)."""
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} TB"  # pragma: no cover - the loop returns


def fmt_rate(bytes_per_s: float) -> str:
    """``fmt_rate(2e6) == "2.0 MB/s"``."""
    return fmt_bytes(bytes_per_s) + "/s"


def fmt_duration(seconds: float) -> str:
    """``fmt_duration(0.0025) == "2.5 ms"``, ``fmt_duration(8e-5) == "80 µs"``, ``fmt_duration(12.3) == "12.3 s"``."""
    s = abs(seconds)
    if s == 0 or math.isnan(s):
        return "0 s"
    if s < 1e-3:
        return f"{seconds * 1e6:.0f} µs"
    if s < 1:
        return f"{seconds * 1e3:.3g} ms"
    return f"{seconds:.3g} s" if s < 100 else f"{seconds:.0f} s"


def fmt_number(x: float) -> str:
    """A value as short as it stays exact enough to compare by eye: 3, 2.5, 0.001, 1.23e+08."""
    if x == int(x) and abs(x) < 1e15:
        return str(int(x))
    return f"{x:.6g}"


def fmt_values(values: Iterable[float]) -> str:
    """``[1, 2.5, -3]``; a single value without brackets."""
    vs = [fmt_number(v) for v in values]
    return vs[0] if len(vs) == 1 else "[" + ", ".join(vs) + "]"


def short_devices(devices: Iterable[str]) -> dict[str, str]:
    """Each device string shortened to the parts that tell it from the others, the device always kept.

    ``/job:localhost/replica:0/task:0/device:CPU:1`` beside ``.../device:CPU:0`` is ``CPU:1``; beside a
    device of task 1 it is ``task:0/CPU:1``.
    """
    devs = sorted({d for d in devices if d})
    parts = {d: d.strip("/").split("/") for d in devs}
    n = max((len(p) for p in parts.values()), default=0)
    same = [i for i in range(n) if len({p[i] if i < len(p) else None for p in parts.values()}) == 1]
    out = {}
    for d, p in parts.items():
        kept = [x for i, x in enumerate(p) if i not in same or x.startswith("device:")]
        out[d] = "/".join(x.removeprefix("device:") for x in kept) or d
    return out
