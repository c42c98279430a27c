"""Which dtypes ``batch_reduce_to`` takes together, as TF 2.21 does (recorded with tensorflow-cpu 2.21, two
logical CPU devices, ``MirroredStrategy``):

- values of different float or int64 dtypes in one batch are reduced, each keeping its dtype
  (float32 + float64 SUM: float32 and float64 results; float32 + int64 MEAN: float32 and float64);
- int32 values live in host memory, each with a ``ReductionToOneDevice`` of its own, so a batch of two values
  or more with any int32 among them raises ``ValueError: Inputs to batch_reduce_to must be either all on the
  host or all on the compute devices.`` (int32 with float32, even int32 with int32, in cross-replica context and
  inside ``merge_call``); one int32 value alone is reduced;
- ``CentralStorageStrategy`` and ``MultiWorkerMirroredStrategy`` reduce int32 with float32 (no such check);
- an optimizer's ``apply_gradients`` to a float32 and a float64 variable at once works (Keras 3).
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

import interdist as idist

HOST_OR_DEVICES = "Inputs to batch_reduce_to must be either all on the host or all on the compute devices."


def _per_replica(s: idist.Strategy, dtype: str, shape: tuple[int, ...]) -> object:
    return s.experimental_distribute_values_from_function(
        lambda ctx: np.full(shape, ctx.replica_id_in_sync_group + 1, dtype)
    )


def _local(s: idist.Strategy, value: object) -> tuple[list[float], str]:
    first = np.asarray(s.experimental_local_results(value)[0])
    return first.tolist(), first.dtype.name


@pytest.mark.parametrize(
    ("first", "second", "op", "expected"),
    [
        ("float32", "float64", "SUM", [([3.0] * 4, "float32"), ([3.0] * 2, "float64")]),
        ("float16", "float32", "MEAN", [([1.5] * 4, "float16"), ([1.5] * 2, "float32")]),
        ("float32", "int64", "MEAN", [([1.5] * 4, "float32"), ([1.5] * 2, "float64")]),
        ("float64", "int64", "SUM", [([3.0] * 4, "float64"), ([3] * 2, "int64")]),
    ],
)
def test_values_of_different_dtypes_are_reduced_in_one_batch(
    mirrored2: idist.MirroredStrategy, first: str, second: str, op: str, expected: list[tuple[list[float], str]]
) -> None:
    s = mirrored2
    a, b = _per_replica(s, first, (4,)), _per_replica(s, second, (2,))
    out = s.extended.batch_reduce_to(op, [(a, a), (b, b)])
    assert [_local(s, o) for o in out] == expected

    def step(x: object, y: object) -> object:
        merge = lambda strategy, x, y: strategy.extended.batch_reduce_to(op, [(x, x), (y, y)])
        return idist.get_replica_context().merge_call(merge, args=(x, y))

    assert [_local(s, o) for o in s.run(step, args=(a, b))] == expected


@pytest.mark.parametrize(("first", "second"), [("int32", "float32"), ("float32", "int32"), ("int32", "int32")])
def test_int32_among_several_values_is_refused_as_tf_does(
    mirrored2: idist.MirroredStrategy, first: str, second: str
) -> None:
    s = mirrored2
    a, b = _per_replica(s, first, (2,)), _per_replica(s, second, (2,))
    with pytest.raises(ValueError, match=HOST_OR_DEVICES):
        s.extended.batch_reduce_to("SUM", [(a, "CPU:0"), (b, "CPU:0")])
    with pytest.raises(ValueError, match=HOST_OR_DEVICES):
        s.extended.batch_reduce_to("SUM", [(a, "CPU:0"), (np.int32(3) if first != "int32" else b, "CPU:0")])

    def step() -> object:
        merge = lambda strategy: strategy.extended.batch_reduce_to(
            "SUM", [(np.ones(2, first), "CPU:0"), (np.ones(2, second), "CPU:0")]
        )
        return idist.get_replica_context().merge_call(merge)

    with pytest.raises(ValueError, match=HOST_OR_DEVICES):
        s.run(step)
    # one int32 value alone is reduced, and the strategy goes on
    assert _local(s, s.extended.batch_reduce_to("SUM", [(_per_replica(s, "int32", (2,)), "CPU:0")])[0]) == (
        [3, 3],
        "int32",
    )


@pytest.fixture(scope="module")
def central() -> Iterator[idist.experimental.CentralStorageStrategy]:
    s = idist.experimental.CentralStorageStrategy(["CPU:0", "CPU:1"])
    try:
        yield s
    finally:
        s.close()


def test_central_storage_reduces_int32_with_other_values(central: idist.experimental.CentralStorageStrategy) -> None:
    a, b = _per_replica(central, "float32", (2,)), _per_replica(central, "int32", (2,))
    out = central.extended.batch_reduce_to("SUM", [(a, "CPU:0"), (b, "CPU:0")])
    assert [(np.asarray(o).tolist(), np.asarray(o).dtype.name) for o in out] == [
        ([3.0, 3.0], "float32"),
        ([3, 3], "int32"),
    ]


def test_an_optimizer_updates_variables_of_two_dtypes_at_once(mirrored2: idist.MirroredStrategy) -> None:
    s = mirrored2
    with s.scope():
        a = idist.Variable(np.ones(3, np.float32))
        b = idist.Variable(np.ones(2, np.float64))
        opt = idist.optimizers.SGD(0.25)

    def step() -> None:
        opt.apply_gradients([(np.ones(3, np.float32), a), (np.ones(2, np.float64), b)])

    s.run(step)  # the gradients' SUM over two replicas is 2: 1 - 0.25 * 2
    for var, dtype in ((a, np.float32), (b, np.float64)):
        for copy in s.experimental_local_results(var):
            got = np.asarray(copy)
            assert got.dtype == dtype and got.tolist() == [0.5] * got.size


def test_multi_worker_mirrored_reduces_int32_with_other_values() -> None:
    # TF 2.21's CollectiveAllReduceExtended picks its collectives by the number of devices, not the dtype.
    with idist.MultiWorkerMirroredStrategy() as s:  # no TF_CONFIG: one worker, this machine
        x = s.experimental_distribute_values_from_function(lambda ctx: np.array([1, 2], np.int32))
        y = s.experimental_distribute_values_from_function(lambda ctx: np.array([1.0, 2.0], np.float32))
        out = s.extended.batch_reduce_to("SUM", [(x, "CPU:0"), (y, "CPU:0")])
        assert [(np.asarray(o).tolist(), np.asarray(o).dtype.name) for o in out] == [
            ([1, 2], "int32"),
            ([1.0, 2.0], "float32"),
        ]


def test_all_reduce_of_a_structure_with_int32_is_refused_as_tf_does(mirrored2: idist.MirroredStrategy) -> None:
    """TF's ``ReplicaContext.all_reduce`` of a structure is one ``batch_reduce_to`` (in a ``merge_call``), so the
    same rule holds there: two leaves or more with any int32 among them raise; one int32 leaf is reduced, and
    float32 with int64 are (TF 2.21: [2.0, 4] for SUM, [1.0, 2.0] for MEAN on two replicas)."""
    s = mirrored2

    def reduce(op: str, make: object) -> object:
        return s.run(lambda: idist.get_replica_context().all_reduce(op, make()))  # type: ignore[operator]

    for make in (
        lambda: [np.int32(1), np.int32(2)],
        lambda: [np.int32(1), np.float32(2.0)],
        lambda: {"a": np.ones(2, np.int32), "b": np.ones(2, np.int32)},
    ):
        for op in ("SUM", "MEAN"):
            with pytest.raises(ValueError, match=HOST_OR_DEVICES):
                reduce(op, make)
    one = reduce("SUM", lambda: [np.int32(1)])
    assert [np.asarray(v).tolist() for v in s.experimental_local_results(one[0])] == [2, 2]
    summed = reduce("SUM", lambda: [np.float32(1.0), np.int64(2)])
    assert [(np.asarray(s.experimental_local_results(v)[0]).tolist()) for v in summed] == [2.0, 4]
    mean = reduce("MEAN", lambda: [np.float32(1.0), np.int64(2)])
    assert [(np.asarray(s.experimental_local_results(v)[0]).tolist()) for v in mean] == [1.0, 2.0]


def _parts_over(total: np.ndarray, n: int) -> np.ndarray:
    """Each part of ``total`` divided by ``n`` in its own precision (IEEE division: correctly rounded)."""
    real = total.real.dtype.type(n)
    return (total.real / real + 1j * (total.imag / real)).astype(total.dtype)


def test_the_mean_of_complex_values_divides_each_part_correctly_rounded() -> None:
    """A complex MEAN divides each part by the real count, every element correctly rounded as TF 2.21's is
    (recorded: complex64 means of 3 replicas equal ``(S.astype(complex128) / 3).astype(complex64)`` everywhere).
    NumPy's division by ``n + 0j`` multiplies by ``1 / n``: one ulp off in about half the elements."""
    from interdist import _reduction

    rng = np.random.default_rng(3)
    total = (rng.normal(size=4096) + 1j * rng.normal(size=4096)).astype(np.complex64)
    expected = _parts_over(total, 3)
    assert np.array_equal(expected, (total.astype(np.complex128) / 3).astype(np.complex64))
    assert (total / np.complex64(3)).tobytes() != expected.tobytes()  # the naive division differs here
    got = _reduction.mean_of_sum(total, 3)
    assert got.dtype == np.complex64 and got.tobytes() == expected.tobytes()
    halves = [(total[:2048].copy(), 3), (total[2048:].copy(), 3)]  # combine: numerators added, then / 6
    got = _reduction.combine(idist.ReduceOp.MEAN, halves, 0)
    assert got.tobytes() == _parts_over(total[:2048] + total[2048:], 6).tobytes()


def test_reduce_mean_of_complex_values_over_an_axis(mirrored2: idist.MirroredStrategy) -> None:
    s = mirrored2
    rng = np.random.default_rng(4)
    parts = [(rng.normal(size=(3, 257)) + 1j * rng.normal(size=(3, 257))).astype(np.complex64) for _ in range(2)]
    per = s.experimental_distribute_values_from_function(lambda ctx: parts[ctx.replica_id_in_sync_group])
    got = np.asarray(s.reduce("MEAN", per, axis=0))  # each replica sums its 3 rows; the total over 6
    numer = parts[0].sum(axis=0, dtype=np.complex64) + parts[1].sum(axis=0, dtype=np.complex64)
    assert got.dtype == np.complex64 and got.tobytes() == _parts_over(numer, 6).tobytes()
