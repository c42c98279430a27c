"""Reused pickles of replica functions (client/fn_pickle.py): reused only while nothing they capture changed.

The functions are made as a notebook makes them: in ``__main__``, so that cloudpickle pickles
them by value with the globals they name (functions of importable modules go by reference).
"""

from __future__ import annotations

import importlib
import math
import sys
import types
from collections.abc import Iterator
from typing import Any, ClassVar

import cloudpickle
import numpy as np
import pytest
from cloudpickle import cloudpickle as _cp

import interdist as idist
from interdist.client import fn_pickle

NOTEBOOK_CELL = """
SCALE = 2.0
TABLE = [1.0]

def scaled(b):
    return b * SCALE

def helper(b):
    return np.float32(math.floor(b))

def uses_helper(b):
    return helper(b) + 1

def uses_list(b):
    return b * TABLE[0]

def with_default(b, k=2.0):
    return b * k

def make(k):
    return lambda b: b * k

from math import floor as m_floor
from time import perf_counter
ROOT = math.sqrt
SEEN = []
note = SEEN.append

def uses_builtins(b):
    return ROOT(b) + m_floor(b) + (perf_counter() > 0) + len([b])

def uses_a_bound_builtin(b):
    note(b)
    return len(SEEN)
"""


@pytest.fixture()
def nb() -> dict[str, Any]:
    """A notebook's namespace after running ``NOTEBOOK_CELL``."""
    ns: dict[str, Any] = {"__name__": "__main__", "np": np, "math": math}
    exec(compile(NOTEBOOK_CELL, "<notebook cell>", "exec"), ns)
    return ns


def test_a_function_of_modules_and_constants_is_pickled_once(nb: dict[str, Any]) -> None:
    first = fn_pickle.cached_dumps(nb["uses_helper"])
    assert first is not None
    assert fn_pickle.cached_dumps(nb["uses_helper"]) is first  # the same bytes object: not pickled again
    assert cloudpickle.loads(first)(2.5) == np.float32(3.0)


def test_new_lambdas_with_the_same_code_share_a_pickle(nb: dict[str, Any]) -> None:
    made = [nb["make"](3.0) for _ in range(2)]
    assert made[0] is not made[1]
    assert fn_pickle.cached_dumps(made[1]) is fn_pickle.cached_dumps(made[0])


def test_rebinding_a_global_makes_a_new_pickle(nb: dict[str, Any]) -> None:
    before = fn_pickle.cached_dumps(nb["scaled"])
    nb["SCALE"] = 3.0
    after = fn_pickle.cached_dumps(nb["scaled"])
    assert after is not before
    assert cloudpickle.loads(after)(2.0) == 6.0
    nb["SCALE"] = 2.0
    assert cloudpickle.loads(fn_pickle.cached_dumps(nb["scaled"]))(2.0) == 4.0


def test_closures_and_defaults_are_part_of_the_key(nb: dict[str, Any]) -> None:
    assert cloudpickle.loads(fn_pickle.cached_dumps(nb["make"](2.0)))(1.0) == 2.0
    assert cloudpickle.loads(fn_pickle.cached_dumps(nb["make"](5.0)))(1.0) == 5.0
    f = nb["with_default"]
    assert cloudpickle.loads(fn_pickle.cached_dumps(f))(1.0) == 2.0
    f.__defaults__ = (7.0,)
    assert cloudpickle.loads(fn_pickle.cached_dumps(f))(1.0) == 7.0


def test_mutable_captures_are_never_reused(nb: dict[str, Any]) -> None:
    assert fn_pickle.cached_dumps(nb["uses_list"]) is None
    box = np.ones(3)
    assert fn_pickle.cached_dumps(lambda b: b + box) is None
    assert fn_pickle.cached_dumps(np.sum) is None  # not a Python function: cloudpickle's own way
    assert cloudpickle.loads(fn_pickle.dumps_fn(nb["uses_list"]))(2.0) == 2.0


