"""``progress=True``: a ``tqdm.auto`` bar that reaches its total, with the same results as without."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tqdm.auto

import interdist as idist

BARS: list[Any] = []


class _Recording(tqdm.auto.tqdm):  # type: ignore[misc, name-defined]
    """A bar that writes to nowhere visible and remembers itself."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("disable", False)
        super().__init__(*args, **kwargs)
        BARS.append(self)


@pytest.fixture
def bars(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    BARS.clear()
    monkeypatch.setattr(tqdm.auto, "tqdm", _Recording)
    return BARS


def _train(s: idist.Strategy, steps: int, progress: bool, data: int = 40) -> list[float]:
    with s.scope():
        w = idist.Variable(np.float32(0.0))
        opt = idist.optimizers.SGD(0.05)
    x = np.arange(data, dtype=np.float32) / data
    it = iter(s.experimental_distribute_dataset(idist.data.Dataset.from_tensor_slices((x, 3 * x)).batch(2)))

    def step(batch: tuple[np.ndarray, np.ndarray]) -> object:
        xb, yb = batch
        err = np.asarray(w) * xb - yb
        opt.apply_gradients([(np.float32(np.sum(err * xb) / 2), w)])
        return np.float32(np.sum(err * err))

    last = s.run_steps(step, it, steps=steps, progress=progress)
    return [float(np.asarray(w))] + [float(v) for v in s.experimental_local_results(last)]


@pytest.mark.parametrize("steps", [20, 7, 1])
def test_run_steps_progress_equals_plain(mirrored2: idist.MirroredStrategy, bars: list[Any], steps: int) -> None:
    plain = _train(mirrored2, steps, progress=False)
    assert bars == []  # progress=False makes no bar
    assert _train(mirrored2, steps, progress=True) == plain
    (bar,) = bars
    assert bar.total == steps and bar.n == steps


def test_run_steps_progress_at_the_end_of_the_data(mirrored2: idist.MirroredStrategy, bars: list[Any]) -> None:
    # 20 batches of data, 100 steps asked: both stop after 20 with the same result.
    assert _train(mirrored2, 100, progress=True, data=40) == _train(mirrored2, 100, progress=False, data=40)
    assert bars[0].n == 20 and bars[0].total == 100


def test_run_steps_progress_over_dataset_fn_stops_at_the_end(
    mirrored2: idist.MirroredStrategy, bars: list[Any]
) -> None:
    s = mirrored2
    it = iter(s.distribute_datasets_from_function(lambda ctx: idist.data.Dataset.range(6).batch(1)))
    last = s.run_steps(lambda b: b * 2, it, steps=100, progress=True)  # only 3 steps of data per replica
    assert [np.asarray(v).tolist() for v in s.experimental_local_results(last)] == [[8], [10]]
    assert bars[0].n == 3
    with pytest.raises(StopIteration):
        s.run_steps(lambda b: b, it, steps=1, progress=True)


def test_dataset_progress(mirrored2: idist.MirroredStrategy, bars: list[Any]) -> None:
    s = mirrored2
    dist = s.experimental_distribute_dataset(idist.data.Dataset.range(8).batch(2))
    plain = [[np.asarray(v).tolist() for v in s.experimental_local_results(b)] for b in dist]
    assert bars == []  # iterating shows nothing by default
    shown = [[np.asarray(v).tolist() for v in s.experimental_local_results(b)] for b in dist.progress()]
    assert shown == plain
    (bar,) = bars
    assert bar.total == 4 and bar.n == 4


def test_checkpoint_progress(mirrored2: idist.MirroredStrategy, bars: list[Any], tmp_path: Path) -> None:
    s = mirrored2
    with s.scope():
        a = idist.Variable(np.arange(3, dtype=np.float32))
        b = idist.Variable(np.float32(2.0))
        c = idist.Variable(np.ones((2, 2), np.float32))
    ck = idist.Checkpoint(a=a, b=b, c=c)
    path = ck.save(str(tmp_path / "ckpt"), progress=True)
    for v in (a, b, c):
        v.assign(np.zeros(v.shape, np.float32))
    ck.restore(path, progress=True)
    assert np.asarray(a).tolist() == [0.0, 1.0, 2.0] and float(np.asarray(b)) == 2.0
    assert np.asarray(c).tolist() == [[1.0, 1.0], [1.0, 1.0]]
    assert [(bar.total, bar.n) for bar in bars] == [(3, 3), (3, 3)]
    bars.clear()
    ck.restore(ck.save(str(tmp_path / "quiet")))  # progress=False: no bar
    assert bars == []


def test_script_prints_a_text_bar(tmp_path: Path) -> None:
    script = tmp_path / "script.py"
    script.write_text(
        textwrap.dedent(
            """
            import interdist as idist

            with idist.MirroredStrategy(["CPU:0", "CPU:1"]) as s:
                it = iter(s.experimental_distribute_dataset(idist.data.Dataset.range(80).batch(2)))
                last = s.run_steps(lambda b: b * 10, it, steps=40, progress=True)
                print([int(v.numpy()[0]) for v in s.experimental_local_results(last)])
            """
        )
    )
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "[780, 790]"
    assert "40/40" in done.stderr and "run_steps of <lambda>" in done.stderr


def test_progress_false_imports_no_tqdm() -> None:
    code = (
        "import sys, interdist as idist\n"
        "with idist.MirroredStrategy(['CPU:0', 'CPU:1']) as s:\n"
        "    it = iter(s.experimental_distribute_dataset(idist.data.Dataset.range(8).batch(2)))\n"
        "    s.run_steps(lambda b: b, it, steps=2)\n"
        "    list(s.experimental_distribute_dataset(idist.data.Dataset.range(4).batch(2)))\n"
        "assert 'tqdm' not in sys.modules, 'progress=False imported tqdm'\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr
