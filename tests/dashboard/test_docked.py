"""``strategy.dashboard(docked=True)``, the overview page it docks, and the inline dashboard's static snapshot.

The browser side (the JupyterLab extension docking the page, freezing the snapshot) is
tests/lab/test_docked_browser.py; here the Python contract: the mime bundle the extension reads,
the page the scheduler serves, the HTML that stays once a kernel is gone.
"""

from __future__ import annotations

import json
import urllib.request
from typing import Any

import numpy as np
import pytest
from bokeh.document import Document

import interdist as idist
from interdist import events as ev
from interdist.dashboard.components import VIEWS, Overview
from interdist.dashboard.docked import MIME_TYPE, DockedDashboard, page_url
from interdist.dashboard.model import DashboardModel
from interdist.dashboard.pages import _page, page_names, register_pages
from interdist.dashboard.snapshot import SHOWN_COPIES, snapshot_html

from .streams import CPU, created, hang_stream, training_stream

OVERVIEW_PAGE = "/individual-interdist-overview"


def model_of(stream: list[ev.Event], n: int = 2) -> DashboardModel:
    m = DashboardModel()
    for r in range(n):
        m.note_worker(r, f"tcp://10.0.0.{r + 1}:4000", CPU.format(r))
    m.feed_many(stream)
    return m


# -- the docked dashboard's output -------------------------------------------------------------


def test_docked_dashboard_is_a_bundle_the_extension_reads_with_a_link_as_fallback(
    mirrored2: idist.MirroredStrategy,
) -> None:
    docked = mirrored2.dashboard(docked=True)
    assert isinstance(docked, DockedDashboard)
    bundle = docked._repr_mimebundle_()
    assert sorted(bundle) == [MIME_TYPE, "text/html", "text/plain"]
    request = bundle[MIME_TYPE]
    json.dumps(request)  # crosses to TypeScript as JSON
    assert set(request) == {"version", "page", "path", "scheduler_address", "cluster_id", "url", "token"}
    assert request["version"] == 1 and request["page"] == "overview" and request["path"] == OVERVIEW_PAGE
    # the extension finds the cluster in /interdist/clusters by its scheduler address (or registry id)
    assert request["scheduler_address"] == mirrored2.client.scheduler.address
    registry_file = mirrored2._lease.registry_file
    assert request["cluster_id"] == (registry_file.stem.split("-", 1)[1] if registry_file else None)
    link = mirrored2.dashboard_link
    assert link is not None and "/status?token=" in link  # the dashboard's token (lab/dashboard_auth.py)
    root, query = link.split("/status?")
    assert request["url"] == f"{root}{OVERVIEW_PAGE}?{query}"
    # without the extension: a link to the page, in HTML and as text
    assert f"href='{request['url']}'" in bundle["text/html"] and "target='_blank'" in bundle["text/html"]
    assert request["url"] in bundle["text/plain"]
    # each display docks once: a new token every time it is shown
    assert docked._repr_mimebundle_()[MIME_TYPE]["token"] != request["token"]
    # and the inline dashboard is as it was
    box = mirrored2.dashboard(interval=1.0)
    try:
        assert "application/vnd.jupyter.widget-view+json" in box._repr_mimebundle_()
    finally:
        box.dashboard.close()


def test_a_cluster_without_a_dashboard_says_so() -> None:
    docked = DockedDashboard("tls://10.0.0.1:8786", dashboard_link=None)
    bundle = docked._repr_mimebundle_()
    assert docked.url is None and bundle[MIME_TYPE]["url"] is None
    assert "has no dashboard" in bundle["text/plain"] and "<a " not in bundle["text/html"]


@pytest.mark.parametrize(("link", "url"), [
    ("http://127.0.0.1:8787/status", "http://127.0.0.1:8787" + OVERVIEW_PAGE),
    ("http://127.0.0.1:8787/status?x=1", "http://127.0.0.1:8787" + OVERVIEW_PAGE + "?x=1"),
    # an embedded cluster's link carries its dashboard's token: so do its pages
    ("http://127.0.0.1:8787/status?token=t0k#top", "http://127.0.0.1:8787" + OVERVIEW_PAGE + "?token=t0k"),
    ("/user/ann/proxy/8787/status", "/user/ann/proxy/8787" + OVERVIEW_PAGE),  # JupyterHub's distributed.dashboard.link
    ("https://dask.example.org/dashboard/", "https://dask.example.org/dashboard" + OVERVIEW_PAGE),
    ("", None),
])
def test_page_url_sits_next_to_the_dashboard_link(link: str, url: str | None) -> None:
    assert page_url(link) == url


