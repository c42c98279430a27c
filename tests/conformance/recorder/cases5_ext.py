"""Round 5: extended.update's results; reduce_to/batch_reduce_to/broadcast_to return types; default strategy devices."""
from cases3_common import SE
from cases3_common import c3 as _c3

VAR_SUB = [(", idist.Variable)", ", tf.Variable)"), (", tf.distribute.Variable)", ", tf.Variable)")]


def c3(*a, tf_sub=(), **kw):
    _c3(*a, tf_sub=VAR_SUB + list(tf_sub), **kw)

UPD = """
with strategy.scope():
    v = idist.Variable(np.float32(1.0))
def D(r):
    if isinstance(r, (tuple, list)):
        return [D(x) for x in r]
    if r is None:
        return None
    return {"mv": isinstance(r, idist.MirroredVariable), "m": isinstance(r, idist.Mirrored),
            "dv": isinstance(r, idist.DistributedValues), "var": isinstance(r, idist.Variable),
            "same": r is v, "vals": L(r)}
"""

for key in ["M1", "M2", "OD", "CS2"]:
    for g in [True, False]:
        c3(f"r5.update.assign_result.{key}.group_{g}", SE, f"extended.update(v, fn returning x.assign_add(...), group={g}): what it returns", UPD + f"""
r = strategy.extended.update(v, lambda x, y: x.assign_add(y), args=(np.float32(1.0),), group={g})
result = {{"r": D(r), "v": L(v)}}
""", strategy=key)
    c3(f"r5.update.kinds.{key}", SE, "extended.update with fn returning a value, None, a tuple, the variable, assign(read_value=False); group=True and False", UPD + """
out = {}
for g in [True, False]:
    out[str(g)] = [D(strategy.extended.update(v, lambda x: x * np.float32(2.0), group=g)),
                   D(strategy.extended.update(v, lambda x: None, group=g)),
                   D(strategy.extended.update(v, lambda x: (x + np.float32(1.0), x * np.float32(3.0)), group=g)),
                   D(strategy.extended.update(v, lambda x: x, group=g)),
                   D(strategy.extended.update(v, lambda x: x.assign(np.float32(7.0), read_value=False), group=g))]
result = out
""", strategy=key, tf_sub=[("x * np.float32(2.0)", "x * 2.0"), ("x + np.float32(1.0)", "x + 1.0"), ("x * np.float32(3.0)", "x * 3.0")])

c3("r5.update.default", SE, "default strategy: extended.update group=True/False with fn returning assign, a tuple, None", """
v = idist.Variable(np.float32(1.0))
e = idist.get_strategy().extended
a = e.update(v, lambda x: x.assign_add(np.float32(1.0)))
b = e.update(v, lambda x: x.assign_add(np.float32(1.0)), group=False)
c = e.update(v, lambda x: (x.read_value(), None), group=False)
d = e.update(v, lambda x: None, group=False)
result = {"a": [isinstance(a, idist.Variable), float(np.asarray(a))], "b": [type(b).__name__, len(b), float(np.asarray(b[0]))],
          "c": [type(c).__name__, len(c), float(np.asarray(c[0][0])), c[1]], "d": list(d)}
""", strategy=None)

RT = """
with strategy.scope():
    v = idist.Variable(np.float32(1.0))
pr = strategy.run(lambda: np.float32(idist.get_replica_context().replica_id_in_sync_group) + np.float32(1.0))
def D(r):
    if isinstance(r, list):
        return [D(x) for x in r]
    return {"m": isinstance(r, idist.Mirrored), "pr": isinstance(r, idist.PerReplica),
            "dv": isinstance(r, idist.DistributedValues), "mv": isinstance(r, idist.MirroredVariable),
            "vals": L(r), "devs": [x.device for x in strategy.experimental_local_results(r)]}
"""
RT_SUB = [("np.float32(tf.distribute.get_replica_context().replica_id_in_sync_group) + np.float32(1.0)",
           "tf.cast(tf.distribute.get_replica_context().replica_id_in_sync_group, tf.float32) + 1.0")]

