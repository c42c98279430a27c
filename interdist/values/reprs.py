"""Rich reprs of distributed values (``_repr_html_``) and ``visualize``, a static picture of where they live.

A repr must be cheap: a component is read from its worker only when it has at most ``SMALL``
elements (one small round trip per replica, as the text repr makes); a larger one shows its shape
and dtype, and a min/max/mean summary only when the notebook already holds its value. Every text
that reaches the HTML goes through ``html.escape``.
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

SMALL = 16  # the most elements a repr reads from a worker

# One colour per replica (Tableau 10), repeated past ten.
PALETTE = (
    "#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2",
    "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac",
)  # fmt: skip

_TABLE = 'style="border-collapse: collapse; text-align: left; font-size: 0.9em"'
_CELL = 'style="padding: 2px 8px; text-align: left; vertical-align: top"'
_DIVERGED = "background: #fde2e1"


class _NotRead:
    def __repr__(self) -> str:
        return "<not read>"


NOT_READ = _NotRead()


@dataclass
class Cell:
    """What a repr knows of one component without a large transfer."""

    device: str
    shape: tuple[int, ...] | None
    dtype: str | None
    value: Any  # the value, or NOT_READ

    @property
    def read(self) -> bool:
        return self.value is not NOT_READ

    def text(self) -> str:
        """The value (small), a summary (large, held here), or what is known of it."""
        if not self.read:
            return "not fetched" if self.shape is None else f"{_shape(self.shape)} {self.dtype} (not fetched)"
        v = self.value
        if isinstance(v, np.ndarray):
            if v.size <= SMALL:
                return np.array2string(v, separator=", ") if v.ndim else repr(v.item())
            if v.dtype.kind in "biuf" and v.size:
                return f"min {v.min():.4g}, max {v.max():.4g}, mean {v.mean():.4g}"
            return f"{_shape(v.shape)} {v.dtype.name}"
        text = repr(v)
        return text if len(text) <= 80 else text[:77] + "..."


def peek(component: Any, limit: int = SMALL) -> Cell:
    """``component`` as a ``Cell``: read only when it has at most ``limit`` elements."""
    device = str(getattr(component, "device", ""))
    peek_fn = getattr(component, "_peek", None)
    if peek_fn is not None:
        shape, dtype, value = peek_fn(limit)
        return Cell(device, shape, dtype, value)
    if isinstance(component, (np.ndarray, np.generic, int, float, complex, bool)):
        a = np.asarray(component)
        return Cell(device, a.shape, a.dtype.name, a)
    return Cell(device, None, None, component)


def size(shape: Sequence[int] | None) -> int | None:
    return None if shape is None else math.prod(shape)


def short_devices(devices: Sequence[str]) -> list[str]:
    """The part of each device string that differs between them: ``CPU:1``, ``task:1/GPU:0``."""
    parts = [d.split("/") for d in devices]
    last = [p[-1].removeprefix("device:") for p in parts]
    if len(parts) < 2 or len({len(p) for p in parts}) > 1:
        return last
    differ = [i for i in range(len(parts[0]) - 1) if len({p[i] for p in parts}) > 1]
    return ["/".join([p[i] for i in differ] + [last[k]]) for k, p in enumerate(parts)]


def divergence(cells: Sequence[Cell]) -> list[float | None] | None:
    """Each copy's largest difference from copy 0 (as ``debug.replica_divergence``); None if not all read."""
    if not all(c.read for c in cells):
        return None
    ref = cells[0].value
    out: list[float | None] = []
    for c in cells:
        try:
            a, b = np.asarray(c.value), np.asarray(ref)
            if a.shape != b.shape:
                out.append(math.inf)
            elif a.dtype.kind in "biuf" and b.dtype.kind in "biuf":
                out.append(float(np.max(np.abs(a.astype(np.float64) - b.astype(np.float64)))) if a.size else 0.0)
            else:
                out.append(0.0 if np.array_equal(a, b) else math.inf)
        except Exception:  # noqa: BLE001 - values that do not compare: say nothing about them
            out.append(None)
    return out


def _shape(shape: Sequence[int] | None) -> str:
    return "?" if shape is None else "(" + ", ".join(map(str, shape)) + ("," if len(shape) == 1 else "") + ")"


def _e(x: Any) -> str:
    return html.escape(str(x))


def row(*cells: str, style: str = "", header: bool = False) -> str:
    """A table row; ``cells`` are HTML already escaped."""
    tag = "th" if header else "td"
    attr = f' style="{style}"' if style else ""
    return f"<tr{attr}>" + "".join(f"<{tag} {_CELL}>{c}</{tag}>" for c in cells) + "</tr>"


