"""Round 2: variables of several shapes/dtypes, both contexts, sync-on-read metrics."""
from cases2_common import CS, PS, SE, ST, c2

SOR = "synchronization=idist.VariableSynchronization.ON_READ, aggregation=idist.VariableAggregation.{agg}"

# ---------------------------------------------------------------- sync-on-read metrics over several steps
for agg in ["SUM", "MEAN", "ONLY_FIRST_REPLICA"]:
    for key in ["M2", "M3"]:
        c2(f"sync_on_read.metric_steps.{agg}.{key}", SE,
           f"sync-on-read {agg} float32 metric: assign_add(i+1) in run for 3 steps; cross-replica read_value and local results after each step",
           f"""
           with strategy.scope():
               m = idist.Variable(np.float32(0.0), {SOR.format(agg=agg)})
           def fn():
               m.assign_add(np.float32(idist.get_replica_context().replica_id_in_sync_group) + np.float32(1.0))
               return np.float32(0.0)
           out = []
           for _ in range(3):
               strategy.run(fn)
               out.append([np.asarray(m.read_value()).tolist(), L(m)])
           result = out
           """, strategy=key)

c2("sync_on_read.vector_sum_metric.M3", SE, "sync-on-read SUM vector metric: assign_add([i, 1]) twice; read_value, np.asarray(var), local results", """
with strategy.scope():
    m = idist.Variable(np.zeros(2, np.float32), synchronization=idist.VariableSynchronization.ON_READ,
                       aggregation=idist.VariableAggregation.SUM)
def fn():
    i = np.float32(idist.get_replica_context().replica_id_in_sync_group)
    m.assign_add(np.array([i, 1.0], np.float32))
    return i
strategy.run(fn)
strategy.run(fn)
result = {"read": np.asarray(m.read_value()).tolist(), "asarray": np.asarray(m).tolist(), "local": L(m)}
""", strategy="M3")

c2("sync_on_read.int32_counter.M4", SE, "sync-on-read SUM int32 counter: assign_add(1) per replica for 3 steps -> 12; dtype kept", """
with strategy.scope():
    n = idist.Variable(np.int32(0), synchronization=idist.VariableSynchronization.ON_READ,
                       aggregation=idist.VariableAggregation.SUM)
def fn():
    n.assign_add(np.int32(1))
    return np.int32(0)
for _ in range(3):
    strategy.run(fn)
v = np.asarray(n.read_value())
result = {"value": v.tolist(), "dtype": v.dtype.name, "local": L(n)}
""", strategy="M4")

c2("sync_on_read.mean_assign_in_replica.M3", SE, "sync-on-read MEAN: replica-context assign(i * 3); cross-replica read is the mean (3.0)", """
with strategy.scope():
    m = idist.Variable(np.float32(0.0), synchronization=idist.VariableSynchronization.ON_READ,
                       aggregation=idist.VariableAggregation.MEAN)
def fn():
    m.assign(np.float32(idist.get_replica_context().replica_id_in_sync_group) * np.float32(3.0))
    return np.float32(0.0)
strategy.run(fn)
result = [np.asarray(m.read_value()).tolist(), L(m)]
""", strategy="M3")

c2("sync_on_read.reset_then_accumulate.M2", SE, "sync-on-read SUM: accumulate, cross-replica assign(0) resets every copy, accumulate again", """
with strategy.scope():
    m = idist.Variable(np.float32(0.0), synchronization=idist.VariableSynchronization.ON_READ,
                       aggregation=idist.VariableAggregation.SUM)
def fn():
    m.assign_add(np.float32(idist.get_replica_context().replica_id_in_sync_group) + np.float32(2.0))
    return np.float32(0.0)
strategy.run(fn)
before = np.asarray(m.read_value()).tolist()
m.assign(np.float32(0.0))
mid = L(m)
strategy.run(fn)
result = [before, mid, np.asarray(m.read_value()).tolist(), L(m)]
""")

