"""GradientTape against TF 2.21: every expected value below was recorded by recorder/tape_tf.py from
the same program in TensorFlow (``tf.GradientTape``, ``tf.Variable``, ``tf.reduce_*``)."""

from __future__ import annotations

import numpy as np
import pytest

import interdist as idist

X = np.array([[1.0, -1.0], [2.0, 0.5], [0.0, 3.0]], np.float32)


@pytest.fixture
def v() -> tuple[idist.Variable, idist.Variable, idist.Variable, idist.Variable]:
    w = idist.Variable(np.array([[1.0, 2.0], [3.0, 4.0]], np.float32))
    b = idist.Variable(np.array([0.5, -1.0], np.float32))
    nt = idist.Variable(np.float32(2.0), trainable=False)
    iv = idist.Variable(np.int32(3))
    return w, b, nt, iv


def assert_close(got: object, want: object) -> None:
    np.testing.assert_allclose(np.asarray(got, np.float64), np.asarray(want, np.float64), rtol=2e-6, atol=1e-6)


def test_mixed_ops_trainable_and_not(v: tuple) -> None:
    w, b, nt, _ = v
    with idist.GradientTape() as t:
        y = np.mean(np.exp(X @ w + b) * np.float32(0.01)) + np.sum(w * w) * nt
    gw, gb, gnt = t.gradient(y, [w, b, nt])
    assert_close(gw, [[4.182365894317627, 8.494793891906738], [78.84375762939453, 315.4942932128906]])
    assert_close(gb, [22.357580184936523, 100.03767395019531])
    assert gnt is None  # a non-trainable variable is not watched
    assert gw.dtype == np.float32 and isinstance(gw, np.ndarray)


def test_non_scalar_target_sums(v: tuple) -> None:
    w = v[0]
    with idist.GradientTape() as t:
        y = X @ w
    assert_close(t.gradient(y, w), [[3.0, 3.0], [2.5, 2.5]])


def test_non_persistent_tape_gives_one_set(v: tuple) -> None:
    w = v[0]
    with idist.GradientTape() as t:
        y = w * 2.0
    t.gradient(y, w)
    with pytest.raises(RuntimeError, match="non-persistent GradientTape can only be used to compute one set"):
        t.gradient(y, w)


def test_persistent_tape(v: tuple) -> None:
    w, b = v[0], v[1]
    with idist.GradientTape(persistent=True) as t:
        y = np.sum(w * w)
        z = np.sum(y * b)
    assert_close(t.gradient(y, w), [[2.0, 4.0], [6.0, 8.0]])
    gw, gb = t.gradient(z, [w, b])
    assert_close(gw, [[-1.0, -2.0], [-3.0, -4.0]])
    assert_close(gb, [30.0, 30.0])


def test_stop_recording(v: tuple) -> None:
    w, b = v[0], v[1]
    with idist.GradientTape() as t:
        y = np.sum(w * 3.0)
        with t.stop_recording():
            z = np.sum(b * b)
        q = y + z
    gw, gb = t.gradient(q, [w, b])
    assert_close(gw, [[3.0, 3.0], [3.0, 3.0]])
    assert gb is None


def test_unconnected_zero(v: tuple) -> None:
    w, b = v[0], v[1]
    with idist.GradientTape() as t:
        y = np.sum(w)
    gw, gb = t.gradient(y, [w, b], unconnected_gradients=idist.UnconnectedGradients.ZERO)
    assert_close(gw, np.ones((2, 2)))
    assert gb.dtype == np.float32
    assert_close(gb, [0.0, 0.0])


def test_watch_accessed_variables_false(v: tuple) -> None:
    w, b = v[0], v[1]
    with idist.GradientTape(watch_accessed_variables=False) as t:
        t.watch(b)
        y = np.sum(w * 2.0) + np.sum(b * b)
    gw, gb = t.gradient(y, [w, b])
    assert gw is None
    assert_close(gb, [1.0, -2.0])
    watched = t.watched_variables()  # as TF: the variable watched by hand, and only it
    assert len(watched) == 1 and watched[0] is b


def test_watch_a_tensor() -> None:
    c = idist.Tensor(np.float32(3.0))
    with idist.GradientTape() as t:
        t.watch(c)
        y = c * c * c
    assert_close(t.gradient(y, c), 27.0)


def test_watch_a_numpy_array_says_what_to_do() -> None:
    with idist.GradientTape() as t, pytest.raises(TypeError, match=r"idist.Tensor\(x\)"):
        t.watch(np.float32(3.0))


def test_integer_variable_has_no_gradient(v: tuple) -> None:
    iv = v[3]
    with idist.GradientTape() as t:
        y = iv.value().astype(np.float32) * 2.0
    assert t.gradient(y, iv) is None


def test_output_gradients_and_list_targets(v: tuple) -> None:
    w, b = v[0], v[1]
    with idist.GradientTape() as t:
        y = np.sum(w * 2.0)
    assert_close(t.gradient(y, w, output_gradients=np.float32(3.0)), np.full((2, 2), 6.0))
    with idist.GradientTape() as t:
        y1 = np.sum(w)
        y2 = np.sum(w * b)
    assert_close(t.gradient([y1, y2], w), [[1.5, 0.0], [1.5, 0.0]])


def test_nested_sources_keep_their_structure(v: tuple) -> None:
    w, b = v[0], v[1]
    with idist.GradientTape() as t:
        y = np.sum(w)
    g = t.gradient(y, {"a": w, "b": [b]})
    assert_close(g["a"], np.ones((2, 2)))
    assert g["b"] == [None]


