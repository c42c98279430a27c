"""ReplicaContext: all_reduce, all_gather, merge_call, context functions."""
from record import case

SE = "strategy_extended.txt"
MD = "module_tf_distribute.txt"
PS = "parameter_server_strategy.txt"

LR = "[np.asarray(v).tolist() for v in strategy.experimental_local_results(out)]"
LRT = "[v.numpy().tolist() for v in strategy.experimental_local_results(out)]"

def _rid_i(dtype="float32"):
    return f"np.{dtype}(idist.get_replica_context().replica_id_in_sync_group)"

def _rid_t(dtype="float32"):
    return f"tf.cast(tf.distribute.get_replica_context().replica_id_in_sync_group, tf.{dtype})"

# ---------------------------------------------------------------- all_reduce
for op_i, op_t, tag in [("idist.ReduceOp.SUM", "tf.distribute.ReduceOp.SUM", "enum_sum"),
                        ("idist.ReduceOp.MEAN", "tf.distribute.ReduceOp.MEAN", "enum_mean"),
                        ('"sum"', '"sum"', "str_sum"), ('"Mean"', '"Mean"', "str_Mean")]:
    for dtype in ["float32", "int32"]:
        case(f"all_reduce.{tag}.{dtype}.mirrored3", MD,
             f"ReplicaContext.all_reduce({op_i}) of (replica_id + 1) * [1, 2] as {dtype} on 3 replicas; value and dtype per replica",
             f"""
             def fn():
                 x = np.{dtype}(idist.get_replica_context().replica_id_in_sync_group + 1) * np.array([1, 2], np.{dtype})
                 return idist.get_replica_context().all_reduce({op_i}, x)
             out = strategy.run(fn)
             vals = strategy.experimental_local_results(out)
             result = {{"values": [np.asarray(v).tolist() for v in vals], "dtypes": [np.asarray(v).dtype.name for v in vals]}}
             """,
             f"""
             def fn():
                 x = tf.cast(tf.distribute.get_replica_context().replica_id_in_sync_group + 1, tf.{dtype}) * tf.constant([1, 2], tf.{dtype})
                 return tf.distribute.get_replica_context().all_reduce({op_t}, x)
             out = strategy.run(fn)
             vals = strategy.experimental_local_results(out)
             result = {{"values": [v.numpy().tolist() for v in vals], "dtypes": [v.dtype.name for v in vals]}}
             """, strategy="M3")

case("all_reduce.mean_int64.mirrored2", MD,
     "all_reduce MEAN of int64 values 1 and 2 (not divisible): value and dtype",
     """
     def fn():
         x = np.int64(1) + np.int64(idist.get_replica_context().replica_id_in_sync_group)
         return idist.get_replica_context().all_reduce("MEAN", x)
     out = strategy.run(fn)
     vals = strategy.experimental_local_results(out)
     result = {"values": [np.asarray(v).tolist() for v in vals], "dtypes": [np.asarray(v).dtype.name for v in vals]}
     """,
     """
     def fn():
         x = tf.constant(1, tf.int64) + tf.cast(tf.distribute.get_replica_context().replica_id_in_sync_group, tf.int64)
         return tf.distribute.get_replica_context().all_reduce("MEAN", x)
     out = strategy.run(fn)
     vals = strategy.experimental_local_results(out)
     result = {"values": [v.numpy().tolist() for v in vals], "dtypes": [v.dtype.name for v in vals]}
     """)

case("all_reduce.float64_sum.mirrored4", MD,
     "all_reduce SUM of float64 values on 4 replicas keeps float64",
     """
     def fn():
         x = np.float64(idist.get_replica_context().replica_id_in_sync_group) * np.float64(0.25)
         return idist.get_replica_context().all_reduce("SUM", x)
     out = strategy.run(fn)
     vals = strategy.experimental_local_results(out)
     result = {"values": [np.asarray(v).tolist() for v in vals], "dtypes": [np.asarray(v).dtype.name for v in vals]}
     """,
     """
     def fn():
         x = tf.cast(tf.distribute.get_replica_context().replica_id_in_sync_group, tf.float64) * 0.25
         return tf.distribute.get_replica_context().all_reduce("SUM", x)
     out = strategy.run(fn)
     vals = strategy.experimental_local_results(out)
     result = {"values": [v.numpy().tolist() for v in vals], "dtypes": [v.dtype.name for v in vals]}
     """, strategy="M4")

case("all_reduce.nested_tuple_dict", MD,
     "all_reduce of a nested structure (tuple holding a dict) reduces every leaf and keeps the structure",
     """
     def fn():
         i = idist.get_replica_context().replica_id_in_sync_group
         x = (np.float32(i), {"a": np.array([1, 2], np.float64) * np.float64(i), "b": np.float32(i) * np.float32(0.0) + np.float32(1.0)})
         r = idist.get_replica_context().all_reduce("SUM", x)
         return r[0], r[1]["a"], r[1]["b"]
     a, b, c = strategy.run(fn)
     result = [[np.asarray(v).tolist() for v in strategy.experimental_local_results(x)] for x in (a, b, c)]
     """,
     """
     def fn():
         i = tf.distribute.get_replica_context().replica_id_in_sync_group
         x = (tf.cast(i, tf.float32), {"a": tf.constant([1, 2], tf.float64) * tf.cast(i, tf.float64), "b": tf.cast(i, tf.float32) * 0.0 + 1.0})
         r = tf.distribute.get_replica_context().all_reduce("SUM", x)
         return r[0], r[1]["a"], r[1]["b"]
     a, b, c = strategy.run(fn)
     result = [[v.numpy().tolist() for v in strategy.experimental_local_results(x)] for x in (a, b, c)]
     """, strategy="M3")

