"""Round 2: optimizers (Keras SGD/Adam vs idist.optimizers) in replica and cross-replica context."""
from cases2_common import CS, SE, ST, c2

GRAD_I1 = "np.float32(idist.get_replica_context().replica_id_in_sync_group) + np.float32(1.0)"


TFG = [("opt.apply_gradients([(g, v)])", "opt.apply_gradients([(tf.convert_to_tensor(g), v)])")]


def _replica_steps(id, what, opt_ctor, init, grad_expr, key, steps=3, seed=SE):
    c2(id, seed, what, f"""
    with strategy.scope():
        v = idist.Variable({init})
        opt = {opt_ctor}
    def fn():
        i = np.float32(idist.get_replica_context().replica_id_in_sync_group)
        g = {grad_expr}
        opt.apply_gradients([(g, v)])
        return i
    out = []
    for _ in range({steps}):
        strategy.run(fn)
        out.append(L(v))
    result = out
    """, strategy=key, tf_sub=TFG)


for key in ["M2", "M3", "M4"]:
    _replica_steps(f"optimizer.sgd.replica_scalar_3steps.{key}",
                   f"SGD(0.1) in replica context on {key}, gradient i+1 (summed), 3 steps",
                   "idist.optimizers.SGD(0.1)", "np.float32(1.0)", "i + np.float32(1.0)", key)
_replica_steps("optimizer.sgd.replica_matrix.M2", "SGD(0.05) on a 2x2 variable, gradient ones*(i+1), 2 steps",
               "idist.optimizers.SGD(0.05)", "np.ones((2, 2), np.float32)",
               "np.ones((2, 2), np.float32) * (i + np.float32(1.0))", "M2", 2)
_replica_steps("optimizer.sgd_momentum.replica.M3", "SGD(0.1, momentum=0.5) in replica context on 3 replicas, 3 steps",
               "idist.optimizers.SGD(0.1, momentum=0.5)", "np.float32(2.0)", "i", "M3")
_replica_steps("optimizer.sgd_nesterov.replica.M2", "SGD(0.1, momentum=0.9, nesterov=True) in replica context, 3 steps",
               "idist.optimizers.SGD(0.1, momentum=0.9, nesterov=True)", "np.float32(1.0)", "i + np.float32(1.0)", "M2")
_replica_steps("optimizer.sgd_nesterov.replica_vector.M4", "SGD(0.01, momentum=0.8, nesterov=True) on a vector, 4 replicas, 2 steps",
               "idist.optimizers.SGD(learning_rate=0.01, momentum=0.8, nesterov=True)",
               "np.array([1.0, -1.0, 0.5], np.float32)", "np.array([1.0, 2.0, 3.0], np.float32) * i", "M4", 2)
_replica_steps("optimizer.adam.replica_scalar.M2", "Adam(0.1) in replica context on 2 replicas, gradient i+1 (sum 3), 3 steps",
               "idist.optimizers.Adam(0.1)", "np.float32(1.0)", "i + np.float32(1.0)", "M2")
_replica_steps("optimizer.adam.replica_vector.M4", "Adam(0.01) on a vector, 4 replicas, gradient [i, -i, 1], 2 steps",
               "idist.optimizers.Adam(learning_rate=0.01)", "np.array([0.0, 1.0, 2.0], np.float32)",
               "np.array([1.0, -1.0, 0.0], np.float32) * i + np.array([0.0, 0.0, 1.0], np.float32)", "M4", 2)
_replica_steps("optimizer.adam.replica_kwargs.M3", "Adam(learning_rate=0.05, beta_1=0.5, beta_2=0.9, epsilon=1e-3), 3 replicas, 3 steps",
               "idist.optimizers.Adam(learning_rate=0.05, beta_1=0.5, beta_2=0.9, epsilon=1e-3)", "np.float32(0.5)",
               "i - np.float32(1.0)", "M3")
_replica_steps("optimizer.sgd.mirrored1", "SGD(0.1, momentum=0.9) on MirroredStrategy(['CPU:0']), 2 steps",
               "idist.optimizers.SGD(0.1, momentum=0.9)", "np.float32(1.0)", "i + np.float32(1.0)", "M1", 2)
