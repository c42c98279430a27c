"""``Checkpoint(optimizer=..., model=...)``: a resumed run equals an uninterrupted one, bit for bit.

The optimizer's slots (momentum, Adam's moments, RMSprop's velocity, Adagrad's accumulators) and
``iterations`` are saved with the model's variables; ``model`` may be any object with a ``variables``
list, a ``trainable_variables`` list, or attributes that are variables (nested dicts/lists too).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import interdist as idist
from interdist import optimizers as O

OPTIMIZERS: dict[str, Callable[[], Any]] = {
    "sgd_momentum": lambda: O.SGD(0.05, momentum=0.9),
    "sgd_nesterov": lambda: O.SGD(0.05, momentum=0.8, nesterov=True),
    "adam": lambda: O.Adam(0.01),
    "rmsprop": lambda: O.RMSprop(0.01),
    "rmsprop_centered": lambda: O.RMSprop(0.01, momentum=0.5, centered=True),
    "adagrad": lambda: O.Adagrad(0.1),
}
SLOTS = {
    "sgd_momentum": ["momentum"],
    "sgd_nesterov": ["momentum"],
    "adam": ["momentum", "velocity"],
    "rmsprop": ["velocity"],
    "rmsprop_centered": ["average_gradient", "momentum", "velocity"],
    "adagrad": ["accumulator"],
}

RNG = np.random.default_rng(24)
# 6 steps x 2 replicas of gradients for a (3, 2) kernel and a (2,) bias
KERNEL_GRADS = RNG.normal(size=(6, 2, 3, 2)).astype(np.float32)
BIAS_GRADS = RNG.normal(size=(6, 2, 2)).astype(np.float32)
KERNEL0 = RNG.normal(size=(3, 2)).astype(np.float32)
BIAS0 = RNG.normal(size=2).astype(np.float32)


class Model:
    """A layer as Keras has them: ``variables`` and ``trainable_variables`` lists."""

    def __init__(self) -> None:
        self.kernel = idist.Variable(KERNEL0.copy(), name="kernel")
        self.bias = idist.Variable(BIAS0.copy(), name="bias")

    @property
    def variables(self) -> list[Any]:
        return [self.kernel, self.bias]

    @property
    def trainable_variables(self) -> list[Any]:
        return [self.kernel, self.bias]


def _train(s: Any, model: Model, opt: Any, steps: range) -> None:
    for k in steps:

        def step(k: int = k) -> None:
            r = idist.get_replica_context().replica_id_in_sync_group
            opt.apply_gradients(zip([KERNEL_GRADS[k, r], BIAS_GRADS[k, r]], model.trainable_variables, strict=True))

        s.run(step)


def _values(model: Model) -> list[np.ndarray]:
    return [np.asarray(v) for v in model.variables]


@pytest.fixture
def fresh_mirrored() -> Iterator[Any]:
    s = idist.MirroredStrategy(["CPU:0", "CPU:1"])
    yield s
    s.close()


@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_resumed_equals_uninterrupted_on_mirrored(
    mirrored2: Any, fresh_mirrored: Any, tmp_path: Path, name: str
) -> None:
    with mirrored2.scope():
        model, opt = Model(), OPTIMIZERS[name]()
    ckpt = idist.Checkpoint(optimizer=opt, model=model)
    _train(mirrored2, model, opt, range(3))
    path = ckpt.save(tmp_path / "ckpt")
    assert Path(path).name == "ckpt-1"
    _train(mirrored2, model, opt, range(3, 6))
    a = _values(model)
    index = json.loads((Path(path) / "index.json").read_text())["variables"]
    assert sorted(index) == sorted(
        ["model/0", "model/1", "optimizer/iterations"]
        + [f"model/{i}/.OPTIMIZER_SLOT/optimizer/{slot}" for i in (0, 1) for slot in SLOTS[name]]
    )
    assert index["model/1/.OPTIMIZER_SLOT/optimizer/" + SLOTS[name][0]]["slot"] == {
        "variable": "model/1",
        "optimizer": "optimizer",
        "name": SLOTS[name][0],
    }

    with fresh_mirrored.scope():
        model2, opt2 = Model(), OPTIMIZERS[name]()
    idist.Checkpoint(optimizer=opt2, model=model2).restore(path)
    assert int(np.asarray(opt2.iterations)) == 3
    _train(fresh_mirrored, model2, opt2, range(3, 6))
    b = _values(model2)
    assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True)), name
    assert all(x.tobytes() == y.tobytes() for x, y in zip(a, b, strict=True))
    assert int(np.asarray(opt2.iterations)) == 6
    for v in model2.variables:  # both replicas went on from the same restored slots
        first, second = (np.asarray(c) for c in fresh_mirrored.experimental_local_results(v))
        assert first.tobytes() == second.tobytes()


@pytest.mark.parametrize("name", ["adam", "sgd_momentum"])
def test_restore_into_the_same_optimizer_rewinds_its_slots(mirrored2: Any, tmp_path: Path, name: str) -> None:
    with mirrored2.scope():
        model, opt = Model(), OPTIMIZERS[name]()
    ckpt = idist.Checkpoint(optimizer=opt, model=model)
    _train(mirrored2, model, opt, range(3))
    path = ckpt.save(tmp_path / "ckpt")
    _train(mirrored2, model, opt, range(3, 6))
    a = _values(model)
    ckpt.restore(path)
    _train(mirrored2, model, opt, range(3, 6))
    assert all(x.tobytes() == y.tobytes() for x, y in zip(a, _values(model), strict=True))


def test_resumed_equals_uninterrupted_on_central_storage(tmp_path: Path) -> None:
    """The slots live on the holder only (here replica 1): saved from there, restored there."""
    cs = idist.experimental.CentralStorageStrategy(["CPU:0", "CPU:1"], parameter_device="CPU:1")
    try:
        with cs.scope():
            model, opt = Model(), O.Adam(0.01)
        ckpt = idist.Checkpoint(optimizer=opt, model=model)
        _train(cs, model, opt, range(3))
        path = ckpt.save(tmp_path / "ckpt")
        _train(cs, model, opt, range(3, 6))
        a = _values(model)
        with cs.scope():
            model2, opt2 = Model(), O.Adam(0.01)
        idist.Checkpoint(optimizer=opt2, model=model2).restore(path)
        _train(cs, model2, opt2, range(3, 6))
        assert all(x.tobytes() == y.tobytes() for x, y in zip(a, _values(model2), strict=True))
    finally:
        cs.close()


@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_resumed_equals_uninterrupted_without_a_strategy(tmp_path: Path, name: str) -> None:
    def train(model: Model, opt: Any, steps: range) -> None:
        for k in steps:
            opt.apply_gradients(zip([KERNEL_GRADS[k, 0], BIAS_GRADS[k, 0]], model.variables, strict=True))

    model, opt = Model(), OPTIMIZERS[name]()
    ckpt = idist.Checkpoint(optimizer=opt, model=model)
    train(model, opt, range(3))
    path = ckpt.save(tmp_path / "ckpt")
    train(model, opt, range(3, 6))
    model2, opt2 = Model(), OPTIMIZERS[name]()
    idist.Checkpoint(optimizer=opt2, model=model2).restore(path)
    train(model2, opt2, range(3, 6))
    assert all(x.tobytes() == y.tobytes() for x, y in zip(_values(model), _values(model2), strict=True))


def test_slots_of_variables_outside_the_checkpoint_are_not_saved(tmp_path: Path) -> None:
    model, other = Model(), idist.Variable(np.ones(2, np.float32))
    opt = O.Adagrad(0.1)
    opt.apply_gradients([(np.ones(2, np.float32), other), (np.ones(2, np.float32), model.bias)])
    path = idist.Checkpoint(opt=opt, bias=model.bias).save(tmp_path / "c")
    index = json.loads((Path(path) / "index.json").read_text())["variables"]
    assert sorted(index) == ["bias", "bias/.OPTIMIZER_SLOT/opt/accumulator", "opt/iterations"]


def test_an_optimizer_alone_saves_its_iterations(tmp_path: Path) -> None:
    opt = O.SGD(0.1)
    w = idist.Variable(np.zeros(2, np.float32))
    opt.apply_gradients([(np.ones(2, np.float32), w)])
    ckpt = idist.Checkpoint(optimizer=opt)
    path = ckpt.save(tmp_path / "c")
    opt.apply_gradients([(np.ones(2, np.float32), w)])
    ckpt.restore(path)
    assert int(np.asarray(opt.iterations)) == 1


def test_an_optimizer_that_never_stepped_has_no_slots_to_save(tmp_path: Path) -> None:
    model, opt = Model(), O.Adam(0.1)
    path = idist.Checkpoint(model=model, optimizer=opt).save(tmp_path / "c")
    names = sorted(json.loads((Path(path) / "index.json").read_text())["variables"])
    assert names == ["model/0", "model/1", "optimizer/iterations"]
    opt2 = O.Adam(0.1)
    idist.Checkpoint(model=model, optimizer=opt2).restore(path)
    assert int(np.asarray(opt2.iterations)) == 0 and opt2._checkpoint_read_slots(model.variables) == [{}, {}]


def test_a_slot_of_another_shape_is_refused_before_anything_is_assigned(tmp_path: Path) -> None:
    w = idist.Variable(np.zeros(3, np.float32))
    opt = O.SGD(0.1, momentum=0.9)
    opt.apply_gradients([(np.ones(3, np.float32), w)])
    path = idist.Checkpoint(opt=opt, w=w).save(tmp_path / "c")
    w2 = idist.Variable(np.zeros(4, np.float32))
    with pytest.raises(ValueError, match="shape"):
        idist.Checkpoint(opt=O.SGD(0.1, momentum=0.9), w=w2).restore(path)


# -- what a checkpoint can hold -------------------------------------------------------------------


class Dense:
    """Attributes that are variables (no ``variables`` list)."""

    def __init__(self, n: int) -> None:
        self.kernel = idist.Variable(np.arange(n, dtype=np.float32))
        self.bias = idist.Variable(np.float32(n))
        self.units = n  # not a variable: not saved
        self._cache = [1, 2]


class Net:
    def __init__(self) -> None:
        self.first = Dense(2)
        self.blocks = [Dense(3), {"scale": idist.Variable(np.float32(0.5)), "note": "text"}]
        self.name = "net"
        self.parent = self  # a cycle


class OnlyTrainable:
    def __init__(self) -> None:
        self.trainable_variables = [idist.Variable(np.float32(1.0)), idist.Variable(np.float32(2.0))]


def test_objects_with_variable_attributes_nested_dicts_and_lists(tmp_path: Path) -> None:
    net, t = Net(), OnlyTrainable()
    nested = {"a": [idist.Variable(np.float32(1.0)), (idist.Variable(np.int64(2)),)], "b": {"c": idist.Variable(3.0)}}
    ckpt = idist.Checkpoint(model=net, t=t, nested=nested)
    path = ckpt.save(tmp_path / "c")
    names = sorted(json.loads((Path(path) / "index.json").read_text())["variables"])
    assert names == [
        "model/blocks/0/bias",
        "model/blocks/0/kernel",
        "model/blocks/1/scale",
        "model/first/bias",
        "model/first/kernel",
        "nested/a/0",
        "nested/a/1/0",
        "nested/b/c",
        "t/0",
        "t/1",
    ]
    before = [np.asarray(v).copy() for v in ckpt._variables().values()]
    for v in ckpt._variables().values():
        v.assign(np.zeros_like(np.asarray(v)))
    ckpt.restore(path)
    after = [np.asarray(v) for v in ckpt._variables().values()]
    assert all(np.array_equal(x, y) for x, y in zip(before, after, strict=True))


def test_an_object_without_variables_is_refused() -> None:
    class Nothing:
        def __init__(self) -> None:
            self.x = 3

    with pytest.raises(TypeError, match="cannot save 'model' of type Nothing"):
        idist.Checkpoint(model=Nothing())._variables()
