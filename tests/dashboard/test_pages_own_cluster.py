"""The interdist pages on the dashboard of a user's own cluster, made before ``import interdist`` (issue 26).

A scheduler reads Dask's dashboard pages once, as it starts: a ``LocalCluster`` made before interdist
was imported served no interdist page (404). A strategy given that cluster now adds them to its running
dashboard (``dashboard/pages.py``'s ``PagesPlugin``), and to Dask's "More" menu. Run as a script in a
fresh Python, so that the import order is the real one.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

SCRIPT = textwrap.dedent("""
    import json, logging, sys, urllib.error, urllib.request

    from distributed import LocalCluster


    def get(url):
        try:
            with urllib.request.urlopen(url, timeout=60) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, ""


    if __name__ == "__main__":  # Dask's own nannies (this is the user's LocalCluster) need the guard
        cluster = LocalCluster(n_workers=1, threads_per_worker=1, host="127.0.0.1",
                               dashboard_address="127.0.0.1:0", silence_logs=logging.ERROR)
        try:
            base = f"http://127.0.0.1:{cluster.scheduler.http_server.port}"
            before, _ = get(base + "/individual-interdist-overview")
            imported_before = "interdist" in sys.modules

            import interdist as idist

            strategy = idist.MirroredStrategy(["CPU:0"], cluster=cluster)
            try:
                value = float(strategy.run(lambda: 2.0 * 21))
                after, page = get(base + "/individual-interdist-overview")
                timeline, _ = get(base + "/individual-interdist-timeline")
                _, status = get(base + "/status")
            finally:
                strategy.close()
        finally:
            cluster.close()
        print("@@" + json.dumps({
            "imported_before": imported_before, "before": before, "after": after, "timeline": timeline,
            "bokeh_page": "Bokeh" in page or "bokeh" in page, "in_menu": "individual-interdist-overview" in status,
            "value": value,
        }), flush=True)
""")


@pytest.mark.timeout(180)
def test_pages_on_a_local_cluster_made_before_import(tmp_path: Path) -> None:
    script = tmp_path / "own_cluster.py"
    script.write_text(SCRIPT)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).resolve().parents[2]), env.get("PYTHONPATH", "")])
    out = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=170, cwd=tmp_path, env=env
    )
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("@@")]
    assert out.returncode == 0 and lines, out.stdout + out.stderr[-3000:]
    got = json.loads(lines[0][2:])
    assert got["imported_before"] is False
    assert got["before"] == 404  # the trap: the scheduler started without the pages
    assert got["after"] == 200 and got["timeline"] == 200, got
    assert got["bokeh_page"], got
    assert got["in_menu"], got  # listed in Dask's "More" menu too
    assert got["value"] == 42.0