_replica_steps("optimizer.adam.mirrored1", "Adam(0.1) on MirroredStrategy(['CPU:0']), 2 steps",
               "idist.optimizers.Adam(0.1)", "np.float32(1.0)", "i + np.float32(1.0)", "M1", 2)
_replica_steps("optimizer.sgd.float64_variable.M2", "SGD(0.1) on a float64 variable with float64 gradients",
               "idist.optimizers.SGD(0.1)", "np.float64(1.0)", "np.float64(i) + np.float64(0.5)", "M2", 2)
_replica_steps("optimizer.sgd.central_storage2", "CentralStorageStrategy (2 compute devices): SGD(0.1) applied in run, 2 steps",
               "idist.optimizers.SGD(0.1)", "np.float32(1.0)", "i + np.float32(1.0)", "CS2", 2, CS)
_replica_steps("optimizer.sgd_momentum.central_storage3", "CentralStorageStrategy (3 compute devices): SGD(0.1, momentum=0.9) in run, 3 steps",
               "idist.optimizers.SGD(0.1, momentum=0.9)", "np.array([1.0, 2.0], np.float32)",
               "np.array([1.0, 1.0], np.float32) * i", "CS3", 3, CS)
_replica_steps("optimizer.adam.central_storage2", "CentralStorageStrategy: Adam(0.1) applied in run, 2 steps",
               "idist.optimizers.Adam(0.1)", "np.float32(1.0)", "i + np.float32(1.0)", "CS2", 2, CS)
_replica_steps("optimizer.adam.one_device", "OneDeviceStrategy: Adam(0.1) applied in run, 3 steps",
               "idist.optimizers.Adam(0.1)", "np.array([1.0, 2.0], np.float32)", "np.array([1.0, -2.0], np.float32)", "OD", 3, ST)
_replica_steps("optimizer.sgd_momentum.one_device", "OneDeviceStrategy: SGD(0.1, momentum=0.9) applied in run, 3 steps",
               "idist.optimizers.SGD(0.1, momentum=0.9)", "np.float32(1.0)", "np.float32(1.0)", "OD", 3, ST)


def _cross_steps(id, what, opt_ctor, init, grads, key):
    c2(id, SE, what + " (apply_gradients outside strategy.scope())", f"""
    with strategy.scope():
        v = idist.Variable({init})
        opt = {opt_ctor}
    out = []
    for g in {grads}:
        opt.apply_gradients([(g, v)])
        out.append(L(v))
    result = out
    """, strategy=key, tf_sub=TFG)
    c2(id + ".in_scope", SE, what + " (apply_gradients inside strategy.scope())", f"""
    with strategy.scope():
        v = idist.Variable({init})
        opt = {opt_ctor}
    out = []
    for g in {grads}:
        with strategy.scope():
            opt.apply_gradients([(g, v)])
        out.append(L(v))
    result = out
    """, strategy=key, tf_sub=TFG)


_cross_steps("optimizer.sgd_momentum.cross_replica.M3", "SGD(0.1, momentum=0.9) in cross-replica context, 3 steps",
             "idist.optimizers.SGD(0.1, momentum=0.9)", "np.float32(1.0)",
             "[np.float32(1.0), np.float32(2.0), np.float32(-1.0)]", "M3")
_cross_steps("optimizer.sgd_nesterov.cross_replica.M2", "SGD(0.2, momentum=0.5, nesterov=True) in cross-replica context, 3 steps",
             "idist.optimizers.SGD(0.2, momentum=0.5, nesterov=True)", "np.array([1.0, 0.0], np.float32)",
             "[np.array([1.0, 2.0], np.float32)] * 3", "M2")
_cross_steps("optimizer.adam.cross_replica.M2", "Adam(0.1) in cross-replica context, 3 steps (one update per call)",
             "idist.optimizers.Adam(0.1)", "np.float32(1.0)", "[np.float32(3.0), np.float32(3.0), np.float32(-1.0)]", "M2")
_cross_steps("optimizer.adam.cross_replica.central_storage2", "CentralStorage: Adam(0.01) in cross-replica context, 2 steps",
             "idist.optimizers.Adam(0.01)", "np.array([1.0, 2.0, 3.0], np.float32)",
             "[np.array([1.0, 0.0, -1.0], np.float32)] * 2", "CS2")
