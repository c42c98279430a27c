"""Empty Python lists take TF's default dtype (float32), not NumPy's (float64)."""

from __future__ import annotations

import numpy as np

import interdist as idist


def test_empty_list_variable_is_float32() -> None:
    # TF 2.21: tf.Variable([]).dtype is float32, shape (0,); tf.Variable([[]]) has shape (1, 0)
    v, w = idist.Variable([]), idist.Variable([[]])
    assert (v.dtype, tuple(v.shape)) == (np.dtype(np.float32), (0,))
    assert (w.dtype, tuple(w.shape)) == (np.dtype(np.float32), (1, 0))


def test_empty_list_in_a_strategy_and_a_dataset_is_float32(mirrored2: idist.MirroredStrategy) -> None:
    with mirrored2.scope():
        v = idist.Variable([])
    assert [np.asarray(c).dtype for c in mirrored2.experimental_local_results(v)] == [np.float32, np.float32]
    spec = idist.data.Dataset.from_tensor_slices([]).element_spec
    assert spec.dtype == np.float32 and spec.shape == ()
    # lists with values keep the rules they had: Python floats float32, ints int32, NumPy arrays their own
    assert idist.Variable([1.0]).dtype == np.float32 and idist.Variable([1]).dtype == np.int32
    assert idist.Variable(np.array([], np.float64)).dtype == np.float64
