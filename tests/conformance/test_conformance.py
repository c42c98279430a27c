"""interdist against values recorded from real TensorFlow 2.21.

``seed_examples.json`` (the given examples, see SEED_README.md) must all pass.
every ``tf_cases*.json`` (our own recordings, one file per round, made by
recorder/record.py) must pass too, except the divergences listed below,
each with its reason. All these files live beside this one; ``runner.load`` fails
loudly when one is missing or empty.
"""

from __future__ import annotations

import pytest

from .runner import RECORDED, SEED, load, run_case

# id -> why interdist differs from the recording (kept short and honest).
KNOWN_DIVERGENCES: dict[str, str] = {
    "dsff.per_replica_central_storage_no_fetch.CS2": "TF's CentralStorageStrategy with PER_REPLICA and "
                                                     "fetch_to_device=False silently gives one batch per step that is "
                                                     "not per-replica; interdist raises NotImplementedError",
    "scope.reuse_scope_object.M2": "re-entering a used scope() object: TF raises AttributeError and then leaves the "
                                   "strategy installed (has_strategy() stays True); interdist raises the same error "
                                   "but leaves the context clean",
    "reduce_op.not_a_reduce_op.all_reduce.M2": "TF's MirroredStrategy all_reduce silently SUMs with any reduce_op that is "
                                               "not a ReduceOp or a string (1, None, an enum, even "
                                               "VariableAggregation.MEAN); interdist raises AssertionError, as TF's "
                                               "reduce/reduce_to and OneDevice/default strategies do",
    "reduce_op.not_a_reduce_op.batch_reduce_to.M2": "same silent SUM in TF's MirroredStrategy batch_reduce_to; interdist "
                                                    "raises AssertionError (as TF's reduce_to)",
    "reduce.other_strategys_per_replica": "deliberate: TF reduces another strategy's PerReplica silently; interdist raises ValueError",
    "xstrat.reduce_foreign_per_replica.M2_M2": "deliberate: TF reduces another strategy's PerReplica silently (3.0); interdist raises ValueError",
    "xstrat.sgd.M2_to_M2": "not implemented: Keras SGD updating another strategy's MirroredVariable in a run (TF sums the "
                           "grads); its copies live on the other strategy's workers, interdist raises ValueError",
}

SEEDS = load(SEED)
OURS = [c for path in RECORDED for c in load(path)]


def test_case_files_are_all_there() -> None:
    """The counts at the time of writing: a file that shrinks or vanishes shows up here."""
    assert len(SEEDS) >= 38
    counts = {p.name: len(load(p)) for p in RECORDED}
    assert all(counts.get(name, 0) >= n for name, n in
               {"tf_cases.json": 335, "tf_cases_2.json": 245, "tf_cases_3.json": 167, "tf_cases_4.json": 72,
                "tf_cases_5.json": 61, "tf_cases_6.json": 39, "tf_cases_7.json": 64,
                "tf_cases_8.json": 92}.items()), counts


@pytest.mark.parametrize("bad", ["missing", "empty"])
def test_load_refuses_a_missing_or_empty_file(tmp_path, bad: str) -> None:
    path = tmp_path / "cases.json"
    if bad == "empty":
        path.write_text("[]")
    with pytest.raises(FileNotFoundError if bad == "missing" else ValueError):
        load(path)


@pytest.mark.parametrize("case", SEEDS, ids=[c["id"] for c in SEEDS])
def test_seed_example(case: dict) -> None:
    ok, detail = run_case(case)
    assert ok, detail


def _param(case: dict) -> object:
    reason = KNOWN_DIVERGENCES.get(case["id"])
    marks = [pytest.mark.xfail(reason=reason, strict=True)] if reason else []
    return pytest.param(case, id=case["id"], marks=marks)


@pytest.mark.parametrize("case", [_param(c) for c in OURS])
def test_recorded_case(case: dict) -> None:
    ok, detail = run_case(case)
    assert ok, detail
