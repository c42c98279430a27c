"""TF 2.21 side of tests/training: run with a TensorFlow install (tensorflow-cpu==2.21.0), not by pytest."""
import numpy as np, tensorflow as tf
cpu = tf.config.list_physical_devices('CPU')[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()]*2)
def T(f):
    try: r = f(); return r.numpy().tolist() if hasattr(r, 'numpy') else r
    except Exception as e: return f"{type(e).__name__}: {str(e)[:150]}"
pel = tf.constant([1., 2., 3., 4.])
print("cal default", T(lambda: tf.nn.compute_average_loss(pel)))
print("cal gbs", T(lambda: tf.nn.compute_average_loss(pel, global_batch_size=8)))
print("cal sw", T(lambda: tf.nn.compute_average_loss(pel, sample_weight=tf.constant([1., 0., 2., 1.]))))
print("cal sw scalar", T(lambda: tf.nn.compute_average_loss(pel, sample_weight=0.5)))
print("cal rank0", T(lambda: tf.nn.compute_average_loss(tf.constant(3.))))
print("cal 2d", T(lambda: tf.nn.compute_average_loss(tf.ones((2,3)))))
print("cal gbs float", T(lambda: tf.nn.compute_average_loss(pel, global_batch_size=2.5)))
print("cal gbs 0", T(lambda: tf.nn.compute_average_loss(pel, global_batch_size=0)))
print("cal int", T(lambda: tf.nn.compute_average_loss(tf.constant([1,2]))))
print("srl", T(lambda: tf.nn.scale_regularization_loss(tf.constant([1., 2.]))))
s = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
with s.scope():
    print("cal in scope (cross-replica)", T(lambda: tf.nn.compute_average_loss(pel)))
    print("srl in scope", T(lambda: tf.nn.scale_regularization_loss(tf.constant(3.))))
    print("cal in scope gbs", T(lambda: tf.nn.compute_average_loss(pel, global_batch_size=8)))
r = s.run(lambda: tf.nn.compute_average_loss(pel)); print("cal in run", [v.numpy() for v in r.values])
r = s.run(lambda: tf.nn.scale_regularization_loss(tf.constant(3.))); print("srl in run", [v.numpy() for v in r.values])
r = s.run(lambda: tf.nn.compute_average_loss(tf.zeros((0,)))); print("cal empty in run", [v.numpy() for v in r.values])
import keras
y = np.array([0, 2, 1]); logits = np.array([[1., 2., 3.], [0.5, 0.1, -1.], [2., 2., 2.]], np.float32)
for red in ["sum_over_batch_size", "sum", None, "none", "mean", "mean_with_sample_weight"]:
    print("scce", red, T(lambda: keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=red)(y, logits)))
    print("scce sw", red, T(lambda: keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=red)(y, logits, sample_weight=np.array([1., 0., 2.]))))
print("scce probs", T(lambda: keras.losses.SparseCategoricalCrossentropy()(y, tf.nn.softmax(logits))))
print("mse", T(lambda: keras.losses.MeanSquaredError()(np.ones((3,2)), logits[:, :2])))
print("mse none", T(lambda: keras.losses.MeanSquaredError(reduction=None)(np.ones((3,2)), logits[:, :2])))
print("cce", T(lambda: keras.losses.CategoricalCrossentropy(from_logits=True)(np.eye(3)[y], logits)))
print("bce", T(lambda: keras.losses.BinaryCrossentropy(from_logits=True)(np.array([[1.],[0.],[1.]]), logits[:, :1])))
print("bad reduction", T(lambda: keras.losses.MeanSquaredError(reduction="auto")))
r = s.run(lambda: keras.losses.SparseCategoricalCrossentropy(from_logits=True)(y, logits)); print("scce in run", [v.numpy() for v in r.values])
print("l2", T(lambda: keras.regularizers.L2(0.01)(tf.constant([[1., 2.], [3., 4.]]))))
print("l2 default", keras.regularizers.L2().get_config())
print("l1", T(lambda: keras.regularizers.L1(0.01)(tf.constant([[1., -2.], [3., 4.]]))))
print("sparse xent fn", T(lambda: tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits)))
print("names", [v.path for v in keras.Sequential([keras.Input((4,)), keras.layers.Dense(3), keras.layers.Dense(2)]).variables])
m = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3, kernel_regularizer=keras.regularizers.L2(0.1))]); m.set_weights([np.ones((4,3)), np.ones(3)]); print("losses", [l.numpy() for l in m.losses])
# the cross-entropies' gradients (tests/training/test_nn_losses.py::test_cross_entropy_gradients_as_tf)
wt = np.array([1., 2., 3.], np.float32); lab = np.array([[0.5, 0.25, 0.75], [0., 0., 0.], [1., 2., 0.]], np.float32)
w, lv = tf.Variable(logits), tf.Variable(lab)
with tf.GradientTape() as t:
    s_ = tf.reduce_sum(tf.nn.sparse_softmax_cross_entropy_with_logits(y, w) * wt)
print("sparse xent grad", t.gradient(s_, w).numpy().tolist())
for axis in (-1, 0):
    with tf.GradientTape(persistent=True) as t:
        l_ = tf.nn.softmax_cross_entropy_with_logits(lv, w, axis=axis); s_ = tf.reduce_sum(l_ * wt)
    print("xent", axis, l_.numpy().tolist(), t.gradient(s_, w).numpy().tolist(), t.gradient(s_, lv).numpy().tolist())