def test_builtins_imported_by_name_are_pickled_by_reference_and_reused(nb: dict[str, Any]) -> None:
    # ``from math import sqrt``: cloudpickle's importability check raises for builtins, so the cache asked it
    # nothing: it must key them by identity, as it does modules, and never fail where cloudpickle succeeds.
    first = fn_pickle.cached_dumps(nb["uses_builtins"])
    assert first is not None
    assert fn_pickle.cached_dumps(nb["uses_builtins"]) is first
    assert cloudpickle.loads(first)(4.0) == 2.0 + 4 + 1 + 1
    nb["ROOT"] = math.exp  # rebound to another builtin: a new pickle
    assert cloudpickle.loads(fn_pickle.cached_dumps(nb["uses_builtins"]))(0.0) == 1.0 + 0 + 1 + 1


def test_a_builtin_bound_to_an_object_is_never_reused(nb: dict[str, Any]) -> None:
    # ``SEEN.append`` carries the list, which may change unseen: pickled afresh each call, as a mutable capture.
    assert fn_pickle.cached_dumps(nb["uses_a_bound_builtin"]) is None
    nb["SEEN"].extend([1.0, 2.0])
    assert cloudpickle.loads(fn_pickle.dumps_fn(nb["uses_a_bound_builtin"]))(3.0) == 3


def test_a_module_made_or_shipped_in_the_notebook_is_never_reused() -> None:
    # cloudpickle sends such a module by value, attributes and all: one reassigned must reach the replicas.
    made = types.ModuleType("made_in_the_notebook")
    made.K = 2
    ns: dict[str, Any] = {"__name__": "__main__", "made": made}
    exec(compile("def read():\n    return made.K\n", "<cell>", "exec"), ns)
    assert fn_pickle.cached_dumps(ns["read"]) is None
    made.K = 3
    assert cloudpickle.loads(fn_pickle.dumps_fn(ns["read"]))() == 3
    assert fn_pickle.cached_dumps(lambda: math.pi) is not None  # an imported module goes by reference: reused


def test_subclasses_of_numbers_strings_and_tuples_are_not_taken_for_them(mirrored2: idist.MirroredStrategy) -> None:
    # A NamedTuple's method, an IntEnum's, an int subclass's instance attribute: pickled by value with the class
    # (checked on the replicas: in this process cloudpickle hands back the class it rebuilt first).
    cell = (
        "import enum, typing\n"
        "EPOCHS = 10\n"
        "class HParams(typing.NamedTuple):\n"
        "    lr: float\n"
        "    def epochs(self):\n"
        "        return EPOCHS\n"
        "H = HParams(0.1)\n"
        "OFFSET = 0\n"
        "class Mode(enum.IntEnum):\n"
        "    TRAIN = 1\n"
        "    def shifted(self):\n"
        "        return int(self) + OFFSET\n"
        "MODE = Mode.TRAIN\n"
        "class MyInt(int):\n"
        "    pass\n"
        "K = MyInt(3)\n"
        "K.extra = 10\n"
        "def read():\n"
        "    return H.epochs() + MODE.shifted() + K.extra\n"
    )
    ns: dict[str, Any] = {"__name__": "__main__"}
    exec(compile(cell, "<cell>", "exec"), ns)
    assert {int(v) for v in mirrored2.experimental_local_results(mirrored2.run(ns["read"]))} == {21}
    ns["EPOCHS"], ns["OFFSET"] = 20, 100
    ns["K"].extra = 1000
    assert {int(v) for v in mirrored2.experimental_local_results(mirrored2.run(ns["read"]))} == {1121}


def test_numpy_numbers_are_reused_and_a_deep_tuple_nest_is_pickled_afresh() -> None:
    lr = np.float64(0.5)
    assert fn_pickle.cached_dumps(lambda b: b * lr) is not None  # immutable: a key by identity
    deep: tuple[Any, ...] = ()
    for i in range(600):  # a cons list: deeper than the fingerprint goes, well within what cloudpickle pickles
        deep = (i, deep)
    assert fn_pickle.cached_dumps(lambda: deep[0]) is None
    assert cloudpickle.loads(fn_pickle.dumps_fn(lambda: deep[0]))() == 599


def test_replicas_run_a_function_of_imported_builtins(mirrored2: idist.MirroredStrategy, nb: dict[str, Any]) -> None:
    out = mirrored2.run(nb["uses_builtins"], args=(np.float64(9.0),))
    assert [float(v) for v in mirrored2.experimental_local_results(out)] == [3.0 + 9 + 1 + 1] * 2


