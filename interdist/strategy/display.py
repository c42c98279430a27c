"""How a strategy shows itself in the notebook: its ``repr``, its HTML card and its dashboard.

Reads only what the notebook holds (the lease, the group's lost and busy replicas): no round trip to a
worker. The dashboard itself (Bokeh, ipywidgets) is imported only when asked for. A mixin of
``Strategy`` (base.py).
"""

from __future__ import annotations

import html
import sys
import weakref
from typing import Any

from interdist import debug
from interdist.strategy.dispatch import ReplicaDispatch
from interdist.values import reprs


class DisplayMixin(ReplicaDispatch):
    """``repr``, ``_repr_html_``, ``dashboard_link`` and ``dashboard`` of a strategy."""

    @property
    def dashboard_link(self) -> str | None:
        """The Dask dashboard of the cluster the replicas run on."""
        return self._lease.dashboard_link

    def dashboard(self, interval: float = 0.2, threshold_s: float = 5.0, *, docked: bool = False) -> Any:
        """A live dashboard of the replicas: inline (ipywidgets, see ``interdist.dashboard.show``), or with
        ``docked=True`` the Dask page ``/individual-interdist-overview`` (status strip, watchdog, timeline),
        which JupyterLab (``interdist[lab]``) docks to the right of the notebook, where it stays in view and
        live while the cells run, comes back after a page reload and follows the notebook's new cluster
        after Kernel > Restart; elsewhere the output is a link to that page (see
        ``interdist.dashboard.docked``). ``interval`` and ``threshold_s`` are the inline dashboard's."""
        if docked:
            from interdist.dashboard.docked import docked as docked_dashboard

            return docked_dashboard(self._lease)
        from interdist.dashboard import show

        ref = weakref.ref(self)  # the dashboard must not keep the strategy alive

        def inject(**kwargs: Any) -> None:  # the dashboard's fault control
            strategy = ref()
            if strategy is None:
                raise RuntimeError("the strategy is gone")
            debug.inject(strategy, **kwargs)

        return show(self, interval=interval, threshold_s=threshold_s, inject=inject)

    def __repr__(self) -> str:
        return f"<interdist.{type(self).__name__} on {', '.join(self._devices)}>"

    def _repr_html_(self) -> str:
        """A card like Dask's ``Client``: replicas, devices, workers, hosts, health, dashboard.

        Reads only what the notebook holds (the group's lost/busy replicas, the client's cached
        dashboard address): no round trip to a worker.
        """
        e = html.escape
        group = getattr(self, "_group", None)
        addresses = list(getattr(group, "addresses", None) or self._lease.addresses)
        names = list(getattr(self._lease, "names", None) or [])
        lost = dict(getattr(group, "lost", None) or {})
        busy = dict(getattr(group, "busy", None) or {})
        closed = self._closed or bool(getattr(group, "closed", False))
        devices = list(self._devices)
        short = reprs.short_devices(devices)
        hosts = sorted({_host(a) for a in addresses})
        rows = []
        for r, dev in enumerate(short):
            address = addresses[r] if r < len(addresses) else ""
            name = names[r] if r < len(names) else ""
            if closed:
                state = "closed"
            elif r in lost:
                state = "lost"
            elif r in busy:
                state = f"busy (step {busy[r][0]})"
            else:
                state = "ok"
            colour = {"ok": "#2e7d32", "closed": "#777"}.get(state, "#c62828")
            rows.append(
                reprs.row(
                    str(r),
                    f'<span title="{e(devices[r])}">{e(dev)}</span>',
                    f"<code>{e(address)}</code>",
                    e(str(name)),
                    f'<span style="color: {colour}">{e(state)}</span>',
                )
            )
        health = "closed" if closed else "ok" if not (lost or busy) else f"{len(lost)} lost, {len(busy)} busy"
        facts = [
            ("Replicas", e(str(self.num_replicas_in_sync))),
            ("Devices", e(", ".join(short))),
            ("Hosts", e(", ".join(hosts)) + f" ({len(hosts)})"),
            ("Health", e(health)),
        ]
        link = None if closed else self.dashboard_link
        if link:
            pages = [f'<a href="{e(link)}" target="_blank">{e(link)}</a>']
            if getattr(self._lease, "embedded", False) and "interdist.dashboard.pages" in sys.modules:
                from interdist.dashboard.docked import page_url

                # The pages the embedded cluster registered (dashboard/pages.py), by their view names; each
                # with the dashboard's token, as the link (lab/dashboard_auth.py).
                pages += [
                    f'<a href="{e(page_url(link, view) or "")}" target="_blank">interdist {view}</a>'
                    for view in ("status", "timeline", "placement")
                ]
            facts.append(("Dashboard", " &middot; ".join(pages)))
        body = reprs.table([], [reprs.row(f"<strong>{k}</strong>", v) for k, v in facts])
        body += reprs.table(["replica", "device", "worker", "name", "state"], rows)
        return reprs.card(type(self).__name__, f"{len(devices)} replica(s) on {len(hosts)} host(s)", body)


def _host(address: str) -> str:
    """``tcp://10.0.0.5:40123`` -> ``10.0.0.5``."""
    rest = address.split("://", 1)[-1]
    return rest.rsplit(":", 1)[0] if ":" in rest else rest
