"""Every optimizer gives the same values on every strategy: TF 2.21's (``_optimizer_cases.py``).

Mirrored, CentralStorage and MultiWorkerMirrored replicas are each given half of each gradient (summed:
the gradient); ParameterServerStrategy steps, scheduled one after the other by a ClusterCoordinator on
two workers, are given the whole gradient. Under ParameterServerStrategy the slots live on the ps task,
sharded as their variable, and every worker's step updates the same ones.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import interdist as idist
from interdist import optimizers as O
from interdist.experimental import ParameterServerStrategy, partitioners
from interdist.strategy.coordinator import ClusterCoordinator
from tests._clusters import InProcessCluster

from ._optimizer_cases import GRADS, IEEE_EXACT, MAKERS, W0, reference

HALF = np.float32(0.5)


@pytest.fixture(scope="module")
def named() -> Iterator[InProcessCluster]:
    c = InProcessCluster(["ps-0", "worker-0", "worker-1"])
    yield c
    c.close()


@pytest.fixture(scope="module")
def cs() -> Iterator[Any]:
    s = idist.experimental.CentralStorageStrategy(["CPU:0", "CPU:1"], parameter_device="CPU:1")  # holder: replica 1
    yield s
    s.close()


@pytest.fixture(scope="module")
def mwms(named: InProcessCluster) -> Iterator[Any]:
    s = idist.MultiWorkerMirroredStrategy(cluster=named.address)
    yield s
    s.close()


@pytest.fixture(scope="module")
def ps(named: InProcessCluster) -> Iterator[tuple[Any, Any]]:
    s = ParameterServerStrategy(cluster=named.address, variable_partitioner=partitioners.FixedShardsPartitioner(2))
    yield s, ClusterCoordinator(s)
    s.close()


def _check(name: str, w: Any, opt: Any) -> None:
    steps, slots = reference(name)
    got = np.asarray(w.numpy() if hasattr(w, "numpy") else w)
    np.testing.assert_allclose(got, steps[-1], rtol=1e-6, atol=0, err_msg=name)
    if name in IEEE_EXACT:
        assert got.tobytes() == steps[-1].tobytes(), name
    assert int(np.asarray(opt.iterations.numpy())) == 4, name
    kept = opt._checkpoint_read_slots([w])[0]
    assert sorted(kept) == sorted(slots), name
    for slot, value in slots.items():
        np.testing.assert_allclose(kept[slot], value, rtol=1e-6, atol=0, err_msg=f"{name} {slot}")


def _one_device(name: str) -> np.ndarray:
    w = idist.Variable(W0.copy())
    opt = MAKERS[name]()
    for g in GRADS:
        opt.apply_gradients([(g, w)])
    return np.asarray(w)


def _replicas(s: Any, name: str) -> tuple[Any, Any]:
    with s.scope():
        w = idist.Variable(W0.copy(), name="w")
        opt = MAKERS[name]()
    for g in GRADS:
        s.run(lambda g: opt.apply_gradients([(g * HALF, w)]), args=(g,))
    return w, opt


@pytest.mark.parametrize("name", list(MAKERS))
def test_mirrored(mirrored2: Any, name: str) -> None:
    w, opt = _replicas(mirrored2, name)
    _check(name, w, opt)
    assert np.asarray(w).tobytes() == _one_device(name).tobytes()
    copies = [np.asarray(c) for c in mirrored2.experimental_local_results(w)]
    assert copies[0].tobytes() == copies[1].tobytes()


def test_build_on_mirrored_makes_the_slots_on_every_replica(mirrored2: Any) -> None:
    with mirrored2.scope():
        w = idist.Variable(W0.copy())
        opt = O.RMSprop(0.05, rho=0.8, momentum=0.5, epsilon=1e-6, centered=True)
    opt.build([w])
    kept = opt._checkpoint_read_slots([w])[0]
    assert sorted(kept) == ["average_gradient", "momentum", "velocity"]
    assert all(v.tolist() == [0.0] * 4 and v.dtype == np.float32 for v in kept.values())
    for g in GRADS:
        mirrored2.run(lambda g: opt.apply_gradients([(g * HALF, w)]), args=(g,))
    _check("rmsprop_centered_momentum", w, opt)


@pytest.mark.parametrize("name", list(MAKERS))
def test_central_storage(cs: Any, name: str) -> None:
    w, opt = _replicas(cs, name)
    _check(name, w, opt)
    assert np.asarray(w).tobytes() == _one_device(name).tobytes()


@pytest.mark.parametrize("name", list(MAKERS))
def test_multi_worker_mirrored(mwms: Any, name: str) -> None:
    w, opt = _replicas(mwms, name)
    _check(name, w, opt)
    assert np.asarray(w).tobytes() == _one_device(name).tobytes()


@pytest.mark.parametrize("name", list(MAKERS))
def test_parameter_server_steps_one_after_the_other(ps: tuple[Any, Any], name: str) -> None:
    s, coord = ps
    with s.scope():
        w = idist.Variable(W0.copy(), name="w")  # two shards: rows 0-1 and 2-3
        opt = MAKERS[name]()
    assert len(w.variables) == 2

    def step(g: np.ndarray) -> None:
        s.run(lambda: opt.apply_gradients([(g, w)]))

    for g in GRADS:
        coord.schedule(step, args=(g,))
        coord.join()  # the next step reads what this one applied, whichever worker runs it
    _check(name, w, opt)
    assert w.numpy().tobytes() == _one_device(name).tobytes()


def test_parameter_server_strategy_run_in_the_notebook(ps: tuple[Any, Any]) -> None:
    # _check asserts the weights and slots equal the recorded one-device run, bit for bit
    s, _ = ps
    with s.scope():
        w = idist.Variable(W0.copy())
        opt = O.SGD(0.1, momentum=0.9, nesterov=True)
    for g in GRADS:
        s.run(lambda g: opt.apply_gradients([(g, w)]), args=(g,))
    _check("sgd_nesterov", w, opt)


def test_parameter_server_workers_share_the_slots(ps: tuple[Any, Any]) -> None:
    """Steps running at once on both workers: every one's update reaches the same accumulators."""
    s, coord = ps
    with s.scope():
        w = idist.Variable(np.zeros(4, np.float32))
        opt = O.Adagrad(0.1, initial_accumulator_value=0.25)
    opt.build([w])  # made before two first steps could both make them
    g = np.array([0.5, -1.0, 2.0, 0.25], np.float32)  # g^2 added 40 times: exact in any order

    def step() -> None:
        s.run(lambda: opt.apply_gradients([(g, w)]))

    for _ in range(40):
        coord.schedule(step)
    coord.join()
    assert int(opt.iterations.numpy()) == 40
    accumulator = opt._checkpoint_read_slots([w])[0]["accumulator"]
    assert accumulator.tolist() == (np.float32(0.25) + 40 * g * g).tolist()
    stats = s._ps_stats()[0]
    assert len([i for i in stats["shards"] if i < 0]) >= 2  # the accumulator's two shards, on the ps


