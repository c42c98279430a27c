"""Round 8: variables as replica code sees them -- a captured MirroredVariable/SyncOnReadVariable inside
``run`` (isinstance, ``values``, names, devices, attributes, ``experimental_local_results``), the same
for OneDevice/CentralStorage variables, and a variable created inside ``run``."""
from cases3_common import ST
from cases3_common import c3 as _c3

VAR_SUB = [(", tf.distribute.Variable)", ", tf.Variable)")]


def c3(*a, tf_sub=(), **kw):
    _c3(*a, tf_sub=VAR_SUB + list(tf_sub), **kw)


# R(out): one result per replica (run returns a dict whose leaves may differ per replica)
R = "def R(out):\n    return list(strategy.experimental_local_results(out))\n"

SOR = ("synchronization=idist.VariableSynchronization.ON_READ, aggregation=idist.VariableAggregation.SUM")

for key in ["M1", "M2", "M3"]:
    c3(f"r8.in_run.isinstance.{key}", ST, "a captured MirroredVariable inside run: isinstance MirroredVariable, DistributedValues, Variable", R + """
with strategy.scope():
    v = idist.Variable(np.float32(1.0), name="w")
def fn():
    return {"mv": isinstance(v, idist.MirroredVariable), "dv": isinstance(v, idist.DistributedValues),
            "var": isinstance(v, idist.Variable), "sor": isinstance(v, idist.SyncOnReadVariable),
            "mirrored": isinstance(v, idist.Mirrored), "per_replica": isinstance(v, idist.PerReplica)}
result = R(strategy.run(fn))
""", strategy=key)

c3("r8.in_run.isinstance_sync_on_read.M2", ST, "a captured SyncOnReadVariable inside run: isinstance SyncOnReadVariable, DistributedValues, Variable, not Mirrored", R + f"""
with strategy.scope():
    v = idist.Variable(np.float32(1.0), {SOR})
def fn():
    return {{"mv": isinstance(v, idist.MirroredVariable), "dv": isinstance(v, idist.DistributedValues),
            "var": isinstance(v, idist.Variable), "sor": isinstance(v, idist.SyncOnReadVariable),
            "mirrored": isinstance(v, idist.Mirrored)}}
result = R(strategy.run(fn))
""")

for key in ["M2", "M3"]:
    c3(f"r8.in_run.type_name.{key}", ST, "type(v).__name__ inside run: MirroredVariable / SyncOnReadVariable", R + f"""
with strategy.scope():
    v = idist.Variable(np.float32(1.0))
    s = idist.Variable(np.float32(1.0), {SOR})
result = R(strategy.run(lambda: {{"v": type(v).__name__, "s": type(s).__name__}}))
""", strategy=key)

for key in ["M1", "M2", "M3"]:
    c3(f"r8.in_run.values.{key}", ST, "v.values inside run: one component per replica, their names, devices, and isinstance Variable", R + """
with strategy.scope():
    v = idist.Variable(np.float32(1.0), name="w")
def fn():
    return {"n": len(v.values), "names": [c.name for c in v.values], "devices": [c.device for c in v.values],
            "are_vars": [isinstance(c, idist.Variable) for c in v.values],
            "are_mirrored": [isinstance(c, idist.MirroredVariable) for c in v.values],
            "primary_name": v._primary.name}
result = R(strategy.run(fn))
""", strategy=key)

c3("r8.in_run.values_read.M2", ST, "reading every component of v.values inside run (each replica reads all copies)", R + """
with strategy.scope():
    v = idist.Variable(np.array([1.0, 2.0], np.float32), name="w")
def fn():
    return {"read": [np.asarray(c.read_value()).tolist() for c in v.values],
            "numpy": [np.asarray(c.numpy()).tolist() for c in v.values]}
result = R(strategy.run(fn))
""")

c3("r8.in_run.values_sync_on_read.M2", ST, "v.values of a SyncOnReadVariable inside run: attributes of each component", R + f"""
with strategy.scope():
    v = idist.Variable(np.float32(1.0), name="s", {SOR})
def fn():
    return {{"n": len(v.values), "names": [c.name for c in v.values], "sync": [c.synchronization.name for c in v.values],
            "agg": [c.aggregation.name for c in v.values], "trainable": [c.trainable for c in v.values]}}
result = R(strategy.run(fn))
""")