case("all_reduce.returns_structure_type", MD,
     "all_reduce of a list returns a list; of a dict returns a dict",
     """
     def fn():
         ctx = idist.get_replica_context()
         a = ctx.all_reduce("SUM", [np.float32(1.0), np.float32(2.0)])
         b = ctx.all_reduce("SUM", {"k": np.float32(3.0)})
         return np.int32(isinstance(a, list)), np.int32(isinstance(b, dict)), a[1], b["k"]
     out = strategy.run(fn)
     result = [[np.asarray(v).tolist() for v in strategy.experimental_local_results(x)] for x in out]
     """,
     """
     def fn():
         ctx = tf.distribute.get_replica_context()
         a = ctx.all_reduce("SUM", [tf.constant(1.0), tf.constant(2.0)])
         b = ctx.all_reduce("SUM", {"k": tf.constant(3.0)})
         return tf.constant(int(isinstance(a, list))), tf.constant(int(isinstance(b, dict))), a[1], b["k"]
     out = strategy.run(fn)
     result = [[v.numpy().tolist() for v in strategy.experimental_local_results(x)] for x in out]
     """)

case("all_reduce.bad_op_raises", MD,
     "all_reduce with an unknown reduce op string ('prod') raises ValueError",
     """
     out = strategy.run(lambda: idist.get_replica_context().all_reduce("prod", np.float32(1.0)))
     result = """ + LR + """
     """,
     """
     out = strategy.run(lambda: tf.distribute.get_replica_context().all_reduce("prod", tf.constant(1.0)))
     result = """ + LRT + """
     """)

case("all_reduce.shape_mismatch", MD,
     "all_reduce of shapes (1,) and (2,) across 2 replicas",
     """
     def fn():
         i = idist.get_replica_context().replica_id_in_sync_group
         return idist.get_replica_context().all_reduce("SUM", np.ones((int(i) + 1,), np.float32))
     out = strategy.run(fn)
     result = """ + LR + """
     """,
     """
     def fn():
         i = tf.distribute.get_replica_context().replica_id_in_sync_group
         return tf.distribute.get_replica_context().all_reduce("SUM", tf.ones((i + 1,)))
     out = strategy.run(fn)
     result = """ + LRT + """
     """)

case("all_reduce.mirrored1", MD,
     "all_reduce SUM with one replica is the identity; run returns a plain value",
     """
     out = strategy.run(lambda: idist.get_replica_context().all_reduce("SUM", np.array([1.0, 2.0], np.float32)))
     result = {"per_replica": isinstance(out, idist.PerReplica), "value": np.asarray(out).tolist()}
     """,
     """
     out = strategy.run(lambda: tf.distribute.get_replica_context().all_reduce("SUM", tf.constant([1.0, 2.0])))
     result = {"per_replica": type(out).__name__ == "PerReplica", "value": out.numpy().tolist()}
     """, strategy="M1")

case("all_reduce.one_device", MD,
     "OneDeviceStrategy: all_reduce MEAN inside run is the identity",
     """
     out = strategy.run(lambda: idist.get_replica_context().all_reduce("MEAN", np.array([1.0, 3.0], np.float32)))
     result = np.asarray(out).tolist()
     """,
     """
     out = strategy.run(lambda: tf.distribute.get_replica_context().all_reduce("MEAN", tf.constant([1.0, 3.0])))
     result = out.numpy().tolist()
     """, strategy="OD")

case("all_reduce.default_context_top_level", MD,
     "all_reduce on the default replica context at top level (no strategy): identity",
     """
     r = idist.get_replica_context().all_reduce("SUM", np.array([2.0, 3.0], np.float32))
     result = np.asarray(r).tolist()
     """,
     """
     r = tf.distribute.get_replica_context().all_reduce("SUM", tf.constant([2.0, 3.0]))
     result = r.numpy().tolist()
     """, strategy=None)

case("all_reduce.twice_in_one_step", MD,
     "two all_reduce calls in one replica function (SUM then MEAN of the sum)",
     """
     def fn():
         ctx = idist.get_replica_context()
         s = ctx.all_reduce("SUM", np.float32(ctx.replica_id_in_sync_group) + np.float32(1.0))
         m = ctx.all_reduce("MEAN", s * (np.float32(ctx.replica_id_in_sync_group) + np.float32(1.0)))
         return m
     out = strategy.run(fn)
     result = """ + LR + """
     """,
     """
     def fn():
         ctx = tf.distribute.get_replica_context()
         s = ctx.all_reduce("SUM", tf.cast(ctx.replica_id_in_sync_group, tf.float32) + 1.0)
         m = ctx.all_reduce("MEAN", s * (tf.cast(ctx.replica_id_in_sync_group, tf.float32) + 1.0))
         return m
     out = strategy.run(fn)
     result = """ + LRT + """
     """, strategy="M3")