c2("sync_on_read.read_in_run_returns_local.M3", SE, "sync-on-read SUM: inside run read_value() gives the replica's own copy", """
with strategy.scope():
    m = idist.Variable(np.float32(0.0), synchronization=idist.VariableSynchronization.ON_READ,
                       aggregation=idist.VariableAggregation.SUM)
def add():
    m.assign_add(np.float32(idist.get_replica_context().replica_id_in_sync_group) * np.float32(10.0))
    return np.float32(0.0)
def read():
    return m.read_value()
strategy.run(add)
result = L(strategy.run(read))
""", strategy="M3")

c2("sync_on_read.reduce_sum.M3", SE, "strategy.reduce('SUM', sync_on_read_MEAN_var): the cross-replica value of a MEAN sync-on-read var, summed?", """
with strategy.scope():
    m = idist.Variable(np.float32(0.0), synchronization=idist.VariableSynchronization.ON_READ,
                       aggregation=idist.VariableAggregation.MEAN)
def fn():
    m.assign(np.float32(idist.get_replica_context().replica_id_in_sync_group) + np.float32(1.0))
    return np.float32(0.0)
strategy.run(fn)
result = {"sum": np.asarray(strategy.reduce("SUM", m, axis=None)).tolist(),
          "mean": np.asarray(strategy.reduce("MEAN", m, axis=None)).tolist()}
""", strategy="M3")

c2("sync_on_read.cross_replica_assign_mean_vector.M2", SE, "sync-on-read MEAN vector: cross-replica assign([2, 4]) copies the value to every replica", """
with strategy.scope():
    m = idist.Variable(np.zeros(2, np.float32), synchronization=idist.VariableSynchronization.ON_READ,
                       aggregation=idist.VariableAggregation.MEAN)
m.assign(np.array([2.0, 4.0], np.float32))
result = [np.asarray(m.read_value()).tolist(), L(m)]
""")

c2("sync_on_read.cross_replica_assign_sum_int.M4", SE, "sync-on-read SUM int32: cross-replica assign(8) divides by 4 replicas", """
with strategy.scope():
    m = idist.Variable(np.int32(0), synchronization=idist.VariableSynchronization.ON_READ,
                       aggregation=idist.VariableAggregation.SUM)
m.assign(np.int32(8))
result = [np.asarray(m.read_value()).tolist(), L(m)]
""", strategy="M4")

c2("sync_on_read.cross_replica_assign_sub_sum_raises.M2", SE, "sync-on-read SUM: cross-replica assign_sub raises", """
with strategy.scope():
    m = idist.Variable(np.float32(4.0), synchronization=idist.VariableSynchronization.ON_READ,
                       aggregation=idist.VariableAggregation.SUM)
m.assign_sub(np.float32(1.0))
result = L(m)
""")

c2("sync_on_read.cross_replica_assign_add_mean.M2", SE, "sync-on-read MEAN: cross-replica assign_add(1)", """
with strategy.scope():
    m = idist.Variable(np.float32(4.0), synchronization=idist.VariableSynchronization.ON_READ,
                       aggregation=idist.VariableAggregation.MEAN)
m.assign_add(np.float32(1.0))
result = [np.asarray(m.read_value()).tolist(), L(m)]
""")

c2("sync_on_read.one_device.SUM", ST, "OneDeviceStrategy sync-on-read SUM variable: assign_add in run 2 steps, read", """
with strategy.scope():
    m = idist.Variable(np.float32(0.0), synchronization=idist.VariableSynchronization.ON_READ,
                       aggregation=idist.VariableAggregation.SUM)
def fn():
    m.assign_add(np.float32(2.5))
    return np.float32(0.0)
strategy.run(fn)
strategy.run(fn)
result = [np.asarray(m.read_value()).tolist(), L(m)]
""", strategy="OD")

c2("sync_on_read.central_storage.SUM", CS, "CentralStorageStrategy sync-on-read SUM variable: assign_add(i+1) in run, read", """
with strategy.scope():
    m = idist.Variable(np.float32(0.0), synchronization=idist.VariableSynchronization.ON_READ,
                       aggregation=idist.VariableAggregation.SUM)
def fn():
    m.assign_add(np.float32(idist.get_replica_context().replica_id_in_sync_group) + np.float32(1.0))
    return np.float32(0.0)
strategy.run(fn)
result = np.asarray(m.read_value()).tolist()
""", strategy="CS2")