for key in ["M1", "M2", "M3"]:
    c3(f"r8.in_run.attributes.{key}", ST, "a captured MirroredVariable's name, device, aggregation, synchronization, trainable, shape inside run", R + """
with strategy.scope():
    v = idist.Variable(np.zeros((2, 3), np.float32), name="w", aggregation=idist.VariableAggregation.MEAN)
def fn():
    return {"name": v.name, "device": v.device, "agg": v.aggregation.name, "sync": v.synchronization.name,
            "trainable": v.trainable, "shape": list(v.shape), "dtype_f32": bool(v.dtype == np.float32)}
result = R(strategy.run(fn))
""", strategy=key)

c3("r8.in_run.attributes_sync_on_read.M2", ST, "a captured SyncOnReadVariable's name, device and attributes inside run", R + f"""
with strategy.scope():
    v = idist.Variable(np.float32(1.0), name="s", {SOR})
def fn():
    return {{"name": v.name, "device": v.device, "agg": v.aggregation.name, "sync": v.synchronization.name,
            "trainable": v.trainable}}
result = R(strategy.run(fn))
""")

c3("r8.in_run.value_container_raises.M2", ST, "v.value_container() inside run: no such method (AttributeError); extended.value_container(v) is v", R + """
with strategy.scope():
    v = idist.Variable(np.float32(1.0))
def fn():
    try:
        v.value_container()
        vc = "no error"
    except Exception as e:
        vc = type(e).__name__
    return {"vc": vc, "ext": idist.get_strategy().extended.value_container(v) is v}
result = R(strategy.run(fn))
""")

for key in ["M1", "M2", "M3"]:
    c3(f"r8.in_run.local_results.{key}", ST, "strategy.experimental_local_results(v) inside run: the components (names, count, same objects as v.values)", R + """
with strategy.scope():
    v = idist.Variable(np.float32(1.0), name="w")
def fn():
    lr = strategy.experimental_local_results(v)
    return {"n": len(lr), "names": [c.name for c in lr], "same": [a is b for a, b in zip(lr, v.values)],
            "vars": [isinstance(c, idist.Variable) for c in lr]}
result = R(strategy.run(fn))
""", strategy=key)

c3("r8.in_run.distribute_strategy.M2", ST, "v.distribute_strategy inside run is the strategy; variable_created_in_scope(v) there", R + """
with strategy.scope():
    v = idist.Variable(np.float32(1.0))
def fn():
    return {"is": v.distribute_strategy is strategy,
            "in_scope": idist.get_strategy().extended.variable_created_in_scope(v)}
result = R(strategy.run(fn))
""")

c3("r8.in_run.float_raises.M2", ST, "float(v) of a captured MirroredVariable inside run: TypeError (as in the notebook)", R + """
with strategy.scope():
    v = idist.Variable(np.float32(1.0))
def fn():
    try:
        float(v)
        out = "no error"
    except Exception as e:
        out = type(e).__name__
    return {"out": out, "asarray": float(np.asarray(v))}
result = R(strategy.run(fn))
""")

c3("r8.in_run.values_after_update.M2", ST, "v.values read inside run after an assign_add (aggregation SUM) in the same run", R + """
with strategy.scope():
    v = idist.Variable(np.float32(1.0), aggregation=idist.VariableAggregation.SUM)
def fn():
    v.assign_add(np.float32(1.0))
    return {"values": [float(np.asarray(c.read_value())) for c in v.values], "v": float(np.asarray(v.read_value()))}
result = R(strategy.run(fn))
""")

for key in ["OD", "CS2"]:
    c3(f"r8.in_run.single.{key}", ST, "a OneDevice/CentralStorage variable inside run: a Variable, not distributed, no .values; name, device, sync", R + """
with strategy.scope():
    v = idist.Variable(np.float32(1.0), name="w")
def fn():
    try:
        n = len(v.values)
    except AttributeError:
        n = "AttributeError"
    return {"var": isinstance(v, idist.Variable), "dv": isinstance(v, idist.DistributedValues),
            "mv": isinstance(v, idist.MirroredVariable), "values": n, "name": v.name, "device": v.device,
            "sync": v.synchronization.name, "local_n": len(strategy.experimental_local_results(v)),
            "local_is_v": strategy.experimental_local_results(v)[0] is v, "float": float(v)}
result = R(strategy.run(fn))
""", strategy=key)

