"""Round 3: kinds of values (isinstance flags), experimental_local_results on every kind,
num_replicas_in_sync everywhere, scope re-entrancy/nesting, experimental_set_strategy, contexts."""
from cases3_common import CS, MD, SE, ST, c3

KINDS = """
def kinds(x):
    return {"per_replica": isinstance(x, idist.PerReplica), "mirrored": isinstance(x, idist.Mirrored),
            "dv": isinstance(x, idist.DistributedValues), "ndarray_or_scalar": not isinstance(x, idist.DistributedValues)}
"""

for key in ["M1", "M2", "M3", "OD", "CS2"]:
    c3(f"types.run_result_kind.{key}", ST, "kind of strategy.run's result (isinstance flags) for a replica-dependent and a constant return", KINDS + """
def f1(ctx):
    return np.float32(ctx.replica_id_in_sync_group)
a = strategy.run(lambda: np.float32(idist.get_replica_context().replica_id_in_sync_group))
b = strategy.run(lambda: np.float32(7.0))
result = {"dep": kinds(a), "const": kinds(b), "dep_local": L(a), "const_local": L(b)}
""", strategy=key)

    c3(f"types.reduce_result_kind.{key}", ST, "strategy.reduce result is a plain value (not DistributedValues); its shape and value", KINDS + """
r = strategy.run(lambda: np.array([1.0, 2.0], np.float32) * np.float32(idist.get_replica_context().replica_id_in_sync_group + 1))
s = strategy.reduce("SUM", r, axis=None)
result = {"kind": kinds(s), "value": np.asarray(s).tolist(), "shape": list(np.shape(s))}
""", strategy=key)

    c3(f"types.num_replicas_everywhere.{key}", MD, "num_replicas_in_sync: strategy top level, in scope, ReplicaContext in run, merge_fn's strategy, extended", """
with strategy.scope():
    sc = strategy.num_replicas_in_sync
def merge_fn(s):
    return np.int32(s.num_replicas_in_sync)
def fn():
    c = idist.get_replica_context()
    return [np.int32(c.num_replicas_in_sync), c.merge_call(merge_fn), np.int32(idist.get_strategy().num_replicas_in_sync)]
r = strategy.run(fn)
result = {"top": strategy.num_replicas_in_sync, "scope": sc, "run": [L(x) for x in r],
          "default": idist.get_strategy().num_replicas_in_sync}
""", strategy=key)

    c3(f"types.variable_kind.{key}", ST, "isinstance flags of a variable made in scope (mirrored, sync-on-read) and local results count", """
with strategy.scope():
    v = idist.Variable(np.float32(1.0))
    s = idist.Variable(np.float32(0.0), synchronization=idist.VariableSynchronization.ON_READ, aggregation=idist.VariableAggregation.SUM)
def k(x):
    return {"dv": isinstance(x, idist.DistributedValues), "mv": isinstance(x, idist.MirroredVariable),
            "mirrored": isinstance(x, idist.Mirrored), "sor": isinstance(x, idist.SyncOnReadVariable),
            "n_local": len(strategy.experimental_local_results(x))}
result = {"v": k(v), "s": k(s)}
""", strategy=key)

for key in ["M2", "M3"]:
    c3(f"types.local_results_every_kind.{key}", ST, "experimental_local_results of: plain np value, python float, tuple, PerReplica, Mirrored (reduce_to), variable, nested dict from run", """
def vf(ctx):
    return np.float32(ctx.replica_id_in_sync_group) + np.float32(1.0)
pr = strategy.experimental_distribute_values_from_function(vf)
with strategy.scope():
    v = idist.Variable(np.float32(5.0))
m = strategy.extended.reduce_to("SUM", pr, v)
d = strategy.run(lambda: {"a": np.float32(idist.get_replica_context().replica_id_in_sync_group), "b": np.float32(2.0)})
plain = strategy.experimental_local_results(np.float32(3.0))
pyf = strategy.experimental_local_results(2.5)
tup = strategy.experimental_local_results((np.float32(1.0), np.float32(2.0)))
result = {"plain": [type(plain).__name__, len(plain), np.asarray(plain[0]).tolist()],
          "pyf": [len(pyf), float(pyf[0])],
          "tup": [len(tup), [np.asarray(t).tolist() for t in tup[0]] if isinstance(tup[0], tuple) else np.asarray(tup[0]).tolist()],
          "pr": [type(strategy.experimental_local_results(pr)).__name__, L(pr)],
          "m": L(m), "v": L(v),
          "d_type": type(d).__name__, "d": {k: L(x) for k, x in sorted(d.items())}}
""", strategy=key)