def test_replicas_see_a_rebound_global_and_a_mutated_list(
    mirrored2: idist.MirroredStrategy, nb: dict[str, Any]
) -> None:
    s = mirrored2

    def values(out: Any) -> list[float]:
        return [float(np.asarray(v).ravel()[0]) for v in s.experimental_local_results(out)]

    one = np.float32(1.0)
    assert values(s.run(nb["scaled"], args=(one,))) == [2.0, 2.0]
    nb["SCALE"] = 10.0
    assert values(s.run(nb["scaled"], args=(one,))) == [10.0, 10.0]
    nb["TABLE"][0] = 4.0
    assert values(s.run(nb["uses_list"], args=(one,))) == [4.0, 4.0]
    nb["TABLE"][0] = 5.0
    assert values(s.run(nb["uses_list"], args=(one,))) == [5.0, 5.0]
    it = iter(s.experimental_distribute_dataset(idist.data.Dataset.range(6).batch(2)))
    assert values(s.run_steps(nb["scaled"], it, steps=1)) == [0.0, 10.0]
    nb["SCALE"] = 100.0
    assert values(s.run_steps(nb["scaled"], it, steps=2)) == [400.0, 500.0]  # fused: the reused pickle, renewed


def test_a_step_naming_its_strategys_variables_is_pickled_once(mirrored2: idist.MirroredStrategy) -> None:
    from interdist.protocol import pickling_for

    s = mirrored2
    with s.scope():
        v = idist.Variable(np.zeros(2, np.float32), name="fp_v", aggregation=idist.VariableAggregation.SUM)

    def step() -> Any:
        v.assign_add(np.ones(2, np.float32))
        return s.num_replicas_in_sync  # the strategy too is a reference on the workers

    with pickling_for(s._group_id, 2):
        first = fn_pickle.cached_dumps(step)
        assert first is not None and fn_pickle.cached_dumps(step) is first  # the same bytes object: reused
    for _ in range(3):
        assert {int(x) for x in s.experimental_local_results(s.run(step))} == {2}
    assert np.asarray(v).tolist() == [6.0, 6.0]  # SUM: each run adds 2 (both replicas' ones)


def test_another_strategys_variable_is_a_snapshot_taken_at_each_call(mirrored2: idist.MirroredStrategy) -> None:
    from interdist.protocol import pickling_for

    with idist.OneDeviceStrategy("CPU:0") as other:
        with other.scope():
            w = idist.Variable(np.float32(1.0), name="fp_w")

        def read() -> Any:
            return w + 0.0  # read on mirrored2's replicas: a copy of w's value as the call was made

        with pickling_for(mirrored2._group_id, 2):
            assert fn_pickle.cached_dumps(read) is None  # its value may change between calls: never reused
        assert [float(x) for x in mirrored2.experimental_local_results(mirrored2.run(read))] == [1.0, 1.0]
        w.assign(5.0)
        assert [float(x) for x in mirrored2.experimental_local_results(mirrored2.run(read))] == [5.0, 5.0]


def test_the_pickle_cache_does_not_keep_a_variable_alive(mirrored2: idist.MirroredStrategy) -> None:
    import gc
    import weakref

    from interdist.protocol import pickling_for

    def make_step() -> Any:  # a step that holds the variable in its closure, as a model's train_step does
        with mirrored2.scope():
            v = idist.Variable(np.float32(1.0), name="fp_gone")
        return weakref.ref(v), lambda: v + 0.0

    ref, step = make_step()
    with pickling_for(mirrored2._group_id, 2):
        assert fn_pickle.cached_dumps(step) is not None
        assert fn_pickle.cached_dumps(step) is fn_pickle.cached_dumps(step)
    del step
    gc.collect()
    assert ref() is None  # so the workers drop its copies with the next program, as without the cache