# ---------------------------------------------------------------- all_gather
def _gather(id, what, shape_code_i, shape_code_t, axis, strategy="M2"):
    case(id, MD, what,
         f"""
         def fn():
             i = idist.get_replica_context().replica_id_in_sync_group
             x = {shape_code_i}
             return idist.get_replica_context().all_gather(x, axis={axis})
         out = strategy.run(fn)
         vals = strategy.experimental_local_results(out)
         result = {{"values": [np.asarray(v).tolist() for v in vals], "dtype": np.asarray(vals[0]).dtype.name}}
         """,
         f"""
         def fn():
             i = tf.distribute.get_replica_context().replica_id_in_sync_group
             x = {shape_code_t}
             return tf.distribute.get_replica_context().all_gather(x, axis={axis})
         out = strategy.run(fn)
         vals = strategy.experimental_local_results(out)
         result = {{"values": [v.numpy().tolist() for v in vals], "dtype": vals[0].dtype.name}}
         """, strategy=strategy)

_gather("all_gather.axis0_vector", "all_gather of [i, i] along axis 0 on 2 replicas",
        "np.array([i, i], np.float32)", "tf.cast(tf.stack([i, i]), tf.float32)", 0)
_gather("all_gather.axis0_matrix.mirrored3", "all_gather of 1x2 matrices along axis 0 on 3 replicas",
        "np.array([[i, 10 * i]], np.int32)", "tf.reshape(tf.stack([i, 10 * i]), (1, 2))", 0, "M3")
_gather("all_gather.axis1_matrix", "all_gather of 2x1 matrices along axis 1",
        "np.array([[i], [i + 10]], np.int32)", "tf.reshape(tf.stack([i, i + 10]), (2, 1))", 1)
_gather("all_gather.axis_neg1_matrix.mirrored3", "all_gather of 2x1 matrices along axis -1 on 3 replicas",
        "np.array([[i], [i + 10]], np.int64)", "tf.cast(tf.reshape(tf.stack([i, i + 10]), (2, 1)), tf.int64)", -1, "M3")
_gather("all_gather.scalar_raises", "all_gather of a scalar (rank 0) along axis 0",
        "np.float32(i)", "tf.cast(i, tf.float32)", 0)
_gather("all_gather.uneven_axis0", "all_gather along axis 0 of vectors of length 1 and 2 (different sizes on the gather axis)",
        "np.arange(int(i) + 1, dtype=np.float32)", "tf.range(tf.cast(i, tf.float32) + 1.0)", 0)
_gather("all_gather.uneven_other_axis", "all_gather along axis 0 of shapes (1, 1) and (1, 2): the non-gather axis differs",
        "np.ones((1, int(i) + 1), np.float32)", "tf.ones((1, i + 1))", 0)
_gather("all_gather.axis0.mirrored4", "all_gather of [i] along axis 0 on 4 replicas",
        "np.array([i], np.int32)", "tf.reshape(i, (1,))", 0, "M4")
_gather("all_gather.mirrored1", "all_gather with one replica is the identity",
        "np.array([1.0, 2.0], np.float32)", "tf.constant([1.0, 2.0])", 0, "M1")

case("all_gather.nested", MD,
     "all_gather of a (tensor, dict) structure gathers every leaf",
     """
     def fn():
         i = idist.get_replica_context().replica_id_in_sync_group
         g = idist.get_replica_context().all_gather((np.array([i], np.int32), {"x": np.array([[i, i]], np.float32)}), axis=0)
         return g[0], g[1]["x"]
     a, b = strategy.run(fn)
     result = {"a": [np.asarray(v).tolist() for v in strategy.experimental_local_results(a)],
               "x": [np.asarray(v).tolist() for v in strategy.experimental_local_results(b)]}
     """,
     """
     def fn():
         i = tf.distribute.get_replica_context().replica_id_in_sync_group
         g = tf.distribute.get_replica_context().all_gather((tf.reshape(i, (1,)), {"x": tf.cast(tf.reshape(tf.stack([i, i]), (1, 2)), tf.float32)}), axis=0)
         return g[0], g[1]["x"]
     a, b = strategy.run(fn)
     result = {"a": [v.numpy().tolist() for v in strategy.experimental_local_results(a)],
               "x": [v.numpy().tolist() for v in strategy.experimental_local_results(b)]}
     """)

# ---------------------------------------------------------------- replica context properties
case("replica_context.devices_and_strategy", MD,
     "inside run on MirroredStrategy: ReplicaContext.devices is a nested list [[device]] holding the replica's own device; ctx.strategy.num_replicas_in_sync is 3",
     """
     devs = list(strategy.extended.worker_devices)
     def fn():
         ctx = idist.get_replica_context()
         i = ctx.replica_id_in_sync_group
         return (np.int32(len(ctx.devices)), np.int32(len(ctx.devices[0])),
                 np.int32(int(ctx.devices[0][0] == devs[int(i)])), np.int32(ctx.strategy.num_replicas_in_sync) + i * 0)
     out = strategy.run(fn)
     result = [[np.asarray(v).tolist() for v in strategy.experimental_local_results(x)] for x in out]
     """,
     """
     devs = list(strategy.extended.worker_devices)
     def fn():
         ctx = tf.distribute.get_replica_context()
         i = ctx.replica_id_in_sync_group
         return (tf.constant(len(ctx.devices)), tf.constant(len(ctx.devices[0])),
                 tf.constant(int(ctx.devices[0][0] == devs[int(i)])), tf.constant(ctx.strategy.num_replicas_in_sync) + i * 0)
     out = strategy.run(fn)
     result = [[v.numpy().tolist() for v in strategy.experimental_local_results(x)] for x in out]
     """, strategy="M3")

