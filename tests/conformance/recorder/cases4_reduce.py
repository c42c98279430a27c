"""Round 4: the kinds of reduce_op (ReduceOp, names in any case, bad strings, ints, None, enums,
VariableAggregation) for reduce / all_reduce / reduce_to / batch_reduce_to; reduce over a tuple of axes;
what replicas get back from merge_call."""
from cases3_common import SE, ST, c3

OPS = """
import enum
class E(enum.Enum):
    SUM = "SUM"
class Obj:
    pass
BAD = {"int": 1, "None": None, "obj": Obj(), "enum": E.SUM, "va_sum": idist.VariableAggregation.SUM}
STRS = {"BOGUS": "BOGUS", "lower": "sum", "Mean": "Mean", "op": idist.ReduceOp.SUM}
def err(f):
    try:
        return f()
    except Exception as e:
        return type(e).__name__
pr = strategy.experimental_distribute_values_from_function(
    lambda c: np.array([1.0, 2.0], np.float32) * np.float32(c.replica_id_in_sync_group + 1))
"""

APIS = {
    "reduce": "lambda op: np.asarray(strategy.reduce(op, pr, axis=None)).tolist()",
    "all_reduce": "lambda op: L(strategy.run(lambda: idist.get_replica_context().all_reduce(op, "
                  "np.array([1.0, 2.0], np.float32) * np.float32(idist.get_replica_context().replica_id_in_sync_group + 1))))",
    "reduce_to": "lambda op: L(strategy.extended.reduce_to(op, pr, pr))",
    "batch_reduce_to": "lambda op: [L(x) for x in strategy.extended.batch_reduce_to(op, [(pr, pr)])]",
}

for api, call in APIS.items():
    for key in ["M2", "OD", "CS2"]:
        c3(f"reduce_op.strings.{api}.{key}", ST if api == "reduce" else SE,
           f"{api}: reduce_op as a bad string, a lowercase or mixed-case name, a ReduceOp", OPS + f"""
call = {call}
result = {{k: err(lambda: call(op)) for k, op in STRS.items()}}
""", strategy=key)
        c3(f"reduce_op.not_a_reduce_op.{api}.{key}", ST if api == "reduce" else SE,
           f"{api}: reduce_op as an int, None, an object, another enum, a VariableAggregation (error class)", OPS + f"""
call = {call}
result = {{k: err(lambda: call(op)) for k, op in BAD.items()}}
""", strategy=key)

AX = """
def err(f):
    try:
        return f()
    except Exception as e:
        return type(e).__name__
pr = strategy.experimental_distribute_values_from_function(
    lambda c: np.arange(6, dtype=np.float32).reshape(2, 3) + np.float32(10 * c.replica_id_in_sync_group))
"""
for key in ["M1", "M2", "OD", "CS2"]:
    c3(f"reduce.axis_tuple.{key}", ST, "reduce with a tuple of axes (both, reversed, negative, one, empty) for SUM and MEAN",
       AX + """
out = {}
for name, ax in {"01": (0, 1), "10": (1, 0), "m10": (-1, 0), "0": (0,), "1": (1,), "none": ()}.items():
    for op in ["SUM", "MEAN"]:
        out[op + name] = err(lambda: np.asarray(strategy.reduce(op, pr, axis=ax)).tolist())
result = out
""", strategy=key)

for key in ["M2", "OD"]:
    c3(f"reduce.axis_tuple_errors.{key}", ST, "reduce with a list of axes, a repeated axis, an axis out of range, a float "
       "or a string axis (error classes)", AX + """
out = {}
for name, ax in {"list": [0, 1], "twice": (0, 0), "range": (0, 5), "float": 1.0, "str": "0"}.items():
    out[name] = err(lambda: np.asarray(strategy.reduce("SUM", pr, axis=ax)).tolist())
result = out
""", strategy=key)

c3("reduce.axis_tuple_int_mean.M2", ST, "reduce MEAN/SUM of int32 values over axis=(0, 1): value and dtype", """
pr = strategy.experimental_distribute_values_from_function(
    lambda c: np.arange(6, dtype=np.int32).reshape(2, 3) + np.int32(c.replica_id_in_sync_group))
m = strategy.reduce("MEAN", pr, axis=(0, 1))
s = strategy.reduce("SUM", pr, axis=(0, 1))
result = {"mean": float(np.asarray(m)), "mean_dtype": str(np.asarray(m).dtype), "sum": int(np.asarray(s)),
          "sum_dtype": str(np.asarray(s).dtype)}
""")

c3("reduce.axis_tuple_plain_value.M2", ST, "reduce of a non-distributed (2, 3) value over axis=(0, 1): SUM counts every replica", """
result = {op: np.asarray(strategy.reduce(op, np.ones((2, 3), np.float32), axis=(0, 1))).tolist() for op in ["SUM", "MEAN"]}
""")

for key in ["M2", "OD"]:
    c3(f"merge_call.returns.{key}", ST, "what replicas get from merge_call: a plain array, a Python int/float/None, "
       "the PerReplica it received, a dict mixing both, kwargs as PerReplica, a plain argument as merge_fn sees it", """
def rid():
    return np.float32(idist.get_replica_context().replica_id_in_sync_group)
def kinds(x):
    return [isinstance(x, idist.PerReplica), L(x) if isinstance(x, idist.DistributedValues) else np.asarray(x).tolist()]
def fn():
    c = idist.get_replica_context()
    return {
        "plain": c.merge_call(lambda s: np.float32(5.0)),
        "py_int": c.merge_call(lambda s: 7),
        "py_float": c.merge_call(lambda s: 2.5),
        "none": c.merge_call(lambda s: None),
        "received": c.merge_call(lambda s, x: x, args=(rid(),)),
        "mixed": c.merge_call(lambda s, x: {"x": x, "b": 2.0}, args=(rid(),)),
        "kwargs": c.merge_call(lambda s, k=None: k, kwargs={"k": rid() * 10}),
        "seen": c.merge_call(lambda s, x: np.float32(isinstance(x, idist.PerReplica)), args=(np.float32(3.0),)),
    }
r = strategy.run(fn)
result = {"plain": kinds(r["plain"]), "py_int": [type(r["py_int"]).__name__, r["py_int"]],
          "py_float": [type(r["py_float"]).__name__, isinstance(r["py_float"], idist.PerReplica)],
          "none": r["none"] is None, "received": kinds(r["received"]), "mixed_x": kinds(r["mixed"]["x"]),
          "mixed_b": isinstance(r["mixed"]["b"], idist.PerReplica), "kwargs": kinds(r["kwargs"]), "seen": kinds(r["seen"])}
""", strategy=key)

    c3(f"merge_call.bad_args.{key}", ST, "merge_call with args not iterable, args as a list, kwargs not a mapping", """
def err(f):
    try:
        f()
        return "ok"
    except Exception as e:
        return type(e).__name__
def call(args=(), kwargs=None):
    return strategy.run(lambda: idist.get_replica_context().merge_call(lambda s, *a, **k: np.float32(len(a) + len(k)),
                                                                        args=args, kwargs=kwargs))
result = {"scalar": err(lambda: call(args=np.float32(1.0))), "list": err(lambda: call(args=[np.float32(1.0)])),
          "kw_list": err(lambda: call(kwargs=[("x", 1)])), "kw_none": err(lambda: call(kwargs=None))}
""", strategy=key)