# ---------------------------------------------------------------- mirrored variables: shapes / dtypes / contexts
VARS = [
    ("float64_vector", "np.array([1.0, 2.0, 3.0], np.float64)", "np.array([0.5, 0.5, 0.5], np.float64)"),
    ("int32_matrix", "np.array([[1, 2], [3, 4]], np.int32)", "np.array([[1, 1], [1, 1]], np.int32)"),
    ("int64_scalar", "np.int64(10)", "np.int64(3)"),
    ("float32_3d", "np.zeros((2, 1, 2), np.float32)", "np.ones((2, 1, 2), np.float32)"),
]
for name, init, delta in VARS:
    c2(f"variables.cross_replica_ops.{name}.M3", SE,
       f"mirrored {name}: cross-replica assign_add / assign_sub / assign; dtype and shape; local results after each",
       f"""
       with strategy.scope():
           v = idist.Variable({init})
       out = {{"dtype": v.dtype.name, "shape": list(v.shape)}}
       v.assign_add({delta})
       out["after_add"] = L(v)
       v.assign_sub({delta} * 2)
       out["after_sub"] = L(v)
       v.assign({delta})
       out["after_assign"] = L(v)
       out["read_dtype"] = np.asarray(v.read_value()).dtype.name
       result = out
       """, strategy="M3")
    c2(f"variables.replica_sum_assign_add.{name}.M2", SE,
       f"mirrored {name} with aggregation SUM: assign_add(delta) in run on 2 replicas adds 2*delta; then assign_sub in run",
       f"""
       with strategy.scope():
           v = idist.Variable({init}, aggregation=idist.VariableAggregation.SUM)
       def add():
           v.assign_add({delta})
           return v.read_value()
       def sub():
           v.assign_sub({delta})
           return v.read_value()
       a = L(strategy.run(add))
       b = L(strategy.run(sub))
       result = {{"add": a, "sub": b, "final": L(v)}}
       """)

for agg in ["SUM", "MEAN", "ONLY_FIRST_REPLICA"]:
    c2(f"variables.read_value_in_run_after_assign.{agg}.M3", SE,
       f"mirrored {agg}: in run, assign(i+1) then read_value() in the same fn: each replica sees the aggregated value",
       f"""
       with strategy.scope():
           v = idist.Variable(np.float32(0.0), aggregation=idist.VariableAggregation.{agg})
       def fn():
           v.assign(np.float32(idist.get_replica_context().replica_id_in_sync_group) + np.float32(1.0))
           return v.read_value()
       result = {{"run": L(strategy.run(fn)), "var": L(v)}}
       """, strategy="M3")
    c2(f"variables.assign_add_return_value_in_run.{agg}.M2", SE,
       f"mirrored {agg}: the value returned by assign_add inside run (np.asarray of it)",
       f"""
       with strategy.scope():
           v = idist.Variable(np.float32(1.0), aggregation=idist.VariableAggregation.{agg})
       def fn():
           r = v.assign_add(np.float32(idist.get_replica_context().replica_id_in_sync_group) + np.float32(1.0))
           return np.asarray(r)
       result = {{"run": L(strategy.run(fn)), "var": L(v)}}
       """)

c2("variables.cross_replica_assign_return.M2", SE, "cross-replica assign on a mirrored variable: local results of the returned value", """
with strategy.scope():
    v = idist.Variable(np.float32(1.0))
r = v.assign(np.float32(5.0))
r2 = v.assign_add(np.float32(1.0))
result = [L(r), L(r2)]
""")

c2("variables.cross_replica_assign_read_value_false.M2", SE, "cross-replica assign_add(..., read_value=False) on a mirrored variable returns None? value updated", """
with strategy.scope():
    v = idist.Variable(np.float32(1.0))
r = v.assign_add(np.float32(2.0), read_value=False)
result = {"none": r is None, "v": L(v)}
""")

