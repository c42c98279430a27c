"""Placement as a picture: hosts, then workers, then devices, then each variable's copies on them.

In the spirit of JAX's ``jax.debug.visualize_array_sharding``: one box per host, inside it one per
worker, inside that one per device (a replica's, the parameter device of central storage, or a
parameter-server task), and in each device one chip per variable copy it holds, coloured by
variable so that the copies of one variable are seen together. A copy whose values differ from the
other copies' (at the same step) has a red border.

Two renderers share one layout (plain rectangles and text, no Bokeh here): the Bokeh view
(``components/placement_diagram.py``) and ``to_svg``, a standalone SVG that is saved with the
notebook and shows with no kernel (``idist.debug.visualize_placement``).
"""

from __future__ import annotations

import html
from collections.abc import Iterable
from dataclasses import dataclass, field

from interdist.dashboard.model import DashboardModel
from interdist.dashboard.units import short_devices

# Light colours (Tableau 20's light half, then its dark half lightened) so that dark text reads on them.
PALETTE = [
    "#aec7e8", "#ffbb78", "#98df8a", "#ff9896", "#c5b0d5", "#c49c94", "#f7b6d2", "#dbdb8d", "#9edae5",
    "#c7c7c7", "#6baed6", "#fdae6b", "#74c476", "#e7969c", "#9e9ac8", "#bcbd22",
]  # fmt: skip
DIFFERS = "#d62728"
FILLS = {"host": "#f4f4f4", "worker": "#ffffff", "device": "#eef3fb", "parameter": "#fdf3e1", "ps": "#fdf3e1"}

# Geometry, in pixels
PAD = 8
HOST_HEAD = 22
WORKER_HEAD = 20
DEVICE_HEAD = 36
CHIP_H = 18
CHIP_GAP = 4
COLUMN_W = 210


@dataclass
class Copy:
    """One chip: a variable's copy (or shard) on one device."""

    name: str
    key: int  # what picks the colour: the variable
    detail: str  # shape and dtype, or the rows a shard holds
    differs: bool = False


@dataclass
class DeviceBox:
    device: str
    short: str
    role: str  # "replica 0", "parameter device", "ps task 1"
    kind: str = "device"  # device | parameter | ps
    copies: list[Copy] = field(default_factory=list)


@dataclass
class WorkerBox:
    address: str
    devices: list[DeviceBox] = field(default_factory=list)


@dataclass
class HostBox:
    host: str
    workers: list[WorkerBox] = field(default_factory=list)


@dataclass(frozen=True)
class Rect:
    """A box or a chip of the picture, at (x, y) from the top left."""

    x: float
    y: float
    w: float
    h: float
    kind: str  # host | worker | device | parameter | ps | copy
    label: str
    sub: str  # a second line (device boxes), or the tooltip's detail (chips)
    fill: str
    line: str


def host_of(address: str) -> str:
    """``tcp://127.0.0.1:4021`` -> ``127.0.0.1``."""
    rest = address.split("://", 1)[-1]
    return rest.rsplit(":", 1)[0] if ":" in rest else rest


def port_of(address: str) -> str:
    """``tcp://127.0.0.1:4021`` -> ``:4021`` (the part that tells workers of one host apart)."""
    rest = address.split("://", 1)[-1]
    return ":" + rest.rsplit(":", 1)[1] if ":" in rest else rest


def group_hosts(boxes: Iterable[tuple[str, DeviceBox]]) -> list[HostBox]:
    """(worker address, device box) pairs into hosts and workers, in the order first seen within a host."""
    hosts: dict[str, HostBox] = {}
    workers: dict[str, WorkerBox] = {}
    for address, box in boxes:
        h = hosts.setdefault(host_of(address), HostBox(host_of(address)))
        w = workers.get(address)
        if w is None:
            w = workers[address] = WorkerBox(address)
            h.workers.append(w)
        w.devices.append(box)
    return [hosts[h] for h in sorted(hosts)]