_cross_steps("optimizer.sgd.cross_replica.one_device", "OneDevice: SGD(0.5) in cross-replica context, 2 steps",
             "idist.optimizers.SGD(0.5)", "np.float32(1.0)", "[np.float32(1.0), np.float32(0.5)]", "OD")

c2("optimizer.adam.two_variables.M2", SE, "Adam(0.1) with two (gradient, variable) pairs of different shapes on 2 replicas, 2 steps", """
with strategy.scope():
    w = idist.Variable(np.array([[1.0, 2.0], [3.0, 4.0]], np.float32))
    b = idist.Variable(np.float32(0.0))
    opt = idist.optimizers.Adam(0.1)
def fn():
    i = np.float32(idist.get_replica_context().replica_id_in_sync_group)
    opt.apply_gradients([(np.full((2, 2), i, np.float32), w), (i - np.float32(1.0), b)])
    return i
out = []
for _ in range(2):
    strategy.run(fn)
    out.append({"w": L(w), "b": L(b)})
result = out
""")

c2("optimizer.sgd.two_variables_shapes.M3", SE, "SGD(0.1, momentum=0.5): a vector and a matrix variable on 3 replicas, 2 steps", """
with strategy.scope():
    a = idist.Variable(np.array([1.0, 2.0, 3.0], np.float32))
    m = idist.Variable(np.zeros((2, 3), np.float32))
    opt = idist.optimizers.SGD(0.1, momentum=0.5)
def fn():
    i = np.float32(idist.get_replica_context().replica_id_in_sync_group)
    opt.apply_gradients([(np.array([1.0, 0.0, -1.0], np.float32) * i, a), (np.ones((2, 3), np.float32), m)])
    return i
for _ in range(2):
    strategy.run(fn)
result = {"a": L(a), "m": L(m)}
""", strategy="M3")

c2("optimizer.sgd.none_gradient_skipped.M2", SE, "SGD(0.1).apply_gradients with a None gradient for one variable: that variable is left alone", """
with strategy.scope():
    w = idist.Variable(np.float32(1.0))
    b = idist.Variable(np.float32(1.0))
    opt = idist.optimizers.SGD(0.1)
def fn():
    opt.apply_gradients([(None, w), (np.float32(1.0), b)])
    return np.float32(0.0)
strategy.run(fn)
result = {"w": L(w), "b": L(b)}
""")

c2("optimizer.sgd.all_none_gradients_raises", SE, "SGD.apply_gradients with only None gradients (cross-replica) raises ValueError", """
with strategy.scope():
    w = idist.Variable(np.float32(1.0))
    opt = idist.optimizers.SGD(0.1)
opt.apply_gradients([(None, w)])
result = L(w)
""")

c2("optimizer.sgd.momentum_out_of_range_raises", SE, "SGD(0.1, momentum=1.5) raises ValueError", """
opt = idist.optimizers.SGD(0.1, momentum=1.5)
result = "created"
""", strategy=None)

c2("optimizer.sgd.learning_rate_attribute", SE, "float(opt.learning_rate) of SGD(0.25) and Adam(learning_rate=0.5)", """
result = [float(idist.optimizers.SGD(0.25).learning_rate), float(idist.optimizers.Adam(learning_rate=0.5).learning_rate)]
""", strategy=None)

c2("optimizer.sgd.replica_then_cross_replica_momentum.M2", SE,
   "SGD(0.1, momentum=0.9): one step in run (sum of gradients 1+2=3), then one cross-replica step with gradient 1: the momentum slot is shared", """
with strategy.scope():
    v = idist.Variable(np.float32(1.0))
    opt = idist.optimizers.SGD(0.1, momentum=0.9)
def fn():
    i = np.float32(idist.get_replica_context().replica_id_in_sync_group)
    opt.apply_gradients([(i + np.float32(1.0), v)])
    return i
strategy.run(fn)
first = L(v)
opt.apply_gradients([(np.float32(1.0), v)])
result = [first, L(v)]
""")