c2("variables.passed_as_run_arg.M2", SE, "a mirrored SUM variable passed as a run argument (not captured): assign_add through the argument, read back", """
with strategy.scope():
    v = idist.Variable(np.float32(0.0), aggregation=idist.VariableAggregation.SUM)
def fn(var):
    var.assign_add(np.float32(idist.get_replica_context().replica_id_in_sync_group) + np.float32(1.0))
    return var.read_value()
result = {"run": L(strategy.run(fn, args=(v,))), "var": L(v)}
""")

c2("variables.passed_as_run_kwarg.M3", SE, "a mirrored MEAN variable passed as a run kwarg: assign(i) through it; mean of 0,1,2 is 1", """
with strategy.scope():
    v = idist.Variable(np.float32(5.0), aggregation=idist.VariableAggregation.MEAN)
def fn(var=None):
    var.assign(np.float32(idist.get_replica_context().replica_id_in_sync_group))
    return var.read_value()
result = {"run": L(strategy.run(fn, kwargs={"var": v})), "var": L(v)}
""", strategy="M3")

c2("variables.arg_and_captured_same.M2", SE, "a variable passed as an argument and also captured: `var is v` inside run", """
with strategy.scope():
    v = idist.Variable(np.float32(0.0))
def fn(var):
    return np.float32(1.0) if var is v else np.float32(0.0)
result = L(strategy.run(fn, args=(v,)))
""")

c2("variables.sync_on_read_passed_as_arg.M2", SE, "a sync-on-read SUM variable passed as a run argument: assign_add through the argument", """
with strategy.scope():
    m = idist.Variable(np.float32(0.0), synchronization=idist.VariableSynchronization.ON_READ,
                       aggregation=idist.VariableAggregation.SUM)
def fn(var):
    var.assign_add(np.float32(idist.get_replica_context().replica_id_in_sync_group) + np.float32(3.0))
    return var.read_value()
result = {"run": L(strategy.run(fn, args=(m,))), "read": np.asarray(m.read_value()).tolist()}
""")

c2("variables.value_and_numpy.M2", SE, "mirrored variable in cross-replica context: value(), numpy(), np.asarray()", """
with strategy.scope():
    v = idist.Variable(np.float32(2.5))
result = [np.asarray(v.value()).tolist(), np.asarray(v.numpy()).tolist(), np.asarray(v).tolist()]
""")

c2("variables.float_of_mirrored_variable.M2", SE, "float(mirrored_variable) in cross-replica context (TF: TypeError)", """
with strategy.scope():
    v = idist.Variable(np.float32(2.5))
result = float(v)
""")

c2("variables.float_of_one_device_variable", SE, "float(variable) under OneDeviceStrategy", """
with strategy.scope():
    v = idist.Variable(np.float32(2.5))
result = float(v)
""", strategy="OD")

c2("variables.arithmetic_in_run.M2", SE, "arithmetic with a mirrored variable inside run: v * x + 1 where x is the replica id", """
with strategy.scope():
    v = idist.Variable(np.array([1.0, 2.0], np.float32))
def fn():
    x = np.float32(idist.get_replica_context().replica_id_in_sync_group)
    return np.asarray(v * x + np.float32(1.0))
result = L(strategy.run(fn))
""")

c2("variables.arithmetic_cross_replica.M2", SE, "arithmetic with a mirrored variable in cross-replica context: v + 1, v * v, -v", """
with strategy.scope():
    v = idist.Variable(np.array([1.0, -2.0], np.float32))
result = [np.asarray(v + np.float32(1.0)).tolist(), np.asarray(v * v).tolist(), np.asarray(-v).tolist()]
""")

c2("variables.only_first_replica_steps.M3", SE, "mirrored ONLY_FIRST_REPLICA: assign_add(i+1) in run 3 times -> replica 0's update (+1) each step", """
with strategy.scope():
    v = idist.Variable(np.float32(0.0), aggregation=idist.VariableAggregation.ONLY_FIRST_REPLICA)
def fn():
    v.assign_add(np.float32(idist.get_replica_context().replica_id_in_sync_group) + np.float32(1.0))
    return np.float32(0.0)
out = []
for _ in range(3):
    strategy.run(fn)
    out.append(L(v))
result = out
""", strategy="M3")