case("replica_context.default_at_top_level", MD,
     "at top level (no strategy) get_replica_context() is the default replica context: replica 0 of 1, its strategy is the default strategy",
     """
     ctx = idist.get_replica_context()
     result = {"is_none": ctx is None, "replica_id": int(np.asarray(ctx.replica_id_in_sync_group)),
               "num_replicas": ctx.num_replicas_in_sync,
               "strategy_is_get_strategy": ctx.strategy is idist.get_strategy(),
               "has_strategy": idist.has_strategy(), "in_cross_replica": idist.in_cross_replica_context()}
     """,
     """
     ctx = tf.distribute.get_replica_context()
     result = {"is_none": ctx is None, "replica_id": int(ctx.replica_id_in_sync_group),
               "num_replicas": ctx.num_replicas_in_sync,
               "strategy_is_get_strategy": ctx.strategy is tf.distribute.get_strategy(),
               "has_strategy": tf.distribute.has_strategy(), "in_cross_replica": tf.distribute.in_cross_replica_context()}
     """, strategy=None)

case("replica_context.default_strategy_num_replicas", MD,
     "the default strategy (no scope): num_replicas_in_sync 1, run returns a plain value, reduce is the identity",
     """
     s = idist.get_strategy()
     out = s.run(lambda x: x * np.float32(2.0), args=(np.float32(3.0),))
     result = {"num_replicas": s.num_replicas_in_sync, "run": np.asarray(out).tolist(),
               "reduce": np.asarray(s.reduce("SUM", out, axis=None)).tolist(),
               "local": [np.asarray(v).tolist() for v in s.experimental_local_results(out)]}
     """,
     """
     s = tf.distribute.get_strategy()
     out = s.run(lambda x: x * 2.0, args=(tf.constant(3.0),))
     result = {"num_replicas": s.num_replicas_in_sync, "run": out.numpy().tolist(),
               "reduce": s.reduce("SUM", out, axis=None).numpy().tolist(),
               "local": [v.numpy().tolist() for v in s.experimental_local_results(out)]}
     """, strategy=None)

case("replica_context.none_in_scope", MD,
     "inside strategy.scope() (cross-replica context) get_replica_context() is None",
     """
     with strategy.scope():
         inside = idist.get_replica_context() is None
     result = {"inside_scope_none": inside, "outside_scope_none": idist.get_replica_context() is None}
     """,
     """
     with strategy.scope():
         inside = tf.distribute.get_replica_context() is None
     result = {"inside_scope_none": inside, "outside_scope_none": tf.distribute.get_replica_context() is None}
     """)

case("context.functions.one_device", MD,
     "has_strategy / in_cross_replica_context / get_strategy with OneDeviceStrategy: outside, inside scope, inside run (returned as int32 flags)",
     """
     outside = [idist.has_strategy(), idist.in_cross_replica_context(), idist.get_strategy() is strategy]
     with strategy.scope():
         inside = [idist.has_strategy(), idist.in_cross_replica_context(), idist.get_strategy() is strategy]
     out = strategy.run(lambda: np.array([int(idist.has_strategy()), int(idist.in_cross_replica_context()),
                                          int(idist.get_replica_context() is None)], np.int32))
     result = {"outside": outside, "inside": inside, "in_run": np.asarray(out).tolist()}
     """,
     """
     outside = [tf.distribute.has_strategy(), tf.distribute.in_cross_replica_context(), tf.distribute.get_strategy() is strategy]
     with strategy.scope():
         inside = [tf.distribute.has_strategy(), tf.distribute.in_cross_replica_context(), tf.distribute.get_strategy() is strategy]
     out = strategy.run(lambda: tf.constant([int(tf.distribute.has_strategy()), int(tf.distribute.in_cross_replica_context()),
                                             int(tf.distribute.get_replica_context() is None)]))
     result = {"outside": outside, "inside": inside, "in_run": out.numpy().tolist()}
     """, strategy="OD")

case("context.experimental_set_strategy", MD,
     "experimental_set_strategy(s) makes s current without a with-block; experimental_set_strategy(None) clears it",
     """
     idist.experimental_set_strategy(strategy)
     try:
         during = [idist.has_strategy(), idist.get_strategy() is strategy, idist.in_cross_replica_context()]
     finally:
         idist.experimental_set_strategy(None)
     after = [idist.has_strategy(), idist.get_strategy() is strategy, idist.in_cross_replica_context()]
     result = {"during": during, "after": after}
     """,
     """
     tf.distribute.experimental_set_strategy(strategy)
     try:
         during = [tf.distribute.has_strategy(), tf.distribute.get_strategy() is strategy, tf.distribute.in_cross_replica_context()]
     finally:
         tf.distribute.experimental_set_strategy(None)
     after = [tf.distribute.has_strategy(), tf.distribute.get_strategy() is strategy, tf.distribute.in_cross_replica_context()]
     result = {"during": during, "after": after}
     """)