def test_an_optimizer_is_pickled_once_until_its_learning_rate_changes(mirrored2: idist.MirroredStrategy) -> None:
    from interdist.protocol import pickling_for

    s = mirrored2
    with s.scope():
        w = idist.Variable(np.float32(0.0), name="fp_opt_w")
        opt = idist.optimizers.SGD(learning_rate=1.0)

    def step() -> None:
        opt.apply_gradients([(np.float32(1.0), w)])  # SUM over 2 replicas: w -= lr * 2

    with pickling_for(s._group_id, 2):
        first = fn_pickle.cached_dumps(step)
        assert first is not None and fn_pickle.cached_dumps(step) is first
    s.run(step)
    assert float(np.asarray(w)) == -2.0
    opt.learning_rate = 0.25  # a new setting: a new pickle, and the replicas use it
    with pickling_for(s._group_id, 2):
        second = fn_pickle.cached_dumps(step)
        assert second is not None and second != first
    s.run(step)
    assert float(np.asarray(w)) == -2.5
    opt.learning_rate = np.float32(0.5)  # not a plain float: pickled at every call, still right
    with pickling_for(s._group_id, 2):
        assert fn_pickle.cached_dumps(step) is None
    s.run(step)
    assert float(np.asarray(w)) == -3.5


def test_a_fused_step_reads_another_strategys_variable_as_a_copy_each_call(mirrored2: idist.MirroredStrategy) -> None:
    """run_steps pickles its function before the program (to reuse the bytes): a foreign variable is
    still a copy of its value as the call is made, as in run."""
    with idist.OneDeviceStrategy("CPU:0") as other:
        with other.scope():
            w = idist.Variable(np.float32(2.0), name="fp_fused_w")

        def step(batch: Any) -> Any:
            return w * batch

        data = idist.data.Dataset.from_tensors(np.float32(1.0)).repeat(4)
        it = iter(mirrored2.experimental_distribute_dataset(data.batch(2)))
        assert [
            float(np.ravel(x)[0]) for x in mirrored2.experimental_local_results(mirrored2.run_steps(step, it, steps=1))
        ] == [2.0, 2.0]
        w.assign(3.0)
        assert [
            float(np.ravel(x)[0]) for x in mirrored2.experimental_local_results(mirrored2.run_steps(step, it, steps=1))
        ] == [3.0, 3.0]


def test_a_large_function_warns_where_the_user_called_naming_what_it_captures(nb: dict[str, Any]) -> None:
    """A function that pickles to a megabyte or more goes to every replica at every call: one warning, at the user's
    line, naming the arrays it captures (a closure's, a global's, a default's) and where to hold them instead."""
    nb["WEIGHTS"] = np.ones(200_000)  # 1.5 MB, a global of the notebook's
    exec(compile("def uses_weights(b):\n    return b * WEIGHTS[0]\n", "<notebook cell>", "exec"), nb)
    bias, ones = np.zeros(150_000), np.ones(10)  # 1.1 MB in a closure; 80 bytes as a default

    def step(b: Any, scale: Any = ones) -> Any:
        return b + bias[0] + scale[0]

    def by_default(b: Any, *, table: Any = bias) -> Any:
        return b + table[0]

    for fn, names in (
        (nb["uses_weights"], "`WEIGHTS` (1.5 MB)"),
        (step, "`bias` (1.1 MB)"),
        (by_default, "`table` (1.1 MB)"),
    ):
        with pytest.warns(UserWarning, match="pickles to .* MB, sent to every replica at every call") as got:
            data = fn_pickle.dumps_fn(fn)
        (w,) = got.list
        assert w.filename == __file__  # this line, not interdist's
        assert f"it captures {names}" in str(w.message) and "strategy.scope()" in str(w.message)
        assert "`scale`" not in str(w.message)  # 80 bytes: not worth naming
        assert len(data) >= fn_pickle.LARGE_FUNCTION_BYTES
        assert cloudpickle.loads(data)(1.0) == fn(1.0)


def test_a_small_function_does_not_warn(nb: dict[str, Any]) -> None:
    import warnings

    nb["SMALL"] = np.ones(1000)
    exec(compile("def uses_small(b):\n    return b * SMALL[0]\n", "<notebook cell>", "exec"), nb)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for fn in (nb["uses_small"], nb["scaled"]):
            assert len(fn_pickle.dumps_fn(fn)) < fn_pickle.LARGE_FUNCTION_BYTES


SUBMODULE_CELL = """
import fnp_pkg

def uses_sub(b):
    return fnp_pkg.sub.VALUE + b

def plain(b, *, k=3):
    return np.float32(b) * k + math.pi

def outer():
    seen = [1]
    def inner(b):
        return fnp_pkg, seen, np.ones(2)
    return inner

plain.tag = "x"
plain.__doc__ = "a docstring"
"""


