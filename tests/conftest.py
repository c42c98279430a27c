"""Shared fixtures. interdist pools its embedded clusters, so the suite starts each size once."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from typing import Any

import pytest

# Helper modules that are scripts or need TensorFlow: never collected (--doctest-modules imports every module).
collect_ignore_glob = ["conformance/recorder/*", "training/recorder/*", "tutorials/recorder/*", "*/_*.py", "dashboard/record_events.py", "dashboard/streams.py"]

#: Debian's chromium, for the real-browser tests (``.ci/run`` installs it); None where it is missing.
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
_FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
          "--disable-sync", "--no-first-run"]


@pytest.fixture(scope="session", autouse=True)
def _close_clusters() -> Iterator[None]:
    from interdist.client import cluster

    # the suite makes strategies of 1 to 8 replicas: keeping more of them idle saves cluster starts
    cluster.IDLE_WORKERS_MAX = 16
    yield
    cluster.shutdown_all()


@pytest.fixture(scope="module")
def mirrored2() -> Iterator[object]:
    import interdist as idist

    s = idist.MirroredStrategy(["CPU:0", "CPU:1"])
    yield s
    s.close()


@pytest.fixture(scope="module")
def browser(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """Headless chromium through Playwright, with a fresh profile; the module's ``VIEWPORT`` if it sets one."""
    if CHROMIUM is None:
        pytest.skip("chromium is not installed (apt-get install -y chromium chromium-driver)")
    playwright = pytest.importorskip("playwright.sync_api", reason="the playwright package is not installed")
    os.environ.setdefault("PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD", "1")
    viewport = getattr(request.module, "VIEWPORT", {"width": 1200, "height": 800})
    with playwright.sync_playwright() as p:
        # A persistent context is how Playwright takes a (fresh) --user-data-dir.
        ctx = p.chromium.launch_persistent_context(
            str(tmp_path_factory.mktemp("chromium-profile")), executable_path=CHROMIUM, headless=True,
            args=_FLAGS, viewport=viewport)
        yield ctx
        ctx.close()
