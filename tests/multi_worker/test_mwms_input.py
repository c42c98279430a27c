"""Auto-sharding of ``experimental_distribute_dataset`` across the workers of a MultiWorkerMirroredStrategy."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

import interdist as idist
from interdist.experimental import CommunicationOptions

Dataset = idist.data.Dataset
AutoShardPolicy = idist.data.experimental.AutoShardPolicy


@pytest.fixture(scope="module")
def mwms(named_cluster: Any) -> Iterator[Any]:
    s = idist.MultiWorkerMirroredStrategy(cluster=named_cluster.address,
                                          communication_options=CommunicationOptions(timeout_seconds=20))
    yield s
    s.close()


def steps(strategy: Any, dataset: Any) -> list[list[Any]]:
    return [[np.asarray(v).tolist() for v in strategy.experimental_local_results(b)]
            for b in strategy.experimental_distribute_dataset(dataset)]


def with_policy(ds: Any, policy: Any) -> Any:
    opts = idist.data.Options()
    opts.experimental_distribute.auto_shard_policy = policy
    return ds.with_options(opts)


@pytest.fixture()
def files(tmp_path: Any) -> list[str]:
    paths = []
    for i in range(4):
        p = tmp_path / f"part-{i}.txt"
        p.write_text("".join(f"f{i}-{j}\n" for j in range(3)))
        paths.append(str(p))
    return paths


@pytest.mark.parametrize("policy", [AutoShardPolicy.AUTO, AutoShardPolicy.FILE])
def test_file_sharding_each_worker_reads_its_files(mwms: Any, files: list[str], policy: Any) -> None:
    got = steps(mwms, with_policy(idist.data.TextLineDataset(files).batch(4), policy))
    # Worker 0 reads files 0 and 2, worker 1 files 1 and 3, each in batches of 4 / 2 workers.
    assert got == [[["f0-0", "f0-1"], ["f1-0", "f1-1"]],
                   [["f0-2", "f2-0"], ["f1-2", "f3-0"]],
                   [["f2-1", "f2-2"], ["f3-1", "f3-2"]]]


def test_file_sharding_needs_a_file_per_worker(mwms: Any, files: list[str]) -> None:
    with pytest.raises(ValueError, match="only has 1 file"):
        iter(mwms.experimental_distribute_dataset(
            with_policy(idist.data.TextLineDataset(files[:1]).batch(4), AutoShardPolicy.FILE)))
    with pytest.raises(ValueError, match="unshardable source"):
        iter(mwms.experimental_distribute_dataset(
            with_policy(Dataset.range(8).batch(4), AutoShardPolicy.FILE)))


def test_off_gives_every_worker_the_whole_pipeline(mwms: Any) -> None:
    got = steps(mwms, with_policy(Dataset.range(6).batch(4), AutoShardPolicy.OFF))
    assert got == [[[0, 1], [0, 1]], [[2, 3], [2, 3]], [[4, 5], [4, 5]]]


def test_data_sharding_splits_each_global_batch(mwms: Any) -> None:
    got = steps(mwms, with_policy(Dataset.range(8).batch(4), AutoShardPolicy.DATA))
    assert got == [[[0, 1], [2, 3]], [[4, 5], [6, 7]]]
    with pytest.warns(UserWarning, match="AUTO sharding policy will apply DATA"):
        assert steps(mwms, Dataset.range(8).batch(4)) == got


def test_uneven_global_batch_is_refused_for_file_sharding(mwms: Any, files: list[str]) -> None:
    with pytest.raises(ValueError, match="must divide evenly among the 2 workers"):
        iter(mwms.experimental_distribute_dataset(idist.data.TextLineDataset(files).batch(3)))
