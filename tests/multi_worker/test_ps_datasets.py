"""Datasets with ``ParameterServerStrategy``: made on each worker, one iterator per worker.

What TF 2.21 does, checked with an in-process cluster of 2 workers and 1 ps
(``tf.distribute.Server`` per task, ``ParameterServerStrategy`` + ``ClusterCoordinator``):

* ``iter(strategy.experimental_distribute_dataset(ds))`` and ``iter`` of
  ``distribute_datasets_from_function`` raise ``ValueError`` (the messages pinned below);
  ``element_spec`` of them raises ``AttributeError``; ``.map`` raises ``AttributeError``.
* ``coordinator.create_per_worker_dataset(strategy.experimental_distribute_dataset(
  Dataset.range(8).batch(2)))``: every worker reads all of [0,1],[2,3],[4,5],[6,7] (no
  sharding, also with ``auto_shard_policy=DATA``); its ``element_spec`` is the dataset's.
* ``dataset_fn`` of ``distribute_datasets_from_function`` gets ``InputContext(1, 0, 1)``.
* ``next()`` of the per-worker iterator in the coordinator raises ``NotImplementedError``.
* Two ``iter()`` of one per-worker dataset are independent, both from the first element.
* A dataset_fn raising ``KeyError`` raises it from ``create_per_worker_dataset``; a
  ``dataset_fn`` that is not callable gives ``TypeError``, a list instead of a dataset
  ``AttributeError``, ``create_per_worker_dataset(3)`` ``ValueError("Unexpected dataset type!")``.
* An exhausted iterator fails the step (``OutOfRangeError`` in TF, ``StopIteration`` here);
  ``join`` raises it once and the steps still queued are cancelled (``CancelledError``).
* ``distribute_datasets_from_function`` with ``PER_REPLICA`` is accepted.
"""

from __future__ import annotations

import gc
import os
import time
from typing import Any

import numpy as np
import pytest

import interdist as idist
from interdist.strategy.coordinator import ClusterCoordinator, PerWorkerValues
from interdist.errors import CancelledError, NotADatasetError
from interdist.experimental import ParameterServerStrategy
from interdist.input import AutoShardPolicy, InputContext, InputOptions, InputReplicationMode, Options, TensorSpec

Dataset = idist.data.Dataset


@pytest.fixture(scope="module")
def ps(named_cluster: Any) -> Any:
    s = ParameterServerStrategy(cluster=named_cluster.address)
    coord = ClusterCoordinator(s)
    yield s, coord
    s.close()


def _next(iterator: Any) -> Any:
    return next(iterator)


def _per_worker(rvs: list[Any]) -> dict[str, list[Any]]:
    """Each worker's results, in the order it ran its steps (a worker runs them in schedule order)."""
    out: dict[str, list[Any]] = {}
    for r in rvs:
        v = r.fetch()
        out.setdefault(r.worker, []).append(v.tolist() if isinstance(v, np.ndarray) else v)
    return out


def _worker_pids(s: Any) -> dict[str, int]:
    pids = s._lease.client.run(os.getpid, workers=list(s._worker_addresses))
    return {f"worker:{t.index}": pids[a] for t, a in zip(s._worker_tasks, s._worker_addresses)}


def test_distributed_dataset_needs_the_coordinator(ps: Any) -> None:
    s, _ = ps
    dd = s.experimental_distribute_dataset(Dataset.range(8).batch(2))
    with pytest.raises(ValueError, match=r"^To use this dataset, you need to pass this dataset to "
                                         r"ClusterCoordinator\.create_per_worker_dataset\.$"):
        iter(dd)
    dfff = s.distribute_datasets_from_function(lambda ctx: Dataset.range(8).batch(2))
    with pytest.raises(ValueError, match=r"^You need to use this dataset in ClusterCoordinator\."
                                         r"create_per_worker_dataset\.$"):
        iter(dfff)
    for d in (dd, dfff):
        with pytest.raises(AttributeError, match="create_per_worker_dataset"):
            d.element_spec  # noqa: B018
        with pytest.raises(AttributeError, match="has no attribute 'map'"):
            d.map(lambda x: x)


