"""TFConfigClusterResolver: values recorded from TF 2.21, and the stricter validation."""

from __future__ import annotations

import json
from typing import Any

import pytest

from interdist.cluster_resolver import ClusterSpec, TFConfigClusterResolver
from interdist.cluster_resolver.tf_config import load_tf_config

FULL = {
    "cluster": {
        "chief": ["c0:1"],
        "worker": ["w0:1", "w1:1"],
        "ps": ["p0:1", "p1:1"],
        "evaluator": ["e0:1"],
    },
    "task": {"type": "worker", "index": 1},
    "rpc_layer": "grpc",
}


def _set(monkeypatch: pytest.MonkeyPatch, config: Any) -> None:
    monkeypatch.setenv(
        "TF_CONFIG", config if isinstance(config, str) else json.dumps(config)
    )


def test_full_config(monkeypatch: pytest.MonkeyPatch) -> None:
    _set(monkeypatch, FULL)
    r = TFConfigClusterResolver()
    spec = r.cluster_spec()
    assert spec.as_dict() == FULL["cluster"]
    assert spec.jobs == ["chief", "worker", "ps", "evaluator"]
    assert (r.task_type, r.task_id, r.rpc_layer, r.environment) == (
        "worker",
        1,
        "grpc",
        None,
    )
    assert r.master() == "grpc://w1:1"
    assert r.master(rpc_layer="grpc") == "grpc://w1:1"
    assert r.master(rpc_layer="") == "w1:1"  # "" is "no prefix", not "use the default"
    assert r.master("worker", 0) == "grpc://w0:1"
    assert r.master("chief", 0) == "grpc://c0:1"
    assert r.master("ps") == "grpc://p1:1"  # task_id falls back to this task's
    assert r.master("evaluator", 0, "http") == "http://e0:1"


def test_without_rpc_layer(monkeypatch: pytest.MonkeyPatch) -> None:
    _set(
        monkeypatch,
        {
            "cluster": {"chief": ["c0:1"], "worker": ["w0:1"]},
            "task": {"type": "chief", "index": 0},
        },
    )
    r = TFConfigClusterResolver()
    assert r.rpc_layer is None
    assert r.master() == "c0:1"
    assert r.master("worker", 0, "grpc+verbs") == "grpc+verbs://w0:1"


