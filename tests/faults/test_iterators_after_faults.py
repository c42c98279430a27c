"""Distributed iterators after a replica's worker is killed or frozen mid-iteration (issue 25, item 6; the
faults review's row 7: after a loss every ``next`` raised a bare ``KeyError: 'dask:1'``, and after a freeze the
failed step's global batch was never delivered, with no word).

Now a step's batch is delivered again after the fault, so a loop that goes on after the error sees every row
exactly once; a pipeline that cannot be read again to the same point says so, every time, with
``IteratorLostError``."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import interdist as idist
from interdist.config import settings
from interdist.input.distributed_dataset import IteratorLostError

from ._resume import resume_frozen

# The warning that a replica was restarted on a new worker (its variables copied there) is tested elsewhere.
pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore:replica.* were restarted on new workers")]

ROWS = 64
BATCH = 4  # global batch: 2 rows per replica


@pytest.fixture
def strategy(monkeypatch: pytest.MonkeyPatch) -> Iterator[idist.MirroredStrategy]:
    monkeypatch.setattr(settings, "frozen_after", 2.0)
    s = idist.MirroredStrategy(["CPU:0", "CPU:1"])
    try:
        yield s
    finally:
        s.close()


def _once(marker: Path, row: int, sig: int) -> Callable[[Any], Any]:
    """A map function that sends ``sig`` to its own worker process the first time any replica reads ``row``
    (the marker file, made atomically, says it was done; it holds the worker's pid)."""
    path = str(marker)

    def fn(x: Any) -> Any:
        if int(x) == row:
            try:
                fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            except FileExistsError:
                return x
            os.write(fd, str(os.getpid()).encode())
            os.close(fd)
            if sig == signal.SIGSTOP:  # from a helper process, waited for: a thread's own SIGSTOP may come late
                from interdist.replica.faults import stop_this_process

                stop_this_process()
            else:
                os.kill(os.getpid(), sig)
        return x

    return fn


def _rows(s: idist.MirroredStrategy, batch: Any) -> list[int]:
    return [int(v) for part in s.experimental_local_results(batch) for v in np.asarray(part).ravel()]


def _until_usable(call: Callable[[], Any], timeout: float = 60.0) -> Any:
    """``call()`` once the strategy takes calls again: a resumed replica first leaves its aborted step, and
    until then the strategy says it is "still running" it."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return call()
        except RuntimeError as e:
            if "still running" not in str(e) or time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def _from_function(s: idist.MirroredStrategy, fn: Callable[[Any], Any] | None, shuffle: bool = False) -> Any:
    def dataset_fn(ctx: idist.InputContext) -> idist.data.Dataset:
        ds = idist.data.Dataset.range(ROWS)
        if fn is not None:
            ds = ds.map(fn)
        if shuffle:
            ds = ds.shuffle(16)  # reshuffled on every iteration: cannot be read again to the same point
        return ds.batch(ctx.get_per_replica_batch_size(BATCH))

    return s.distribute_datasets_from_function(dataset_fn)


def test_a_replica_killed_inside_next_gets_that_step_again(strategy: idist.MirroredStrategy, tmp_path: Path) -> None:
    s = strategy
    it = iter(_from_function(s, _once(tmp_path / "killed", 37, signal.SIGKILL)))
    seen: list[int] = []
    errors: list[BaseException] = []
    while True:
        try:
            batch = next(it)
        except StopIteration:
            break
        except idist.WorkerLostError as e:
            errors.append(e)
            continue
        seen += _rows(s, batch)
    assert (tmp_path / "killed").exists()
    assert len(errors) == 1 and "_next_batch_at" in str(errors[0])  # the next() it died in, and only that one
    assert sorted(seen) == list(range(ROWS))  # every row exactly once


def test_a_replica_killed_in_a_step_gets_that_batch_again(strategy: idist.MirroredStrategy) -> None:
    """``for batch in it: try: run(step, batch) except WorkerLostError: pass``: the next ``next`` hands out the
    failed step's batch again, its lost replica's part read again on the restarted worker."""
    s = strategy
    it = iter(_from_function(s, None))
    seen: list[int] = []
    failures = 0
    for k, batch in enumerate(it):
        if k == 5:
            idist.debug.inject(s, replica=1, fault="kill", at="step")
        try:
            seen += _rows(s, s.run(lambda b: b, args=(batch,)))
        except idist.WorkerLostError:
            failures += 1
    assert failures == 1
    assert sorted(seen) == list(range(ROWS))


@pytest.mark.parametrize(("steps", "progress"), [(1, False), (3, False), (3, True)])
def test_run_steps_after_a_lost_step_runs_its_batch_first(
    strategy: idist.MirroredStrategy, steps: int, progress: bool
) -> None:
    """After a ``run`` lost with a replica, ``run_steps`` over the replicas' iterators runs the failed step's batch
    (#1, rows 4-7) first, as ``next`` hands it out: the fused program reads the replicas' iterators, which are
    past it, and skipped that batch without a word."""
    s = strategy
    it = iter(_from_function(s, None))
    seen = _rows(s, s.run(lambda b: b, args=(next(it),)))  # batch #0
    idist.debug.inject(s, replica=1, fault="kill", at="step")
    with pytest.raises(idist.WorkerLostError):
        s.run(lambda b: b, args=(next(it),))

    def step(b: Any) -> Any:
        return b

    last = s.run_steps(step, it, steps=steps, progress=progress)
    assert _rows(s, last) == ([4, 5, 6, 7] if steps == 1 else [12, 13, 14, 15])  # batch #1 again, or #3
    rest = [row for batch in it for row in _rows(s, batch)]
    assert seen == [0, 1, 2, 3] and sorted(rest) == list(range(4 * (steps + 1), ROWS))  # on from the next batch


def test_a_step_retried_by_hand_is_not_handed_out_again(strategy: idist.MirroredStrategy) -> None:
    """Retrying the failed step with the same batch works (its part on the lost replica is back), and then
    ``next`` goes on to the following batch: no row twice."""
    s = strategy
    dataset = s.experimental_distribute_dataset(idist.data.Dataset.range(ROWS).batch(BATCH))  # read here
    it = iter(_from_function(s, None))
    for iterator in (it, iter(dataset)):
        seen: list[int] = []
        for k, batch in enumerate(iterator):
            if k == 3:
                idist.debug.inject(s, replica=1, fault="kill", at="step")
                with pytest.raises(idist.WorkerLostError):
                    s.run(lambda b: b, args=(batch,))
            seen += _rows(s, s.run(lambda b: b, args=(batch,)))
        assert sorted(seen) == list(range(ROWS))


def test_a_notebook_side_iterator_hands_out_a_failed_steps_batch_again(strategy: idist.MirroredStrategy) -> None:
    s = strategy
    it = iter(s.experimental_distribute_dataset(idist.data.Dataset.range(ROWS).batch(BATCH)))
    seen: list[int] = []
    failures = 0
    for k, batch in enumerate(it):
        if k == 2:
            idist.debug.inject(s, replica=0, fault="kill", at="step")
        try:
            seen += _rows(s, s.run(lambda b: b, args=(batch,)))
        except idist.WorkerLostError:
            failures += 1
    assert failures == 1
    assert sorted(seen) == list(range(ROWS))


def test_a_replica_frozen_inside_next_loses_no_batch(strategy: idist.MirroredStrategy, tmp_path: Path) -> None:
    """SIGSTOP while a replica reads its batch, then SIGCONT: the step's batch is delivered, once."""
    s = strategy
    marker = tmp_path / "stopped"
    it = iter(_from_function(s, _once(marker, 21, signal.SIGSTOP)))
    seen: list[int] = []
    frozen = 0
    while True:
        try:
            batch = _until_usable(lambda: next(it))
        except StopIteration:
            break
        except idist.errors.ReplicaFrozenError:
            frozen += 1
            os.kill(int(marker.read_text()), signal.SIGCONT)
            continue
        seen += _rows(s, batch)
    assert frozen == 1
    assert sorted(seen) == list(range(ROWS))


def test_a_replica_frozen_in_a_step_loses_no_batch(strategy: idist.MirroredStrategy) -> None:
    s = strategy
    it = iter(_from_function(s, None))
    seen: list[int] = []
    frozen = 0
    for k, batch in enumerate(it):
        if k == 4:  # stopped for longer than frozen_after, then it resumes by itself
            idist.debug.inject(s, replica=1, fault="freeze", at="step", seconds=60)  # until resumed below
        try:
            seen += _rows(s, _until_usable(lambda batch=batch: s.run(lambda b: b, args=(batch,))))
        except idist.errors.ReplicaFrozenError as e:
            frozen += 1
            resume_frozen(e)  # as the error tells a user
    assert frozen == 1
    assert sorted(seen) == list(range(ROWS))


def test_dask_rows_read_on_the_workers_come_back_after_a_kill(strategy: idist.MirroredStrategy) -> None:
    """A Dask source read by row plan (each replica reads its rows on its worker): the restarted replica's
    reader starts at the step its iterator was at, and no row is lost or read twice."""
    da = pytest.importorskip("dask.array")
    s = strategy
    x = da.from_array(np.arange(ROWS), chunks=16)
    with pytest.warns(UserWarning, match="restarted on new workers"):
        it = iter(s.experimental_distribute_dataset(idist.data.Dataset.from_tensor_slices(x).batch(BATCH)))
        seen = [row for _ in range(3) for row in _rows(s, next(it))]
        pids = s.run(lambda: os.getpid())
        os.kill(int(s.experimental_local_results(pids)[1]), signal.SIGKILL)
        errors = 0
        while True:
            try:
                seen += _rows(s, next(it))
            except StopIteration:
                break
            except idist.WorkerLostError:
                errors += 1
        # The rows may all have come before a program of the strategy met the dead worker (Dask reads them):
        # the next call then finds it lost, or recovers, whichever the notebook learned first.
        for _ in range(2):
            try:
                s.run(lambda: 1)
                break
            except idist.WorkerLostError:
                errors += 1
    assert errors <= 1
    assert sorted(seen) == list(range(ROWS))


def test_a_pipeline_that_cannot_be_read_again_says_so_every_time(
    strategy: idist.MirroredStrategy, tmp_path: Path
) -> None:
    s = strategy
    it = iter(_from_function(s, _once(tmp_path / "killed", 30, signal.SIGKILL), shuffle=True))
    delivered = 0
    with pytest.raises(idist.WorkerLostError):
        for _ in range(ROWS):
            next(it)
            delivered += 1
    for _ in range(3):  # not a KeyError, and not once only
        with pytest.raises(IteratorLostError) as info:
            next(it)
        message = str(info.value)
        assert isinstance(info.value, idist.InterdistError) and not isinstance(info.value, KeyError)
        assert "reshuffle_each_iteration" in message and "iter(dist_dataset)" in message
        assert f"handed out {delivered} global batch(es)" in message and info.value.delivered == delivered
    # a new iterator starts from the first batch
    assert sorted(row for batch in _from_function(s, None) for row in _rows(s, batch)) == list(range(ROWS))


def test_run_steps_failing_with_a_lost_replica_says_which_batches(strategy: idist.MirroredStrategy) -> None:
    """Which of the steps of a fused loop a lost replica's peers applied is unknown: the iterator says which
    batches that leaves unseen, every time, rather than go on as if they were seen."""
    s = strategy
    on_workers = iter(_from_function(s, None))
    here = iter(s.experimental_distribute_dataset(idist.data.Dataset.range(ROWS).batch(BATCH)))
    for it, took in ((on_workers, "the global batches from #2 on"), (here, "global batches #2 to #5")):
        next(it), next(it)
        idist.debug.inject(s, replica=1, fault="kill", at="step")
        with pytest.raises(idist.WorkerLostError):
            s.run_steps(lambda b: b, it, steps=4)
        for _ in range(2):
            with pytest.raises(IteratorLostError, match=rf"run_steps .* after it took {took}: ") as info:
                next(it)
            assert info.value.delivered == 2 and "iter(dist_dataset)" in str(info.value)


def test_run_steps_failing_in_the_function_goes_on_after_its_batches(strategy: idist.MirroredStrategy) -> None:
    """A replica function's own error in a fused loop: the steps before it ran, and the iterator goes on
    after the batches the call took, without repeating any, and says which were not run."""
    s = strategy
    it = iter(_from_function(s, None))
    first = _rows(s, next(it))

    def fn(b: np.ndarray) -> object:
        if int(np.asarray(b).ravel()[0]) == 8:  # the third step
            raise ValueError("bad batch")
        return b

    with pytest.raises(ValueError, match="bad batch"):
        s.run_steps(fn, it, steps=3)
    with pytest.warns(UserWarning, match=r"took global batches #1 to #3: .* goes on from batch #4") as caught:
        after = [row for batch in it for row in _rows(s, batch)]
    assert caught[0].filename == __file__
    assert first == [0, 1, 2, 3] and after == list(range(16, ROWS))
    # the same with batches read here: the warning comes with the error
    it = iter(s.experimental_distribute_dataset(idist.data.Dataset.range(ROWS).batch(BATCH)))
    next(it)
    with pytest.raises(ValueError, match="bad batch"), pytest.warns(UserWarning, match=r"#1 to #3: ") as caught:
        s.run_steps(fn, it, steps=3)
    assert caught[0].filename == __file__
    assert [row for batch in it for row in _rows(s, batch)] == list(range(16, ROWS))


def _gated_block(block: np.ndarray, gate: str = "", block_info: dict[Any, Any] | None = None) -> np.ndarray:
    """The third chunk (rows 32..47) is read only once ``gate`` exists; ``gate + ".waiting"`` says a read of it
    started. It waits out of its worker's one task thread (``secede``): a read of an earlier chunk that Dask
    put on the same worker would otherwise wait behind it, and the steps before the gated chunk with it (seen
    as a 120 s test on a cold cluster, with workers fresh or forked alike)."""
    if block_info and block_info[0]["chunk-location"] == (2,):
        from distributed import secede

        secede()
        Path(gate + ".waiting").touch()
        deadline = time.monotonic() + 120
        while not os.path.exists(gate) and time.monotonic() < deadline:
            time.sleep(0.05)
    return block


def test_a_replica_waiting_for_its_batch_leaves_the_step_when_a_peer_is_lost(
    strategy: idist.MirroredStrategy, tmp_path: Path
) -> None:
    """CI: replica 0 waited for rows (a Dask read) when replica 1's worker died; the abort reached it only at
    a collective, so it stayed in the dead step until its read ended, and the recovery's own program, behind
    it, timed out after 60 s. The wait for a batch ends on the step's abort too."""
    da = pytest.importorskip("dask.array")
    s = strategy
    gate = str(tmp_path / "gate")
    x = da.from_array(np.arange(ROWS), chunks=16).map_blocks(_gated_block, gate=gate, dtype=np.int64)
    it = iter(s.experimental_distribute_dataset(idist.data.Dataset.from_tensor_slices(x).batch(BATCH)))
    # Batches 0..6 come in the reader's first three windows (1, 2 and 4 steps); the fourth (7..14) holds rows
    # of the gated chunk, so the readers wait there, and the step of batch 7 waits for them.
    seen = [row for _ in range(7) for row in _rows(s, next(it))]
    deadline = time.monotonic() + 60
    while not os.path.exists(gate + ".waiting"):
        assert time.monotonic() < deadline, "no reader reached the gated chunk"
        time.sleep(0.05)
    pid = int(s.experimental_local_results(s.run(lambda: os.getpid()))[1])
    os.kill(pid, signal.SIGKILL)
    try:
        with pytest.raises(idist.WorkerLostError):
            next(it)  # replica 0 waits for the gated rows; replica 1 is gone
        # The recovery's programs and this step run while replica 0's read still waits at the gate.
        with pytest.warns(UserWarning, match="restarted on new workers"):
            out = s.run(lambda: idist.get_replica_context().all_reduce("SUM", np.float32(1.0)))
        assert [float(v) for v in s.experimental_local_results(out)] == [2.0, 2.0]
    finally:
        Path(gate).touch()
    for batch in it:  # no row lost or read twice: the failed step's batch comes again
        seen += _rows(s, batch)
    assert sorted(seen) == list(range(ROWS))