def test_experimental_distribute_dataset_gives_every_worker_the_whole_dataset(ps: Any) -> None:
    s, coord = ps
    batches = [[0, 1], [2, 3], [4, 5], [6, 7]]
    for policy in (None, AutoShardPolicy.DATA, AutoShardPolicy.OFF):
        ds = Dataset.range(8).batch(2)
        if policy is not None:
            opts = Options()
            opts.experimental_distribute.auto_shard_policy = policy
            ds = ds.with_options(opts)
        pwd = coord.create_per_worker_dataset(s.experimental_distribute_dataset(ds.repeat()))
        assert pwd.element_spec == TensorSpec((None,), np.int64)
        it = iter(pwd)
        rvs = [coord.schedule(_next, args=(it,)) for _ in range(12)]
        coord.join()
        per_worker = _per_worker(rvs)
        assert sum(len(v) for v in per_worker.values()) == 12
        for values in per_worker.values():  # no sharding: each worker reads every batch, from the first
            assert values == (batches * 4)[:len(values)]


def test_dataset_fn_runs_on_each_worker_with_tf_input_context(ps: Any) -> None:
    s, coord = ps

    def dataset_fn(ctx: InputContext) -> Any:
        row = [ctx.num_input_pipelines, ctx.input_pipeline_id, ctx.num_replicas_in_sync, os.getpid()]
        return Dataset.from_tensors(np.array(row, np.int64)).repeat()

    pwd = coord.create_per_worker_dataset(s.distribute_datasets_from_function(dataset_fn))
    assert pwd.element_spec == TensorSpec((4,), np.int64)
    it = iter(pwd)
    rvs = [coord.schedule(_next, args=(it,)) for _ in range(8)]
    coord.join()
    pids = _worker_pids(s)
    for worker, rows in _per_worker(rvs).items():
        assert all(row == [1, 0, 1, pids[worker]] for row in rows)  # made on the step's own worker
    assert os.getpid() not in pids.values()


def test_tf_docstring_example(ps: Any) -> None:
    """``create_per_worker_dataset``'s example in TF: a dataset_fn returning a distributed dataset."""
    s, coord = ps

    def per_worker_dataset_fn() -> Any:
        return s.distribute_datasets_from_function(lambda x: Dataset.from_tensor_slices([3] * 3))

    per_worker_iter = iter(coord.create_per_worker_dataset(per_worker_dataset_fn))
    remote_value = coord.schedule(_next, args=(per_worker_iter,))
    assert remote_value.fetch() == 3
    fn_dd = coord.create_per_worker_dataset(lambda: s.experimental_distribute_dataset(Dataset.range(4).batch(2)))
    assert coord.schedule(_next, args=(iter(fn_dd),)).fetch().tolist() == [0, 1]


def test_plain_dataset_and_per_replica_options(ps: Any) -> None:
    s, coord = ps
    plain = coord.create_per_worker_dataset(Dataset.range(5, 9))
    assert coord.schedule(_next, args=(iter(plain),)).fetch() == 5
    options = InputOptions(experimental_replication_mode=InputReplicationMode.PER_REPLICA)
    per_replica = s.distribute_datasets_from_function(lambda ctx: Dataset.range(3), options)
    assert coord.schedule(_next, args=(iter(coord.create_per_worker_dataset(per_replica)),)).fetch() == 0
    # The per-worker dataset itself, given to a step, is that worker's dataset.
    assert coord.schedule(lambda d: [int(x) for x in d.take(2)], args=(plain,)).fetch() == [5, 6]
    with pytest.raises(ValueError, match="you must also specify `PER_REPLICA`"):
        s.distribute_datasets_from_function(lambda ctx: Dataset.range(3),
                                            InputOptions(experimental_place_dataset_on_device=True))