@pytest.fixture()
def pkg_nb(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Any]]:
    """A notebook that imported ``fnp_pkg`` (a package of the test's own, with a submodule ``sub`` not imported)."""
    (tmp_path / "fnp_pkg").mkdir()
    (tmp_path / "fnp_pkg" / "__init__.py").write_text("")
    (tmp_path / "fnp_pkg" / "sub.py").write_text("VALUE = 7\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    ns: dict[str, Any] = {"__name__": "__main__", "np": np, "math": math}
    exec(compile(SUBMODULE_CELL, "<notebook cell>", "exec"), ns)
    yield ns
    for name in ("fnp_pkg.sub", "fnp_pkg"):
        sys.modules.pop(name, None)


def test_the_function_state_is_cloudpickles_own(pkg_nb: dict[str, Any]) -> None:
    """The state a replica function is pickled with (``_function_state``, which remembers the submodule scan) is
    exactly cloudpickle's ``_function_getstate``: names, defaults, closure, globals, ``__dict__``, submodules."""
    for fn in (pkg_nb["uses_sub"], pkg_nb["plain"], pkg_nb["outer"]()):
        for _ in range(2):  # the second time from the remembered scan
            assert fn_pickle._function_state(fn) == _cp._function_getstate(fn)


def test_a_submodule_imported_after_a_pickle_is_in_the_next_one(
    pkg_nb: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """cloudpickle records the imported submodules a function may name (``fnp_pkg.sub``), so that the replica imports
    them: the remembered scan is not reused once a module has been imported, and is reused until then."""
    fn = pkg_nb["uses_sub"]
    scans: list[Any] = []
    real = _cp._find_imported_submodules
    monkeypatch.setattr(_cp, "_find_imported_submodules", lambda *a: scans.append(a) or real(*a))
    assert fn_pickle._function_state(fn)[1]["_cloudpickle_submodules"] == []
    assert fn_pickle._function_state(fn)[1]["_cloudpickle_submodules"] == []
    assert len(scans) == 1  # the second pickle did not scan sys.modules again
    importlib.import_module("fnp_pkg.sub")
    subs = fn_pickle._function_state(fn)[1]["_cloudpickle_submodules"]
    assert [m.__name__ for m in subs] == ["fnp_pkg.sub"] and len(scans) == 2
    assert fn_pickle._function_state(fn)[1]["_cloudpickle_submodules"] == subs and len(scans) == 2
    # What the replica gets: the function, which imports the submodule as it is unpickled.
    data = fn_pickle.dumps_fn(fn)
    del sys.modules["fnp_pkg.sub"], sys.modules["fnp_pkg"].sub
    assert cloudpickle.loads(data)(1) == 8 and "fnp_pkg.sub" in sys.modules


def test_the_dispatch_table_is_cloudpickles_and_follows_copyreg(nb: dict[str, Any]) -> None:
    """The pickler's plain-dict table gives the bytes of cloudpickle's ChainMap (with the file-keeping code reducer),
    and a reducer registered with copyreg after a pickle is used by the next one."""
    import copyreg
    import io
    from collections import ChainMap

    class ChainMapPickler(fn_pickle._Pickler):
        dispatch_table: ClassVar[Any] = ChainMap(
            {types.CodeType: fn_pickle._code_reduce}, cloudpickle.Pickler.dispatch_table
        )

    def chain_map_dumps(fn: Any) -> bytes:
        with io.BytesIO() as f:
            ChainMapPickler(f).dump(fn)
            return f.getvalue()

    for fn in (nb["scaled"], nb["uses_helper"], nb["make"](3.0), nb["uses_builtins"]):
        assert fn_pickle._dumps(fn) == chain_map_dumps(fn)

    class Point:
        def __init__(self, x: float) -> None:
            self.x = x

    reduced: list[float] = []

    def reduce_point(p: Point) -> Any:
        reduced.append(p.x)
        return (float, (p.x,))

    point = Point(2.5)
    fn_pickle._dumps(nb["scaled"])  # a table made before the registration
    copyreg.pickle(Point, reduce_point)
    try:
        assert cloudpickle.loads(fn_pickle._dumps(lambda: point))() == 2.5  # the reducer made it a float
        assert reduced == [2.5]
    finally:
        del copyreg.dispatch_table[Point]
    assert Point not in fn_pickle._dispatch_table()
