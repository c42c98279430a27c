"""The server extension's ``/interdist/clusters`` in a real ``jupyter lab``: token auth, live clusters, their pages."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from interdist.lab import registry

from ._lab import Lab, running_lab

pytest.importorskip("jupyterlab", reason="jupyterlab is not installed (pip install 'interdist[lab]')")
pytestmark = pytest.mark.timeout(120)


def anonymous_status(url: str) -> int:
    """The status of a GET without the token, redirects not followed."""
    import urllib.error
    import urllib.request

    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args: Any) -> None:
            return None

    try:
        with urllib.request.build_opener(NoRedirect).open(url, timeout=20) as r:
            return int(r.status)
    except urllib.error.HTTPError as e:
        return e.code


@pytest.fixture(scope="module")
def reg_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("registry")


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory, reg_dir: Path) -> Iterator[Lab]:
    with running_lab(tmp_path_factory.mktemp("lab"), reg_dir) as lab:
        yield lab
    assert lab.proc.returncode is not None


def test_needs_the_token(lab: Lab) -> None:
    assert lab.get("interdist/clusters", token=False)[0] == 403
    wrong = Lab(lab.url, "not-the-token", lab.proc, lab.log)
    assert wrong.get("interdist/clusters")[0] == 403


def test_lists_live_clusters_with_their_interdist_pages(lab: Lab, reg_dir: Path, mirrored2: Any) -> None:
    for f in reg_dir.glob("*.json"):
        f.unlink()
    assert lab.get("interdist/clusters") == (200, {"clusters": []})
    link = mirrored2.dashboard_link
    mine = registry.register(mirrored2._lease.cluster.scheduler_address, link, 2, directory=reg_dir)
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True, check=True)
    (reg_dir / "dead.json").write_text(json.dumps({"id": "d", "pid": int(done.stdout), "scheduler_address": "x",
                                                   "dashboard_link": link, "n_workers": 2, "created": 0.0}))
    status, body = lab.get("interdist/clusters")
    assert status == 200
    (cluster,) = body["clusters"]
    assert cluster["scheduler_address"] == mirrored2._lease.cluster.scheduler_address
    assert cluster["n_workers"] == 2 and cluster["pages_error"] is None
    # a dashboard on this host: its pages through Jupyter's proxy (jupyter-server-proxy), under the base URL
    port = int(link.rsplit("/", 1)[0].rsplit(":", 1)[1])
    origin = f"/proxy/{port}"
    assert cluster["dashboard_url"] == f"/proxy/{port}/status"
    assert cluster["name"] == f"process {cluster['pid']}" and cluster["kernel_id"] is None  # no kernel here
    urls = [p["url"] for p in cluster["pages"]]
    for view in ("replica-values", "placement", "timeline", "timings", "progress", "watchdog"):
        assert f"{origin}/individual-interdist-{view}" in urls
    assert all("/individual-interdist-" in u for u in urls)
    # the pages' URLs carry no dashboard token: the answer sets its cookie, for that port's proxy path only
    assert not any("token=" in u for u in urls) and "token=" not in cluster["dashboard_url"]
    cookies = lab.get_with_headers("interdist/clusters")[2].get_all("Set-Cookie")
    (cookie,) = [c for c in cookies if c.startswith(f"interdist-dashboard-{port}=")]
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and f"Path=/proxy/{port}/" in cookie
    # the proxied page answers with that cookie, behind Jupyter's token; not without the cookie
    jar = {"Cookie": cookie.split(";", 1)[0]}
    assert lab.get(f"proxy/{port}/individual-plots.json", headers=jar)[0] == 200
    assert lab.get(f"proxy/{port}/individual-plots.json")[0] == 403
    assert anonymous_status(lab.url + f"proxy/{port}/individual-plots.json") in (302, 403)  # to the login page
    registry.unregister(mine)
    assert lab.get("interdist/clusters") == (200, {"clusters": []})