c2("optimizer.adam.replica_then_cross.M2", SE,
   "Adam(0.1): one step in run (gradients 0.5 + 0.5, builds the slots), then one cross-replica step (gradient 1) outside scope: shared moments and step count", """
with strategy.scope():
    v = idist.Variable(np.float32(0.0))
    opt = idist.optimizers.Adam(0.1)
def fn():
    opt.apply_gradients([(np.float32(0.5), v)])
    return np.float32(0.0)
strategy.run(fn)
first = L(v)
opt.apply_gradients([(np.float32(1.0), v)])
result = [first, L(v)]
""", tf_sub=[("opt.apply_gradients([(np.float32(1.0), v)])", "opt.apply_gradients([(tf.constant(1.0), v)])")])

c2("optimizer.sgd.grad_shape_mismatch_raises", SE, "SGD.apply_gradients with a gradient of shape (3,) for a (2,) variable (cross-replica) raises", """
with strategy.scope():
    v = idist.Variable(np.array([1.0, 2.0], np.float32))
    opt = idist.optimizers.SGD(0.1)
opt.apply_gradients([(np.array([1.0, 2.0, 3.0], np.float32), v)])
result = L(v)
""")

c2("optimizer.sgd.variable_outside_scope_no_strategy", SE, "No strategy: SGD(0.1, momentum=0.9) on a plain variable, 3 steps", """
v = idist.Variable(np.array([1.0, 2.0], np.float32))
opt = idist.optimizers.SGD(0.1, momentum=0.9)
out = []
for _ in range(3):
    opt.apply_gradients([(np.array([1.0, -1.0], np.float32), v)])
    out.append(np.asarray(v.read_value()).tolist())
result = out
""", strategy=None)

c2("optimizer.adam.no_strategy", SE, "No strategy: Adam(0.01) on a plain variable, 3 steps", """
v = idist.Variable(np.float32(1.0))
opt = idist.optimizers.Adam(0.01)
out = []
for g in [1.0, 2.0, -3.0]:
    opt.apply_gradients([(np.float32(g), v)])
    out.append(float(np.asarray(v.read_value())))
result = out
""", strategy=None)

c2("optimizer.sgd.iterations.M2", SE, "SGD(0.1): int(opt.iterations) after 2 replica-context steps and 1 cross-replica step", """
with strategy.scope():
    v = idist.Variable(np.float32(1.0))
    opt = idist.optimizers.SGD(0.1)
def fn():
    opt.apply_gradients([(np.float32(1.0), v)])
    return np.float32(0.0)
strategy.run(fn)
strategy.run(fn)
opt.apply_gradients([(np.float32(1.0), v)])
result = {"iterations": int(np.asarray(opt.iterations)), "v": L(v)}
""")

# ---------------------------------------------------------------- training loops
c2("training_loop.linear_sgd.M2", ST,
   "custom training loop: y = 2x + 1 over a distributed dataset (batch 4 on 2 replicas), SGD(0.05), loss summed per replica / global batch, reduce SUM per step", """
x = np.arange(8, dtype=np.float32)
y = np.float32(2.0) * x + np.float32(1.0)
with strategy.scope():
    w = idist.Variable(np.float32(0.0))
    b = idist.Variable(np.float32(0.0))
    opt = idist.optimizers.SGD(0.05)
dd = strategy.experimental_distribute_dataset(idist.data.Dataset.from_tensor_slices((x, y)).batch(4))
def step(batch):
    xb, yb = batch
    xb = np.asarray(xb); yb = np.asarray(yb)
    wv = np.asarray(w.read_value()); bv = np.asarray(b.read_value())
    err = wv * xb + bv - yb
    gw = np.float32(np.sum(2.0 * err * xb) / 4.0)
    gb = np.float32(np.sum(2.0 * err) / 4.0)
    opt.apply_gradients([(gw, w), (gb, b)])
    return np.float32(np.sum(err * err) / 4.0)
losses = []
for epoch in range(2):
    for batch in dd:
        per = strategy.run(step, args=(batch,))
        losses.append(float(strategy.reduce("SUM", per, axis=None)))
result = {"losses": losses, "w": L(w), "b": L(b)}
""")

