"""Round 4: experimental_distribute_values_from_function returning nests (dict, tuple, list, nested),
inconsistent structures across replicas, run's args/kwargs of the wrong kind."""
from cases3_common import ST, c3

DESC = """
def desc(x):
    if isinstance(x, idist.DistributedValues):
        return ["PR" if isinstance(x, idist.PerReplica) else "DV", [desc(c) for c in x.values]]
    if isinstance(x, (tuple, list)):
        return [type(x).__name__, [desc(c) for c in x]]
    if isinstance(x, dict):
        return {k: desc(v) for k, v in x.items()}
    if x is None or isinstance(x, (str, bool)):
        return x
    return np.asarray(x).tolist()
"""

for key in ["M1", "M2", "OD"]:
    c3(f"values_fn.dict.{key}", ST, "value_fn returning a dict: a dict of PerReplica; what run receives and returns; "
       "experimental_local_results", DESC + """
v = strategy.experimental_distribute_values_from_function(
    lambda c: {"a": np.float32(c.replica_id_in_sync_group), "b": np.float32(10.0 * c.replica_id_in_sync_group)})
seen = strategy.run(lambda x: {k: isinstance(t, idist.DistributedValues) for k, t in x.items()}, args=(v,))
result = {"v": desc(v), "is_dict": isinstance(v, dict), "run": desc(strategy.run(lambda x: x, args=(v,))),
          "seen": seen, "local": desc(strategy.experimental_local_results(v))}
""", strategy=key)

    c3(f"values_fn.nests.{key}", ST, "value_fn returning a tuple, a list, a nested dict/tuple/list: nests of PerReplica", DESC + """
f = lambda c: np.float32(c.replica_id_in_sync_group)
out = {}
for name, vf in {"tuple": lambda c: (f(c), np.float32(1.0)), "list": lambda c: [f(c), f(c) + 5],
                 "nested": lambda c: {"x": (f(c), [np.float32(2.0)]), "y": {"z": f(c) * 3}},
                 "empty_dict": lambda c: {}, "empty_tuple": lambda c: ()}.items():
    v = strategy.experimental_distribute_values_from_function(vf)
    out[name] = {"v": desc(v), "run": desc(strategy.run(lambda x: x, args=(v,)))}
result = out
""", strategy=key)

    c3(f"values_fn.inconsistent.{key}", ST, "value_fn whose structure differs across replicas: dict vs tuple, other keys, "
       "other lengths, tuple vs list (error class, or the value)", DESC + """
def err(f):
    try:
        return desc(f())
    except Exception as e:
        return type(e).__name__
one = np.float32(1.0)
out = {}
for name, vf in {"dict_tuple": lambda c: {"a": one} if c.replica_id_in_sync_group == 0 else (one,),
                 "keys": lambda c: {"a": one} if c.replica_id_in_sync_group == 0 else {"b": one},
                 "len": lambda c: [one] * (1 + c.replica_id_in_sync_group),
                 "tuple_list": lambda c: (one,) if c.replica_id_in_sync_group == 0 else [one]}.items():
    out[name] = err(lambda: strategy.experimental_distribute_values_from_function(vf))
result = out
""", strategy=key)

c3("values_fn.leaf_then_nest.M2", ST, "value_fn giving a leaf on replica 0 and a tuple on replica 1 at the same place: "
   "a PerReplica holding both", DESC + """
v = strategy.experimental_distribute_values_from_function(
    lambda c: (np.float32(1.0), np.float32(2.0) if c.replica_id_in_sync_group == 0 else (np.float32(2.0),)))
result = desc(v)
""")

for key in ["M1", "M2", "OD"]:
    c3(f"run.args_kinds.{key}", ST, "run(fn, args=x) with x not a list or tuple (a float, an array, a dict, a string, None, "
       "a set) and with a list; kwargs not a mapping; kwargs None", DESC + """
def err(f):
    try:
        return desc(f())
    except Exception as e:
        return type(e).__name__
out = {}
for name, a in {"float": 1.0, "array": np.ones(2, np.float32), "dict": {"x": 1}, "str": "ab", "none": None, "set": {1},
                "list": [np.float32(1.0)], "tuple": (np.float32(1.0),)}.items():
    out["args_" + name] = err(lambda: strategy.run(lambda *x: x, args=a))
for name, k in {"list": [("x", 1)], "tuple": (), "str": "ab", "int": 1, "none": None}.items():
    out["kwargs_" + name] = err(lambda: strategy.run(lambda *a, **x: len(x), kwargs=k))
result = out
""", strategy=key)

c3("run.args_kinds.default", ST, "the default strategy's run with args not a list/tuple and kwargs not a mapping", """
def err(f):
    try:
        f()
        return "ok"
    except Exception as e:
        return type(e).__name__
d = idist.get_strategy()
result = {"float": err(lambda: d.run(lambda *x: x, args=1.0)), "none": err(lambda: d.run(lambda *x: x, args=None)),
          "list": err(lambda: d.run(lambda *x: x, args=[1])), "kw_list": err(lambda: d.run(lambda **x: x, kwargs=[("x", 1)]))}
""", strategy=None, helper=False)