case("context.experimental_set_strategy_inside_scope_raises", MD,
     "experimental_set_strategy called while inside a strategy.scope() raises RuntimeError",
     """
     with strategy.scope():
         idist.experimental_set_strategy(strategy)
     result = "no error"
     """,
     """
     with strategy.scope():
         tf.distribute.experimental_set_strategy(strategy)
     result = "no error"
     """)

case("context.experimental_set_strategy_variable_mirrored", MD,
     "a variable created while a strategy is set with experimental_set_strategy is a distributed (mirrored) variable",
     """
     idist.experimental_set_strategy(strategy)
     try:
         v = idist.Variable(np.float32(1.0))
     finally:
         idist.experimental_set_strategy(None)
     result = {"distributed": isinstance(v, idist.DistributedValues),
               "local": [np.asarray(x).tolist() for x in strategy.experimental_local_results(v)]}
     """,
     """
     tf.distribute.experimental_set_strategy(strategy)
     try:
         v = tf.Variable(1.0)
     finally:
         tf.distribute.experimental_set_strategy(None)
     result = {"distributed": isinstance(v, tf.distribute.DistributedValues),
               "local": [x.numpy().tolist() for x in strategy.experimental_local_results(v)]}
     """)

case("context.nested_scope_other_strategy_raises", MD,
     "entering one strategy's scope inside another strategy's scope raises RuntimeError",
     """
     other = idist.MirroredStrategy(["CPU:2", "CPU:3"])
     try:
         with strategy.scope():
             with other.scope():
                 pass
         result = "no error"
     finally:
         other.close()
     """,
     """
     other = tf.distribute.MirroredStrategy(["CPU:2", "CPU:3"])
     with strategy.scope():
         with other.scope():
             pass
     result = "no error"
     """)

case("context.nested_scope_same_strategy", MD,
     "entering the same strategy's scope twice (nested) is allowed",
     """
     with strategy.scope():
         with strategy.scope():
             inner = [idist.get_strategy() is strategy, idist.in_cross_replica_context()]
         after_inner = idist.get_strategy() is strategy
     result = {"inner": inner, "after_inner": after_inner, "after": idist.has_strategy()}
     """,
     """
     with strategy.scope():
         with strategy.scope():
             inner = [tf.distribute.get_strategy() is strategy, tf.distribute.in_cross_replica_context()]
         after_inner = tf.distribute.get_strategy() is strategy
     result = {"inner": inner, "after_inner": after_inner, "after": tf.distribute.has_strategy()}
     """)

case("context.own_scope_inside_run_raises", MD,
     "entering the strategy's own scope() inside its replica function raises RuntimeError (scope requires cross-replica context)",
     """
     def fn():
         with strategy.scope():
             return np.int32(int(idist.in_cross_replica_context()))
     out = strategy.run(fn)
     result = """ + LR + """
     """,
     """
     def fn():
         with strategy.scope():
             return tf.constant(int(tf.distribute.in_cross_replica_context()))
     out = strategy.run(fn)
     result = """ + LRT + """
     """)

case("context.other_scope_inside_run_raises", MD,
     "entering another strategy's scope inside a replica function raises RuntimeError",
     """
     other = idist.OneDeviceStrategy("CPU:3")
     try:
         def fn():
             with other.scope():
                 return np.float32(1.0)
         out = strategy.run(fn)
         result = """ + LR + """
     finally:
         other.close()
     """,
     """
     other = tf.distribute.OneDeviceStrategy("CPU:3")
     def fn():
         with other.scope():
             return tf.constant(1.0)
     out = strategy.run(fn)
     result = """ + LRT + """
     """)

case("context.run_of_other_strategy_inside_scope", MD,
     "calling strategy.run while inside another strategy's scope",
     """
     other = idist.OneDeviceStrategy("CPU:3")
     try:
         with other.scope():
             out = strategy.run(lambda: np.float32(1.0))
         result = """ + LR + """
     finally:
         other.close()
     """,
     """
     other = tf.distribute.OneDeviceStrategy("CPU:3")
     with other.scope():
         out = strategy.run(lambda: tf.constant(1.0))
     result = """ + LRT + """
     """)

# ---------------------------------------------------------------- merge_call
case("merge_call.merge_fn_sees_per_replica", SE,
     "merge_fn receives the strategy and a PerReplica of the replicas' args; in merge_fn the context is cross-replica and get_replica_context() is None (flags returned through the replicas)",
     """
     def merge_fn(distribution, x):
         vals = [np.asarray(v) for v in distribution.experimental_local_results(x)]
         flags = np.array([int(isinstance(x, idist.PerReplica)), int(idist.in_cross_replica_context()),
                           int(idist.get_replica_context() is None), distribution.num_replicas_in_sync], np.int32)
         return flags, np.stack(vals)
     def fn():
         ctx = idist.get_replica_context()
         i = ctx.replica_id_in_sync_group
         flags, vals = ctx.merge_call(merge_fn, args=(np.float32(i) * np.float32(2.0),))
         return flags + i * 0, vals + np.float32(0.0) * np.float32(i)
     flags, vals = strategy.run(fn)
     result = {"flags": [np.asarray(v).tolist() for v in strategy.experimental_local_results(flags)],
               "values": [np.asarray(v).tolist() for v in strategy.experimental_local_results(vals)]}
     """,
     """
     def merge_fn(distribution, x):
         vals = [v for v in distribution.experimental_local_results(x)]
         flags = tf.constant([int(type(x).__name__ == "PerReplica"), int(tf.distribute.in_cross_replica_context()),
                              int(tf.distribute.get_replica_context() is None), distribution.num_replicas_in_sync])
         return flags, tf.stack(vals)
     def fn():
         ctx = tf.distribute.get_replica_context()
         i = ctx.replica_id_in_sync_group
         flags, vals = ctx.merge_call(merge_fn, args=(tf.cast(i, tf.float32) * 2.0,))
         return flags + i * 0, vals + 0.0 * tf.cast(i, tf.float32)
     flags, vals = strategy.run(fn)
     result = {"flags": [v.numpy().tolist() for v in strategy.experimental_local_results(flags)],
               "values": [v.numpy().tolist() for v in strategy.experimental_local_results(vals)]}
     """, strategy="M3")