c3("types.local_results_of_nested_run.M2", ST, "run returning a list of (tuple, dict): experimental_local_results of the whole structure gives per-replica structures", """
r = strategy.run(lambda: [(np.float32(idist.get_replica_context().replica_id_in_sync_group), np.float32(1.0)), {"k": np.float32(2.0)}])
lr = strategy.experimental_local_results(r)
result = {"type": type(lr).__name__, "len": len(lr),
          "first": [[np.asarray(a).tolist() for a in lr[0][0]], np.asarray(lr[0][1]["k"]).tolist()] if len(lr) == 2 else None}
""")

# ----------------------------------------------------------------- scope re-entrancy
for key in ["M2", "OD", "CS2"]:
    c3(f"scope.reenter_same.{key}", ST, "with scope(): with scope(): (same strategy, nested) then the outer again: get_strategy identity at each level, variable kind", """
out = []
with strategy.scope():
    out.append(idist.get_strategy() is strategy)
    with strategy.scope():
        out.append(idist.get_strategy() is strategy)
        v = idist.Variable(np.float32(1.0))
    out.append(idist.get_strategy() is strategy)
    w = idist.Variable(np.float32(2.0))
out.append(idist.has_strategy())
result = {"flags": out, "v": [strategy.extended.variable_created_in_scope(v), len(L(v))],
          "w": [strategy.extended.variable_created_in_scope(w), len(L(w))]}
""", strategy=key)

c3("scope.reuse_scope_object.M2", ST, "the same scope() object entered twice in sequence", """
sc = strategy.scope()
with sc:
    a = idist.has_strategy()
b = idist.has_strategy()
try:
    with sc:
        c = idist.get_strategy() is strategy
    err = None
except Exception as e:
    c, err = None, type(e).__name__
result = [a, b, c, err, idist.has_strategy()]
""")

c3("scope.nest_other_strategy.M2_OD", ST, "inside M2.scope(), entering OneDeviceStrategy.scope() raises; the outer scope stays active", """
other = idist.OneDeviceStrategy("CPU:0")
try:
    with strategy.scope():
        try:
            with other.scope():
                res = "entered"
        except Exception as e:
            res = type(e).__name__
        still = idist.get_strategy() is strategy
finally:
    other.close()
result = [res, still, idist.has_strategy()]
""", tf_sub=[("    other.close()\n", "    pass\n")])

c3("scope.nest_two_mirrored.M2", ST, "inside scope() of one MirroredStrategy, scope() of a second MirroredStrategy with the same devices raises", """
other = idist.MirroredStrategy(["CPU:0", "CPU:1"])
try:
    with strategy.scope():
        try:
            with other.scope():
                res = "entered"
        except Exception as e:
            res = type(e).__name__
finally:
    other.close()
result = [res, idist.has_strategy()]
""", tf_sub=[("    other.close()\n", "    pass\n")])

c3("scope.sequential_two_strategies.M2", ST, "scope of one strategy, exit, scope of another: get_strategy follows, variables belong to their own", """
other = idist.OneDeviceStrategy("CPU:0")
try:
    with strategy.scope():
        a = idist.Variable(np.float32(1.0))
        f1 = idist.get_strategy() is strategy
    with other.scope():
        b = idist.Variable(np.float32(2.0))
        f2 = idist.get_strategy() is other
    res = [f1, f2, strategy.extended.variable_created_in_scope(a), strategy.extended.variable_created_in_scope(b),
           other.extended.variable_created_in_scope(a), other.extended.variable_created_in_scope(b)]
finally:
    other.close()
result = res
""", tf_sub=[("    other.close()\n", "    pass\n")])

# ----------------------------------------------------------------- experimental_set_strategy
c3("set_strategy.set_then_scope_same.M2", MD, "experimental_set_strategy(s), then with s.scope(): nested entry works; clear with None", """
idist.experimental_set_strategy(strategy)
try:
    a = [idist.has_strategy(), idist.get_strategy() is strategy, idist.in_cross_replica_context()]
    with strategy.scope():
        b = [idist.get_strategy() is strategy]
        v = idist.Variable(np.float32(1.0))
    c = [idist.get_strategy() is strategy]
finally:
    idist.experimental_set_strategy(None)
result = {"a": a, "b": b, "c": c, "after": idist.has_strategy(), "v_local": len(L(v))}
""")

c3("set_strategy.set_then_scope_other.M2", MD, "experimental_set_strategy(s), then other.scope() raises; clear", """
other = idist.OneDeviceStrategy("CPU:0")
idist.experimental_set_strategy(strategy)
try:
    try:
        with other.scope():
            res = "entered"
    except Exception as e:
        res = type(e).__name__
    still = idist.get_strategy() is strategy
finally:
    idist.experimental_set_strategy(None)
    other.close()
result = [res, still, idist.has_strategy()]
""", tf_sub=[("    other.close()\n", "    pass\n")])