def from_model(model: DashboardModel, replica: int | None = None, variable: str | None = None) -> list[HostBox]:
    """The placement the events tell: each replica's device and copies, and central storage's parameter
    devices (a variable with one copy for the group), under the replicas' workers and hosts."""
    differs = differing_copies(model)
    mine: dict[int, list[Copy]] = {r: [] for r in model.replicas}
    central: dict[tuple[int, str], list[Copy]] = {}  # (holding replica, device) -> copies
    for (var_id, r), c in sorted(model.copies.items()):
        info = model.variables.get(var_id)
        name = info.name if info is not None else f"var {var_id}"
        if variable is not None and name != variable:
            continue
        detail = f"{tuple(info.shape)} {info.dtype}" if info is not None else ""
        if info is not None and info.synchronization == "ON_READ":
            detail += " (on read)"
        chip = Copy(name, var_id, detail, (var_id, r) in differs)
        if model.copies_of(var_id) == 1 and model.world_size > 1:
            central.setdefault((r, c.device), []).append(chip)
        else:
            mine.setdefault(r, []).append(chip)
    devices = {r: model.devices_of(r) for r in mine}
    short = short_devices([*devices.values(), *(d for _, d in central)])
    pairs: list[tuple[str, DeviceBox]] = []
    for r in sorted(mine):
        if replica is not None and r != replica:
            continue
        d = devices[r]
        box = DeviceBox(d, short.get(d, d), f"replica {r}", "device", mine[r])
        pairs.append((model.workers.get(r, f"replica {r}"), box))
    for (r, d), chips in sorted(central.items()):
        box = DeviceBox(d, short.get(d, d), "parameter device", "parameter", chips)
        pairs.append((model.workers.get(r, f"replica {r}"), box))
    pairs.sort(key=lambda p: host_of(p[0]))  # stable: replica order within a host
    return group_hosts(pairs)


def from_parameter_servers(
    workers: list[tuple[str, str]],
    ps_tasks: list[tuple[str, str]],
    variables: list[tuple[str, tuple[int, ...], str, list[tuple[str, int, int]]]],
) -> list[HostBox]:
    """A ``ParameterServerStrategy``'s placement: its workers (``(address, device)``), its ps tasks, and
    each variable's shards (``(name, shape, dtype, [(ps device, start row, stop row), ...])``)."""
    held: dict[str, list[Copy]] = {d: [] for _, d in ps_tasks}
    for key, (name, shape, dtype, shards) in enumerate(variables):
        for k, (device, start, stop) in enumerate(shards):
            label = name if len(shards) == 1 else f"{name} [{start}:{stop}]"
            detail = f"{tuple(shape)} {dtype}"
            if len(shards) > 1:
                detail += f", shard {k} of {len(shards)}: rows {start}:{stop}"
            held.setdefault(device, []).append(Copy(label, key, detail))
    short = short_devices([d for _, d in workers] + [d for _, d in ps_tasks])
    pairs = [(a, DeviceBox(d, short.get(d, d), f"worker {i}", "device")) for i, (a, d) in enumerate(workers)]
    pairs += [(a, DeviceBox(d, short.get(d, d), f"ps task {i}", "ps", held[d])) for i, (a, d) in enumerate(ps_tasks)]
    pairs.sort(key=lambda p: host_of(p[0]))
    return group_hosts(pairs)


def differing_copies(model: DashboardModel) -> set[tuple[int, int]]:
    """(var_id, replica) of the copies that differ from the most common copy of the same variable at its
    newest step all copies reported: by values (small variables), block means (larger ones), else checksum.
    A late replica's older copy is not compared; sync-on-read copies differ by design."""
    by_var: dict[int, dict[int, list[tuple[int, tuple[float, ...]]]]] = {}
    for (var_id, replica), c in model.copies.items():
        info = model.variables.get(var_id)
        if info is not None and info.synchronization == "ON_READ":
            continue
        seen = c.values or c.sketch or (c.checksum,)
        by_var.setdefault(var_id, {}).setdefault(c.step, []).append((replica, seen))
    out = set()
    for var_id, steps in by_var.items():
        copies = steps[max(steps)]
        if len(copies) < 2:
            continue
        counts: dict[tuple[float, ...], int] = {}
        for _, vals in copies:
            counts[vals] = counts.get(vals, 0) + 1
        common = max(counts, key=lambda v: counts[v])
        if 2 * counts[common] <= len(copies):  # no majority (1 against 1): every copy is in question
            if len(counts) > 1 and any(not close(v, common, model.rtol, model.atol) for _, v in copies):
                out |= {(var_id, r) for r, _ in copies}
            continue
        out |= {(var_id, r) for r, vals in copies if not close(vals, common, model.rtol, model.atol)}
    return out


def close(a: tuple[float, ...], b: tuple[float, ...], rtol: float, atol: float) -> bool:
    return len(a) == len(b) and all(abs(x - y) <= atol + rtol * max(abs(x), abs(y)) for x, y in zip(a, b, strict=True))


# -- geometry ------------------------------------------------------------------------------------