def test_bad_inputs_fail_in_create_per_worker_dataset(ps: Any) -> None:
    s, coord = ps
    registered = set(coord._resources)
    with pytest.raises(ValueError, match="^Unexpected dataset type!"):
        coord.create_per_worker_dataset(3)
    with pytest.raises(NotADatasetError, match="returned list"):
        coord.create_per_worker_dataset(lambda: [1, 2])
    with pytest.raises(AttributeError):  # what TF raises there
        coord.create_per_worker_dataset(s.distribute_datasets_from_function(lambda ctx: [1, 2]))
    with pytest.raises(AttributeError, match="got list"):
        coord.create_per_worker_dataset(s.experimental_distribute_dataset([1, 2, 3]))
    with pytest.raises(TypeError, match="'int' object is not callable"):
        coord.create_per_worker_dataset(s.distribute_datasets_from_function(3))  # type: ignore[arg-type]

    def raising() -> Any:
        raise KeyError("boom")

    with pytest.raises(KeyError, match="boom"):
        coord.create_per_worker_dataset(raising)
    assert set(coord._resources) == registered  # a dataset that failed is not made again on a new worker
    coord.join()  # nothing of these reached the steps
    assert coord.done()


def test_per_worker_iterator_in_the_notebook(ps: Any) -> None:
    _, coord = ps
    it = iter(coord.create_per_worker_dataset(lambda: Dataset.range(3)))
    assert isinstance(it, PerWorkerValues)
    with pytest.raises(NotImplementedError, match="^Iterating over an `AsyncDistributedIterator` is not supported"):
        next(it)
    with pytest.raises(NotImplementedError):
        it.get_next()


def test_two_iterators_are_independent(ps: Any) -> None:
    _, coord = ps
    pwd = coord.create_per_worker_dataset(lambda: Dataset.range(100))
    it1, it2 = iter(pwd), iter(pwd)
    rvs1, rvs2 = [], []
    for _ in range(6):
        rvs1.append(coord.schedule(_next, args=(it1,)))
        rvs2.append(coord.schedule(_next, args=(it2,)))
    coord.join()
    for rvs in (rvs1, rvs2):
        for values in _per_worker(rvs).values():
            assert values == list(range(len(values)))


def test_exhausted_iterator_fails_the_step_and_cancels_the_queue(ps: Any) -> None:
    _, coord = ps
    it = iter(coord.create_per_worker_dataset(lambda: Dataset.range(2)))
    rvs = [coord.schedule(_next, args=(it,)) for _ in range(200)]
    with pytest.raises(StopIteration, match=r"exhausted \(End of sequence\)"):
        coord.join()
    coord.join()  # the error is raised once
    assert coord.done() and all(r.done() for r in rvs)
    outcomes: dict[str, list[Any]] = {}
    for r in rvs:
        try:
            outcomes.setdefault(r.worker or "cancelled", []).append(int(r.fetch()))
        except StopIteration:
            outcomes.setdefault(r.worker or "cancelled", []).append("end")
        except CancelledError as e:
            assert r.worker is None and "is cancelled. Please reschedule the function." in str(e)
            outcomes.setdefault("cancelled", []).append("cancelled")
    assert len(outcomes["cancelled"]) >= 100  # the queue was cancelled, not run
    for worker, values in outcomes.items():
        if worker != "cancelled":
            assert values == [0, 1, "end", "end", "end"][:len(values)]
    assert sum(v.count("end") for k, v in outcomes.items() if k != "cancelled") >= 1


def test_dropped_iterators_leave_the_workers(ps: Any) -> None:
    s, coord = ps
    store = s._store
    pwd = coord.create_per_worker_dataset(lambda: Dataset.range(10))
    it = iter(pwd)
    key = it._key
    assert coord.schedule(_next, args=(it,)).fetch() == 0

    def held(key: str = key, store: str = store) -> bool:
        from interdist.replica import ps_input as worker_input

        slot = worker_input._slots.get(store)
        return slot is not None and key in slot.iterators

    assert all(s._lease.client.run(held, workers=list(s._worker_addresses)).values())
    del it
    gc.collect()
    for _ in range(4):  # the next steps on each worker drop it there
        coord.schedule(lambda: 1)
    coord.join()
    deadline = time.monotonic() + 10
    while any(s._lease.client.run(held, workers=list(s._worker_addresses)).values()):
        assert time.monotonic() < deadline, "the collected iterator was not dropped on the workers"
        coord.schedule(lambda: 1).fetch()
    assert key not in coord._resources


