"""TF 2.21 side of tests/training: run with a TensorFlow install (tensorflow-cpu==2.21.0), not by pytest."""
import numpy as np, tensorflow as tf, json
cpu = tf.config.list_physical_devices('CPU')[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()]*2)
def T(f):
    try:
        r = f()
        return tf.nest.map_structure(lambda v: None if v is None else np.asarray(v).tolist(), r)
    except Exception as e: return f"{type(e).__name__}: {str(e)[:160]}"
out = {}
w = tf.Variable([[1., 2.], [3., 4.]]); b = tf.Variable([0.5, -1.]); nt = tf.Variable(2., trainable=False); iv = tf.Variable(3)
x = np.array([[1., -1.], [2., 0.5], [0., 3.]], np.float32)
def g1():
    with tf.GradientTape() as t:
        y = tf.reduce_mean(tf.exp(x @ w + b) * 0.01) + tf.reduce_sum(w * w) * nt
    return t.gradient(y, [w, b, nt])
out["mixed"] = T(g1)
def g2():
    with tf.GradientTape() as t:
        y = x @ w
    return t.gradient(y, w)   # non-scalar target
out["nonscalar"] = T(g2)
def g3():
    with tf.GradientTape() as t:
        y = w * 2.
    t.gradient(y, w); return t.gradient(y, w)
out["twice"] = T(g3)
def g4():
    with tf.GradientTape(persistent=True) as t:
        y = tf.reduce_sum(w * w); z = tf.reduce_sum(y * b)
    return [t.gradient(y, w), t.gradient(z, [w, b])]
out["persistent"] = T(g4)
def g5():
    with tf.GradientTape() as t:
        y = tf.reduce_sum(w * 3.)
        with t.stop_recording():
            z = tf.reduce_sum(b * b)
        q = y + z
    return t.gradient(q, [w, b])
out["stop_recording"] = T(g5)
def g6():
    with tf.GradientTape() as t:
        y = tf.reduce_sum(w)
    return t.gradient(y, [w, b], unconnected_gradients=tf.UnconnectedGradients.ZERO)
out["unconnected_zero"] = T(g6)
def g7():
    with tf.GradientTape(watch_accessed_variables=False) as t:
        t.watch(b); y = tf.reduce_sum(w * 2.) + tf.reduce_sum(b * b)
    return t.gradient(y, [w, b])
out["no_auto_watch"] = T(g7)
def g8():
    c = tf.constant(3.)
    with tf.GradientTape() as t:
        t.watch(c); y = c * c * c
    return t.gradient(y, c)
out["watch_const"] = T(g8)
def g9():
    with tf.GradientTape() as t:
        y = tf.cast(iv, tf.float32) * 2.
    return t.gradient(y, iv)
out["int_var"] = T(g9)
def g10():
    with tf.GradientTape() as t:
        y = tf.reduce_sum(w * 2.)
    return t.gradient(y, w, output_gradients=tf.constant(3.))
out["output_gradients"] = T(g10)
def g11():
    with tf.GradientTape() as t:
        y1 = tf.reduce_sum(w); y2 = tf.reduce_sum(w * b)
    return t.gradient([y1, y2], w)
out["list_target"] = T(g11)
def g12():
    with tf.GradientTape() as t:
        y = tf.reduce_sum(w)
    return t.gradient(y, {"a": w, "b": [b]})
out["nested_sources"] = T(g12)
def g13():
    with tf.GradientTape() as t:
        h = x @ w
        y = tf.reduce_sum(tf.nn.relu(h - 3.))
    return t.gradient(y, [w, h])
out["intermediate"] = T(g13)
def g14():
    with tf.GradientTape() as t:
        y = tf.reduce_sum(tf.nn.relu(w - 2.))
    return t.gradient(y, w)
out["relu_at_zero"] = T(g14)
def g15():
    with tf.GradientTape() as t:
        y = tf.reduce_sum(tf.maximum(w, 2.))
    return t.gradient(y, w)
out["maximum_tie"] = T(g15)
def g16():
    with tf.GradientTape() as t: y = tf.reduce_sum(w)
    return t.gradient(y, [w, None])
out["none_source"] = T(g16)
def g17():
    with tf.GradientTape() as t: y = tf.reduce_sum(w[0] * 2.) + tf.reduce_sum(tf.concat([w, b[None]], 0))
    return t.gradient(y, [w, b])
out["slicing_concat"] = T(g17)
s = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
with s.scope():
    mw = tf.Variable([1., 2.]); opt = tf.keras.optimizers.SGD(0.1)
    so = tf.Variable(0., synchronization=tf.VariableSynchronization.ON_READ, aggregation=tf.VariableAggregation.SUM, trainable=False)
xs = s.experimental_distribute_values_from_function(lambda c: tf.constant([[1., 2.], [3., 4.]][c.replica_id_in_sync_group]))
def step(xr):
    with tf.GradientTape() as t:
        loss = tf.reduce_sum((mw * xr - 1.) ** 2) / 2.
    g = t.gradient(loss, mw)
    opt.apply_gradients([(g, mw)])
    return g
r = s.run(step, args=(xs,))
out["mirrored_step"] = {"grads": [v.numpy().tolist() for v in r.values], "after": mw.numpy().tolist()}
json.dump(out, open("/tmp/tf_tape.json", "w"), indent=1)  # copied by hand into tests/training/test_autodiff.py
print(json.dumps(out)[:3000])
