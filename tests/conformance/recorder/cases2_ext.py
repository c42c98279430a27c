"""Round 2: StrategyExtended update/batch_reduce_to/broadcast_to, reduce/gather/all_gather shapes."""
from cases2_common import PS, SE, ST, c2

PR = """
def vf(ctx):
    return np.float32(ctx.replica_id_in_sync_group) + np.float32(1.0)
pr = strategy.experimental_distribute_values_from_function(vf)
"""

c2("extended.update.group_false_mirrored_arg.M3", SE,
   "update(v, fn, args=(reduce_to(SUM, per_replica, v),), group=False): a Mirrored arg; fn returns var.assign_add(x); returns a tuple, one per copy", PR + """
with strategy.scope():
    v = idist.Variable(np.float32(1.0))
m = strategy.extended.reduce_to("SUM", pr, v)
r = strategy.extended.update(v, lambda var, x: var.assign_add(x), args=(m,), group=False)
result = {"type": type(r).__name__, "len": len(r), "vals": [np.asarray(x).tolist() for x in r], "v": L(v)}
""", strategy="M3")

c2("extended.update.group_false_per_replica_arg.M2", SE,
   "update(v, fn, args=(PerReplica,), group=False): each copy gets its own component", PR + """
with strategy.scope():
    v = idist.Variable(np.float32(10.0))
r = strategy.extended.update(v, lambda var, x: var.assign_sub(x), args=(pr,), group=False)
result = {"len": len(r), "vals": [np.asarray(x).tolist() for x in r], "v": L(v)}
""")

c2("extended.update.group_true_return.M2", SE,
   "update(v, fn, args=(plain,)) with group=True: local results of the returned value", """
with strategy.scope():
    v = idist.Variable(np.array([1.0, 2.0], np.float32))
r = strategy.extended.update(v, lambda var, x: var.assign(var * x), args=(np.float32(3.0),))
result = {"r": L(r), "v": L(v)}
""")

c2("extended.update.fn_returns_plain.M2", SE,
   "update with fn returning a plain computed value (not an assign), group=False: tuple of values", """
with strategy.scope():
    v = idist.Variable(np.float32(2.0))
r = strategy.extended.update(v, lambda var, x: np.asarray(var.read_value()) * x, args=(np.float32(5.0),), group=False)
result = {"vals": [np.asarray(x).tolist() for x in r], "v": L(v)}
""")

c2("extended.update.two_args_kwargs.M3", SE,
   "update(v, fn, args=(a,), kwargs={'b': b}) with a Mirrored and a plain value", PR + """
with strategy.scope():
    v = idist.Variable(np.float32(0.0))
m = strategy.extended.reduce_to("MEAN", pr, v)
strategy.extended.update(v, lambda var, a, b=None: var.assign(a * b), args=(m,), kwargs={"b": np.float32(10.0)})
result = L(v)
""", strategy="M3")

c2("extended.update.sync_on_read_per_replica.M2", SE,
   "update on a sync-on-read SUM variable with a PerReplica arg: each copy takes its own component; read sums", PR + """
with strategy.scope():
    m = idist.Variable(np.float32(0.0), synchronization=idist.VariableSynchronization.ON_READ,
                       aggregation=idist.VariableAggregation.SUM)
strategy.extended.update(m, lambda var, x: var.assign(x), args=(pr,))
result = {"local": L(m), "read": np.asarray(m.read_value()).tolist()}
""")

c2("extended.update.in_merge_fn.M2", SE,
   "the seed's update pattern: merge_call -> reduce_to(SUM) -> update(v, assign_sub) inside merge_fn", """
with strategy.scope():
    v = idist.Variable(np.float32(10.0))
def merge_fn(s, g):
    red = s.extended.reduce_to(idist.ReduceOp.SUM, g, v)
    s.extended.update(v, lambda var, x: var.assign_sub(x), args=(red,))
def fn():
    g = np.float32(idist.get_replica_context().replica_id_in_sync_group) + np.float32(1.0)
    idist.get_replica_context().merge_call(merge_fn, args=(g,))
    return v.read_value()
result = {"run": L(strategy.run(fn)), "v": L(v)}
""")

