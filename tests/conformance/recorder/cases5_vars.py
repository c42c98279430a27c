"""Round 5: the components of MirroredVariable/SyncOnReadVariable are variables; synchronization as TF reports it."""
from cases3_common import ST
from cases3_common import c3 as _c3

VAR_SUB = [(", tf.distribute.Variable)", ", tf.Variable)")]


def c3(*a, tf_sub=(), **kw):
    _c3(*a, tf_sub=VAR_SUB + list(tf_sub), **kw)

for key in ["M1", "M2", "M3"]:
    c3(f"r5.component.is_variable.{key}", ST, "each component of a MirroredVariable is a variable: isinstance, in scope, value_container, attributes", """
with strategy.scope():
    v = idist.Variable(np.float32(1.0), name="w")
comps = strategy.experimental_local_results(v)
c = comps[-1]
result = {"n": len(comps), "is_var": [isinstance(x, idist.Variable) for x in comps],
          "is_mirrored_var": [isinstance(x, idist.MirroredVariable) for x in comps],
          "in_scope": [strategy.extended.variable_created_in_scope(x) for x in comps],
          "container": [strategy.extended.value_container(x) is v for x in comps],
          "values_same": [a is b for a, b in zip(v.values, comps)],
          "name": c.name, "device": c.device, "trainable": c.trainable,
          "sync": c.synchronization.name, "agg": c.aggregation.name, "shape": list(c.shape),
          "read": np.asarray(c.read_value()).tolist(), "value": np.asarray(c.value()).tolist(), "numpy": c.numpy().tolist()}
""", strategy=key)

c3("r5.component.sync_on_read.M2", ST, "components of a SyncOnReadVariable(SUM) are variables reporting ON_READ/SUM, not trainable", """
with strategy.scope():
    v = idist.Variable(np.float32(1.0), synchronization=idist.VariableSynchronization.ON_READ,
                       aggregation=idist.VariableAggregation.SUM)
comps = strategy.experimental_local_results(v)
result = {"is_var": [isinstance(x, idist.Variable) for x in comps], "sync": [x.synchronization.name for x in comps],
          "agg": [x.aggregation.name for x in comps], "trainable": [x.trainable for x in comps],
          "in_scope": [strategy.extended.variable_created_in_scope(x) for x in comps],
          "names": [x.name for x in comps]}
""")

for key in ["M1", "M2", "M3"]:
    c3(f"r5.component.assign_one_copy.{key}", ST, "assign/assign_add/assign_sub on the last component change only that copy; the variable reads as its first copy", """
with strategy.scope():
    v = idist.Variable(np.float32(1.0))
c = strategy.experimental_local_results(v)[-1]
r = c.assign(np.float32(5.0))
a = L(v)
c.assign_add(np.float32(2.0))
b = L(v)
c.assign_sub(np.float32(4.0))
none = c.assign(np.float32(3.0), read_value=False)
result = {"ret_is_var": isinstance(r, idist.Variable), "ret_value": np.asarray(r).tolist(), "after_assign": a,
          "after_add": b, "after_sub_assign": L(v), "none": none is None,
          "read": float(np.asarray(v.read_value())), "asarray": float(np.asarray(v))}
""", strategy=key)

c3("r5.component.assign_sync_on_read_sum.M2", ST, "assigning one component of a SyncOnReadVariable(SUM) changes only that copy; the variable reads as the sum", """
with strategy.scope():
    v = idist.Variable(np.float32(1.0), synchronization=idist.VariableSynchronization.ON_READ,
                       aggregation=idist.VariableAggregation.SUM)
c = strategy.experimental_local_results(v)[1]
c.assign(np.float32(5.0))
result = {"copies": L(v), "read": float(np.asarray(v.read_value()))}
""")

c3("r5.component.assign_wrong_shape.M2", ST, "assigning a value of another shape to a component fails", """
with strategy.scope():
    v = idist.Variable(np.zeros(2, np.float32))
c = strategy.experimental_local_results(v)[1]
try:
    c.assign(np.zeros(3, np.float32))
    result = "no error"
except Exception as e:
    result = type(e).__name__
""")

c3("r5.component.array_values.M2", ST, "components of a vector variable: shape, dtype name and values after an update in run", """
with strategy.scope():
    v = idist.Variable(np.array([1.0, 2.0], np.float32), aggregation=idist.VariableAggregation.SUM)
strategy.run(lambda: v.assign_add(np.array([1.0, 1.0], np.float32)))
comps = strategy.experimental_local_results(v)
result = {"shapes": [list(c.shape) for c in comps], "values": [c.numpy().tolist() for c in comps],
          "dtype_f32": [np.dtype(c.dtype) == np.float32 for c in comps]}
""", tf_sub=[("np.dtype(c.dtype)", "c.dtype.as_numpy_dtype")])

for key in ["OD", "CS2"]:
    c3(f"r5.component.single.{key}", ST, "OneDevice/CentralStorage: the local result of a variable is the variable itself", """
with strategy.scope():
    v = idist.Variable(np.float32(1.0))
comps = strategy.experimental_local_results(v)
result = {"n": len(comps), "same": comps[0] is v, "is_var": isinstance(comps[0], idist.Variable),
          "is_dv": isinstance(v, idist.DistributedValues), "in_scope": strategy.extended.variable_created_in_scope(comps[0])}
""", strategy=key)

for key in ["M2", "OD", "CS2"]:
    c3(f"r5.sync_reported.{key}", ST, "synchronization/aggregation a variable reports: default, AUTO, ON_WRITE, ON_READ, ON_READ+MEAN, SUM", """
out = []
for kw in [{}, {"synchronization": idist.VariableSynchronization.AUTO},
           {"synchronization": idist.VariableSynchronization.ON_WRITE},
           {"synchronization": idist.VariableSynchronization.ON_READ},
           {"synchronization": idist.VariableSynchronization.ON_READ, "aggregation": idist.VariableAggregation.MEAN},
           {"aggregation": idist.VariableAggregation.SUM}]:
    with strategy.scope():
        v = idist.Variable(np.float32(1.0), **kw)
    c = strategy.experimental_local_results(v)[0]
    out.append([v.synchronization.name, v.aggregation.name, c.synchronization.name, v.trainable])
result = out
""", strategy=key)

c3("r5.sync_reported.default", ST, "the default strategy's variables report AUTO by default", """
v = idist.Variable(np.float32(1.0))
w = idist.Variable(np.float32(1.0), synchronization=idist.VariableSynchronization.ON_WRITE)
result = [v.synchronization.name, v.aggregation.name, w.synchronization.name]
""", strategy=None)