c2("variables.mean_assign_sub_vector.M4", SE, "mirrored MEAN vector: assign_sub([i, 2i]) in run on 4 replicas subtracts the mean", """
with strategy.scope():
    v = idist.Variable(np.array([10.0, 10.0], np.float32), aggregation=idist.VariableAggregation.MEAN)
def fn():
    i = np.float32(idist.get_replica_context().replica_id_in_sync_group)
    v.assign_sub(np.array([i, 2.0 * i], np.float32))
    return np.float32(0.0)
strategy.run(fn)
result = L(v)
""", strategy="M4")

c2("variables.cross_replica_assign_then_read_in_run.M3", SE, "cross-replica assign([1,2]) then read in run: every replica sees it", """
with strategy.scope():
    v = idist.Variable(np.zeros(2, np.float32))
v.assign(np.array([1.0, 2.0], np.float32))
result = L(strategy.run(lambda: v.read_value()))
""", strategy="M3")

c2("variables.cross_replica_assign_int64_array_to_float.M2", SE, "assign an int64 NumPy array to a float32 mirrored variable in cross-replica context (TF converts it)", """
with strategy.scope():
    v = idist.Variable(np.zeros(2, np.float32))
v.assign(np.array([1, 2], np.int64))
result = L(v)
""")

c2("variables.replica_assign_shape_mismatch_raises.M2", SE, "assign of a (3,) value to a (2,) SUM variable inside run raises", """
with strategy.scope():
    v = idist.Variable(np.zeros(2, np.float32), aggregation=idist.VariableAggregation.SUM)
def fn():
    v.assign(np.zeros(3, np.float32))
    return np.float32(0.0)
strategy.run(fn)
result = L(v)
""")

c2("variables.bool_variable.M2", SE, "a bool mirrored variable: cross-replica assign(False), dtype", """
with strategy.scope():
    v = idist.Variable(np.array([True, False]))
v.assign(np.array([False, False]))
result = {"dtype": v.dtype.name, "local": L(v)}
""")

c2("variables.named_variable.M2", SE, "Variable(..., name='w') in scope: name of the variable and of its copies", """
with strategy.scope():
    v = idist.Variable(np.float32(1.0), name="w")
result = {"name": v.name, "copies": [c.name for c in strategy.experimental_local_results(v)]}
""")

c2("variables.trainable_mirrored.M2", SE, "trainable of mirrored variables: default True, trainable=False kept", """
with strategy.scope():
    a = idist.Variable(np.float32(1.0))
    b = idist.Variable(np.float32(1.0), trainable=False)
result = [a.trainable, b.trainable]
""")

c2("variables.aggregation_attribute_values.M2", SE, "aggregation attribute of mirrored variables created with each aggregation (enum names)", """
with strategy.scope():
    vs = [idist.Variable(np.float32(0.0), aggregation=a) for a in
          [idist.VariableAggregation.NONE, idist.VariableAggregation.SUM, idist.VariableAggregation.MEAN,
           idist.VariableAggregation.ONLY_FIRST_REPLICA]]
result = [v.aggregation.name for v in vs]
""")

c2("variables.one_device_vector_ops", ST, "OneDeviceStrategy variable: assign_add in run, assign_sub in cross-replica, device", """
with strategy.scope():
    v = idist.Variable(np.array([1.0, 2.0], np.float32))
def fn():
    v.assign_add(np.array([1.0, 1.0], np.float32))
    return v.read_value()
r = strategy.run(fn)
v.assign_sub(np.array([0.5, 0.5], np.float32))
result = {"run": np.asarray(r).tolist(), "v": np.asarray(v.read_value()).tolist(), "device": v.device,
          "local": L(v)}
""", strategy="OD1")

c2("variables.central_storage_mean_steps", CS, "CentralStorage MEAN variable: assign_add(i) in run twice on 3 replicas (mean 1 per step)", """
with strategy.scope():
    v = idist.Variable(np.float32(0.0), aggregation=idist.VariableAggregation.MEAN)
def fn():
    v.assign_add(np.float32(idist.get_replica_context().replica_id_in_sync_group))
    return v.read_value()
r = strategy.run(fn)
strategy.run(fn)
result = {"first_run": L(r), "v": L(v)}
""", strategy="CS3")
