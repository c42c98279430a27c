"""ClusterResolver base, SimpleClusterResolver and UnionResolver (values from TF 2.21)."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from typing import Any

import pytest

from interdist.cluster_resolver import (
    ClusterResolver,
    ClusterSpec,
    SimpleClusterResolver,
    UnionResolver,
    base,
)

SPEC = ClusterSpec({"worker": ["w0:1", "w1:1"], "ps": ["p0:1"]})


def test_public_api() -> None:
    import interdist.cluster_resolver as cr

    assert sorted(cr.__all__) == sorted(
        [
            "ClusterSpec",
            "ClusterResolver",
            "SimpleClusterResolver",
            "TFConfigClusterResolver",
            "DaskClusterResolver",
            "UnionResolver",
        ]
    )


def test_base_is_abstract() -> None:
    with pytest.raises(TypeError):
        ClusterResolver()  # type: ignore[abstract]


class _Minimal(ClusterResolver):
    def cluster_spec(self) -> ClusterSpec:
        return SPEC

    def master(
        self,
        task_type: str | None = None,
        task_id: int | None = None,
        rpc_layer: str | None = None,
    ) -> str:
        return ""


def test_base_properties_are_settable() -> None:
    r = _Minimal()
    assert (r.task_type, r.task_id, r.rpc_layer, r.environment) == (
        None,
        None,
        None,
        "",
    )
    r.task_type, r.task_id, r.rpc_layer = "worker", 1, "grpc"
    assert (r.task_type, r.task_id, r.rpc_layer) == ("worker", 1, "grpc")


def test_simple_resolver() -> None:
    r = SimpleClusterResolver(
        SPEC,
        task_type="worker",
        task_id=1,
        rpc_layer="grpc",
        num_accelerators={"GPU": 2},
    )
    assert r.cluster_spec() is SPEC
    assert r.master() == "grpc://"  # TF prefixes even the empty master
    assert r.master("worker", 1) == "grpc://w1:1"
    assert r.master("worker", 1, "http") == "http://w1:1"
    assert r.master("worker") == "grpc://"  # both task_type and task_id are needed
    assert (r.task_type, r.task_id, r.rpc_layer, r.environment) == (
        "worker",
        1,
        "grpc",
        "",
    )
    assert r.num_accelerators() == {"GPU": 2}
    with pytest.raises(ValueError, match="No task with index 5"):
        r.master("worker", 5)


def test_simple_resolver_defaults_and_setters() -> None:
    r = SimpleClusterResolver(SPEC, master="m:1")
    assert r.master() == "m:1"
    assert (r.task_type, r.task_id, r.rpc_layer, r.environment) == (
        None,
        None,
        None,
        "",
    )
    assert r.num_accelerators() == {}
    r.task_type, r.task_id, r.rpc_layer = "ps", 0, "grpc"
    assert (r.task_type, r.task_id, r.rpc_layer, r.master()) == (
        "ps",
        0,
        "grpc",
        "grpc://m:1",
    )


@pytest.mark.parametrize(
    ("args", "kwargs", "match"),
    [
        (({"worker": ["a"]},), {}, "cluster_spec must be a `ClusterSpec`"),
        ((SPEC,), {"master": None}, "master must be a string"),
    ],
)
def test_simple_resolver_type_errors(args: Any, kwargs: Any, match: str) -> None:
    with pytest.raises(TypeError, match=match):
        SimpleClusterResolver(*args, **kwargs)


U1 = SimpleClusterResolver(
    ClusterSpec({"worker": ["w0:1", "w1:1"]}),
    task_type="worker",
    task_id=0,
    rpc_layer="grpc",
    master="m:1",
)
U2 = SimpleClusterResolver(
    ClusterSpec({"worker": ["w2:1"], "ps": ["p0:1"]}), task_type="ps", task_id=0
)
U3 = SimpleClusterResolver(ClusterSpec({"worker": {5: "w5:1"}}))
U4 = SimpleClusterResolver(ClusterSpec({"worker": {0: "dup:1"}}))  # dense: a list
U5 = SimpleClusterResolver(ClusterSpec({"worker": {5: "dup:1"}}))


def test_union_merges() -> None:
    assert UnionResolver(U1, U2).cluster_spec().as_dict() == {
        "worker": ["w0:1", "w1:1", "w2:1"],
        "ps": ["p0:1"],
    }
    assert UnionResolver(U1, U3).cluster_spec().as_dict() == {
        "worker": {0: "w0:1", 1: "w1:1", 5: "w5:1"}
    }
    # {0: addr} is dense, so it is concatenated like a list (as TF).
    assert UnionResolver(U1, U4).cluster_spec().as_dict() == {
        "worker": ["w0:1", "w1:1", "dup:1"]
    }
    with pytest.raises(KeyError, match="Duplicate keys"):
        UnionResolver(U1, U3, U5).cluster_spec()


def test_union_delegates_to_first() -> None:
    u = UnionResolver(U2, U1)
    assert (u.task_type, u.task_id, u.rpc_layer, u.environment) == ("ps", 0, None, "")
    assert UnionResolver(U1, U2).rpc_layer == "grpc"
    assert UnionResolver(U1, U2).master() == "grpc://m:1"
    assert UnionResolver(U1, U2).master("ps", 0) == "p0:1"
    assert UnionResolver(U2, U1, rpc_layer="x").master("ps", 0) == "x://p0:1"
    assert UnionResolver(U1, U2).num_accelerators() == {}


def test_union_overrides() -> None:
    u = UnionResolver(U1, U2, task_type="ps", task_id=0)
    assert (u.task_type, u.task_id) == ("ps", 0)
    u.task_id = 1
    assert u.task_id == 1


@pytest.mark.parametrize(
    ("args", "kwargs", "exc"),
    [((), {}, ValueError), ((SPEC,), {}, TypeError), ((U1,), {"foo": 1}, ValueError)],
)
def test_union_errors(args: Any, kwargs: Any, exc: type[Exception]) -> None:
    with pytest.raises(exc):
        UnionResolver(*args, **kwargs)


def test_format_master_url() -> None:
    assert base.format_master_url("h:1", "grpc") == "grpc://h:1"
    assert base.format_master_url("h:1", "") == "h:1"
    assert base.format_master_url("h:1") == "h:1"


# -- the GPU probe -------------------------------------------------------------
@pytest.fixture
def fresh_probe() -> Iterator[None]:
    base.local_gpu_count.cache_clear()
    yield
    base.local_gpu_count.cache_clear()


def _no_pynvml(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(base, "_count_with_pynvml", lambda: None)


def test_probe_without_nvidia_smi(
    monkeypatch: pytest.MonkeyPatch, fresh_probe: None
) -> None:
    _no_pynvml(monkeypatch)
    monkeypatch.setattr("shutil.which", lambda name: None)
    assert base.local_gpu_count() == 0
    assert _Minimal().num_accelerators() == {}


def test_probe_parses_nvidia_smi(
    monkeypatch: pytest.MonkeyPatch, fresh_probe: None
) -> None:
    _no_pynvml(monkeypatch)
    monkeypatch.setattr("shutil.which", lambda name: "/usr/bin/nvidia-smi")
    out = (
        "GPU 0: NVIDIA H100 (UUID: GPU-1)\n  MIG 1g.10gb Device 0: (UUID: MIG-1)\n"
        "GPU 1: NVIDIA H100 (UUID: GPU-2)\n"
    )
    monkeypatch.setattr(
        "subprocess.run",
        lambda *a, **k: subprocess.CompletedProcess(a, 0, out, ""),
    )
    assert base.local_gpu_count() == 2
    assert _Minimal().num_accelerators("worker", 0) == {"GPU": 2}


@pytest.mark.parametrize(
    "run",
    [
        lambda *a, **k: subprocess.CompletedProcess(a, 9, "", "NVIDIA-SMI has failed"),
        lambda *a, **k: (_ for _ in ()).throw(
            subprocess.TimeoutExpired("nvidia-smi", 10)
        ),
        lambda *a, **k: (_ for _ in ()).throw(PermissionError("denied")),
    ],
    ids=["nonzero-exit", "timeout", "oserror"],
)
def test_probe_never_raises(
    monkeypatch: pytest.MonkeyPatch, fresh_probe: None, run: Any
) -> None:
    _no_pynvml(monkeypatch)
    monkeypatch.setattr("shutil.which", lambda name: "/usr/bin/nvidia-smi")
    monkeypatch.setattr("subprocess.run", run)
    assert base.local_gpu_count() == 0


def test_probe_prefers_pynvml(
    monkeypatch: pytest.MonkeyPatch, fresh_probe: None
) -> None:
    monkeypatch.setattr(base, "_count_with_pynvml", lambda: 3)
    monkeypatch.setattr(
        base, "_count_with_nvidia_smi", lambda: pytest.fail("not needed")
    )
    assert base.local_gpu_count() == 3


def test_probe_is_cached(monkeypatch: pytest.MonkeyPatch, fresh_probe: None) -> None:
    calls: list[int] = []

    def probe() -> int:
        calls.append(1)
        return 1

    monkeypatch.setattr(base, "_count_with_pynvml", probe)
    assert base.local_gpu_count() == base.local_gpu_count() == 1
    assert calls == [1]
