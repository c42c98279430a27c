"""Metrics on sync-on-read variables, and checkpoints restored across replica counts."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

import interdist as idist


def test_metrics_aggregate_over_replicas(mirrored2: idist.MirroredStrategy) -> None:
    s = mirrored2
    with s.scope():
        mean = idist.metrics.Mean()
        total = idist.metrics.Sum()

    def step() -> None:
        r = int(idist.get_replica_context().replica_id_in_sync_group)
        values = np.array([1.0, 2.0, 3.0], np.float32) if r == 0 else np.array([10.0], np.float32)
        mean.update_state(values)
        total.update_state(values)

    s.run(step)
    s.run(step)
    # replica 0 saw 1+2+3 twice, replica 1 saw 10 twice: sum 32 over 8 values
    assert float(total.result()) == 32.0
    assert float(mean.result()) == pytest.approx(4.0)
    assert [float(c) for c in s.experimental_local_results(total.total)] == [12.0, 20.0]
    mean.reset_state()
    assert [float(c) for c in s.experimental_local_results(mean.count)] == [0.0, 0.0]


def test_checkpoint_restores_across_replica_counts(tmp_path: Path) -> None:
    def build(s: idist.Strategy) -> tuple[object, object]:
        with s.scope():
            w = idist.Variable(np.zeros(3, np.float32), name="w")
            seen = idist.Variable(np.float32(0.0), name="seen", synchronization=idist.VariableSynchronization.ON_READ,
                                  aggregation=idist.VariableAggregation.SUM)
        return w, seen

    with idist.MirroredStrategy(["CPU:0", "CPU:1"]) as s2:
        w, seen = build(s2)
        w.assign(np.array([1.0, 2.0, 3.0], np.float32))
        s2.run(lambda: seen.assign_add(np.float32(idist.get_replica_context().replica_id_in_sync_group) + 1))
        path = idist.Checkpoint(w=w, seen=seen).save(tmp_path / "ckpt")
    # files are numbered in the order the variables were given; names live only in the index
    assert sorted(os.listdir(path)) == ["index.json", "v000000.npy", "v000001.npy"]
    import json

    files = {k: e["file"] for k, e in json.loads((Path(path) / "index.json").read_text())["variables"].items()}
    assert files == {"w": "v000000.npy", "seen": "v000001.npy"}

    with idist.MirroredStrategy(["CPU:0", "CPU:1", "CPU:2", "CPU:3"]) as s4:
        w4, seen4 = build(s4)
        idist.Checkpoint(w=w4, seen=seen4).restore(path)
        assert [np.asarray(c).tolist() for c in s4.experimental_local_results(w4)] == [[1.0, 2.0, 3.0]] * 4
        # saved read: 1 + 2 = 3; restoring a SUM sync-on-read variable divides by the 4 replicas
        assert [float(c) for c in s4.experimental_local_results(seen4)] == [0.75] * 4
        assert float(seen4.read_value()) == 3.0
        back = idist.Checkpoint(w=w4, seen=seen4).save(tmp_path / "back")

    with idist.MirroredStrategy(["CPU:0", "CPU:1"]) as s2b:
        w2, seen2 = build(s2b)
        idist.Checkpoint(w=w2, seen=seen2).restore(back)
        assert [float(c) for c in s2b.experimental_local_results(seen2)] == [1.5, 1.5]
        assert np.asarray(w2).tolist() == [1.0, 2.0, 3.0]


def test_failed_checkpoint_is_absent(tmp_path: Path) -> None:
    v = idist.Variable(np.float32(1.0))

    class Broken:
        @property
        def variables(self) -> list[object]:
            raise RuntimeError("replica failed while saving")

    with pytest.raises(RuntimeError):
        idist.Checkpoint(v=v, broken=Broken()).write(tmp_path / "ckpt")
    assert list(tmp_path.iterdir()) == []


def test_restore_checks_everything_before_assigning(tmp_path: Path) -> None:
    a, b = idist.Variable(np.float32(1.0)), idist.Variable(np.zeros(2, np.float32))
    path = idist.Checkpoint(a=a, b=b).write(tmp_path / "c")
    a2, b2 = idist.Variable(np.float32(7.0)), idist.Variable(np.zeros(3, np.float32))
    with pytest.raises(ValueError, match="shape"):
        idist.Checkpoint(a=a2, b=b2).restore(path)
    assert float(a2) == 7.0  # untouched: nothing is half restored


def test_linear_regression_same_weights_every_step() -> None:
    rng = np.random.default_rng(1)
    x = rng.normal(size=(96, 2)).astype(np.float32)
    y = (x @ np.array([[2.0], [-1.0]], np.float32) + 0.5).astype(np.float32)

    def train(s: idist.Strategy, steps: int = 6) -> list[np.ndarray]:
        with s.scope():
            w = idist.Variable(np.zeros((2, 1), np.float32))
            b = idist.Variable(np.float32(0.0))
            opt = idist.optimizers.SGD(learning_rate=0.1, momentum=0.5)
        data = s.experimental_distribute_dataset(idist.data.Dataset.from_tensor_slices((x, y)).batch(16))

        def step(batch: tuple[np.ndarray, np.ndarray]) -> None:
            xb, yb = batch
            err = xb @ np.asarray(w) + np.asarray(b) - yb
            opt.apply_gradients([(xb.T @ err / 16, w), (np.float32(np.sum(err) / 16), b)])

        history = []
        for i, batch in enumerate(data):
            if i == steps:
                break
            s.run(step, args=(batch,))
            history.append(np.concatenate([np.asarray(w).ravel(), [float(np.asarray(b))]]))
        s.close()
        return history

    one = train(idist.OneDeviceStrategy("CPU:0"))
    for n in (2, 4):
        many = train(idist.MirroredStrategy([f"CPU:{i}" for i in range(n)]))
        for a, o in zip(many, one):
            np.testing.assert_allclose(a, o, atol=1e-6)


def test_names_that_would_share_a_file_name_keep_their_own_values(tmp_path: Path) -> None:
    # "x/y", "x_y" and "x y" once all became x_y.npy: the last write won and restore mixed them up
    a, b, c = idist.Variable(np.float32(1.0)), idist.Variable(np.float32(2.0)), idist.Variable(np.float32(3.0))
    ck = idist.Checkpoint(x={"y": a}, x_y=b, **{"x y": c})
    path = ck.save(tmp_path / "ckpt")
    for v in (a, b, c):
        v.assign(0.0)
    ck.restore(path)
    assert [float(a), float(b), float(c)] == [1.0, 2.0, 3.0]


def _saved(tmp_path: Path) -> tuple[idist.Checkpoint, idist.Variable, Path]:
    import json

    v = idist.Variable(np.arange(4, dtype=np.float32))
    ck = idist.Checkpoint(w=v)
    path = Path(ck.save(tmp_path / "ckpt"))
    assert json.loads((path / "index.json").read_text())["variables"]["w"]["file"] == "v000000.npy"
    return ck, v, path


def test_restore_never_reads_outside_the_checkpoint(tmp_path: Path) -> None:
    import json

    ck, v, path = _saved(tmp_path)
    np.save(tmp_path / "outside.npy", np.full(4, 9.0, np.float32))
    index = json.loads((path / "index.json").read_text())
    for bad in ("../outside.npy", str(tmp_path / "outside.npy"), "..", ""):
        index["variables"]["w"]["file"] = bad
        (path / "index.json").write_text(json.dumps(index))
        with pytest.raises(ValueError, match="not a file of the checkpoint"):
            ck.restore(path)
    np.testing.assert_array_equal(np.asarray(v), np.arange(4, dtype=np.float32))  # nothing assigned


def test_restore_refuses_a_corrupted_or_truncated_array(tmp_path: Path) -> None:
    ck, v, path = _saved(tmp_path)
    data = bytearray((path / "v000000.npy").read_bytes())
    data[-1] ^= 0xFF  # one flipped bit of the last element
    (path / "v000000.npy").write_bytes(bytes(data))
    with pytest.raises(ValueError, match=r"'w' \(v000000.npy\) cannot be restored: .*checksum"):
        ck.restore(path)
    (path / "v000000.npy").write_bytes(bytes(data[:-8]))  # truncated
    with pytest.raises(ValueError, match="cannot be restored"):
        ck.restore(path)
    np.testing.assert_array_equal(np.asarray(v), np.arange(4, dtype=np.float32))


def test_restore_refuses_a_foreign_or_malformed_index(tmp_path: Path) -> None:
    import json

    ck, _, path = _saved(tmp_path)
    (path / "index.json").write_text(json.dumps({"format": "interdist-checkpoint/1"}))
    with pytest.raises(ValueError, match="no variables table"):
        ck.restore(path)
    (path / "index.json").write_text("[1, 2]")
    with pytest.raises(ValueError, match="is not an interdist checkpoint"):
        ck.restore(path)
    (path / "index.json").write_text("{not json")
    with pytest.raises(ValueError, match="not a readable interdist checkpoint"):
        ck.restore(path)