# -- the overview page ---------------------------------------------------------------------------


def test_overview_is_a_dask_page_but_not_an_inline_view() -> None:
    from distributed.dashboard.scheduler import applications

    register_pages()
    assert OVERVIEW_PAGE in page_names() and OVERVIEW_PAGE in applications
    assert "overview" not in VIEWS  # the inline dashboard shows its three parts already


def test_the_scheduler_serves_the_overview_page(mirrored2: idist.MirroredStrategy) -> None:
    link = mirrored2.dashboard_link
    assert link is not None
    root, _, query = link.removesuffix("/status").partition("/status?")  # the link carries the dashboard's token
    with urllib.request.urlopen(f"{root}/individual-plots.json?{query}", timeout=20) as r:
        plots = json.loads(r.read())
    assert OVERVIEW_PAGE in plots.values()  # what /interdist/clusters lists for the sidebar and the dock
    with urllib.request.urlopen(page_url(link), timeout=20) as r:
        assert r.status == 200 and b"interdist: overview" in r.read()


class _Scheduler:
    def __init__(self) -> None:
        self.plugins: dict[str, Any] = {}

    def get_events(self, topic: str) -> list[Any]:
        return []

    def add_plugin(self, plugin: Any, name: str) -> None:
        self.plugins[name] = plugin


def test_overview_page_composes_status_watchdog_and_timeline() -> None:
    doc = Document()
    _page("overview", _Scheduler(), {}, doc)
    (root,) = doc.roots
    assert doc.title == "interdist: overview"
    names = {m.name for m in root.references() if getattr(m, "name", None)}
    assert {"interdist-status", "interdist-watchdog", "interdist-timeline"} <= names


def test_overview_redraws_its_parts_from_one_model() -> None:
    view = Overview(threshold_s=0.5)
    model = model_of(hang_stream(), n=3)
    view.status.clock = view.watchdog.clock = lambda: 103.0
    assert view.update(model)
    assert list(view.source.data["kind"]) == ["waiting", "running", "waiting"]  # the status strip's chips
    assert list(view.watchdog.source.data["missing"]) == ["1"]
    assert not view.watchdog.failures.visible  # listed once, by the status strip
    assert not view.update(model)  # nothing new: nothing redrawn
    view.replica = 2
    assert view.update(model)
    assert list(view.status.source.data["replica"]) == [2]  # the filter reaches every part


# -- the inline dashboard's static snapshot -----------------------------------------------------


def test_snapshot_shows_chips_summary_and_copies_as_plain_html() -> None:
    model = model_of(training_stream())
    text = snapshot_html(model, now=103.0)
    assert text.startswith("<div class='interdist-snapshot'") and "<script" not in text.lower()
    assert text.count("class='interdist-chip ") == 2 and "data-kind='done'" in text
    assert "run #" in text and "DIVERGED" in text  # w's copies differ from step 3 on
    assert ">w</td>" in text and ">s</td>" in text
    # as of the last event, not of the clock: an idle dashboard's snapshot does not change every second
    assert snapshot_html(model, now=200.0) == snapshot_html(model, now=201.0)


def test_snapshot_escapes_names_and_lists_a_bounded_number_of_copies() -> None:
    stream: list[ev.Event] = [created(r, v, f"<v{v}>", 1.0, 100.0) for v in range(1, 20) for r in (0, 1)]
    text = snapshot_html(model_of(stream), now=100.0)
    assert "<v1>" not in text and "&lt;v19&gt;" in text
    assert text.count("<tr>") == 1 + SHOWN_COPIES and f"and {38 - SHOWN_COPIES} more copies" in text


def test_inline_dashboard_keeps_its_snapshot_current_and_shows_it_without_widgets(
    mirrored2: idist.MirroredStrategy,
) -> None:
    box = mirrored2.dashboard(interval=0.05)
    d = box.dashboard
    try:
        assert box.snapshot.layout.display == "none" and "interdist-snapshot-widget" in box.snapshot._dom_classes
        before = box.snapshot.value
        assert before.count("class='interdist-chip ") == 2
        mirrored2.run(lambda: idist.get_replica_context().all_reduce("sum", np.float32(1.0)))
        d.refresh()
        assert box.snapshot.value != before and "run #" in box.snapshot.value
        bundle = box._repr_mimebundle_()
        assert bundle["text/html"] == box.snapshot.value  # nbconvert and static viewers show the state
    finally:
        d.close()