case("merge_call.returns_per_replica_arg", SE,
     "merge_fn returning the PerReplica it was given: each replica gets back its own component",
     """
     def fn():
         ctx = idist.get_replica_context()
         x = np.float32(ctx.replica_id_in_sync_group) + np.float32(5.0)
         return ctx.merge_call(lambda s, v: v, args=(x,))
     out = strategy.run(fn)
     result = """ + LR + """
     """,
     """
     def fn():
         ctx = tf.distribute.get_replica_context()
         x = tf.cast(ctx.replica_id_in_sync_group, tf.float32) + 5.0
         return ctx.merge_call(lambda s, v: v, args=(x,))
     out = strategy.run(fn)
     result = """ + LRT + """
     """, strategy="M3")

case("merge_call.returns_plain_value", SE,
     "merge_fn returning a plain value: every replica gets that value",
     """
     def fn():
         ctx = idist.get_replica_context()
         m = ctx.merge_call(lambda s: np.float32(42.0))
         return m + np.float32(ctx.replica_id_in_sync_group)
     out = strategy.run(fn)
     result = """ + LR + """
     """,
     """
     def fn():
         ctx = tf.distribute.get_replica_context()
         m = ctx.merge_call(lambda s: tf.constant(42.0))
         return m + tf.cast(ctx.replica_id_in_sync_group, tf.float32)
     out = strategy.run(fn)
     result = """ + LRT + """
     """)

case("merge_call.kwargs", SE,
     "merge_call with kwargs: merge_fn gets them as PerReplica keyword arguments; each replica adds its id to the merged value",
     """
     def merge_fn(s, a, scale=None):
         return s.reduce("SUM", a, axis=None) * s.reduce("MEAN", scale, axis=None)
     def fn():
         ctx = idist.get_replica_context()
         i = np.float32(ctx.replica_id_in_sync_group)
         return ctx.merge_call(merge_fn, args=(i + np.float32(1.0),), kwargs={"scale": i + np.float32(2.0)}) + i
     out = strategy.run(fn)
     result = """ + LR + """
     """,
     """
     def merge_fn(s, a, scale=None):
         return s.reduce("SUM", a, axis=None) * s.reduce("MEAN", scale, axis=None)
     def fn():
         ctx = tf.distribute.get_replica_context()
         i = tf.cast(ctx.replica_id_in_sync_group, tf.float32)
         return ctx.merge_call(merge_fn, args=(i + 1.0,), kwargs={"scale": i + 2.0}) + i
     out = strategy.run(fn)
     result = """ + LRT + """
     """)

case("merge_call.reduce_to_device_string", SE,
     "in merge_fn, extended.reduce_to(SUM, value, destinations='CPU:0'); each replica multiplies the merged value by 1 (so the results are distinct per replica)",
     """
     def merge_fn(s, x):
         return s.extended.reduce_to(idist.ReduceOp.SUM, x, destinations="CPU:0")
     def fn():
         ctx = idist.get_replica_context()
         return ctx.merge_call(merge_fn, args=(np.float32(ctx.replica_id_in_sync_group) + np.float32(1.0),)) * np.float32(1.0)
     out = strategy.run(fn)
     result = """ + LR + """
     """,
     """
     def merge_fn(s, x):
         return s.extended.reduce_to(tf.distribute.ReduceOp.SUM, x, destinations="CPU:0")
     def fn():
         ctx = tf.distribute.get_replica_context()
         return ctx.merge_call(merge_fn, args=(tf.cast(ctx.replica_id_in_sync_group, tf.float32) + 1.0,)) * 1.0
     out = strategy.run(fn)
     result = """ + LRT + """
     """, strategy="M3")