def test_gradient_with_respect_to_an_intermediate_value(v: tuple) -> None:
    w = v[0]
    with idist.GradientTape() as t:
        h = X @ w
        y = np.sum(idist.nn.relu(h - 3.0))
    gw, gh = t.gradient(y, [w, h])
    assert_close(gw, [[2.0, 2.0], [3.5, 3.5]])
    assert_close(gh, [[0.0, 0.0], [1.0, 1.0], [1.0, 1.0]])


def test_ties_as_tf(v: tuple) -> None:
    w = v[0]
    with idist.GradientTape() as t:
        y = np.sum(idist.nn.relu(w - 2.0))
    assert_close(t.gradient(y, w), [[0.0, 0.0], [1.0, 1.0]])  # relu'(0) = 0
    with idist.GradientTape() as t:
        y = np.sum(np.maximum(w, 2.0))
    assert_close(t.gradient(y, w), [[0.0, 1.0], [1.0, 1.0]])  # a tie goes to the first argument
    with idist.GradientTape() as t:
        y = np.sum(np.minimum(w, 2.0))
    assert_close(t.gradient(y, w), [[1.0, 1.0], [0.0, 0.0]])


def test_none_among_sources_is_a_type_error(v: tuple) -> None:
    w = v[0]
    with idist.GradientTape() as t:
        y = np.sum(w)
    with pytest.raises(TypeError):
        t.gradient(y, [w, None])


def test_slicing_and_concatenate(v: tuple) -> None:
    w, b = v[0], v[1]
    with idist.GradientTape() as t:
        y = np.sum(w[0] * 2.0) + np.sum(np.concatenate([w, b[None]], 0))
    gw, gb = t.gradient(y, [w, b])
    assert_close(gw, [[3.0, 3.0], [1.0, 1.0]])
    assert_close(gb, [1.0, 1.0])


def test_numpy_function_without_gradient_is_named(v: tuple) -> None:
    w = v[0]
    with idist.GradientTape(), pytest.raises(NotImplementedError, match="lexsort"):
        np.lexsort((np.sum(w, 0),))


def test_values_off_the_tape_behave_as_arrays(v: tuple) -> None:
    w = v[0]
    with idist.GradientTape() as t:
        y = np.sum(w)
        assert f"{y:.1f}" == "10.0" and float(y) == 10.0 and y.numpy() == np.float32(10.0)
        assert np.asarray(y).dtype == np.float32
    assert t.gradient(y, w) is not None
    # no tape: variables and NumPy functions as before
    assert float(np.sum(w)) == 10.0 and np.concatenate([w, w]).shape == (4, 2)


def test_value_and_grad(v: tuple) -> None:
    w, b = v[0], v[1]
    loss, grads = idist.value_and_grad(lambda x: np.mean(np.exp(x @ w + b) * np.float32(0.01)))(X)
    assert isinstance(loss, np.ndarray) or np.isscalar(loss)
    gw, gb = grads
    assert_close(gb, [22.357580184936523 - 0.0, 100.03767395019531])  # the same program as test_mixed_ops, less sum(w*w)*nt
    assert_close(
        gw, [[4.182365894317627 - 4.0, 8.494793891906738 - 8.0], [78.84375762939453 - 12.0, 315.4942932128906 - 16.0]]
    )
    _, (only_b,) = idist.value_and_grad(lambda: np.sum(b * w[0]), sources=[b])()
    assert_close(only_b, [1.0, 2.0])


def test_jacobian_is_not_implemented(v: tuple) -> None:
    with idist.GradientTape() as t:
        y = v[0] * 2.0
    with pytest.raises(NotImplementedError, match="jacobian"):
        t.jacobian(y, v[0])


def test_mirrored_step_with_sgd(mirrored2: idist.MirroredStrategy) -> None:
    """TF: each replica's gradient on its own batch; apply_gradients sums them (recorded on 2 logical CPUs)."""
    s = mirrored2
    with s.scope():
        mw = idist.Variable(np.array([1.0, 2.0], np.float32))
        opt = idist.optimizers.SGD(0.1)
    xs = s.experimental_distribute_values_from_function(
        lambda c: np.array([[1.0, 2.0], [3.0, 4.0]][c.replica_id_in_sync_group], np.float32)
    )

    def step(xr: np.ndarray) -> np.ndarray:
        with idist.GradientTape() as t:
            loss = np.sum((mw * xr - 1.0) ** 2) / 2.0
        g = t.gradient(loss, mw)
        opt.apply_gradients([(g, mw)])
        return g

    r = s.run(step, args=(xs,))
    assert_close(r.values[0], [0.0, 6.0])
    assert_close(r.values[1], [6.0, 28.0])
    assert_close(np.asarray(mw), [0.3999999761581421, -1.4000000953674316])


def test_numpy_shape_functions_do_not_read_a_variable(mirrored2: idist.MirroredStrategy) -> None:
    """Variables take NumPy's function protocol for the tape; np.shape/ndim/size still answer from the shape,
    as before, without a read (a sync-on-read variable with aggregation NONE cannot be read in the notebook)."""
    with mirrored2.scope():
        v = idist.Variable(
            np.zeros((2, 3), np.float32),
            synchronization=idist.VariableSynchronization.ON_READ,
            aggregation=idist.VariableAggregation.NONE,
        )
    assert (np.shape(v), np.ndim(v), np.size(v)) == ((2, 3), 2, 6)
    with pytest.raises(ValueError, match="VariableAggregation.NONE"):
        np.sum(v)  # a read, as TF's