def test_parameter_server_first_steps_at_once_make_the_slots_once(ps: tuple[Any, Any]) -> None:
    """No build(): both workers' first steps may find the slots missing and make them; a slot made once is
    never made again (create-if-absent on the ps), so no worker's first update is reset by the other's."""
    s, coord = ps
    g = np.array([0.5, -1.0, 2.0, 0.25], np.float32)
    for _ in range(3):  # fresh variables and slots each round: three chances for the first steps to overlap
        with s.scope():
            w = idist.Variable(np.zeros(4, np.float32))
            opt = O.Adagrad(0.1, initial_accumulator_value=0.25)

        def step(opt: Any = opt, w: Any = w) -> None:
            s.run(lambda: opt.apply_gradients([(g, w)]))

        for _ in range(8):
            coord.schedule(step)
        coord.join()
        accumulator = opt._checkpoint_read_slots([w])[0]["accumulator"]
        assert accumulator.tolist() == (np.float32(0.25) + 8 * g * g).tolist()


def test_a_shard_store_makes_a_shard_once_when_asked() -> None:
    from interdist.worker.ps_store import ShardStore

    store = ShardStore()
    assert store.create(1, np.zeros(2)) is True
    assert store.create(1, np.ones(2), if_absent=True) is False
    assert store.read([1])[0][0].tolist() == [0.0, 0.0]
    assert store.create(1, np.ones(2)) is True  # a restore replaces
    assert store.read([1])[0][0].tolist() == [1.0, 1.0]