c2("extended.update.batch_in_merge_fn.M3", SE,
   "the seed's pattern with batch_reduce_to over two (grad, var) pairs inside merge_fn, then update each", """
with strategy.scope():
    w = idist.Variable(np.array([1.0, 1.0], np.float32))
    b = idist.Variable(np.float32(0.0))
def merge_fn(s, gw, gb):
    rw, rb = s.extended.batch_reduce_to(idist.ReduceOp.SUM, [(gw, w), (gb, b)])
    s.extended.update(w, lambda var, x: var.assign_sub(x * np.float32(0.1)), args=(rw,))
    s.extended.update(b, lambda var, x: var.assign_sub(x * np.float32(0.1)), args=(rb,))
def fn():
    i = np.float32(idist.get_replica_context().replica_id_in_sync_group)
    idist.get_replica_context().merge_call(merge_fn, args=(np.array([i, 1.0], np.float32), i + np.float32(1.0)))
    return np.float32(0.0)
strategy.run(fn)
result = {"w": L(w), "b": L(b)}
""", strategy="M3")

c2("extended.update.non_variable_raises.M2", SE, "extended.update on a plain array (not a variable) raises", """
x = np.float32(1.0)
strategy.extended.update(x, lambda var: var, args=())
result = "no error"
""")

c2("extended.update.one_device_group_false", SE, "OneDeviceStrategy: update(group=False) returns a 1-tuple", """
with strategy.scope():
    v = idist.Variable(np.float32(1.0))
r = strategy.extended.update(v, lambda var, x: var.assign_add(x), args=(np.float32(2.0),), group=False)
result = {"type": type(r).__name__, "len": len(r), "vals": [np.asarray(x).tolist() for x in r], "v": L(v)}
""", strategy="OD")

# ---------------------------------------------------------------- batch_reduce_to
c2("extended.batch_reduce_to.many_pairs_mixed_destinations.M3", SE,
   "batch_reduce_to(SUM) with 4 float32 pairs: destinations a variable, a device string, a PerReplica, the value itself", PR + """
with strategy.scope():
    v = idist.Variable(np.float32(0.0))
def vf2(ctx):
    return np.array([ctx.replica_id_in_sync_group, 1], np.float32)
pr2 = strategy.experimental_distribute_values_from_function(vf2)
out = strategy.extended.batch_reduce_to("SUM", [(pr, v), (pr2, "/cpu:1"), (pr, pr2), (pr2, pr2)])
result = {"n": len(out), "vals": [L(o) for o in out], "dtypes": [np.asarray(strategy.experimental_local_results(o)[0]).dtype.name for o in out],
          "devices": [[c.device for c in strategy.experimental_local_results(o)] for o in out]}
""", strategy="M3")

c2("extended.batch_reduce_to.mean_many.M4", SE, "batch_reduce_to(MEAN) of five float32 PerReplica values, destination a mirrored variable", """
with strategy.scope():
    v = idist.Variable(np.float32(0.0))
vals = [strategy.experimental_distribute_values_from_function(
            lambda ctx, k=k: np.float32(ctx.replica_id_in_sync_group * k)) for k in range(5)]
out = strategy.extended.batch_reduce_to(idist.ReduceOp.MEAN, [(x, v) for x in vals])
result = [L(o) for o in out]
""", strategy="M4")

c2("extended.batch_reduce_to.int_mean.M2", SE, "batch_reduce_to(MEAN) of int32 PerReplica values: dtype of the result", """
def vf(ctx):
    return np.int32(ctx.replica_id_in_sync_group + 2)
pr = strategy.experimental_distribute_values_from_function(vf)
out = strategy.extended.batch_reduce_to("MEAN", [(pr, "CPU:0")])
r = np.asarray(strategy.experimental_local_results(out[0])[0])
result = [r.tolist(), r.dtype.name]
""")

c2("extended.batch_reduce_to.plain_value_mean.M2", SE, "batch_reduce_to(MEAN) with a plain (non-distributed) value", """
out = strategy.extended.batch_reduce_to("MEAN", [(np.array([2.0, 4.0], np.float32), "CPU:0")])
result = [L(o) for o in out]
""")

c2("extended.batch_reduce_to.plain_value_sum.M2", SE, "batch_reduce_to(SUM) with a plain value (TF does not raise here, unlike reduce)", """
out = strategy.extended.batch_reduce_to("SUM", [(np.array([2.0, 4.0], np.float32), "CPU:0")])
result = [L(o) for o in out]
""")

c2("extended.batch_reduce_to.one_device", SE, "OneDeviceStrategy batch_reduce_to(SUM) of two plain values", """
out = strategy.extended.batch_reduce_to("SUM", [(np.float32(1.5), "CPU:0"), (np.array([1, 2], np.int32), "CPU:0")])
result = [np.asarray(o).tolist() for o in out]
""", strategy="OD")

c2("extended.batch_reduce_to.in_replica_context_raises.M2", SE, "batch_reduce_to called inside run raises RuntimeError", """
def fn():
    s = idist.get_strategy()
    return s.extended.batch_reduce_to("SUM", [(np.float32(1.0), "CPU:0")])
strategy.run(fn)
result = "no error"
""")

# ---------------------------------------------------------------- reduce_to / broadcast_to
c2("extended.reduce_to.sync_on_read_destination.M2", SE, "reduce_to(SUM, per_replica, sync_on_read_var): local results", PR + """
with strategy.scope():
    m = idist.Variable(np.float32(0.0), synchronization=idist.VariableSynchronization.ON_READ,
                       aggregation=idist.VariableAggregation.SUM)
r = strategy.extended.reduce_to("SUM", pr, m)
result = L(r)
""")

c2("extended.reduce_to.vector_mean_variable_dest.M4", SE, "reduce_to(MEAN) of vectors [i, 2i] to a mirrored variable destination", """
def vf(ctx):
    i = np.float32(ctx.replica_id_in_sync_group)
    return np.array([i, 2 * i], np.float32)
pr = strategy.experimental_distribute_values_from_function(vf)
with strategy.scope():
    v = idist.Variable(np.zeros(2, np.float32))
r = strategy.extended.reduce_to(idist.ReduceOp.MEAN, pr, v)
result = {"vals": L(r), "devices": [c.device for c in strategy.experimental_local_results(r)]}
""", strategy="M4")

c2("extended.broadcast_to.variable_destination.M3", SE, "broadcast_to(vector, destinations=mirrored_var): one copy per variable device", """
with strategy.scope():
    v = idist.Variable(np.zeros(3, np.float32))
b = strategy.extended.broadcast_to(np.array([1.0, 2.0, 3.0], np.float32), v)
result = {"vals": L(b), "devices": [c.device for c in strategy.experimental_local_results(b)]}
""", strategy="M3")

c2("extended.broadcast_to.then_assign.M2", SE, "broadcast_to a value with a variable destination, then v.assign(broadcast value)", """
with strategy.scope():
    v = idist.Variable(np.float32(0.0))
b = strategy.extended.broadcast_to(np.float32(7.0), v)
v.assign(b)
result = L(v)
""")

c2("extended.broadcast_to.then_update.M2", SE, "broadcast_to(value, v) then extended.update(v, assign_add, args=(broadcast,))", """
with strategy.scope():
    v = idist.Variable(np.array([1.0, 1.0], np.float32))
b = strategy.extended.broadcast_to(np.array([2.0, 3.0], np.float32), v)
strategy.extended.update(v, lambda var, x: var.assign_add(x), args=(b,))
result = L(v)
""")

c2("extended.broadcast_to.one_device", SE, "OneDeviceStrategy.extended.broadcast_to(value, variable)", """
with strategy.scope():
    v = idist.Variable(np.float32(0.0))
b = strategy.extended.broadcast_to(np.float32(4.0), v)
result = L(b)
""", strategy="OD1")

# ---------------------------------------------------------------- strategy.reduce shapes
def _red(id, what, vf_body, op, axis, key="M2", seed=PS):
    c2(id, seed, what, f"""
    def vf(ctx):
        i = ctx.replica_id_in_sync_group
{vf_body}
    pr = strategy.experimental_distribute_values_from_function(vf)
    r = np.asarray(strategy.reduce({op!r}, pr, axis={axis}))
    result = {{"value": r.tolist(), "dtype": r.dtype.name, "shape": list(r.shape)}}
    """, strategy=key)


B3D = "        return np.arange(12, dtype=np.float32).reshape(2, 3, 2) + np.float32(i)"
_red("reduce.3d_sum_axis_1.M2", "reduce SUM of (2,3,2) per-replica values along axis 1", B3D, "SUM", 1)
_red("reduce.3d_mean_axis_neg1.M2", "reduce MEAN of (2,3,2) per-replica values along axis -1", B3D, "MEAN", -1)
_red("reduce.3d_mean_axis_2.M3", "reduce MEAN of (2,3,2) per-replica values along axis 2 on 3 replicas", B3D, "MEAN", 2, "M3")
_red("reduce.3d_sum_axis_none.M3", "reduce SUM of (2,3,2) per-replica values, axis None", B3D, "SUM", None, "M3")
_red("reduce.3d_sum_axis_neg3.M2", "reduce SUM of (2,3,2) values along axis -3", B3D, "SUM", -3)
_red("reduce.uneven_axis1_sum.M2", "reduce SUM along axis 1 of (2,1) and (2,2) per-replica matrices (uneven along the axis)",
     "        return np.ones((2, i + 1), np.float32) * np.float32(i + 1)", "SUM", 1)
_red("reduce.uneven_axis1_mean.M3", "reduce MEAN along axis 1 of (2,1),(2,2),(2,3) per-replica matrices",
     "        return np.ones((2, i + 1), np.float32) * np.float32(i + 1)", "MEAN", 1, "M3")
_red("reduce.uneven_axis0_mean_matrix.M2", "reduce MEAN along axis 0 of (1,2) and (3,2) per-replica matrices",
     "        return np.arange((2 * i + 1) * 2, dtype=np.float32).reshape(2 * i + 1, 2)", "MEAN", 0)
_red("reduce.uneven_axis1_shape_mismatch_raises.M2", "reduce SUM along axis 1 of (1,2) and (2,2): other axis differs -> raises",
     "        return np.ones((i + 1, 2), np.float32)", "SUM", 1)
_red("reduce.int64_mean_axis_1.M2", "reduce MEAN of int64 matrices along axis 1: float64 result",
     "        return np.array([[1, 2], [3, 4]], np.int64) * (i + 1)", "MEAN", 1)
_red("reduce.int32_sum_axis_neg1.M4", "reduce SUM of int32 vectors along axis -1 on 4 replicas",
     "        return np.array([i, i + 1, i + 2], np.int32)", "SUM", -1, "M4")
_red("reduce.float64_mean_axis_neg2.M3", "reduce MEAN of float64 (2,2) along axis -2",
     "        return np.array([[1.0, 2.0], [3.0, 4.0]], np.float64) + i", "MEAN", -2, "M3")
_red("reduce.axis_1_on_vector_raises.M2", "reduce SUM with axis=1 on vectors raises",
     "        return np.array([1.0, 2.0], np.float32)", "SUM", 1)
_red("reduce.ReduceOp_enum_mean_axis_0_vector.M4", "reduce(ReduceOp.MEAN) of vectors of different lengths along axis 0 on 4 replicas",
     "        return np.arange(i, dtype=np.float32)", "MEAN", 0, "M4")

c2("reduce.run_result_matrix_axis_1.M3", ST, "reduce SUM along axis 1 of a run result built from the replica id", """
def fn():
    i = np.float32(idist.get_replica_context().replica_id_in_sync_group)
    return np.array([[i, 1.0], [2.0, i]], np.float32)
r = strategy.reduce("SUM", strategy.run(fn), axis=1)
result = np.asarray(r).tolist()
""", strategy="M3")

# ---------------------------------------------------------------- gather / all_gather
def _gather(id, what, vf_body, axis, key="M2"):
    c2(id, ST, what, f"""
    def vf(ctx):
        i = ctx.replica_id_in_sync_group
{vf_body}
    pr = strategy.experimental_distribute_values_from_function(vf)
    r = np.asarray(strategy.gather(pr, axis={axis}))
    result = {{"value": r.tolist(), "dtype": r.dtype.name}}
    """, strategy=key)


_gather("gather.axis1_matrix.M3", "strategy.gather of (2,2) matrices along axis 1 on 3 replicas",
        "        return np.array([[1.0, 2.0], [3.0, 4.0]], np.float32) * np.float32(i + 1)", 1, "M3")
_gather("gather.uneven_axis0.M3", "strategy.gather of vectors of lengths 1, 2, 3 along axis 0",
        "        return np.arange(i + 1, dtype=np.int32)", 0, "M3")
_gather("gather.uneven_axis1.M2", "strategy.gather of (2,1) and (2,2) along axis 1",
        "        return np.ones((2, i + 1), np.float32) * np.float32(i)", 1)
