"""``interdist.Server`` / ``python -m interdist.server`` from TF_CONFIG on 127.0.0.1 ports, and its errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from typing import Any

import numpy as np
import pytest

import interdist as idist
from interdist.client.connect import connect  # a refused Client closed at once (see there)
from interdist.experimental import CommunicationOptions

from .conftest import free_port


@pytest.mark.slow
def test_servers_form_a_cluster_for_multi_worker(monkeypatch: Any) -> None:
    cluster = {"chief": [f"127.0.0.1:{free_port()}"], "worker": [f"127.0.0.1:{free_port()}"]}
    chief = idist.Server(cluster, "chief", 0, config={"timeout": 20})
    worker = idist.Server(cluster, "worker", 0, config={"timeout": 20})
    try:
        assert chief.target == f"tcp://{cluster['chief'][0]}" and chief.is_scheduler and chief.runs_worker
        monkeypatch.setenv("TF_CONFIG", json.dumps({"cluster": cluster, "task": {"type": "chief", "index": 0}}))
        s = idist.MultiWorkerMirroredStrategy(communication_options=CommunicationOptions(timeout_seconds=20))
        try:
            assert s.extended.worker_devices == (
                "/job:chief/replica:0/task:0/device:CPU:0",
                "/job:worker/replica:0/task:0/device:CPU:0",
            )
            assert s._lease.names == ["chief", "worker-0"]
            # The worker task's Dask worker listens on the address of its TF_CONFIG entry.
            assert s._lease.addresses[1] == f"tcp://{cluster['worker'][0]}"
            out = s.run(
                lambda: idist.get_replica_context().all_reduce(
                    "sum", np.float32(idist.get_replica_context().replica_id_in_sync_group + 1)
                )
            )
            assert [float(v) for v in s.experimental_local_results(out)] == [3.0, 3.0]
        finally:
            s.close()
    finally:
        worker.stop()
        chief.stop()


@pytest.mark.slow
def test_python_m_server_starts_and_stops() -> None:
    port = free_port()
    env = dict(
        os.environ,
        TF_CONFIG=json.dumps({"cluster": {"chief": [f"127.0.0.1:{port}"]}, "task": {"type": "chief", "index": 0}}),
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "interdist.server", "--timeout", "20"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        line = json.loads(proc.stdout.readline())  # type: ignore[union-attr]
        assert line == {"task": "chief:0", "scheduler": f"tcp://127.0.0.1:{port}", "runs_worker": True}
        s = idist.MultiWorkerMirroredStrategy(cluster=line["scheduler"])
        try:
            assert s.num_replicas_in_sync == 1
            assert s._lease.names == ["chief"]
        finally:
            s.close()
    finally:
        proc.terminate()
        assert proc.wait(30) == 0


def test_task_index_out_of_range() -> None:
    with pytest.raises(ValueError, match="task_index 3 is out of range"):
        idist.Server({"worker": ["127.0.0.1:1", "127.0.0.1:2"]}, "worker", 3, start=False)
    with pytest.raises(ValueError, match="job_name 'ps'"):
        idist.Server({"worker": ["127.0.0.1:1"]}, "ps", 0, start=False)


def test_worker_that_cannot_reach_the_chief_times_out() -> None:
    cluster = {"chief": [f"127.0.0.1:{free_port()}"], "worker": [f"127.0.0.1:{free_port()}"]}
    t0 = time.monotonic()
    with pytest.raises(TimeoutError, match=r"worker:0 could not reach the scheduler of task chief:0"):
        idist.Server(cluster, "worker", 0, config={"timeout": 2})
    assert time.monotonic() - t0 < 20


def test_malformed_tf_config_names_the_field() -> None:
    from interdist.server import main

    os.environ["TF_CONFIG"] = json.dumps({"cluster": {"worker": ["127.0.0.1:1"]}, "task": {"type": "worker"}})
    try:
        with pytest.raises(ValueError, match="'task' is missing 'index'"):
            main([])
    finally:
        del os.environ["TF_CONFIG"]


def test_chief_of_a_ps_cluster_runs_no_worker() -> None:
    s = idist.Server(
        {"chief": ["127.0.0.1:1"], "ps": ["127.0.0.1:2"], "worker": ["127.0.0.1:3"]}, "chief", 0, start=False
    )
    assert s.is_scheduler and not s.runs_worker
    w = idist.Server({"worker": ["127.0.0.1:3", "127.0.0.1:4"]}, "worker", 0, start=False)
    assert w.is_scheduler and w.runs_worker and w.target == "tcp://127.0.0.1:3"


@pytest.mark.slow
def test_python_m_server_with_tls_refuses_a_client_without_the_credentials(tmp_path: Any) -> None:
    from distributed import Client
    from distributed.security import Security

    made = Security.temporary()
    files = {"ca": made.tls_ca_file, "cert": made.tls_worker_cert, "key": made.tls_worker_key}
    for name, pem in files.items():
        (tmp_path / f"{name}.pem").write_text(pem)
        (tmp_path / f"{name}.pem").chmod(0o600)
    port = free_port()
    env = dict(
        os.environ,
        TF_CONFIG=json.dumps({"cluster": {"chief": [f"127.0.0.1:{port}"]}, "task": {"type": "chief", "index": 0}}),
    )
    flags = [
        "--tls-ca-file",
        str(tmp_path / "ca.pem"),
        "--tls-cert",
        str(tmp_path / "cert.pem"),
        "--tls-key",
        str(tmp_path / "key.pem"),
    ]
    proc = subprocess.Popen(
        [sys.executable, "-m", "interdist.server", "--timeout", "20", *flags],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        line = json.loads(proc.stdout.readline())  # type: ignore[union-attr]
        assert line["scheduler"] == f"tls://127.0.0.1:{port}"
        with pytest.raises((OSError, TypeError, TimeoutError)):
            connect(line["scheduler"], timeout="3s", set_as_default=False)
        with pytest.raises((OSError, TypeError, TimeoutError)):
            connect(line["scheduler"], security=Security.temporary(), timeout="3s", set_as_default=False)
        mine = Security(
            require_encryption=True,
            tls_ca_file=str(tmp_path / "ca.pem"),
            tls_client_cert=str(tmp_path / "cert.pem"),
            tls_client_key=str(tmp_path / "key.pem"),
        )
        # the multi-worker strategies take the credentials themselves (security=), by address or TF_CONFIG
        with pytest.raises(ConnectionError, match="speaks TLS .* pass security="):
            idist.MultiWorkerMirroredStrategy(cluster=line["scheduler"],
                                              communication_options=CommunicationOptions(timeout_seconds=3))
        mw = idist.MultiWorkerMirroredStrategy(cluster=line["scheduler"], security=mine)
        try:
            assert mw.num_replicas_in_sync == 1
            assert float(mw.run(lambda: np.float32(2.0) * 4)) == 8.0
        finally:
            mw.close()
        with Client(line["scheduler"], security=mine, timeout="20s", set_as_default=False) as client:
            s = idist.MirroredStrategy(["CPU:0"], cluster=client)
            try:
                assert float(s.run(lambda: np.float32(2.0) * 3)) == 6.0
            finally:
                s.close()
    finally:
        proc.terminate()
        assert proc.wait(30) == 0


@pytest.mark.parametrize(
    ("flags", "words"),
    [
        (["--tls-cert", "x.pem"], "needs all of"),
        (
            [
                "--tls-ca-file",
                "/nonexistent/ca.pem",
                "--tls-cert",
                "/nonexistent/c.pem",
                "--tls-key",
                "/nonexistent/k.pem",
            ],
            "does not exist",
        ),
    ],
)
def test_python_m_server_tls_flags_are_checked(flags: list[str], words: str) -> None:
    env = dict(
        os.environ,
        TF_CONFIG=json.dumps(
            {"cluster": {"chief": [f"127.0.0.1:{free_port()}"]}, "task": {"type": "chief", "index": 0}}
        ),
    )
    out = subprocess.run(
        [sys.executable, "-m", "interdist.server", *flags], env=env, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 2 and words in out.stderr


def test_security_must_be_a_security_and_goes_with_an_address() -> None:
    from distributed.security import Security

    with pytest.raises(TypeError, match="Security"):
        idist.MultiWorkerMirroredStrategy(cluster="tls://127.0.0.1:1", security="secret")
    with pytest.raises(ValueError, match="by address"):
        idist.experimental.ParameterServerStrategy(cluster=object(), security=Security.temporary())


def test_server_refuses_plain_tcp_with_a_security_that_requires_tls() -> None:
    from distributed.security import Security

    with pytest.raises(ValueError, match="tls"):
        idist.Server(
            {"worker": [f"127.0.0.1:{free_port()}"]}, protocol="tcp", security=Security.temporary(), start=False
        )
    with pytest.raises(TypeError, match="Security"):
        idist.Server({"worker": [f"127.0.0.1:{free_port()}"]}, security="yes", start=False)