def test_unset(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TF_CONFIG", raising=False)
    r = TFConfigClusterResolver()
    assert r.cluster_spec() == ClusterSpec({})
    assert repr(r.cluster_spec()) == "ClusterSpec({})"
    assert bool(r.cluster_spec()) is False
    assert (r.task_type, r.task_id, r.rpc_layer, r.environment) == (
        None,
        None,
        None,
        None,
    )
    assert r.master() == ""
    assert r.master("worker", 0, "grpc") == ""
    assert load_tf_config() == {}


@pytest.mark.parametrize(
    "config",
    [
        {},
        {"cluster": {}, "task": {"type": "worker", "index": 0}},
        {"task": {"type": "worker", "index": 2}},
    ],
    ids=["empty-object", "empty-cluster", "task-without-cluster"],
)
def test_no_cluster_gives_empty_master(
    monkeypatch: pytest.MonkeyPatch, config: Any
) -> None:
    _set(monkeypatch, config)
    r = TFConfigClusterResolver()
    assert r.cluster_spec().as_dict() == {}
    assert r.master() == ""
    assert r.master("worker", 1, "grpc") == ""


def test_task_without_cluster_is_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    _set(monkeypatch, {"task": {"type": "worker", "index": 2}})
    r = TFConfigClusterResolver()
    assert (r.task_type, r.task_id) == ("worker", 2)


@pytest.mark.parametrize("task", [None, {}], ids=["no-task", "empty-task"])
def test_no_task(monkeypatch: pytest.MonkeyPatch, task: Any) -> None:
    config: dict[str, Any] = {"cluster": {"worker": ["w0:1", "w1:1"]}}
    if task is not None:
        config["task"] = task
    _set(monkeypatch, config)
    r = TFConfigClusterResolver()
    assert (r.task_type, r.task_id) == (None, None)
    assert r.cluster_spec().as_dict() == {"worker": ["w0:1", "w1:1"]}
    assert r.master("worker", 0) == "w0:1"
    assert r.master("worker", 1, "grpc") == "grpc://w1:1"
    # TF raises ValueError("No such job in cluster: None") here.
    with pytest.raises(ValueError, match="no 'task'"):
        r.master()


def test_single_task_cluster_master_is_empty(monkeypatch: pytest.MonkeyPatch) -> None:
    _set(
        monkeypatch,
        {
            "cluster": {"worker": ["w0:1"]},
            "task": {"type": "worker", "index": 0},
            "rpc_layer": "grpc",
        },
    )
    r = TFConfigClusterResolver()
    assert r.master() == ""
    assert r.master("worker", 0) == ""  # even when named, as TF


def test_sparse_cluster(monkeypatch: pytest.MonkeyPatch) -> None:
    _set(
        monkeypatch,
        {
            "cluster": {"worker": {"1": "w1:1", "3": "w3:1"}, "ps": ["p0:1"]},
            "task": {"type": "worker", "index": 3},
        },
    )
    r = TFConfigClusterResolver()
    assert r.cluster_spec().as_dict() == {
        "worker": {1: "w1:1", 3: "w3:1"},
        "ps": ["p0:1"],
    }
    assert r.master() == "w3:1"
    assert r.master(rpc_layer="grpc") == "grpc://w3:1"
    with pytest.raises(ValueError, match="No task with index 0"):
        r.master("worker", 0)


def test_sparse_single_task_is_not_single(monkeypatch: pytest.MonkeyPatch) -> None:
    # TF counts len(job_tasks) == max index + 1, so {3: addr} is "4 tasks".
    _set(
        monkeypatch,
        {"cluster": {"worker": {"3": "w3:1"}}, "task": {"type": "worker", "index": 3}},
    )
    assert TFConfigClusterResolver().master() == "w3:1"


def test_session_master_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    _set(
        monkeypatch,
        {
            "cluster": {"worker": ["w0:1", "w1:1"]},
            "task": {"type": "worker", "index": 0},
            "session_master": "sm:1",
        },
    )
    r = TFConfigClusterResolver()
    assert r.master() == "sm:1"
    assert r.master("worker", 1, "grpc") == "sm:1"


def test_index_as_digit_string(monkeypatch: pytest.MonkeyPatch) -> None:
    _set(
        monkeypatch,
        {
            "cluster": {"worker": ["w0:1", "w1:1"]},
            "task": {"type": "worker", "index": "1"},
        },
    )
    r = TFConfigClusterResolver()
    assert r.task_id == 1
    assert r.master() == "w1:1"


def test_evaluator_may_sit_outside_the_cluster(monkeypatch: pytest.MonkeyPatch) -> None:
    _set(
        monkeypatch,
        {
            "cluster": {"chief": ["c0:1"], "worker": ["w0:1"]},
            "task": {"type": "evaluator", "index": 0},
        },
    )
    r = TFConfigClusterResolver()
    assert (r.task_type, r.task_id) == ("evaluator", 0)
    assert r.cluster_spec().jobs == ["chief", "worker"]
    assert r.master("chief", 0) == "c0:1"
    with pytest.raises(ValueError, match="No such job in cluster: 'evaluator'"):
        r.master()


def test_constructor_overrides_and_setters(monkeypatch: pytest.MonkeyPatch) -> None:
    _set(monkeypatch, FULL)
    r = TFConfigClusterResolver(
        task_type="ps", task_id=0, rpc_layer="http", environment="google"
    )
    assert (r.task_type, r.task_id, r.rpc_layer, r.environment) == (
        "ps",
        0,
        "http",
        "google",
    )
    assert r.master() == "http://p0:1"
    r.task_type, r.task_id = "chief", 0
    # setattr: after `r.rpc_layer = None` mypy would narrow the property to None.
    setattr(r, "rpc_layer", None)  # noqa: B010
    assert (r.task_type, r.task_id, r.rpc_layer) == (
        "chief",
        0,
        "grpc",
    )  # from TF_CONFIG
    assert r.master() == "grpc://c0:1"
    r.task_type = None
    assert r.task_type == "worker"  # back to TF_CONFIG


def test_environment_from_tf_config(monkeypatch: pytest.MonkeyPatch) -> None:
    # An interdist extension: TF's resolver ignores TF_CONFIG["environment"].
    _set(monkeypatch, {"cluster": {"worker": ["w0:1"]}, "environment": "cloud"})
    assert TFConfigClusterResolver().environment == "cloud"
    assert TFConfigClusterResolver(environment="google").environment == "google"


def test_read_lazily_every_time(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TF_CONFIG", raising=False)
    r = TFConfigClusterResolver()
    assert (r.task_type, r.cluster_spec().as_dict()) == (None, {})
    _set(
        monkeypatch,
        {"cluster": {"worker": ["a:1", "b:1"]}, "task": {"type": "worker", "index": 1}},
    )
    assert (r.task_type, r.task_id, r.master()) == ("worker", 1, "b:1")
    _set(
        monkeypatch,
        {"cluster": {"worker": ["a:1", "b:1"]}, "task": {"type": "worker", "index": 0}},
    )
    assert (r.task_id, r.master()) == (0, "a:1")


def test_num_accelerators_is_a_dict(monkeypatch: pytest.MonkeyPatch) -> None:
    _set(monkeypatch, FULL)
    result = TFConfigClusterResolver().num_accelerators()
    assert isinstance(result, dict)
    assert set(result) <= {"GPU"}


_CLUSTER = {"worker": ["a:1", "b:1"]}

MALFORMED: list[tuple[str, Any, str]] = [
    ("not-json", "{cluster: }", "TF_CONFIG is not valid JSON: "),
    ("empty-string", "", "TF_CONFIG is not valid JSON: "),
    ("json-list", "[1, 2]", "TF_CONFIG must be a JSON object"),
    ("json-null", "null", "TF_CONFIG must be a JSON object"),
    ("json-string", '"abc"', "TF_CONFIG must be a JSON object"),
    ("cluster-list", {"cluster": ["w0:1"]}, "'cluster' must be an object"),
    ("cluster-null", {"cluster": None}, "'cluster' must be an object"),
    ("job-string", {"cluster": {"worker": "w0:1"}}, "'cluster.worker' must be a list"),
    (
        "address-int",
        {"cluster": {"worker": [1]}},
        r"'cluster.worker\[0\]' must be an address string",
    ),
    (
        "sparse-key",
        {"cluster": {"worker": {"x": "a:1"}}},
        "'cluster.worker key' must be an integer",
    ),
    (
        "task-list",
        {"cluster": _CLUSTER, "task": ["worker", 0]},
        "'task' must be an object",
    ),
    ("task-null", {"cluster": _CLUSTER, "task": None}, "'task' must be an object"),
    (
        "no-type",
        {"cluster": _CLUSTER, "task": {"index": 0}},
        "'task' is missing 'type'",
    ),
    (
        "no-index",
        {"cluster": _CLUSTER, "task": {"type": "worker"}},
        "'task' is missing 'index'",
    ),
    (
        "index-word",
        {"cluster": _CLUSTER, "task": {"type": "worker", "index": "one"}},
        "'task.index' must be an integer",
    ),
    (
        "index-float",
        {"cluster": _CLUSTER, "task": {"type": "worker", "index": 1.5}},
        "'task.index' must be an integer",
    ),
    (
        "index-bool",
        {"cluster": _CLUSTER, "task": {"type": "worker", "index": True}},
        "'task.index' must be an integer",
    ),
    (
        "index-negative",
        {"cluster": _CLUSTER, "task": {"type": "worker", "index": -1}},
        "'task.index' must be non-negative",
    ),
    (
        "type-int",
        {"cluster": _CLUSTER, "task": {"type": 3, "index": 0}},
        "'task.type' must be a non-empty string",
    ),
    (
        "type-unknown",
        {"cluster": _CLUSTER, "task": {"type": "ps", "index": 0}},
        "'task.type' is 'ps', which is not a job of the cluster",
    ),
    (
        "index-out-of-range",
        {"cluster": _CLUSTER, "task": {"type": "worker", "index": 2}},
        r"'task.index' is 2, but job 'worker' has tasks \[0, 1\]",
    ),
    (
        "sparse-index-missing",
        {
            "cluster": {"worker": {"1": "a:1", "3": "b:1"}},
            "task": {"type": "worker", "index": 2},
        },
        r"'task.index' is 2, but job 'worker' has tasks \[1, 3\]",
    ),
    (
        "rpc-layer-int",
        {"cluster": _CLUSTER, "task": {"type": "worker", "index": 0}, "rpc_layer": 5},
        "'rpc_layer' must be a string",
    ),
    ("environment-list", {"environment": ["x"]}, "'environment' must be a string"),
]


@pytest.mark.parametrize(
    ("config", "match"), [m[1:] for m in MALFORMED], ids=[m[0] for m in MALFORMED]
)
@pytest.mark.parametrize(
    "query",
    [
        lambda r: r.cluster_spec(),
        lambda r: r.task_type,
        lambda r: r.task_id,
        lambda r: r.rpc_layer,
        lambda r: r.master(),
        lambda r: r.master("worker", 0),
    ],
    ids=["cluster_spec", "task_type", "task_id", "rpc_layer", "master", "master-named"],
)
def test_malformed_tf_config_is_value_error(
    monkeypatch: pytest.MonkeyPatch, config: Any, match: str, query: Any
) -> None:
    _set(monkeypatch, config)
    r = TFConfigClusterResolver()  # construction never reads TF_CONFIG
    with pytest.raises(ValueError, match=match):
        query(r)


def test_not_json_chains_the_decode_error(monkeypatch: pytest.MonkeyPatch) -> None:
    _set(monkeypatch, "{")
    with pytest.raises(ValueError) as info:
        TFConfigClusterResolver().cluster_spec()
    assert isinstance(info.value.__cause__, json.JSONDecodeError)


def test_overrides_skip_reading_task(monkeypatch: pytest.MonkeyPatch) -> None:
    # With both overrides, task_type/task_id never consult TF_CONFIG (as TF).
    _set(monkeypatch, "{")
    r = TFConfigClusterResolver(task_type="worker", task_id=1, rpc_layer="grpc")
    assert (r.task_type, r.task_id, r.rpc_layer) == ("worker", 1, "grpc")


def test_load_tf_config_with_explicit_environ() -> None:
    text = json.dumps(FULL)
    assert load_tf_config({"TF_CONFIG": text}) == FULL
    with pytest.raises(ValueError, match="not valid JSON"):
        load_tf_config({"TF_CONFIG": "nope"})
