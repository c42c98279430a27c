"""Round 8: ``strategy.extended`` inside ``merge_fn`` (reduce_to / broadcast_to / batch_reduce_to return
what the notebook's StrategyExtended returns: a plain value for one destination device, a Mirrored for
several; lists and None refused) and ``batch_reduce_to`` of variables in the notebook."""
from cases3_common import SE
from cases3_common import c3 as _c3

VAR_SUB = [(", tf.distribute.Variable)", ", tf.Variable)")]


def c3(*a, tf_sub=(), **kw):
    _c3(*a, tf_sub=VAR_SUB + list(tf_sub), **kw)


# Inside merge_fn: D(s, x) describes a result (kind and values), T(...) catches the exception class.
HEAD = '''
def D(s, x):
    if isinstance(x, list):
        return [D(s, y) for y in x]
    return {"mirrored": isinstance(x, idist.Mirrored), "dv": isinstance(x, idist.DistributedValues),
            "var": isinstance(x, idist.Variable),
            "local": [float(np.asarray(c)) for c in s.experimental_local_results(x)]}
def T(f):
    try:
        return f()
    except Exception as e:
        return type(e).__name__
with strategy.scope():
    v = idist.Variable(np.float32(1.0))
def run_merge(merge_fn):
    def fn():
        ctx = idist.get_replica_context()
        pr = np.float32(ctx.replica_id_in_sync_group) + np.float32(1.0)
        return ctx.merge_call(merge_fn, args=(pr, v))
    return list(strategy.experimental_local_results(strategy.run(fn)))[0]
'''

PROBES = {
    "reduce_to": '''
def merge_fn(s, pr, v):
    e = s.extended
    return {"str": T(lambda: D(s, e.reduce_to("SUM", pr, "CPU:0"))),
            "pr": T(lambda: D(s, e.reduce_to("SUM", pr, pr))),
            "var": T(lambda: D(s, e.reduce_to("SUM", pr, v))),
            "mean_var": T(lambda: D(s, e.reduce_to("MEAN", pr, v)))}
''',
    "reduce_to_variable": '''
def merge_fn(s, pr, v):
    e = s.extended
    return {"mean_is_v": T(lambda: e.reduce_to("MEAN", v, v) is v),
            "sum": T(lambda: D(s, e.reduce_to("SUM", v, v)))}
''',
    "reduce_to_plain": '''
def merge_fn(s, pr, v):
    e = s.extended
    return {"sum": T(lambda: D(s, e.reduce_to("SUM", np.float32(1.0), v))),
            "mean": T(lambda: D(s, e.reduce_to("MEAN", np.float32(1.0), v)))}
''',
    "refused": '''
def merge_fn(s, pr, v):
    e = s.extended
    return {"reduce_to_list": T(lambda: D(s, e.reduce_to("SUM", pr, ["CPU:0", "CPU:1"]))),
            "broadcast_list": T(lambda: D(s, e.broadcast_to(np.float32(2.0), ["CPU:0"]))),
            "broadcast_none": T(lambda: D(s, e.broadcast_to(np.float32(2.0), None))),
            "batch_list": T(lambda: D(s, e.batch_reduce_to("SUM", [(pr, ["CPU:0"])])))}
''',
    "broadcast_to": '''
def merge_fn(s, pr, v):
    e = s.extended
    return {"str": T(lambda: D(s, e.broadcast_to(np.float32(2.0), "CPU:0"))),
            "var": T(lambda: D(s, e.broadcast_to(np.float32(2.0), v))),
            "pr": T(lambda: D(s, e.broadcast_to(np.float32(2.0), pr)))}
''',
    "batch_reduce_to": '''
def merge_fn(s, pr, v):
    e = s.extended
    return {"pairs": T(lambda: D(s, e.batch_reduce_to("SUM", [(pr, v), (pr, "CPU:0")]))),
            "mean_var": T(lambda: D(s, e.batch_reduce_to("MEAN", [(v, v)])))}
''',
}

for name, probe in PROBES.items():
    for key in ["M1", "M2", "OD", "CS2"]:
        c3(f"r8.merge_fn.{name}.{key}", SE, f"extended.{name.split('_to')[0]}_to... inside merge_fn: kinds and values of the results",
           HEAD + probe + "result = run_merge(merge_fn)\n", strategy=key)

c3("r8.merge_fn.reduce_to_none.M1", SE, "reduce_to(SUM, value, None) inside merge_fn (one replica): ValueError", HEAD + '''
def merge_fn(s, pr, v):
    return T(lambda: D(s, s.extended.reduce_to("SUM", pr, None)))
result = run_merge(merge_fn)
''', strategy="M1")
c3("r8.merge_fn.reduce_to_none.OD", SE, "reduce_to(SUM, value, None) inside merge_fn (OneDevice): the value handed back", HEAD + '''
def merge_fn(s, pr, v):
    return T(lambda: D(s, s.extended.reduce_to("SUM", pr, None)))
result = run_merge(merge_fn)
''', strategy="OD")

# -- batch_reduce_to of a variable, in the notebook --------------------------------------------------
for key in ["M1", "M2", "CS2"]:
    c3(f"r8.batch_reduce_to.variable.{key}", SE, "extended.batch_reduce_to(op, [(v, v), (v, 'CPU:0')]) of a variable in the notebook: MEAN and SUM", """
def D(x):
    return {"is_v": x is v, "mirrored": isinstance(x, idist.Mirrored), "var": isinstance(x, idist.Variable), "local": L(x)}
with strategy.scope():
    v = idist.Variable(np.float32(1.0))
out = {}
for op in ["MEAN", "SUM"]:
    try:
        out[op] = [D(x) for x in strategy.extended.batch_reduce_to(op, [(v, v), (v, "CPU:0")])]
    except Exception as e:
        out[op] = type(e).__name__
result = out
""", strategy=key)