case("merge_call.nested_structure", SE,
     "merge_call with a nested (tuple, dict) argument: merge_fn sees the structure with PerReplica leaves and returns a tuple; replicas add/subtract their id",
     """
     def merge_fn(s, args):
         a, d = args
         return s.reduce("SUM", a, axis=None), s.reduce("MEAN", d["b"], axis=None)
     def fn():
         ctx = idist.get_replica_context()
         i = np.float32(ctx.replica_id_in_sync_group)
         a, b = ctx.merge_call(merge_fn, args=((i, {"b": i * np.float32(4.0)}),))
         return a + i, b - i
     out = strategy.run(fn)
     result = [[np.asarray(v).tolist() for v in strategy.experimental_local_results(x)] for x in out]
     """,
     """
     def merge_fn(s, args):
         a, d = args
         return s.reduce("SUM", a, axis=None), s.reduce("MEAN", d["b"], axis=None)
     def fn():
         ctx = tf.distribute.get_replica_context()
         i = tf.cast(ctx.replica_id_in_sync_group, tf.float32)
         a, b = ctx.merge_call(merge_fn, args=((i, {"b": i * 4.0}),))
         return a + i, b - i
     out = strategy.run(fn)
     result = [[v.numpy().tolist() for v in strategy.experimental_local_results(x)] for x in out]
     """, strategy="M3")

case("merge_call.same_python_value_collapsed", SE,
     "every replica passes the same Python int (5) to merge_call: merge_fn receives the plain int, not a PerReplica",
     """
     def merge_fn(s, x):
         return np.array([int(isinstance(x, idist.PerReplica)), int(isinstance(x, idist.DistributedValues)), x], np.int32)
     def fn():
         i = idist.get_replica_context().replica_id_in_sync_group
         return idist.get_replica_context().merge_call(merge_fn, args=(5,)) + i * 0
     out = strategy.run(fn)
     result = [np.asarray(v).tolist() for v in strategy.experimental_local_results(out)]
     """,
     """
     def merge_fn(s, x):
         return tf.constant([int(type(x).__name__ == "PerReplica"), int(isinstance(x, tf.distribute.DistributedValues)), x])
     def fn():
         i = tf.distribute.get_replica_context().replica_id_in_sync_group
         return tf.distribute.get_replica_context().merge_call(merge_fn, args=(5,)) + i * 0
     out = strategy.run(fn)
     result = [v.numpy().tolist() for v in strategy.experimental_local_results(out)]
     """)

case("merge_call.top_level_default_context", SE,
     "merge_call on the default replica context at top level: merge_fn gets the default strategy and the plain argument",
     """
     def merge_fn(s, x):
         return [s is idist.get_strategy(), s.num_replicas_in_sync, np.asarray(x).tolist()]
     result = idist.get_replica_context().merge_call(merge_fn, args=(np.float32(3.0),))
     """,
     """
     def merge_fn(s, x):
         return [s is tf.distribute.get_strategy(), s.num_replicas_in_sync, x.numpy().tolist()]
     result = tf.distribute.get_replica_context().merge_call(merge_fn, args=(tf.constant(3.0),))
     """, strategy=None)

case("merge_call.merge_call_inside_merge_fn_raises", SE,
     "calling get_replica_context().merge_call inside merge_fn: get_replica_context() is None there, so TF fails with AttributeError ('NoneType' object has no attribute 'merge_call')",
     """
     def merge_fn(s):
         return idist.get_replica_context().merge_call(lambda s2: np.float32(1.0))
     out = strategy.run(lambda: idist.get_replica_context().merge_call(merge_fn))
     result = """ + LR + """
     """,
     """
     def merge_fn(s):
         return tf.distribute.get_replica_context().merge_call(lambda s2: tf.constant(1.0))
     out = strategy.run(lambda: tf.distribute.get_replica_context().merge_call(merge_fn))
     result = """ + LRT + """
     """)

case("merge_call.run_inside_merge_fn", SE,
     "calling strategy.run inside merge_fn (cross-replica context inside a replica step) is allowed: the inner run's sum is returned to every replica",
     """
     def merge_fn(s):
         inner = s.run(lambda: np.float32(idist.get_replica_context().replica_id_in_sync_group))
         return s.reduce("SUM", inner, axis=None)
     out = strategy.run(lambda: idist.get_replica_context().merge_call(merge_fn) * np.float32(1.0))
     result = """ + LR + """
     """,
     """
     def merge_fn(s):
         inner = s.run(lambda: tf.cast(tf.distribute.get_replica_context().replica_id_in_sync_group, tf.float32))
         return s.reduce("SUM", inner, axis=None)
     out = strategy.run(lambda: tf.distribute.get_replica_context().merge_call(merge_fn) * 1.0)
     result = """ + LRT + """
     """)

case("merge_call.two_merge_calls", SE,
     "two merge_calls in one replica function: the second sees values computed from the first",
     """
     def fn():
         ctx = idist.get_replica_context()
         i = np.float32(ctx.replica_id_in_sync_group) + np.float32(1.0)
         a = ctx.merge_call(lambda s, x: s.reduce("SUM", x, axis=None), args=(i,))
         b = ctx.merge_call(lambda s, x: s.reduce("MEAN", x, axis=None), args=(a * i,))
         return b * np.float32(1.0)
     out = strategy.run(fn)
     result = """ + LR + """
     """,
     """
     def fn():
         ctx = tf.distribute.get_replica_context()
         i = tf.cast(ctx.replica_id_in_sync_group, tf.float32) + 1.0
         a = ctx.merge_call(lambda s, x: s.reduce("SUM", x, axis=None), args=(i,))
         b = ctx.merge_call(lambda s, x: s.reduce("MEAN", x, axis=None), args=(a * i,))
         return b * 1.0
     out = strategy.run(fn)
     result = """ + LRT + """
     """, strategy="M3")

