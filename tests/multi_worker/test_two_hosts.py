"""Two hosts on one machine: network namespaces joined by a veth pair (10.99.0.1 and 10.99.0.2).

Each namespace runs ``python -m interdist.server`` for one TF_CONFIG task (the chief
with the scheduler in the first, worker 0 in the second), and the driver runs a
``MultiWorkerMirroredStrategy`` from inside the first. Traffic only goes to the
two addresses created here. The namespaces share this machine's /dev/shm, so
collectives of 1 MiB or more could take the shared-memory path; the values here
are small, so they cross the veth over Dask comms.

Needs root (``ip netns add``); without it the test is skipped. The fallback of
separate loopback addresses (127.0.0.2 / 127.0.0.3) is not implemented: it would
not exercise a second network stack.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

HERE = Path(__file__).parent


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=10)


@pytest.fixture()
def namespaces() -> Iterator[tuple[str, str]]:
    tag = f"{os.getpid() % 100000}"
    a, b = f"idA{tag}", f"idB{tag}"
    try:
        _ip("netns", "add", a)
    except (subprocess.CalledProcessError, FileNotFoundError, PermissionError) as e:
        pytest.skip(f"network namespaces cannot be created here ({e}); this test needs root and iproute2")
    try:
        _ip("netns", "add", b)
        _ip("link", "add", f"vA{tag}", "type", "veth", "peer", "name", f"vB{tag}")
        _ip("link", "set", f"vA{tag}", "netns", a)
        _ip("link", "set", f"vB{tag}", "netns", b)
        for ns, dev, addr in ((a, f"vA{tag}", "10.99.0.1/24"), (b, f"vB{tag}", "10.99.0.2/24")):
            _ip("-n", ns, "addr", "add", addr, "dev", dev)
            _ip("-n", ns, "link", "set", dev, "up")
            _ip("-n", ns, "link", "set", "lo", "up")
        yield a, b
    finally:
        for ns in (a, b):
            subprocess.run(["ip", "netns", "del", ns], check=False, capture_output=True, timeout=10)  # removes the veth too


@pytest.mark.slow
def test_multi_worker_across_two_namespaces(namespaces: tuple[str, str]) -> None:
    a, b = namespaces
    port_a, port_b = random.randint(20000, 29999), random.randint(30000, 39999)
    cluster = {"chief": [f"10.99.0.1:{port_a}"], "worker": [f"10.99.0.2:{port_b}"]}

    def env(task: str) -> dict[str, str]:
        return dict(os.environ, TF_CONFIG=json.dumps({"cluster": cluster, "task": {"type": task, "index": 0}}))

    server_cmd = [sys.executable, "-m", "interdist.server", "--timeout", "30"]
    procs = [subprocess.Popen(["ip", "netns", "exec", b, *server_cmd], env=env("worker"),
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL),
             subprocess.Popen(["ip", "netns", "exec", a, *server_cmd], env=env("chief"),
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)]
    try:
        assert json.loads(procs[1].stdout.readline())["scheduler"] == f"tcp://10.99.0.1:{port_a}"  # type: ignore
        out = subprocess.run(["ip", "netns", "exec", a, sys.executable, str(HERE / "_two_hosts_driver.py")],
                             env=env("chief"), check=False, capture_output=True, text=True, timeout=90)
        assert out.returncode == 0, out.stderr[-3000:]
        result = json.loads(out.stdout.strip().splitlines()[-1])
        assert result["addresses"][0].startswith("tcp://10.99.0.1:")
        assert result["addresses"][1] == f"tcp://10.99.0.2:{port_b}"
        assert result["devices"] == ["/job:chief/replica:0/task:0/device:CPU:0",
                                     "/job:worker/replica:0/task:0/device:CPU:0"]
        assert result["all_reduce"] == [3.0, 3.0]
        assert result["variable"] == [[3.0] * 4, [3.0] * 4]
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