_gather("gather.axis_neg1.M2", "strategy.gather with axis=-1 of (2,2) matrices",
        "        return np.array([[1.0, 2.0], [3.0, 4.0]], np.float32) + np.float32(i)", -1)
_gather("gather.scalar.M2", "strategy.gather of scalars (rank 0)",
        "        return np.float32(i)", 0)
_gather("gather.3d_axis2.M2", "strategy.gather of (1,2,2) values along axis 2",
        "        return np.arange(4, dtype=np.float32).reshape(1, 2, 2) + np.float32(10 * i)", 2)
_gather("gather.int64_axis0.M4", "strategy.gather of int64 (1,2) rows on 4 replicas",
        "        return np.array([[i, -i]], np.int64)", 0, "M4")

c2("gather.plain_value.M2", ST, "strategy.gather of a plain (non-distributed) vector on 2 replicas", """
r = np.asarray(strategy.gather(np.array([1.0, 2.0], np.float32), axis=0))
result = r.tolist()
""")

c2("gather.one_device", ST, "OneDeviceStrategy.gather of a run result along axis 0", """
r = strategy.gather(strategy.run(lambda: np.array([1.0, 2.0], np.float32)), axis=0)
result = np.asarray(r).tolist()
""", strategy="OD")


def _ag(id, what, body, key="M2"):
    c2(id, ST, what, f"""
    def fn():
        ctx = idist.get_replica_context()
        i = ctx.replica_id_in_sync_group
{body}
    result = L(strategy.run(fn))
    """, strategy=key)


_ag("all_gather.uneven_vectors.M3", "all_gather of vectors of lengths 1,2,3 along axis 0 on 3 replicas",
    "        return ctx.all_gather(np.arange(i + 1, dtype=np.float32), axis=0)", "M3")
_ag("all_gather.uneven_axis1.M2", "all_gather of (2,1) and (2,3) along axis 1",
    "        return ctx.all_gather(np.ones((2, 2 * i + 1), np.float32) * np.float32(i), axis=1)")
_ag("all_gather.empty_on_one_replica.M2", "all_gather where replica 0 contributes an empty vector",
    "        return ctx.all_gather(np.arange(i * 2, dtype=np.float32), axis=0)")
_ag("all_gather.3d_axis2.M2", "all_gather of (1,1,2) values along axis 2",
    "        return ctx.all_gather(np.array([[[1.0, 2.0]]], np.float32) * np.float32(i + 1), axis=2)")
_ag("all_gather.int32_axis0.M4", "all_gather of int32 (1,) vectors on 4 replicas",
    "        return ctx.all_gather(np.array([i * 10], np.int32), axis=0)", "M4")


def _agn(id, what, body, key="M2"):
    c2(id, ST, what, f"""
    def fn():
        ctx = idist.get_replica_context()
        i = ctx.replica_id_in_sync_group
{body}
    out = strategy.run(fn)
    result = {{k: L(v) for k, v in out.items()}} if isinstance(out, dict) else [L(v) for v in out]
    """, strategy=key)


_agn("all_gather.nested_uneven_tuple.M2", "all_gather of a tuple (uneven vector, matrix) along axis 0",
     "        return ctx.all_gather((np.arange(i + 1, dtype=np.float32), np.ones((1, 2), np.float32) * np.float32(i)), axis=0)")
_agn("all_gather.nested_dict.M3", "all_gather of a dict {'a': scalar-as-(1,), 'b': (2,)} along axis 0 on 3 replicas",
     "        return ctx.all_gather({'a': np.array([i], np.int32), 'b': np.array([1.0, 2.0], np.float32) * np.float32(i)}, axis=0)", "M3")
_agn("all_gather.nested_list_axis1.M2", "all_gather of a list of two (2,1) matrices along axis 1",
     "        return ctx.all_gather([np.ones((2, 1), np.float32) * np.float32(i), np.zeros((2, 1), np.float32)], axis=1)")
_agn("all_reduce.nested_dict_mean.M3", "all_reduce MEAN of a dict of float32 values on 3 replicas",
     "        return ctx.all_reduce('MEAN', {'x': np.float32(i), 'y': np.array([1.0, 2.0], np.float32) * np.float32(i)})", "M3")