for key in ["OD", "CS2"]:
    c3(f"r8.in_run.single_type_name.{key}", ST, "type(v).__name__ of a OneDevice (ResourceVariable) / CentralStorage (AggregatingVariable) variable inside run", R + """
with strategy.scope():
    v = idist.Variable(np.float32(1.0))
result = R(strategy.run(lambda: {"t": type(v).__name__}))
""", strategy=key)

# -- merge_fn sees the same variable ---------------------------------------------------------------
c3("r8.merge_fn.variable.M2", ST, "inside merge_fn: the variable passed through merge_call is the MirroredVariable (isinstance, values, names)", R + """
with strategy.scope():
    v = idist.Variable(np.float32(1.0), name="w")
def merge_fn(s, x):
    return {"mv": isinstance(x, idist.MirroredVariable), "same": x is v, "n": len(x.values),
            "names": [c.name for c in x.values],
            "local": [float(np.asarray(c)) for c in s.experimental_local_results(x)]}
result = R(strategy.run(lambda: idist.get_replica_context().merge_call(merge_fn, args=(v,))))
""")

c3("r8.merge_fn.assign_component.M2", ST, "inside merge_fn, assigning component 1 of v changes that copy only", """
with strategy.scope():
    v = idist.Variable(np.float32(1.0))
def merge_fn(s, x):
    x.values[1].assign(np.float32(5.0))
    return 0
strategy.run(lambda: idist.get_replica_context().merge_call(merge_fn, args=(v,)))
result = L(v)
""")

# -- a variable created inside run ----------------------------------------------------------------
MADE = """
def fn():
    rid = idist.get_replica_context().replica_id_in_sync_group
    w = idist.Variable(np.float32(rid) + np.float32(1.0), name="made")
    return w
"""
for key in ["M1", "M2", "OD", "CS2"]:
    c3(f"r8.created_in_run.inside.{key}", ST, "a variable created inside run, seen inside the function: isinstance, type name, name, sync, value", R + """
def fn():
    rid = idist.get_replica_context().replica_id_in_sync_group
    w = idist.Variable(np.float32(rid) + np.float32(1.0), name="made")
    return {"mv": isinstance(w, idist.MirroredVariable), "dv": isinstance(w, idist.DistributedValues),
            "var": isinstance(w, idist.Variable), "type": type(w).__name__, "name": w.name, "device": w.device,
            "sync": w.synchronization.name, "agg": w.aggregation.name, "trainable": w.trainable,
            "value": float(np.asarray(w.read_value())),
            "in_scope": idist.get_strategy().extended.variable_created_in_scope(w)}
result = R(strategy.run(fn))
""", strategy=key)
    c3(f"r8.created_in_run.returned.{key}", ST, "run returning a variable created inside it: the variable (isinstance, name, value from replica 0), usable after", MADE + """
r = strategy.run(fn)
out = {"mv": isinstance(r, idist.MirroredVariable), "var": isinstance(r, idist.Variable),
       "dv": isinstance(r, idist.DistributedValues), "name": r.name, "sync": r.synchronization.name,
       "local": L(r), "in_scope": strategy.extended.variable_created_in_scope(r)}
r.assign_add(np.float32(1.0))
out["after_assign_add"] = L(r)
try:
    strategy.run(lambda: r.assign_add(np.float32(1.0)))
    out["run_assign_add"] = "ok"
except Exception as e:
    out["run_assign_add"] = type(e).__name__
out["after_run"] = L(r)
out["second_is_new"] = strategy.run(fn) is not r
result = out
""", strategy=key)

c3("r8.created_in_run.values.M2", ST, "a variable created inside run (M2): its values' names and devices inside the function", R + """
def fn():
    w = idist.Variable(np.float32(1.0), name="made")
    return {"n": len(w.values), "names": [c.name for c in w.values], "devices": [c.device for c in w.values]}
result = R(strategy.run(fn))
""")

c3("r8.created_in_run.reduce_sum.M2", ST, "strategy.reduce(SUM) of a MirroredVariable created inside run: AssertionError", MADE + """
r = strategy.run(fn)
try:
    result = np.asarray(strategy.reduce("SUM", r, axis=None)).tolist()
except Exception as e:
    result = type(e).__name__
""")