case("merge_call.one_device", SE,
     "OneDeviceStrategy: merge_fn gets the plain value (not a DistributedValues); merge result returned from run",
     """
     def merge_fn(s, x):
         return np.float32(isinstance(x, idist.DistributedValues)), x * np.float32(2.0)
     out = strategy.run(lambda: idist.get_replica_context().merge_call(merge_fn, args=(np.float32(3.0),)))
     result = [np.asarray(x).tolist() for x in out]
     """,
     """
     def merge_fn(s, x):
         return tf.constant(float(isinstance(x, tf.distribute.DistributedValues))), x * 2.0
     out = strategy.run(lambda: tf.distribute.get_replica_context().merge_call(merge_fn, args=(tf.constant(3.0),)))
     result = [x.numpy().tolist() for x in out]
     """, strategy="OD")

case("merge_call.mirrored1_per_replica", SE,
     "one-device MirroredStrategy: merge_fn receives a replica-computed value as a plain value (not a DistributedValues)",
     """
     def merge_fn(s, x):
         return np.float32(isinstance(x, idist.DistributedValues)), x
     out = strategy.run(lambda: idist.get_replica_context().merge_call(merge_fn, args=(np.float32(3.0) * np.float32(2.0),)))
     result = [np.asarray(x).tolist() for x in out]
     """,
     """
     def merge_fn(s, x):
         return tf.constant(float(isinstance(x, tf.distribute.DistributedValues))), x
     out = strategy.run(lambda: tf.distribute.get_replica_context().merge_call(merge_fn, args=(tf.constant(3.0) * 2.0,)))
     result = [x.numpy().tolist() for x in out]
     """, strategy="M1")

case("merge_call.batch_reduce_to_in_merge_fn", SE,
     "in merge_fn, batch_reduce_to(SUM, [(a, a), (b, b)]) with the PerReplica values as destinations",
     """
     def merge_fn(s, a, b):
         ra, rb = s.extended.batch_reduce_to(idist.ReduceOp.SUM, [(a, a), (b, b)])
         return ra, rb
     def fn():
         ctx = idist.get_replica_context()
         i = np.float32(ctx.replica_id_in_sync_group)
         return ctx.merge_call(merge_fn, args=(i, i * np.float32(10.0) + np.float32(1.0)))
     a, b = strategy.run(fn)
     result = [[np.asarray(v).tolist() for v in strategy.experimental_local_results(x)] for x in (a, b)]
     """,
     """
     def merge_fn(s, a, b):
         ra, rb = s.extended.batch_reduce_to(tf.distribute.ReduceOp.SUM, [(a, a), (b, b)])
         return ra, rb
     def fn():
         ctx = tf.distribute.get_replica_context()
         i = tf.cast(ctx.replica_id_in_sync_group, tf.float32)
         return ctx.merge_call(merge_fn, args=(i, i * 10.0 + 1.0))
     a, b = strategy.run(fn)
     result = [[v.numpy().tolist() for v in strategy.experimental_local_results(x)] for x in (a, b)]
     """, strategy="M3")

case("merge_call.result_returned_unchanged_collapsed", SE,
     "fn returns merge_call's result unchanged: every replica returns the very same tensor object, so TF's run returns that one tensor, not a PerReplica",
     """
     def fn():
         ctx = idist.get_replica_context()
         return ctx.merge_call(lambda s, x: s.reduce("SUM", x, axis=None),
                               args=(np.float32(ctx.replica_id_in_sync_group) + np.float32(1.0),))
     out = strategy.run(fn)
     result = {"per_replica": isinstance(out, idist.PerReplica), "value": np.asarray(out).tolist(),
               "local": [np.asarray(v).tolist() for v in strategy.experimental_local_results(out)]}
     """,
     """
     def fn():
         ctx = tf.distribute.get_replica_context()
         return ctx.merge_call(lambda s, x: s.reduce("SUM", x, axis=None),
                               args=(tf.cast(ctx.replica_id_in_sync_group, tf.float32) + 1.0,))
     out = strategy.run(fn)
     result = {"per_replica": type(out).__name__ == "PerReplica", "value": out.numpy().tolist(),
               "local": [v.numpy().tolist() for v in strategy.experimental_local_results(out)]}
     """, strategy="M3")

case("merge_call.in_scope_context_is_none", SE,
     "misuse: get_replica_context().merge_call(...) inside strategy.scope() (cross-replica context, where get_replica_context() is None) fails with AttributeError on None",
     """
     with strategy.scope():
         result = np.asarray(idist.get_replica_context().merge_call(lambda s: np.float32(1.0))).tolist()
     """,
     """
     with strategy.scope():
         result = tf.distribute.get_replica_context().merge_call(lambda s: tf.constant(1.0)).numpy().tolist()
     """)

case("merge_call.merge_fn_not_callable", SE,
     "misuse: merge_call with a non-callable merge_fn inside run",
     """
     out = strategy.run(lambda: idist.get_replica_context().merge_call(3))
     result = [np.asarray(v).tolist() for v in strategy.experimental_local_results(out)]
     """,
     """
     out = strategy.run(lambda: tf.distribute.get_replica_context().merge_call(3))
     result = [v.numpy().tolist() for v in strategy.experimental_local_results(out)]
     """)