c3("set_strategy.inside_scope_raises.M2", MD, "experimental_set_strategy called inside a scope", """
with strategy.scope():
    try:
        idist.experimental_set_strategy(strategy)
        res = "ok"
        idist.experimental_set_strategy(None)
    except Exception as e:
        res = type(e).__name__
result = [res, idist.has_strategy()]
""")

c3("set_strategy.replace.M2", MD, "experimental_set_strategy(s) then experimental_set_strategy(other): get_strategy is other; clear", """
other = idist.OneDeviceStrategy("CPU:0")
try:
    idist.experimental_set_strategy(strategy)
    a = idist.get_strategy() is strategy
    idist.experimental_set_strategy(other)
    b = [idist.get_strategy() is other, idist.get_strategy().num_replicas_in_sync]
    idist.experimental_set_strategy(None)
    c = idist.has_strategy()
finally:
    other.close()
result = [a, b, c]
""", tf_sub=[("    other.close()\n", "    pass\n")])

c3("set_strategy.run_uses_it.M2", MD, "after experimental_set_strategy(s): variables created are distributed, run works, get_strategy inside run is s", """
idist.experimental_set_strategy(strategy)
try:
    v = idist.Variable(np.float32(3.0))
    r = strategy.run(lambda: np.int32(idist.get_strategy() is strategy))
    res = {"v_in_scope": strategy.extended.variable_created_in_scope(v), "v": L(v), "r": L(r)}
finally:
    idist.experimental_set_strategy(None)
result = res
""")

c3("set_strategy.clear_twice", MD, "experimental_set_strategy(None) with nothing set, twice: no error, default strategy", """
idist.experimental_set_strategy(None)
idist.experimental_set_strategy(None)
result = [idist.has_strategy(), idist.get_strategy().num_replicas_in_sync]
""", strategy=None, helper=False)

# ----------------------------------------------------------------- contexts in special places
for key in ["M2", "OD", "CS2"]:
    c3(f"context.flags_in_run.{key}", MD, "inside run: get_strategy() is strategy, has_strategy, in_cross_replica_context, get_replica_context().strategy is strategy as int flags", """
def fn():
    c = idist.get_replica_context()
    return [np.int32(idist.get_strategy() is strategy), np.int32(idist.has_strategy()),
            np.int32(idist.in_cross_replica_context()), np.int32(c.strategy is strategy)]
r = strategy.run(fn)
result = [L(x) for x in r]
""", strategy=key)

    c3(f"context.flags_in_merge_fn.{key}", MD, "inside merge_fn: the strategy argument is strategy, get_strategy() is strategy, in_cross_replica_context, get_replica_context() is None", """
def merge_fn(s):
    return [np.int32(s is strategy), np.int32(idist.get_strategy() is strategy),
            np.int32(idist.in_cross_replica_context()), np.int32(idist.get_replica_context() is None)]
r = strategy.run(lambda: idist.get_replica_context().merge_call(merge_fn))
result = [L(x) for x in r]
""", strategy=key)

    c3(f"context.flags_in_update_fn.{key}", SE, "inside extended.update's fn (called from top level): in_cross_replica_context and get_replica_context() is None, has_strategy, get_strategy is strategy", """
with strategy.scope():
    v = idist.Variable(np.float32(0.0))
def upd(var):
    code = (8 * int(idist.in_cross_replica_context()) + 4 * int(idist.get_replica_context() is None)
            + 2 * int(idist.has_strategy()) + int(idist.get_strategy() is strategy))
    return var.assign(np.float32(code))
strategy.extended.update(v, upd)
result = L(v)
""", strategy=key)

c3("context.replica_ctx_in_merge_fn_run.M2", MD, "strategy.run called inside merge_fn: the replica ids and num_replicas_in_sync seen by the nested run", """
def inner():
    c = idist.get_replica_context()
    return [np.float32(c.replica_id_in_sync_group), np.float32(c.num_replicas_in_sync)]
def merge_fn(s):
    r = s.run(inner)
    return [np.asarray(x).tolist() for x in s.experimental_local_results(r[0])]
try:
    out = strategy.run(lambda: idist.get_replica_context().merge_call(merge_fn))
    res = {"ok": L(out)}
except Exception as e:
    res = {"err": type(e).__name__}
result = res
""")

c3("context.in_update_inside_merge_fn.M2", SE, "extended.update called inside merge_fn: in_cross_replica_context inside the update fn", """
with strategy.scope():
    v = idist.Variable(np.float32(0.0))
def upd(var, x):
    return var.assign(x * np.float32(10.0) + np.float32(idist.in_cross_replica_context()))
def merge_fn(s, x):
    s.extended.update(v, upd, args=(s.extended.reduce_to("SUM", x, v),))
    return np.float32(0.0)
strategy.run(lambda: idist.get_replica_context().merge_call(merge_fn, args=(np.float32(idist.get_replica_context().replica_id_in_sync_group) + 1,)))
result = L(v)
""")
