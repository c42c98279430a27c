"""TF 2.21 side of tests/training: run with a TensorFlow install (tensorflow-cpu==2.21.0), not by pytest."""
import numpy as np, tensorflow as tf, keras
cpu = tf.config.list_physical_devices('CPU')[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()]*2)
s = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
y = np.array([0, 2, 1]); logits = np.array([[1., 2., 3.], [0.5, 0.1, -1.], [2., 2., 2.]], np.float32)
for red in ["sum_over_batch_size", "sum", None, "mean", "mean_with_sample_weight"]:
    r = s.run(lambda: keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=red)(y, logits, sample_weight=np.array([1., 0., 2.])))
    print("in run", red, [v.numpy().tolist() for v in r.values])
r = s.run(lambda: keras.losses.MeanSquaredError()(np.ones((3,2)), logits[:, :2])); print("mse in run", [v.numpy() for v in r.values])
r = s.run(lambda: keras.losses.mean_squared_error(np.ones((3,2)), logits[:, :2])); print("mse fn in run", [v.numpy() for v in r.values])
print("int cal", tf.nn.compute_average_loss(tf.constant([1,2])).dtype, tf.nn.compute_average_loss(tf.constant([1.,2.], tf.float64)).dtype)
r = s.run(lambda: keras.regularizers.L2(0.1)(tf.constant([1., 2.]))); print("l2 in run", [v.numpy() for v in r.values])
with s.scope():
    m = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3, kernel_regularizer=keras.regularizers.L2(0.1))]); m.set_weights([np.ones((4,3)), np.ones(3)])
r = s.run(lambda: tf.add_n(m.losses)); print("model.losses in run", [v.numpy() for v in r.values])
print(keras.losses.SparseCategoricalCrossentropy(from_logits=True)(np.array([[0],[2],[1]]), logits).numpy())
print("scce sw 2d", keras.losses.SparseCategoricalCrossentropy(from_logits=True)(y, logits, sample_weight=np.array([[1.], [0.], [2.]])).numpy())
print("no logits clip", keras.losses.SparseCategoricalCrossentropy()(np.array([0, 1]), np.array([[0., 1.], [0.5, 0.5]], np.float32)).numpy())
print("glorot", keras.initializers.GlorotUniform(seed=1)((2,2)).numpy())
print(keras.layers.Dense(3).get_config()["kernel_initializer"])
