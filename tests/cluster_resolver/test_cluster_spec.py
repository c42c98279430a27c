"""ClusterSpec against values recorded from TensorFlow 2.21's ``tf.train.ClusterSpec``."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from interdist.cluster_resolver import ClusterSpec

DENSE = {"worker": ["w0:1", "w1:1"], "ps": ["p0:1"]}
SPARSE = {"worker": {1: "w1:1", 4: "w4:1"}, "ps": {0: "p0:1", 1: "p1:1"}}


def test_dense() -> None:
    spec = ClusterSpec(DENSE)
    assert spec.as_dict() == {"worker": ["w0:1", "w1:1"], "ps": ["p0:1"]}
    assert spec.jobs == ["worker", "ps"]  # insertion order, as TF
    assert repr(spec) == "ClusterSpec({'ps': ['p0:1'], 'worker': ['w0:1', 'w1:1']})"
    assert bool(spec) is True
    assert spec.num_tasks("worker") == 2
    assert spec.task_indices("worker") == [0, 1]
    assert spec.task_address("worker", 1) == "w1:1"
    assert spec.job_tasks("ps") == ["p0:1"]


def test_tuple_tasks_become_lists() -> None:
    assert ClusterSpec({"worker": ("a:1", "b:1")}).as_dict() == {
        "worker": ["a:1", "b:1"]
    }


def test_sparse() -> None:
    spec = ClusterSpec(SPARSE)
    # A job whose indices are 0..n-1 comes back as a list even if given as a dict.
    assert spec.as_dict() == {"worker": {1: "w1:1", 4: "w4:1"}, "ps": ["p0:1", "p1:1"]}
    assert isinstance(spec.as_dict()["ps"], list)
    assert spec.num_tasks("worker") == 2
    assert spec.task_indices("worker") == [1, 4]
    assert spec.job_tasks("worker") == [None, "w1:1", None, None, "w4:1"]
    assert (
        repr(spec)
        == "ClusterSpec({'ps': ['p0:1', 'p1:1'], 'worker': {1: 'w1:1', 4: 'w4:1'}})"
    )


def test_sparse_string_keys_as_in_json() -> None:
    spec = ClusterSpec({"worker": {"1": "w1:1", "0": "w0:1"}})
    assert spec.as_dict() == {"worker": ["w0:1", "w1:1"]}
    assert spec.task_address("worker", 1) == "w1:1"
    with pytest.raises(ValueError, match="No task with index '0' in job 'worker'"):
        spec.task_address("worker", "0")  # type: ignore[arg-type]


def test_empty_spec() -> None:
    spec = ClusterSpec({})
    assert spec.as_dict() == {}
    assert spec.jobs == []
    assert repr(spec) == "ClusterSpec({})"
    assert bool(spec) is False


def test_empty_job() -> None:
    spec = ClusterSpec({"worker": [], "ps": ["p:1"]})
    assert spec.as_dict() == {"worker": {}, "ps": ["p:1"]}  # {} not [], as TF
    assert repr(spec) == "ClusterSpec({'ps': ['p:1'], 'worker': {}})"
    assert bool(spec) is True
    assert spec.num_tasks("worker") == 0
    assert spec.task_indices("worker") == []
    with pytest.raises(ValueError):
        spec.job_tasks("worker")
    with pytest.raises(ValueError):
        spec.task_address("worker", 0)


@pytest.mark.parametrize(
    "call",
    [
        lambda s: s.num_tasks("nope"),
        lambda s: s.task_indices("nope"),
        lambda s: s.job_tasks("nope"),
        lambda s: s.task_address("nope", 0),
        lambda s: s.task_address(None, None),
    ],
)
def test_unknown_job_is_value_error(call: Any) -> None:
    with pytest.raises(ValueError, match="No such job in cluster"):
        call(ClusterSpec(DENSE))


@pytest.mark.parametrize("index", [-1, 2, 4, "0", None])
def test_unknown_index_is_value_error(index: Any) -> None:
    with pytest.raises(ValueError, match=r"No task with index .* in job 'worker'"):
        ClusterSpec(DENSE).task_address("worker", index)


def test_copy_sorts_jobs_as_tf_proto_round_trip() -> None:
    original = ClusterSpec({"z": ["z:1"], "a": ["a:1"], "m": {2: "m:1"}})
    assert original.jobs == ["z", "a", "m"]
    copy = ClusterSpec(original)
    assert copy.jobs == ["a", "m", "z"]
    assert copy.as_dict() == {"a": ["a:1"], "m": {2: "m:1"}, "z": ["z:1"]}
    assert copy == original


def test_copy_is_independent() -> None:
    original = ClusterSpec({"worker": ["a:1"]})
    copy = ClusterSpec(original)
    original._cluster_spec["worker"][1] = "b:1"
    assert copy.as_dict() == {"worker": ["a:1"]}


def test_equality_follows_tf() -> None:
    spec = ClusterSpec({"worker": ["a:1"]})
    assert spec == ClusterSpec({"worker": {0: "a:1"}})
    assert spec != ClusterSpec({"worker": ["b:1"]})
    # TF compares its internal {job: {index: address}} mapping with `other`.
    assert spec == {"worker": {0: "a:1"}}
    assert (spec == {"worker": ["a:1"]}) is False
    assert (spec != {"worker": ["a:1"]}) is True
    assert (spec == None) is False
    with pytest.raises(TypeError):
        hash(spec)


@pytest.mark.parametrize("bad", [["w0:1"], None, "worker", 3])
def test_not_a_dict_is_type_error(bad: Any) -> None:
    with pytest.raises(TypeError, match="`cluster` must be a dictionary"):
        ClusterSpec(bad)


@pytest.mark.parametrize(
    ("cluster", "exc", "match"),
    [
        ({"worker": "w0:1"}, TypeError, "The tasks for job 'worker' must be a list"),
        ({"worker": None}, TypeError, "The tasks for job 'worker' must be a list"),
        ({"worker": [1234]}, TypeError, "Task address 1234 must be bytes or unicode"),
        (
            {"worker": ["a:1", None]},
            TypeError,
            "Task address None must be bytes or unicode",
        ),
        ({"worker": {0: 5}}, TypeError, "Task address 5 must be bytes or unicode"),
        ({0: ["a:1"]}, TypeError, "Job name 0 must be bytes or unicode"),
        (
            {"worker": {"x": "a:1"}},
            ValueError,
            "Task index 'x' of job 'worker' is not an integer",
        ),
        ({"worker": {None: "a:1"}}, TypeError, "Task index None of job 'worker'"),
    ],
)
def test_bad_tasks(cluster: Any, exc: type[Exception], match: str) -> None:
    with pytest.raises(exc, match=match):
        ClusterSpec(cluster)


def test_bytes_are_decoded() -> None:
    spec = ClusterSpec({b"worker": [b"a:1"]})  # type: ignore[dict-item,list-item]
    assert spec.as_dict() == {"worker": ["a:1"]}


_job_names = st.text(alphabet="abcdefghijklmnopqrstuvwxyz", min_size=1, max_size=6)
_addresses = st.builds("{}:{}".format, _job_names, st.integers(1, 65535))
_jobs = st.one_of(
    st.lists(_addresses, min_size=1, max_size=5),
    st.dictionaries(st.integers(0, 20), _addresses, min_size=1, max_size=5),
)


@given(st.dictionaries(_job_names, _jobs, max_size=4))
def test_as_dict_round_trips(cluster: dict[str, Any]) -> None:
    spec = ClusterSpec(cluster)
    assert ClusterSpec(spec.as_dict()) == spec
    assert ClusterSpec(spec) == spec
    assert spec.jobs == list(cluster)
    for job, tasks in cluster.items():
        indices = list(range(len(tasks))) if isinstance(tasks, list) else sorted(tasks)
        assert spec.task_indices(job) == indices
        assert spec.num_tasks(job) == len(tasks)
        for i in indices:
            assert spec.task_address(job, i) == tasks[i]
        dense = indices == list(range(len(indices)))
        assert isinstance(spec.as_dict()[job], list if dense else dict)
    assert eval(repr(spec), {"ClusterSpec": ClusterSpec}) == spec