def test_a_slot_found_missing_by_two_steps_is_made_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """The race itself, without timing luck: step B probed before step A made the slot, A made it and updated
    it, then B makes it: B must keep A's update (create-if-absent) and read it back, not reset it."""
    import cloudpickle

    from interdist.optimizers import slots as slots_lib
    from interdist.values.ps_variable import PSVariable
    from interdist.worker.ps_store import ShardStore

    store = ShardStore()

    class Conn:  # the ps task's handlers, called in this process
        def call_many(self, calls: list, tasks: dict) -> list:
            out = []
            for _, handler, kw in calls:
                if handler == "interdist_ps_create":
                    made = store.create(kw["shard_id"], cloudpickle.loads(kw["value"]), kw.get("if_absent", False))
                    out.append("OK" if made else "EXISTS")
                elif handler == "interdist_ps_read":
                    out.append(cloudpickle.dumps(store.read(kw["shard_ids"])))
                else:
                    raise AssertionError(handler)
            return out

    device = "/job:ps/replica:0/task:0/device:CPU:0"
    desc = {"store": "s", "var_id": -7, "name": "w/accumulator", "shape": [2], "dtype": "float32",
            "trainable": False, "synchronization": "NONE", "aggregation": "NONE",
            "shards": [[-7, "tcp://ps0", device, 0, 2]]}
    slot = PSVariable(desc)

    class Ctx:
        def __init__(self) -> None:
            self.values: dict = {}
            self.store, self.conn = "s", Conn()

        def register(self, v: Any) -> None:
            pass

    monkeypatch.setattr(slots_lib, "_probe_ps_slots", lambda conn, st, hs: {h._var_id: None for h in hs})
    a, b = Ctx(), Ctx()
    slots_lib._ensure_ps_slots(a, [(slot, 0.25)])  # A makes it...
    store.apply("step-a", [(-7, "assign_add", np.array([1.0, 1.0], np.float32))], None)  # ...and updates it
    slots_lib._KNOWN_PS_SLOTS.discard(("s", -7))
    slots_lib._ensure_ps_slots(b, [(slot, 0.25)])  # B found it missing before A made it
    assert store.read([-7])[0][0].tolist() == [1.25, 1.25]
    assert b.values[-7].tolist() == [1.25, 1.25]


def test_parameter_server_apply_outside_a_step_says_where(ps: tuple[Any, Any]) -> None:
    s, _ = ps
    with s.scope():
        w = idist.Variable(np.zeros(2, np.float32))
        opt = O.Adam()
    with pytest.raises(AttributeError, match="merge_call"), s.scope():
        opt.apply_gradients([(np.ones(2, np.float32), w)])