def layout(hosts: list[HostBox]) -> tuple[list[Rect], float, float]:
    """The rectangles of the picture (outer boxes first), and its width and height."""
    rects: list[Rect] = []
    y = float(PAD)
    width = float(2 * PAD + COLUMN_W)
    for h in hosts:
        inner = [_worker(w, 0.0, 0.0) for w in h.workers]
        host_h = HOST_HEAD + max((hh for _, hh in inner), default=0.0) + PAD
        host_w = PAD + sum(COLUMN_W + PAD for _ in h.workers)
        rects.append(Rect(PAD, y, host_w, host_h, "host", f"host {h.host}", "", FILLS["host"], "#999999"))
        x = float(2 * PAD)
        for w in h.workers:
            placed, _ = _worker(w, x, y + HOST_HEAD)
            rects += placed
            x += COLUMN_W + PAD
        width = max(width, host_w + 2 * PAD)
        y += host_h + PAD
    return rects, width, max(y, 2 * PAD + HOST_HEAD)


def _worker(w: WorkerBox, x: float, y: float) -> tuple[list[Rect], float]:
    rects: list[Rect] = []
    dy = y + WORKER_HEAD
    for d in w.devices:
        dh = DEVICE_HEAD + len(d.copies) * (CHIP_H + CHIP_GAP) + PAD
        rects.append(Rect(x + PAD, dy, COLUMN_W - 2 * PAD, dh, d.kind, d.short, d.role, FILLS[d.kind], "#6b8ec9"))
        cy = dy + DEVICE_HEAD
        for c in d.copies:
            line = DIFFERS if c.differs else "#555555"
            fill = PALETTE[c.key % len(PALETTE)]
            rects.append(Rect(x + 2 * PAD, cy, COLUMN_W - 4 * PAD, CHIP_H, "copy", c.name, c.detail, fill, line))
            cy += CHIP_H + CHIP_GAP
        dy += dh + PAD
    h = dy - y
    outer = Rect(x, y, COLUMN_W, h, "worker", f"worker {port_of(w.address)}", w.address, FILLS["worker"], "#bbbbbb")
    return [outer, *rects], h


# -- the static picture ----------------------------------------------------------------------------


def to_svg(hosts: list[HostBox], title: str = "") -> str:
    """The picture as a standalone SVG (hover a chip for its shape and dtype)."""
    rects, width, height = layout(hosts)
    top = 22 if title else 0
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="interdist-placement" width="{width:.0f}" '
        f'height="{height + top:.0f}" viewBox="0 0 {width:.0f} {height + top:.0f}" '
        'font-family="sans-serif" font-size="12">'
    ]
    if title:
        out.append(f'<text x="{PAD}" y="16" font-weight="bold">{html.escape(title)}</text>')
    if not hosts:
        out.append(f'<text x="{PAD}" y="{top + 24}" fill="#777">no replicas yet</text>')
    for r in rects:
        y = r.y + top
        stroke = 2.5 if r.line == DIFFERS else 1.0
        tip = f"<title>{html.escape(r.label + (': ' + r.sub if r.sub else ''))}</title>"
        out.append(
            f'<g class="interdist-{r.kind}"><rect x="{r.x:.0f}" y="{y:.0f}" width="{r.w:.0f}" height="{r.h:.0f}" '
            f'rx="4" fill="{r.fill}" stroke="{r.line}" stroke-width="{stroke}">{tip}</rect>'
        )
        if r.kind == "copy":
            out.append(f'<text x="{r.x + 6:.0f}" y="{y + 13:.0f}">{html.escape(r.label)}{tip}</text>')
        elif r.kind in ("device", "parameter", "ps"):
            out.append(f'<text x="{r.x + 6:.0f}" y="{y + 15:.0f}" font-weight="bold">{html.escape(r.label)}</text>')
            out.append(f'<text x="{r.x + 6:.0f}" y="{y + 29:.0f}" fill="#555">{html.escape(r.sub)}</text>')
        else:
            out.append(f'<text x="{r.x + 6:.0f}" y="{y + 15:.0f}" fill="#333">{html.escape(r.label)}</text>')
        out.append("</g>")
    out.append("</svg>")
    return "".join(out)


class PlacementPicture:
    """What ``idist.debug.visualize_placement`` returns: shown as SVG in a notebook (saved with it), and as
    a text tree in a terminal."""

    def __init__(self, hosts: list[HostBox], title: str = "") -> None:
        self.hosts = hosts
        self.title = title

    def _repr_html_(self) -> str:
        return to_svg(self.hosts, self.title)

    def svg(self) -> str:
        return to_svg(self.hosts, self.title)

    def __repr__(self) -> str:
        lines = [self.title] if self.title else []
        for h in self.hosts:
            lines.append(f"host {h.host}")
            for w in h.workers:
                lines.append(f"  worker {w.address}")
                for d in w.devices:
                    chips = ", ".join(c.name + (" (differs)" if c.differs else "") for c in d.copies)
                    lines.append(f"    {d.short} ({d.role}): {chips or '-'}")
        return "\n".join(lines)