def test_variable_creation_inside_a_step_is_refused(ps: Any) -> None:
    s, coord = ps
    rv = coord.schedule(lambda: idist.Variable(1.0))
    with pytest.raises(NotImplementedError, match=r"cannot create a variable inside a step .* strategy\.scope\(\)"):
        coord.join()
    with pytest.raises(NotImplementedError, match="cannot create a variable inside a step"):
        rv.fetch()
    with pytest.raises(NotImplementedError, match="cannot create a variable inside a step"):
        s.run(lambda: idist.Variable(1.0))


def test_closing_the_strategy_drops_the_worker_datasets(named_cluster: Any) -> None:
    s = ParameterServerStrategy(cluster=named_cluster.address)
    try:
        coord = ClusterCoordinator(s)
        it = iter(coord.create_per_worker_dataset(lambda: Dataset.range(3)))
        assert coord.schedule(_next, args=(it,)).fetch() == 0
        store, client, addresses = s._store, s._lease.client, list(s._worker_addresses)

        def has_store(store: str = store) -> bool:
            from interdist.replica import ps_input as worker_input

            return store in worker_input._slots

        assert set(client.run(has_store, workers=addresses).values()) == {True}
    finally:
        s.close()
    from distributed import Client

    with Client(named_cluster.address, set_as_default=False) as c:
        assert set(c.run(has_store, workers=addresses).values()) == {False}


@pytest.mark.slow
def test_worker_restart_recreates_its_iterator(ps: Any, tmp_path: Any) -> None:
    """A worker dies inside a step: the step runs again, and the replacement worker's iterator starts over."""
    s, coord = ps
    marker = str(tmp_path / "killed")
    it = iter(coord.create_per_worker_dataset(lambda: Dataset.range(1000)))

    def step(i: int, iterator: Any) -> tuple[int, int]:
        x = int(next(iterator))
        if i == 4 and not os.path.exists(marker):
            open(marker, "w").close()
            os._exit(1)  # the worker process dies in the middle of the step, its iterator with it
        return os.getpid(), x

    client, names = s._lease.client, [t.name for t in s._worker_tasks]
    before = set(s._worker_addresses)
    rvs = [coord.schedule(step, args=(i, it)) for i in range(12)]
    coord.join()
    assert os.path.exists(marker) and rvs[4].attempts >= 2
    results = [r.fetch() for r in rvs]
    deadline = time.monotonic() + 60
    while True:  # until the scheduler lists the nanny's new worker (and no longer the dead one)
        by_name = {w.get("name"): a for a, w in client.scheduler_info(n_workers=-1)["workers"].items()}
        live = [by_name.get(n) for n in names]
        if None not in live and set(live) - before:
            break
        assert time.monotonic() < deadline, "the killed worker was not replaced"
        time.sleep(0.2)
    new_pids = {client.run(os.getpid, workers=[a])[a] for a in set(live) - before}
    while not set(coord._addresses) & (set(live) - before):  # until the coordinator has taken the new worker
        assert time.monotonic() < deadline, "the coordinator did not take the replacement worker"
        time.sleep(0.1)
    # Until the new worker has run some steps. Paced: the surviving worker takes every step the new one is
    # too slow to take (its first rebuilds the iterator), and 1000 of them would exhaust its own iterator.
    while not new_pids & {pid for pid, _ in results}:
        assert time.monotonic() < deadline, "no step ran on the replacement worker"
        batch = [coord.schedule(step, args=(100, it)) for _ in range(4)]
        coord.join()
        results += [r.fetch() for r in batch]
        time.sleep(0.05)
    by_pid: dict[int, list[int]] = {}
    for pid, x in results:
        by_pid.setdefault(pid, []).append(x)
    for pid, values in by_pid.items():
        # Every process read its own iterator from the first element, each element once (a retried step
        # runs after the steps scheduled behind it, so schedule order is not read order).
        assert sorted(values) == list(range(len(values))), (pid, values)
    assert new_pids & set(by_pid) and len(by_pid) >= 2
