"""Round 8 leftovers: experimental_distribute_values_from_function keeping Python numbers as they are
(in the PerReplica, in run, in reduce), and ParameterServerStrategy.run / ClusterCoordinator.schedule with
``args`` that is not a list or tuple."""
from cases3_common import ST
from cases3_common import c3 as _c3
from cases6_ps import ps_case


def c3(*a, **kw):
    _c3(*a, **kw)


T = '''
def T(f):
    try:
        return f()
    except Exception as e:
        return type(e).__name__
def K(x):
    return [[type(c).__name__ if type(c).__name__ in ("int", "float", "bool") else "array", np.asarray(c).tolist()]
            for c in strategy.experimental_local_results(x)]
'''

VF = {"float": "1.5 + float(ctx.replica_id_in_sync_group)", "int": "2 + int(ctx.replica_id_in_sync_group)",
      "bool": "ctx.replica_id_in_sync_group == 0"}
for name, expr in VF.items():
    for key in ["M1", "M2", "OD", "CS2"]:
        c3(f"r8.values_fn.python_{name}.{key}", ST, f"value_fn returning a Python {name}: kept as it is (local results, in run, returned by run)", T + f"""
pr = strategy.experimental_distribute_values_from_function(lambda ctx: {expr})
result = {{"local": K(pr), "in_run": K(strategy.run(lambda x: type(x).__name__ == "{name}", args=(pr,))),
          "returned": K(strategy.run(lambda x: x, args=(pr,))),
          "plus_one": [np.asarray(c).tolist() for c in strategy.experimental_local_results(strategy.run(lambda x: x + 1, args=(pr,)))]}}
""", strategy=key)

for name in ["float", "int"]:
    for key in ["M1", "M2", "OD", "CS2"]:
        c3(f"r8.values_fn.python_{name}_reduce.{key}", ST, f"strategy.reduce of a PerReplica of Python {name}s: AttributeError on Mirrored, reduced on CentralStorage, the value on OneDevice", T + f"""
pr = strategy.experimental_distribute_values_from_function(lambda ctx: {VF[name]})
result = {{"sum": T(lambda: np.asarray(strategy.reduce("SUM", pr, axis=None)).tolist()),
          "mean": T(lambda: np.asarray(strategy.reduce("MEAN", pr, axis=None)).tolist())}}
""", strategy=key)

c3("r8.values_fn.python_in_nest.M2", ST, "value_fn returning a dict with a Python float and an array: the float stays a float", T + """
pr = strategy.experimental_distribute_values_from_function(
    lambda ctx: {"f": 0.5 * ctx.replica_id_in_sync_group, "a": np.full(2, ctx.replica_id_in_sync_group, np.float32)})
result = {"f": K(pr["f"]), "a": K(pr["a"]),
          "in_run": K(strategy.run(lambda d: type(d["f"]).__name__ == "float", args=(pr,)))}
""")

# -- ParameterServerStrategy: args not a list/tuple ---------------------------------------------------
PS_ARGS = '''
s = make_strategy(None)
coord = Coordinator(s)
out = {}
for name, a in [("float", 1.0), ("dict", {"x": 1.0}), ("str", "ab"), ("None", None), ("list", [np.float32(1.0)]),
                ("tuple", (np.float32(1.0),))]:
    try:
        r = coord.schedule(Step(lambda *x: s.run(lambda *y: np.float32(len(y)), args=a)))
        coord.join()
        out[name] = float(np.asarray(r.fetch()))
    except Exception as e:
        out[name] = ExcName(e)
result = out
'''
TF_HEAD = '''
Coordinator = tf.distribute.experimental.coordinator.ClusterCoordinator
Step = tf.function
def ExcName(e):
    # TF wraps the error raised while tracing the step; its class is kept
    return type(e).__name__
'''
ID_HEAD = '''
Coordinator = idist.experimental.coordinator.ClusterCoordinator
Step = lambda f: f
def ExcName(e):
    return type(e).__name__
'''
ps_case("r8.ps.run_args_not_a_list", "ParameterServerStrategy.run inside a scheduled step with args that is not a list/tuple: ValueError (list and tuple work)",
        ID_HEAD + PS_ARGS, TF_HEAD + PS_ARGS)

PS_SCHED = '''
s = make_strategy(None)
coord = Coordinator(s)
out = {}
for name, a in [("float", 1.0), ("dict", {"x": 1.0}), ("str", "ab"), ("None", None), ("list", [np.float32(1.0)])]:
    try:
        r = coord.schedule(Step(lambda *x: np.float32(len(x))), args=a)
        coord.join()
        out[name] = float(np.asarray(r.fetch()))
    except Exception as e:
        out[name] = ExcName(e)
try:
    coord.schedule(Step(lambda **k: np.float32(1.0)), kwargs=[1])
    coord.join()
    out["kwargs_list"] = "no error"
except Exception as e:
    out["kwargs_list"] = ExcName(e)
result = out
'''
ps_case("r8.ps.schedule_args_kinds", "ClusterCoordinator.schedule args kinds: a float fails (TypeError), a dict/str are iterated, None is no args; kwargs a list: TypeError",
        ID_HEAD + PS_SCHED, TF_HEAD + PS_SCHED)