def table(head: Sequence[str], rows: Sequence[str]) -> str:
    thead = f"<thead>{row(*head, header=True)}</thead>" if head else ""
    return f"<table {_TABLE}>{thead}<tbody>{''.join(rows)}</tbody></table>"


def card(title: str, subtitle: str, body: str) -> str:
    """The frame every interdist repr shares (``title`` and ``subtitle`` are plain text)."""
    return (
        '<div class="interdist-repr" style="font-family: var(--jp-ui-font-family, sans-serif)">'
        f'<div><strong>{_e(title)}</strong> <span style="color: #777">{_e(subtitle)}</span></div>'
        f"{body}</div>"
    )


def values_html(obj: Any, components: Sequence[Any], *, mirrored: bool, title: str | None = None) -> str:
    """The replica x value grid of a distributed value or variable; differing mirrored copies marked."""
    cells = [peek(c) for c in components]
    devices = short_devices([c.device for c in cells])
    diffs = divergence(cells) if mirrored and len(cells) > 1 else None
    shapes = {c.shape for c in cells}
    dtypes = {c.dtype for c in cells}
    about = [f"{len(cells)} replica" + ("s" if len(cells) != 1 else "")]
    if len(shapes) == 1 and None not in shapes:
        about.append(f"shape {_shape(next(iter(shapes)))}")
    if len(dtypes) == 1 and None not in dtypes:
        about.append(str(next(iter(dtypes))))
    rows = []
    for r, (c, dev) in enumerate(zip(cells, devices, strict=True)):
        d = diffs[r] if diffs is not None else None
        note = ""
        if d:
            note = " &#8800; replica 0" + (f" (max |diff| {d:.4g})" if math.isfinite(d) else "")
        rows.append(
            row(
                str(r),
                f'<span title="{_e(c.device)}">{_e(dev)}</span>',
                f"<code>{_e(c.text())}</code>{note}",
                style=_DIVERGED if d else "",
            )
        )
    foot = ""
    if mirrored and len(cells) > 1:
        if diffs is None:
            foot = "copies not compared (too large to fetch for a repr: see interdist.debug.replica_divergence)"
        else:
            n = sum(1 for d in diffs if d)
            foot = f"{n} cop{'y differs' if n == 1 else 'ies differ'} from replica 0" if n else "all copies equal"
        foot = f'<div style="color: #777; font-size: 0.85em">{_e(foot)}</div>'
    body = table(["replica", "device", "value"], rows) + foot
    return card(title or type(obj).__name__, ", ".join(about), body)


class Visualization:
    """A static coloured picture of which replica holds what: HTML saved with the notebook."""

    def __init__(self, title: str, cells: Sequence[Cell]) -> None:
        self.title = title
        self.cells = list(cells)

    def _repr_html_(self) -> str:
        devices = short_devices([c.device for c in self.cells])
        blocks = []
        for r, (c, dev) in enumerate(zip(self.cells, devices, strict=True)):
            colour = PALETTE[r % len(PALETTE)]
            blocks.append(
                f'<div title="{_e(c.device)}" style="display: inline-block; min-width: 110px; margin: 2px; '
                f"padding: 6px 10px; border-radius: 4px; background: {colour}; color: white; "
                'vertical-align: top">'
                f"<div><strong>replica {r}</strong></div><div>{_e(dev)}</div>"
                f'<div><code style="color: white; background: none">{_e(c.text())}</code></div></div>'
            )
        return card(self.title, f"{len(self.cells)} replica(s)", "<div>" + "".join(blocks) + "</div>")

    def __repr__(self) -> str:
        lines = [f"{self.title}:"]
        for r, (c, dev) in enumerate(zip(self.cells, short_devices([c.device for c in self.cells]), strict=True)):
            lines.append(f"  replica {r}" + (f" [{dev}]" if dev else "") + f": {c.text()}")
        return "\n".join(lines)


def visualize(value: Any) -> Visualization:
    """A static coloured picture of which replica (device) holds what part of ``value``.

    One block per replica, with its value when small, else its shape and dtype. The picture is
    plain HTML, so it is saved with the notebook.

    >>> import interdist as idist
    >>> print(repr(idist.visualize(idist.PerReplica([1, 2]))))
    PerReplica:
      replica 0: 1
      replica 1: 2
    """
    components = getattr(value, "values", None)
    if not isinstance(components, tuple):
        components = (value,)
    name = getattr(value, "name", None)
    title = type(value).__name__ + (f" {name!r}" if isinstance(name, str) else "")
    return Visualization(title, [peek(c) for c in components])
