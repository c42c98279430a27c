"""``interdist.Server`` and lesson 05's parameter-server recipe in scripts without a ``__main__`` guard (issue 26).

A ``Server``'s worker was a Dask ``Nanny``, started through ``multiprocessing``: in a script without
``if __name__ == "__main__":`` every nanny ran the script again and failed after ~40 s ("Nanny failed to
start", or "Can't get attribute 'train_step'"). Its worker is now interdist's own process
(``client/worker_process.py``), as the embedded clusters' are. Each script runs as ``python script.py``
in a fresh Python and must print its result within a bound, with no traceback.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# TF's tutorial shape, top-level code: one Server per task, then the strategy from a resolver.
SERVER_SCRIPT = textwrap.dedent("""
    import socket

    import numpy as np
    import interdist as idist


    def free_port():
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            return s.getsockname()[1]


    cluster = {"chief": [f"127.0.0.1:{free_port()}"], "worker": [f"127.0.0.1:{free_port()}"]}
    servers = [idist.Server(cluster, "chief", 0, config={"timeout": 60}),
               idist.Server(cluster, "worker", 0, config={"timeout": 60})]
    resolver = idist.cluster_resolver.SimpleClusterResolver(idist.cluster_resolver.ClusterSpec(cluster))
    strategy = idist.MultiWorkerMirroredStrategy(resolver)


    def train_step(x):
        return idist.get_replica_context().all_reduce("sum", np.float32(x))


    out = strategy.run(train_step, args=(np.float32(2.0),))
    print("result", [float(v) for v in strategy.experimental_local_results(out)], strategy._lease.names)
    strategy.close()
    for server in reversed(servers):
        server.stop()
""")


def _run(script: Path, timeout: float) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    out = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=timeout, cwd=script.parent, env=env
    )
    assert out.returncode == 0, out.stdout + out.stderr[-4000:]
    for words in ("Traceback", "Nanny failed to start", "Can't get attribute"):
        assert words not in out.stderr, out.stderr[-4000:]
    return out


@pytest.mark.timeout(150)
def test_servers_in_a_script_without_main_guard(tmp_path: Path) -> None:
    script = tmp_path / "servers.py"
    script.write_text(SERVER_SCRIPT)
    out = _run(script, timeout=140)
    assert "result [4.0, 4.0] ['chief', 'worker-0']" in out.stdout, out.stdout


def _lesson_05_recipe() -> str:
    """Lesson 05's parameter-server cells as they are in the notebook: its imports, the cluster and the
    strategy, the asynchronous steps; then the strategy's and servers' close."""
    nb = json.loads((ROOT / "notebooks" / "05_placement_strategies.ipynb").read_text())
    code = ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code"]

    def cell(words: str) -> str:
        found = [c for c in code if words in c]
        assert len(found) == 1, f"one code cell of lesson 05 with {words!r} expected, found {len(found)}"
        return found[0]

    close = "\n".join(line for line in cell("ps_strategy.close()").splitlines() if "central" not in line)
    parts = [cell("import interdist as idist"), cell("ParameterServerStrategy("), cell("def step():"), close]
    return "\n\n".join(parts) + "\n"


@pytest.mark.timeout(150)
def test_lesson_05_parameter_server_recipe_in_a_script_without_main_guard(tmp_path: Path) -> None:
    recipe = _lesson_05_recipe()
    assert "__main__" not in recipe and "Nanny" not in recipe
    script = tmp_path / "lesson05.py"
    script.write_text(recipe)
    out = _run(script, timeout=140)
    assert "final counter       : 8" in out.stdout, out.stdout