for key in ["M1", "M2", "OD", "CS2"]:
    c3(f"r5.reduce_to.destinations.{key}", SE, "reduce_to(SUM, run result) to a variable, a device string, the run result: types, values, devices", RT + """
result = {"var": D(strategy.extended.reduce_to("SUM", pr, v)),
          "str": D(strategy.extended.reduce_to("SUM", pr, "CPU:0")),
          "str1": D(strategy.extended.reduce_to("SUM", pr, "/job:localhost/replica:0/task:0/device:CPU:1")),
          "pr": D(strategy.extended.reduce_to("SUM", pr, pr))}
""", strategy=key, tf_sub=RT_SUB)
    c3(f"r5.broadcast_to.destinations.{key}", SE, "broadcast_to a variable, a device string, a run result: types, values, devices", RT + """
result = {"var": D(strategy.extended.broadcast_to(np.float32(3.0), v)),
          "str": D(strategy.extended.broadcast_to(np.float32(3.0), "CPU:1")),
          "pr": D(strategy.extended.broadcast_to(np.float32(3.0), pr))}
""", strategy=key, tf_sub=RT_SUB + [("np.float32(3.0)", "tf.constant(3.0)")])
    c3(f"r5.batch_reduce_to.destinations.{key}", SE, "batch_reduce_to(SUM, [(pr, v), (pr, 'CPU:0'), (pr, pr)]): types and values", RT + """
result = D(strategy.extended.batch_reduce_to("SUM", [(pr, v), (pr, "CPU:0"), (pr, pr)]))
""", strategy=key, tf_sub=RT_SUB)
    c3(f"r5.reduce_to.mean_variable.{key}", SE, "reduce_to(MEAN, the variable, destinations) hands the variable back", RT + """
result = [strategy.extended.reduce_to("MEAN", v, d) is v for d in [v, "CPU:0", pr]]
""", strategy=key, tf_sub=RT_SUB)
    c3(f"r5.destinations_list.{key}", SE, "a list of device strings as destinations: reduce_to, broadcast_to, batch_reduce_to", RT + """
out = []
for f in [lambda: strategy.extended.reduce_to("SUM", pr, ["CPU:0", "CPU:1"]),
          lambda: strategy.extended.reduce_to("MEAN", pr, ("CPU:0",)),
          lambda: strategy.extended.broadcast_to(np.float32(1.0), ["CPU:0", "CPU:1"]),
          lambda: strategy.extended.batch_reduce_to("SUM", [(pr, ["CPU:0", "CPU:1"])])]:
    try:
        f()
        out.append("ok")
    except Exception as e:
        out.append(type(e).__name__)
result = out
""", strategy=key, tf_sub=RT_SUB)
    c3(f"r5.broadcast_to.none.{key}", SE, "broadcast_to(value, None)", """
try:
    strategy.extended.broadcast_to(np.float32(1.0), None)
    result = "ok"
except Exception as e:
    result = type(e).__name__
""", strategy=key)

for key in ["M2", "CS2"]:
    c3(f"r5.reduce_to.plain_value.{key}", SE, "reduce_to with a plain value: SUM refused, MEAN hands the value back (any destination)", RT + """
out = []
for op, d in [("SUM", v), ("SUM", "CPU:0"), ("MEAN", v), ("MEAN", "CPU:1"), ("MEAN", None)]:
    try:
        r = strategy.extended.reduce_to(op, np.float32(2.0), d)
        out.append([isinstance(r, idist.DistributedValues), float(np.asarray(r))])
    except Exception as e:
        out.append(type(e).__name__)
result = out
""", strategy=key, tf_sub=RT_SUB + [("np.float32(2.0)", "tf.constant(2.0)")])

c3("r5.reduce_to.none_destination.M1", SE, "reduce_to(SUM, run result, None) on one replica fails with ValueError", RT + """
try:
    strategy.extended.reduce_to("SUM", pr, None)
    result = "ok"
except Exception as e:
    result = type(e).__name__
""", strategy="M1", tf_sub=RT_SUB)

c3("r5.reduce_to.none_destination.OD", SE, "OneDevice: reduce_to(SUM, value, None) and batch_reduce_to with None hand the value back", RT + """
a = strategy.extended.reduce_to("SUM", pr, None)
b = strategy.extended.batch_reduce_to("SUM", [(pr, None)])
result = [float(np.asarray(a)), [float(np.asarray(x)) for x in b]]
""", strategy="OD", tf_sub=RT_SUB)

c3("r5.reduce_to.sum_mirrored.M2", SE, "reduce_to(SUM) of a MirroredVariable / a Mirrored value fails (its copies are already equal)", RT + """
m = strategy.extended.broadcast_to(np.float32(5.0), v)
out = []
for val in [v, m]:
    try:
        strategy.extended.reduce_to("SUM", val, v)
        out.append("ok")
    except Exception as e:
        out.append(type(e).__name__)
result = out
""", tf_sub=RT_SUB + [("np.float32(5.0)", "tf.constant(5.0)")])

c3("r5.reduce_to.sync_on_read.M2", SE, "reduce_to(SUM) of a SyncOnReadVariable onto the mirrored variable: a Mirrored sum", """
with strategy.scope():
    v = idist.Variable(np.float32(1.0))
    s = idist.Variable(np.float32(1.0), synchronization=idist.VariableSynchronization.ON_READ,
                       aggregation=idist.VariableAggregation.SUM)
r = strategy.extended.reduce_to("SUM", s, v)
result = [isinstance(r, idist.Mirrored), L(r)]
""")

c3("r5.default.devices", SE, "default strategy: extended.worker_devices / parameter_devices raise RuntimeError", """
e = idist.get_strategy().extended
out = []
for f in [lambda: e.worker_devices, lambda: e.parameter_devices]:
    try:
        f()
        out.append("ok")
    except Exception as ex:
        out.append(type(ex).__name__)
result = out
""", strategy=None)

c3("r5.default.reduce_broadcast", SE, "default strategy: reduce_to/batch_reduce_to hand values back; list destinations fail; broadcast_to not implemented", """
e = idist.get_strategy().extended
out = [float(np.asarray(e.reduce_to("SUM", np.float32(2.0), "CPU:0"))),
       [float(np.asarray(x)) for x in e.batch_reduce_to("SUM", [(np.float32(3.0), None)])]]
for f in [lambda: e.reduce_to("SUM", np.float32(2.0), ["CPU:0"]),
          lambda: e.broadcast_to(np.float32(2.0), None),
          lambda: e.broadcast_to(np.float32(2.0), "CPU:0")]:
    try:
        f()
        out.append("ok")
    except Exception as ex:
        out.append(type(ex).__name__)
result = out
""", strategy=None)
