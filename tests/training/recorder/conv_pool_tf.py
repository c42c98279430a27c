"""TF 2.21 side of tests/training: run with a TensorFlow install (tensorflow-cpu==2.21.0), not by pytest."""
import numpy as np, tensorflow as tf, json
rng = np.random.default_rng(7)
x = rng.standard_normal((2, 6, 5, 3)).astype(np.float32)
f = rng.standard_normal((3, 2, 3, 4)).astype(np.float32)
out = {"x": x.tolist(), "f": f.tolist(), "conv": [], "pool": []}
for strides, pad in [(1, "VALID"), (2, "SAME"), ((2, 1), "SAME"), (1, "SAME")]:
    xt = tf.constant(x); fv = tf.Variable(f)
    with tf.GradientTape() as t:
        t.watch(xt)
        y = tf.nn.conv2d(xt, fv, strides=strides, padding=pad)
        loss = tf.reduce_sum(tf.sin(y))
    gx, gf = t.gradient(loss, [xt, fv])
    out["conv"].append({"strides": strides, "padding": pad, "y": y.numpy().tolist(), "gx": gx.numpy().tolist(), "gf": gf.numpy().tolist()})
for k, s, pad in [(2, 2, "VALID"), (3, 2, "SAME"), (2, 1, "VALID")]:
    xt = tf.constant(np.maximum(x, 0))  # ties at 0, as after a relu
    with tf.GradientTape() as t:
        t.watch(xt)
        y = tf.nn.max_pool2d(xt, k, s, pad)
        loss = tf.reduce_sum(tf.sin(y) + y)
    out["pool"].append({"k": k, "s": s, "padding": pad, "y": y.numpy().tolist(), "gx": t.gradient(loss, xt).numpy().tolist()})
import pathlib
json.dump(out, open(pathlib.Path(__file__).parents[1] / "data" / "conv_pool_tf.json", "w"))
import numpy as np, tensorflow as tf
w = np.array([[0.5, 2.0], [2.0, 2.0]], np.float32)
x = tf.constant(w[None, :, :, None])
with tf.GradientTape() as t:
    t.watch(x); y = tf.reduce_sum(tf.nn.max_pool2d(x, 2, 1, "SAME"))
print(t.gradient(y, x).numpy()[0, :, :, 0].tolist())
x = tf.constant(np.tile(w, (2, 3))[None, :, :, None])
with tf.GradientTape() as t:
    t.watch(x); y = tf.reduce_sum(tf.nn.max_pool2d(x, 2, 2, "VALID"))
print(t.gradient(y, x).numpy()[0, :, :, 0].tolist())