c2("training_loop.linear_adam.M4", ST,
   "custom training loop on 4 replicas with Adam(0.1): per-replica loss, reduce MEAN, 3 steps over a repeated dataset", """
x = np.array([[1.0], [2.0], [3.0], [4.0]], np.float32)
y = np.array([3.0, 5.0, 7.0, 9.0], np.float32)
with strategy.scope():
    w = idist.Variable(np.float32(1.0))
    opt = idist.optimizers.Adam(0.1)
dd = strategy.experimental_distribute_dataset(idist.data.Dataset.from_tensor_slices((x, y)).repeat(3).batch(4))
def step(xb, yb):
    xb = np.asarray(xb)[:, 0]; yb = np.asarray(yb)
    err = np.asarray(w.read_value()) * xb - yb
    opt.apply_gradients([(np.float32(np.sum(2.0 * err * xb) / 4.0), w)])
    return np.float32(np.mean(err * err))
losses = []
for xb, yb in dd:
    losses.append(float(strategy.reduce("MEAN", strategy.run(step, args=(xb, yb)), axis=None)))
result = {"losses": losses, "w": L(w)}
""", strategy="M4")

c2("training_loop.one_device_sgd", ST, "OneDeviceStrategy training loop: SGD(0.1) over from_tensor_slices batches, reduce SUM of each step's loss", """
x = np.array([1.0, 2.0, 3.0, 4.0], np.float32)
with strategy.scope():
    w = idist.Variable(np.float32(0.0))
    opt = idist.optimizers.SGD(0.1)
dd = strategy.experimental_distribute_dataset(idist.data.Dataset.from_tensor_slices(x).batch(2))
def step(xb):
    xb = np.asarray(xb)
    err = np.asarray(w.read_value()) * xb - xb
    opt.apply_gradients([(np.float32(np.sum(2.0 * err * xb) / 2.0), w)])
    return np.float32(np.sum(err * err))
losses = [float(strategy.reduce("SUM", strategy.run(step, args=(xb,)), axis=None)) for xb in dd]
result = {"losses": losses, "w": float(np.asarray(w.read_value()))}
""", strategy="OD")

c2("training_loop.central_storage_momentum", CS, "CentralStorageStrategy (3 compute devices) training loop with SGD(0.05, momentum=0.9), batch 6", """
x = np.arange(12, dtype=np.float32) / np.float32(4.0)
with strategy.scope():
    w = idist.Variable(np.float32(0.5))
    opt = idist.optimizers.SGD(0.05, momentum=0.9)
dd = strategy.experimental_distribute_dataset(idist.data.Dataset.from_tensor_slices(x).batch(6))
def step(xb):
    xb = np.asarray(xb)
    err = np.asarray(w.read_value()) * xb - np.float32(3.0) * xb
    opt.apply_gradients([(np.float32(np.sum(2.0 * err * xb) / 6.0), w)])
    return np.float32(np.sum(err * err) / 6.0)
losses = [float(strategy.reduce("SUM", strategy.run(step, args=(xb,)), axis=None)) for xb in dd]
result = {"losses": losses, "w": L(w)}
""", strategy="CS3")

c2("training_loop.metric_sync_on_read.M2", ST,
   "training-style loop with a sync-on-read SUM metric (total loss) and a MEAN metric, reset between epochs", """
with strategy.scope():
    total = idist.Variable(np.float32(0.0), synchronization=idist.VariableSynchronization.ON_READ,
                           aggregation=idist.VariableAggregation.SUM)
    count = idist.Variable(np.float32(0.0), synchronization=idist.VariableSynchronization.ON_READ,
                           aggregation=idist.VariableAggregation.SUM)
dd = strategy.experimental_distribute_dataset(idist.data.Dataset.range(8).map(lambda t: t * 2).batch(4))
def step(xb):
    xb = np.asarray(xb).astype(np.float32)
    total.assign_add(np.float32(np.sum(xb)))
    count.assign_add(np.float32(len(xb)))
    return np.float32(np.sum(xb))
epochs = []
for epoch in range(2):
    for xb in dd:
        strategy.run(step, args=(xb,))
    epochs.append([float(np.asarray(total.read_value())), float(np.asarray(count.read_value())), L(total)])
    total.assign(np.float32(0.0))
    count.assign(np.float32(0.0))
result = epochs
""")