def test_parameter_server_checkpoint_of_the_slots(ps: tuple[Any, Any], tmp_path: Path) -> None:
    s, coord = ps
    with s.scope():
        w = idist.Variable(W0.copy())
        opt = O.Adam(0.1)

    def step(g: np.ndarray) -> None:
        s.run(lambda: opt.apply_gradients([(g, w)]))

    def train(gs: np.ndarray) -> None:
        for g in gs:
            coord.schedule(step, args=(g,))
            coord.join()

    ckpt = idist.Checkpoint(optimizer=opt, model={"w": w})
    train(GRADS[:2])
    path = ckpt.save(tmp_path / "ckpt")
    train(GRADS[2:])
    uninterrupted = w.numpy()
    np.testing.assert_allclose(uninterrupted, reference("adam")[0][3], rtol=1e-6, atol=0)
    ckpt.restore(path)  # the variable, iterations and both slots go back to step 2
    assert int(opt.iterations.numpy()) == 2
    train(GRADS[2:])
    assert w.numpy().tobytes() == uninterrupted.tobytes()
    # into a new optimizer (its slots made by the restore)
    with s.scope():
        opt2 = O.Adam(0.1)
    idist.Checkpoint(optimizer=opt2, model={"w": w}).restore(path)
    opt = opt2
    train(GRADS[2:])
    assert w.numpy().tobytes() == uninterrupted.tobytes()


# -- a GradientTape step under every strategy ---------------------------------------------------------------

X8 = np.linspace(-1.0, 1.0, 24, dtype=np.float32).reshape(8, 3)
Y8 = np.array([0, 1, 1, 0, 1, 0, 0, 1])
K0 = np.array([[0.5, -0.25], [0.125, 1.0], [-0.75, 0.5]], np.float32)


def _tape_steps(strategy: Any, run: Any) -> tuple[np.ndarray, np.ndarray]:
    """Three Adam steps of a Dense(2) softmax classifier on X8, through a GradientTape in ``run``."""
    with strategy.scope():
        dense = idist.layers.Dense(2, kernel_initializer=idist.initializers.Constant(0.0))
        dense.build((None, 3))
        dense.set_weights([K0, np.array([0.1, -0.1], np.float32)])
        opt = O.Adam(0.05)
    loss_object = idist.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=None)

    def step(x: np.ndarray, y: np.ndarray) -> Any:
        with idist.GradientTape() as tape:
            loss = idist.nn.compute_average_loss(loss_object(y, dense(x)), global_batch_size=8)
        grads = tape.gradient(loss, dense.trainable_variables)
        opt.apply_gradients(zip(grads, dense.trainable_variables, strict=True))
        return loss

    for _ in range(3):
        run(step)
    kernel, bias = dense.get_weights()
    return kernel, bias


def _halves(strategy: Any, step: Any) -> Any:
    x = strategy.experimental_distribute_values_from_function(lambda c: X8[4 * c.replica_id_in_sync_group :][:4])
    y = strategy.experimental_distribute_values_from_function(lambda c: Y8[4 * c.replica_id_in_sync_group :][:4])
    return strategy.run(step, args=(x, y))


def test_a_tape_step_is_the_same_under_every_strategy(
    mirrored2: Any, cs: Any, mwms: Any, ps: tuple[Any, Any]
) -> None:
    """Each replica differentiates its half of the batch, apply_gradients sums: the same weights as one
    device on the whole batch, under Mirrored, CentralStorage, MultiWorkerMirrored and ParameterServer."""
    from interdist import _context

    one = _tape_steps(_context.get_strategy(), lambda step: step(X8, Y8))
    results = {
        "mirrored": _tape_steps(mirrored2, lambda step: _halves(mirrored2, step)),
        "central_storage": _tape_steps(cs, lambda step: _halves(cs, step)),
        "multi_worker": _tape_steps(mwms, lambda step: _halves(mwms, step)),
    }
    s, coord = ps

    def scheduled(step: Any) -> None:
        coord.schedule(lambda: s.run(step, args=(X8, Y8)))
        coord.join()

    results["parameter_server"] = _tape_steps(s, scheduled)
    for name, (kernel, bias) in results.items():
        np.testing.assert_allclose(kernel, one[0], rtol=2e-6, atol=1e-7, err_msg=name)
        np.testing.assert_allclose(bias, one[1], rtol=2e-6, atol=1e-7, err_msg=name)
    assert not np.allclose(one[0], K0)  # it trained
