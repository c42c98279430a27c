"""Strategy.run, Strategy.reduce, experimental_local_results,
experimental_distribute_values_from_function."""
from record import case

PS = "parameter_server_strategy.txt"
CS = "central_storage_strategy.txt"
ST = "strategy.txt"

# ---------------------------------------------------------------- run
case("run.one_replica_returns_plain_value", PS,
     "MirroredStrategy with one device: run returns the plain value, not a PerReplica",
     """
     out = strategy.run(lambda: np.float32(1.5) * np.float32(2.0))
     result = {"per_replica": isinstance(out, idist.PerReplica),
               "distributed": isinstance(out, idist.DistributedValues),
               "value": np.asarray(out).tolist(),
               "local_results": [np.asarray(v).tolist() for v in strategy.experimental_local_results(out)]}
     """,
     """
     out = strategy.run(lambda: tf.constant(1.5) * tf.constant(2.0))
     result = {"per_replica": type(out).__name__ == "PerReplica",
               "distributed": isinstance(out, tf.distribute.DistributedValues),
               "value": out.numpy().tolist(),
               "local_results": [v.numpy().tolist() for v in strategy.experimental_local_results(out)]}
     """, strategy="M1")

case("run.two_replicas_per_replica", PS,
     "two replicas: run returns a PerReplica (a DistributedValues) with one value per replica",
     """
     out = strategy.run(lambda: np.float32(1.5) * np.float32(2.0))
     result = {"per_replica": isinstance(out, idist.PerReplica),
               "distributed": isinstance(out, idist.DistributedValues),
               "mirrored": isinstance(out, idist.Mirrored),
               "local_results": [np.asarray(v).tolist() for v in strategy.experimental_local_results(out)]}
     """,
     """
     out = strategy.run(lambda: tf.constant(1.5) * tf.constant(2.0))
     result = {"per_replica": type(out).__name__ == "PerReplica",
               "distributed": isinstance(out, tf.distribute.DistributedValues),
               "mirrored": type(out).__name__ == "Mirrored",
               "local_results": [v.numpy().tolist() for v in strategy.experimental_local_results(out)]}
     """)

case("run.replica_ids.mirrored4", PS,
     "four replicas: replica_id_in_sync_group is an int32 scalar 0..3 on devices CPU:0..CPU:3",
     """
     out = strategy.run(lambda: idist.get_replica_context().replica_id_in_sync_group)
     vals = strategy.experimental_local_results(out)
     result = {"values": [np.asarray(v).tolist() for v in vals],
               "dtypes": [np.asarray(v).dtype.name for v in vals],
               "devices": [v.device for v in vals]}
     """,
     """
     out = strategy.run(lambda: tf.identity(tf.distribute.get_replica_context().replica_id_in_sync_group))
     vals = strategy.experimental_local_results(out)
     result = {"values": [v.numpy().tolist() for v in vals],
               "dtypes": [v.dtype.name for v in vals],
               "devices": [v.device for v in vals]}
     """, strategy="M4")

case("run.replica_ids.mirrored3", PS,
     "three replicas: replica ids and num_replicas_in_sync seen inside run",
     """
     def fn():
         ctx = idist.get_replica_context()
         return ctx.replica_id_in_sync_group, np.int32(ctx.num_replicas_in_sync)
     ids, n = strategy.run(fn)
     result = {"ids": [np.asarray(v).tolist() for v in strategy.experimental_local_results(ids)],
               "n": [np.asarray(v).tolist() for v in strategy.experimental_local_results(n)]}
     """,
     """
     def fn():
         ctx = tf.distribute.get_replica_context()
         return tf.identity(ctx.replica_id_in_sync_group), tf.constant(ctx.num_replicas_in_sync)
     ids, n = strategy.run(fn)
     result = {"ids": [v.numpy().tolist() for v in strategy.experimental_local_results(ids)],
               "n": [v.numpy().tolist() for v in strategy.experimental_local_results(n)]}
     """, strategy="M3")

case("run.kwargs_plain", PS,
     "run with kwargs holding plain values",
     """
     def fn(x, scale=1.0):
         return x * scale
     out = strategy.run(fn, args=(np.float32(2.0),), kwargs={"scale": np.float32(3.0)})
     result = [np.asarray(v).tolist() for v in strategy.experimental_local_results(out)]
     """,
     """
     def fn(x, scale=1.0):
         return x * scale
     out = strategy.run(fn, args=(tf.constant(2.0),), kwargs={"scale": tf.constant(3.0)})
     result = [v.numpy().tolist() for v in strategy.experimental_local_results(out)]
     """)

case("run.kwargs_distributed_values", PS,
     "a DistributedValues passed in kwargs: each replica gets its own component",
     """
     dv = strategy.experimental_distribute_values_from_function(
         lambda ctx: np.float32(10.0 * (ctx.replica_id_in_sync_group + 1)))
     def fn(a, b=None):
         return a + b
     out = strategy.run(fn, args=(np.float32(1.0),), kwargs={"b": dv})
     result = [np.asarray(v).tolist() for v in strategy.experimental_local_results(out)]
     """,
     """
     dv = strategy.experimental_distribute_values_from_function(
         lambda ctx: tf.constant(10.0 * (ctx.replica_id_in_sync_group + 1)))
     def fn(a, b=None):
         return a + b
     out = strategy.run(fn, args=(tf.constant(1.0),), kwargs={"b": dv})
     result = [v.numpy().tolist() for v in strategy.experimental_local_results(out)]
     """, strategy="M3")

case("run.nested_args_with_distributed_values", PS,
     "DistributedValues nested inside a tuple and a dict argument",
     """
     dv = strategy.experimental_distribute_values_from_function(
         lambda ctx: np.int32(ctx.replica_id_in_sync_group))
     def fn(pair, d):
         a, b = pair
         return a * b + d["k"]
     out = strategy.run(fn, args=((dv, np.int32(10)), {"k": dv}))
     result = [np.asarray(v).tolist() for v in strategy.experimental_local_results(out)]
     """,
     """
     dv = strategy.experimental_distribute_values_from_function(
         lambda ctx: tf.constant(ctx.replica_id_in_sync_group))
     def fn(pair, d):
         a, b = pair
         return a * b + d["k"]
     out = strategy.run(fn, args=((dv, tf.constant(10)), {"k": dv}))
     result = [v.numpy().tolist() for v in strategy.experimental_local_results(out)]
     """)

case("run.returns_tuple", PS,
     "fn returns a tuple: run returns a tuple of PerReplica",
     """
     def fn():
         i = idist.get_replica_context().replica_id_in_sync_group
         return i, np.float32(i) * np.float32(0.5)
     out = strategy.run(fn)
     result = {"type": type(out).__name__, "len": len(out),
               "first": [np.asarray(v).tolist() for v in strategy.experimental_local_results(out[0])],
               "second": [np.asarray(v).tolist() for v in strategy.experimental_local_results(out[1])],
               "elements_per_replica": [isinstance(x, idist.PerReplica) for x in out]}
     """,
     """
     def fn():
         i = tf.distribute.get_replica_context().replica_id_in_sync_group
         return tf.identity(i), tf.cast(i, tf.float32) * 0.5
     out = strategy.run(fn)
     result = {"type": type(out).__name__, "len": len(out),
               "first": [v.numpy().tolist() for v in strategy.experimental_local_results(out[0])],
               "second": [v.numpy().tolist() for v in strategy.experimental_local_results(out[1])],
               "elements_per_replica": [type(x).__name__ == "PerReplica" for x in out]}
     """)

case("run.returns_dict", PS,
     "fn returns a dict: run returns a dict of PerReplica",
     """
     def fn():
         i = idist.get_replica_context().replica_id_in_sync_group
         return {"loss": np.float32(i) + np.float32(1.0), "count": np.int64(2) * np.int64(i)}
     out = strategy.run(fn)
     result = {"type": type(out).__name__, "keys": sorted(out),
               "loss": [np.asarray(v).tolist() for v in strategy.experimental_local_results(out["loss"])],
               "count": [np.asarray(v).tolist() for v in strategy.experimental_local_results(out["count"])],
               "count_dtype": np.asarray(strategy.experimental_local_results(out["count"])[0]).dtype.name}
     """,
     """
     def fn():
         i = tf.distribute.get_replica_context().replica_id_in_sync_group
         return {"loss": tf.cast(i, tf.float32) + 1.0, "count": tf.constant(2, tf.int64) * tf.cast(i, tf.int64)}
     out = strategy.run(fn)
     result = {"type": type(out).__name__, "keys": sorted(out),
               "loss": [v.numpy().tolist() for v in strategy.experimental_local_results(out["loss"])],
               "count": [v.numpy().tolist() for v in strategy.experimental_local_results(out["count"])],
               "count_dtype": strategy.experimental_local_results(out["count"])[0].dtype.name}
     """, strategy="M3")

case("run.returns_list", PS,
     "fn returns a list: run returns a list of PerReplica",
     """
     out = strategy.run(lambda: [np.int32(1) + idist.get_replica_context().replica_id_in_sync_group, np.int32(5)])
     result = {"type": type(out).__name__,
               "values": [[np.asarray(v).tolist() for v in strategy.experimental_local_results(x)] for x in out]}
     """,
     """
     out = strategy.run(lambda: [tf.constant(1) + tf.distribute.get_replica_context().replica_id_in_sync_group, tf.constant(5)])
     result = {"type": type(out).__name__,
               "values": [[v.numpy().tolist() for v in strategy.experimental_local_results(x)] for x in out]}
     """)

case("run.local_results_of_nested", PS,
     "experimental_local_results of a nested run result gives one nested structure per replica",
     """
     def fn():
         i = idist.get_replica_context().replica_id_in_sync_group
         return (i, {"a": i * np.int32(2)})
     out = strategy.run(fn)
     lr = strategy.experimental_local_results(out)
     result = [[np.asarray(r[0]).tolist(), np.asarray(r[1]["a"]).tolist()] for r in lr]
     """,
     """
     def fn():
         i = tf.distribute.get_replica_context().replica_id_in_sync_group
         return (tf.identity(i), {"a": i * 2})
     out = strategy.run(fn)
     lr = strategy.experimental_local_results(out)
     result = [[r[0].numpy().tolist(), r[1]["a"].numpy().tolist()] for r in lr]
     """)

case("run.returns_none", PS,
     "fn returning None: run returns None",
     """
     out = strategy.run(lambda: None)
     result = out is None
     """,
     """
     out = strategy.run(lambda: None)
     result = out is None
     """)

case("run.returns_none_one_replica", PS,
     "fn returning None on a one-device MirroredStrategy: run returns None",
     """
     out = strategy.run(lambda: None)
     result = out is None
     """,
     """
     out = strategy.run(lambda: None)
     result = out is None
     """, strategy="M1")

case("run.returns_python_int_collapsed", PS,
     "every replica returns the same Python object (the int 7): TF returns that one object, not a PerReplica",
     """
     out = strategy.run(lambda: 7)
     result = {"per_replica": isinstance(out, idist.PerReplica), "value": out}
     """,
     """
     out = strategy.run(lambda: 7)
     result = {"per_replica": type(out).__name__ == "PerReplica", "value": out}
     """)

case("run.returns_unchanged_argument_collapsed", PS,
     "fn returns its non-distributed argument unchanged: every replica returns the very same object and TF hands that object back (not a PerReplica)",
     """
     x = np.array([1.0, 2.0], np.float32)
     out = strategy.run(lambda a: a, args=(x,))
     result = {"per_replica": isinstance(out, idist.PerReplica),
               "local_results": [np.asarray(v).tolist() for v in strategy.experimental_local_results(out)]}
     """,
     """
     x = tf.constant([1.0, 2.0])
     out = strategy.run(lambda a: a, args=(x,))
     result = {"per_replica": type(out).__name__ == "PerReplica",
               "local_results": [v.numpy().tolist() for v in strategy.experimental_local_results(out)]}
     """)

case("run.mixed_return_distributed_and_constant", PS,
     "fn returns (computed tensor, shared Python int): the first element is a PerReplica, the shared int stays a plain int",
     """
     out = strategy.run(lambda: (idist.get_replica_context().replica_id_in_sync_group + np.int32(1), 3))
     result = {"first_per_replica": isinstance(out[0], idist.PerReplica),
               "first": [np.asarray(v).tolist() for v in strategy.experimental_local_results(out[0])],
               "second": out[1]}
     """,
     """
     out = strategy.run(lambda: (tf.distribute.get_replica_context().replica_id_in_sync_group + 1, 3))
     result = {"first_per_replica": type(out[0]).__name__ == "PerReplica",
               "first": [v.numpy().tolist() for v in strategy.experimental_local_results(out[0])],
               "second": out[1]}
     """)

case("run.float64_input", PS,
     "a float64 input keeps its dtype through run",
     """
     out = strategy.run(lambda x: x * 2.0, args=(np.array([1.5, 2.5], np.float64),))
     vals = strategy.experimental_local_results(out)
     result = {"values": [np.asarray(v).tolist() for v in vals], "dtype": np.asarray(vals[0]).dtype.name}
     """,
     """
     out = strategy.run(lambda x: x * 2.0, args=(tf.constant([1.5, 2.5], tf.float64),))
     vals = strategy.experimental_local_results(out)
     result = {"values": [v.numpy().tolist() for v in vals], "dtype": vals[0].dtype.name}
     """)

case("run.nested_run_raises", PS,
     "calling strategy.run inside a replica function (replica context) raises RuntimeError",
     """
     def inner():
         return strategy.run(lambda: np.float32(1.0))
     result = strategy.run(inner)
     """,
     """
     def inner():
         return strategy.run(lambda: tf.constant(1.0))
     result = strategy.run(inner)
     """)

case("run.other_strategys_per_replica", PS,
     "passing a PerReplica made by another 2-replica strategy (on CPU:2, CPU:3) into this strategy's run: TF does not check the owner, replica i simply gets component i",
     """
     other = idist.MirroredStrategy(["CPU:2", "CPU:3"])
     try:
         pr = other.run(lambda: idist.get_replica_context().replica_id_in_sync_group)
         out = strategy.run(lambda x: x + np.int32(1), args=(pr,))
         result = [np.asarray(v).tolist() for v in strategy.experimental_local_results(out)]
     finally:
         other.close()
     """,
     """
     other = tf.distribute.MirroredStrategy(["CPU:2", "CPU:3"])
     pr = other.run(lambda: tf.identity(tf.distribute.get_replica_context().replica_id_in_sync_group))
     out = strategy.run(lambda x: x + 1, args=(pr,))
     result = [v.numpy().tolist() for v in strategy.experimental_local_results(out)]
     """)

case("run.per_replica_wrong_count_takes_first", PS,
     "a PerReplica from a 3-replica strategy passed to a 2-replica strategy's run: TF does not raise, replica i gets component i (the third is ignored)",
     """
     other = idist.MirroredStrategy(["CPU:0", "CPU:1", "CPU:2"])
     try:
         pr = other.experimental_distribute_values_from_function(lambda ctx: np.float32(ctx.replica_id_in_sync_group))
         out = strategy.run(lambda x: x * np.float32(2.0), args=(pr,))
         result = [np.asarray(v).tolist() for v in strategy.experimental_local_results(out)]
     finally:
         other.close()
     """,
     """
     other = tf.distribute.MirroredStrategy(["CPU:0", "CPU:1", "CPU:2"])
     pr = other.experimental_distribute_values_from_function(lambda ctx: tf.constant(float(ctx.replica_id_in_sync_group)))
     out = strategy.run(lambda x: x * 2.0, args=(pr,))
     result = [v.numpy().tolist() for v in strategy.experimental_local_results(out)]
     """)

case("run.exception_in_fn_propagates", PS,
     "an exception raised inside fn on the replicas reaches the caller with its own class",
     """
     def fn():
         raise NotImplementedError("nope")
     result = strategy.run(fn)
     """,
     """
     def fn():
         raise NotImplementedError("nope")
     result = strategy.run(fn)
     """)

case("run.in_cross_replica_inside_run", ST,
     "inside run: in_cross_replica_context() is False, get_replica_context() is not None, get_strategy() is the strategy",
     """
     def fn():
         return np.int32(int(idist.in_cross_replica_context())), np.int32(int(idist.get_replica_context() is None)), np.int32(int(idist.get_strategy() is strategy)), np.int32(int(idist.has_strategy()))
     out = strategy.run(fn)
     result = [[np.asarray(v).tolist() for v in strategy.experimental_local_results(x)] for x in out]
     """,
     """
     def fn():
         return tf.constant(int(tf.distribute.in_cross_replica_context())), tf.constant(int(tf.distribute.get_replica_context() is None)), tf.constant(int(tf.distribute.get_strategy() is strategy)), tf.constant(int(tf.distribute.has_strategy()))
     out = strategy.run(fn)
     result = [[v.numpy().tolist() for v in strategy.experimental_local_results(x)] for x in out]
     """)

# ---------------------------------------------------------------- reduce
def _reduce_case(id, what, op_i, op_tf, axis, rows, dtype="float32", strategy="M2", seed=PS):
    case(id, seed, what,
         f"""
         rows = {rows!r}
         v = strategy.experimental_distribute_values_from_function(
             lambda ctx: np.asarray(rows[ctx.replica_id_in_sync_group], np.{dtype}))
         r = strategy.reduce({op_i}, v, axis={axis!r})
         result = {{"value": np.asarray(r).tolist(), "dtype": np.asarray(r).dtype.name}}
         """,
         f"""
         rows = {rows!r}
         v = strategy.experimental_distribute_values_from_function(
             lambda ctx: tf.constant(rows[ctx.replica_id_in_sync_group], tf.{dtype}))
         r = strategy.reduce({op_tf}, v, axis={axis!r})
         result = {{"value": r.numpy().tolist(), "dtype": r.dtype.name}}
         """, strategy=strategy)

_reduce_case("reduce.enum_sum.axis_none", "ReduceOp.SUM enum, axis=None", "idist.ReduceOp.SUM",
             "tf.distribute.ReduceOp.SUM", None, [[1., 2.], [3., 4.]])
_reduce_case("reduce.enum_mean.axis_none", "ReduceOp.MEAN enum, axis=None", "idist.ReduceOp.MEAN",
             "tf.distribute.ReduceOp.MEAN", None, [[1., 2.], [3., 5.]])
_reduce_case("reduce.string_lower_sum", "reduce op given as the lower-case string 'sum'", '"sum"', '"sum"',
             None, [[1., 2.], [3., 4.]])
_reduce_case("reduce.string_mixed_case_mean", "reduce op given as 'Mean' (mixed case)", '"Mean"', '"Mean"',
             None, [[1., 2.], [3., 5.]])
_reduce_case("reduce.string_upper_mean", "reduce op given as 'MEAN'", '"MEAN"', '"MEAN"',
             0, [[1., 2.], [3., 5.]])
_reduce_case("reduce.bad_string_max_raises", "an unknown reduce op string ('max') raises ValueError", '"max"',
             '"max"', None, [[1., 2.], [3., 4.]])
_reduce_case("reduce.bad_string_empty_raises", "an empty reduce op string raises ValueError", '""', '""',
             None, [[1., 2.], [3., 4.]])
_reduce_case("reduce.int32_sum", "int32 SUM keeps int32", '"SUM"', '"SUM"', None, [[1, 2], [3, 4]], "int32")
_reduce_case("reduce.int32_mean_axis_none", "int32 MEAN across replicas: TF gives float64 (true division)",
             '"MEAN"', '"MEAN"', None, [[1, 2], [2, 5]], "int32")
_reduce_case("reduce.int32_mean_axis_0", "int32 MEAN with axis=0: dtype as TF gives it",
             '"MEAN"', '"MEAN"', 0, [[1, 2], [2, 6]], "int32")
_reduce_case("reduce.int64_sum_axis_0", "int64 SUM with axis=0", '"SUM"', '"SUM"', 0,
             [[1, 2, 3], [4, 5, 6]], "int64")
_reduce_case("reduce.int64_mean_axis_none", "int64 MEAN across replicas", '"MEAN"', '"MEAN"', None,
             [[1, 2, 3], [4, 5, 7]], "int64")
_reduce_case("reduce.float64_mean_axis_0", "float64 MEAN with axis=0 keeps float64", '"MEAN"', '"MEAN"', 0,
             [[1., 2.], [3., 4.]], "float64")
_reduce_case("reduce.matrix_sum_axis_1", "2x2 per-replica matrices, SUM with axis=1",
             '"SUM"', '"SUM"', 1, [[[1., 2.], [3., 4.]], [[10., 20.], [30., 40.]]])
_reduce_case("reduce.matrix_mean_axis_1", "2x2 per-replica matrices, MEAN with axis=1",
             '"MEAN"', '"MEAN"', 1, [[[1., 2.], [3., 4.]], [[10., 20.], [30., 40.]]])
_reduce_case("reduce.matrix_sum_axis_neg1", "2x3 per-replica matrices, SUM with axis=-1",
             '"SUM"', '"SUM"', -1, [[[1., 2., 3.], [4., 5., 6.]], [[1., 1., 1.], [2., 2., 2.]]])
_reduce_case("reduce.matrix_mean_axis_neg2", "2x3 per-replica matrices, MEAN with axis=-2",
             '"MEAN"', '"MEAN"', -2, [[[1., 2., 3.], [4., 5., 6.]], [[1., 1., 1.], [2., 2., 2.]]])
_reduce_case("reduce.matrix_sum_axis_0", "2x2 per-replica matrices, SUM with axis=0 gives a vector",
             '"SUM"', '"SUM"', 0, [[[1., 2.], [3., 4.]], [[10., 20.], [30., 40.]]])
_reduce_case("reduce.mirrored3_mean_axis_0_uneven", "three replicas with batches of 3, 2 and 1: MEAN with axis=0 divides by 6",
             '"MEAN"', '"MEAN"', 0, [[1., 2., 3.], [4., 5.], [6.]], strategy="M3")
_reduce_case("reduce.mirrored3_sum_axis_0_with_empty", "three replicas, one holding an empty batch: SUM axis=0",
             '"SUM"', '"SUM"', 0, [[1., 2.], [3., 4.], []], strategy="M3")
_reduce_case("reduce.mirrored3_mean_axis_0_with_empty", "three replicas, one holding an empty batch: MEAN axis=0 divides by 4",
             '"MEAN"', '"MEAN"', 0, [[1., 2.], [3., 4.], []], strategy="M3")
_reduce_case("reduce.mirrored4_mean_axis_none", "four replicas, MEAN axis=None",
             '"MEAN"', '"MEAN"', None, [[1., 2.], [3., 4.], [5., 6.], [7., 9.]], strategy="M4")
_reduce_case("reduce.mirrored4_sum_axis_0_int32", "four replicas, int32 SUM axis=0",
             '"SUM"', '"SUM"', 0, [[1, 2], [3, 4], [5, 6], [7, 9]], "int32", strategy="M4")
_reduce_case("reduce.shape_mismatch_axis_none_3", "shapes (2,) and (3,) with axis=None cannot be combined",
             '"MEAN"', '"MEAN"', None, [[1., 2.], [3., 4., 5.]])
_reduce_case("reduce.axis_out_of_range", "axis=2 on 1-D per-replica values",
             '"SUM"', '"SUM"', 2, [[1., 2.], [3., 4.]])
_reduce_case("reduce.axis_on_scalars", "axis=0 on scalar per-replica values",
             '"SUM"', '"SUM"', 0, [1., 2.])
_reduce_case("reduce.one_device_axis_0", "OneDeviceStrategy with a PerReplica from values_from_function, MEAN axis=0",
             '"MEAN"', '"MEAN"', 0, [[1., 2., 6.]], strategy="OD")
_reduce_case("reduce.mirrored1_sum_axis_0", "one-device MirroredStrategy, SUM axis=0",
             '"SUM"', '"SUM"', 0, [[1., 2., 6.]], strategy="M1")

case("reduce.plain_value_sum_raises", PS,
     "reduce('SUM') of a plain (non-distributed) value under a 2-replica MirroredStrategy raises ValueError",
     """
     result = np.asarray(strategy.reduce("SUM", np.float32(3.0), axis=None)).tolist()
     """,
     """
     result = strategy.reduce("SUM", tf.constant(3.0), axis=None).numpy().tolist()
     """)

case("reduce.plain_value_mean_identity", PS,
     "reduce('MEAN') of a plain value under a 2-replica MirroredStrategy returns it unchanged",
     """
     result = np.asarray(strategy.reduce("MEAN", np.array([3.0, 4.0], np.float32), axis=None)).tolist()
     """,
     """
     result = strategy.reduce("MEAN", tf.constant([3.0, 4.0]), axis=None).numpy().tolist()
     """)

case("reduce.plain_value_mean_axis_0", PS,
     "reduce('MEAN', axis=0) of a plain vector under a 2-replica MirroredStrategy",
     """
     result = np.asarray(strategy.reduce("MEAN", np.array([3.0, 5.0], np.float32), axis=0)).tolist()
     """,
     """
     result = strategy.reduce("MEAN", tf.constant([3.0, 5.0]), axis=0).numpy().tolist()
     """)

case("reduce.one_device_plain_sum", PS,
     "OneDeviceStrategy: reduce of a plain value is the value itself (SUM, axis=None)",
     """
     r = strategy.reduce("SUM", np.array([1.0, 2.0], np.float32), axis=None)
     result = {"value": np.asarray(r).tolist(), "device": r.device}
     """,
     """
     r = strategy.reduce("SUM", tf.constant([1.0, 2.0]), axis=None)
     result = {"value": r.numpy().tolist(), "device": r.device}
     """, strategy="OD")

case("reduce.one_device_plain_sum_axis_0", PS,
     "OneDeviceStrategy: reduce('SUM', plain vector, axis=0) sums the vector",
     """
     r = strategy.reduce("SUM", np.array([1.0, 2.0, 4.0], np.float32), axis=0)
     result = np.asarray(r).tolist()
     """,
     """
     r = strategy.reduce("SUM", tf.constant([1.0, 2.0, 4.0]), axis=0)
     result = r.numpy().tolist()
     """, strategy="OD")

case("reduce.one_device_run_result", PS,
     "OneDeviceStrategy: run result (a plain value) reduced with MEAN axis=None",
     """
     out = strategy.run(lambda: np.array([2.0, 4.0], np.float32))
     result = np.asarray(strategy.reduce(idist.ReduceOp.MEAN, out, axis=None)).tolist()
     """,
     """
     out = strategy.run(lambda: tf.constant([2.0, 4.0]))
     result = strategy.reduce(tf.distribute.ReduceOp.MEAN, out, axis=None).numpy().tolist()
     """, strategy="OD")

case("reduce.nested_structure", PS,
     "reduce of a nested structure (tuple and dict of PerReplica) reduces every leaf and keeps the structure",
     """
     def fn():
         i = idist.get_replica_context().replica_id_in_sync_group
         x = np.float32(i) + np.float32(1.0)
         return (x, {"a": x * np.float32(10.0)})
     out = strategy.run(fn)
     r = strategy.reduce("SUM", out, axis=None)
     result = {"type": type(r).__name__, "first": np.asarray(r[0]).tolist(), "a": np.asarray(r[1]["a"]).tolist()}
     """,
     """
     def fn():
         i = tf.distribute.get_replica_context().replica_id_in_sync_group
         x = tf.cast(i, tf.float32) + 1.0
         return (x, {"a": x * 10.0})
     out = strategy.run(fn)
     r = strategy.reduce("SUM", out, axis=None)
     result = {"type": type(r).__name__, "first": r[0].numpy().tolist(), "a": r[1]["a"].numpy().tolist()}
     """)

case("reduce.result_device_mirrored3", PS,
     "the reduced value of a run result lives on the host device CPU:0 whatever the replicas' devices",
     """
     v = strategy.run(lambda: np.float32(idist.get_replica_context().replica_id_in_sync_group))
     r = strategy.reduce("SUM", v, axis=None)
     result = {"value": np.asarray(r).tolist(), "device": r.device,
               "component_devices": [x.device for x in strategy.experimental_local_results(v)]}
     """,
     """
     v = strategy.run(lambda: tf.cast(tf.distribute.get_replica_context().replica_id_in_sync_group, tf.float32))
     r = strategy.reduce("SUM", v, axis=None)
     result = {"value": r.numpy().tolist(), "device": r.device,
               "component_devices": [x.device for x in strategy.experimental_local_results(v)]}
     """, strategy="M3")

case("reduce.in_replica_context_raises", PS,
     "strategy.reduce called inside run (replica context) raises RuntimeError",
     """
     def fn():
         return strategy.reduce("SUM", np.float32(1.0), axis=None)
     result = strategy.run(fn)
     """,
     """
     def fn():
         return strategy.reduce("SUM", tf.constant(1.0), axis=None)
     result = strategy.run(fn)
     """)

case("reduce.other_strategys_per_replica", PS,
     "strategy.reduce of a PerReplica made by another (same-size) strategy",
     """
     other = idist.MirroredStrategy(["CPU:2", "CPU:3"])
     try:
         pr = other.experimental_distribute_values_from_function(lambda ctx: np.float32(ctx.replica_id_in_sync_group + 1))
         result = np.asarray(strategy.reduce("SUM", pr, axis=None)).tolist()
     finally:
         other.close()
     """,
     """
     other = tf.distribute.MirroredStrategy(["CPU:2", "CPU:3"])
     pr = other.experimental_distribute_values_from_function(lambda ctx: tf.constant(float(ctx.replica_id_in_sync_group + 1)))
     result = strategy.reduce("SUM", pr, axis=None).numpy().tolist()
     """)

case("reduce.mirrored_variable_sum_raises", PS,
     "reduce('SUM') of a mirrored variable: TF 2.21 fails with an AssertionError (an internal assert; TF raises AssertionError, not one of the usual classes)",
     """
     with strategy.scope():
         v = idist.Variable(np.float32(2.0))
     result = np.asarray(strategy.reduce("SUM", v, axis=None)).tolist()
     """,
     """
     with strategy.scope():
         v = tf.Variable(2.0)
     result = strategy.reduce("SUM", v, axis=None).numpy().tolist()
     """)

case("reduce.mirrored_variable_mean", PS,
     "reduce('MEAN') of a mirrored variable gives its value",
     """
     with strategy.scope():
         v = idist.Variable(np.float32(2.0))
     result = np.asarray(strategy.reduce("MEAN", v, axis=None)).tolist()
     """,
     """
     with strategy.scope():
         v = tf.Variable(2.0)
     result = strategy.reduce("MEAN", v, axis=None).numpy().tolist()
     """)

case("reduce.sync_on_read_variable", PS,
     "reduce('SUM') of a sync-on-read SUM variable whose replicas hold 1.0 and 2.0",
     """
     with strategy.scope():
         v = idist.Variable(np.float32(0.0), synchronization=idist.VariableSynchronization.ON_READ,
                            aggregation=idist.VariableAggregation.SUM)
     strategy.run(lambda: v.assign(np.float32(idist.get_replica_context().replica_id_in_sync_group) + np.float32(1.0)))
     result = np.asarray(strategy.reduce("SUM", v, axis=None)).tolist()
     """,
     """
     with strategy.scope():
         v = tf.Variable(0.0, synchronization=tf.VariableSynchronization.ON_READ,
                         aggregation=tf.VariableAggregation.SUM)
     strategy.run(lambda: v.assign(tf.cast(tf.distribute.get_replica_context().replica_id_in_sync_group, tf.float32) + 1.0))
     result = strategy.reduce("SUM", v, axis=None).numpy().tolist()
     """)

# ---------------------------------------------------------------- local results
case("local_results.plain_tuple_value", CS,
     "experimental_local_results of a plain (non-distributed) tuple: TF maps over the nest and returns one copy of the tuple per replica (len 2 on 2 replicas), unlike a plain leaf which gives (value,)",
     """
     r = strategy.experimental_local_results((np.float32(1.0), np.float32(2.0)))
     result = {"len": len(r), "value": [[np.asarray(x).tolist() for x in item] for item in r]}
     """,
     """
     r = strategy.experimental_local_results((tf.constant(1.0), tf.constant(2.0)))
     result = {"len": len(r), "value": [[x.numpy().tolist() for x in item] for item in r]}
     """)

case("local_results.python_int", CS,
     "experimental_local_results of a Python int returns (int,)",
     """
     r = strategy.experimental_local_results(3)
     result = {"is_tuple": isinstance(r, tuple), "value": list(r)}
     """,
     """
     r = strategy.experimental_local_results(3)
     result = {"is_tuple": isinstance(r, tuple), "value": list(r)}
     """, strategy="M3")

case("local_results.per_replica_mirrored4", CS,
     "experimental_local_results of a 4-replica PerReplica is a tuple of 4",
     """
     v = strategy.experimental_distribute_values_from_function(lambda ctx: np.float32(ctx.replica_id_in_sync_group) * np.float32(1.5))
     r = strategy.experimental_local_results(v)
     result = {"is_tuple": isinstance(r, tuple), "values": [np.asarray(x).tolist() for x in r]}
     """,
     """
     v = strategy.experimental_distribute_values_from_function(lambda ctx: tf.constant(ctx.replica_id_in_sync_group * 1.5))
     r = strategy.experimental_local_results(v)
     result = {"is_tuple": isinstance(r, tuple), "values": [x.numpy().tolist() for x in r]}
     """, strategy="M4")

case("local_results.mirrored_variable", CS,
     "experimental_local_results of a mirrored variable: one component variable per replica, with names Variable:0, Variable/replica_1:0, ...",
     """
     with strategy.scope():
         v = idist.Variable(np.float32(3.0))
     r = strategy.experimental_local_results(v)
     result = {"values": [np.asarray(x).tolist() for x in r], "names": [x.name for x in r],
               "devices": [x.device for x in r]}
     """,
     """
     with strategy.scope():
         v = tf.Variable(3.0)
     r = strategy.experimental_local_results(v)
     result = {"values": [x.numpy().tolist() for x in r], "names": [x.name for x in r],
               "devices": [x.device for x in r]}
     """, strategy="M3")

case("local_results.variable_outside_scope", CS,
     "experimental_local_results of a variable created outside any scope: (variable,)",
     """
     v = idist.Variable(np.float32(3.0))
     r = strategy.experimental_local_results(v)
     result = {"len": len(r), "is_same": r[0] is v, "value": np.asarray(r[0]).tolist()}
     """,
     """
     v = tf.Variable(3.0)
     r = strategy.experimental_local_results(v)
     result = {"len": len(r), "is_same": r[0] is v, "value": r[0].numpy().tolist()}
     """)

case("local_results.one_device_run", CS,
     "OneDeviceStrategy: experimental_local_results of a run result is a 1-tuple",
     """
     out = strategy.run(lambda: np.float32(4.0))
     r = strategy.experimental_local_results(out)
     result = {"is_tuple": isinstance(r, tuple), "values": [np.asarray(x).tolist() for x in r],
               "devices": [x.device for x in r]}
     """,
     """
     out = strategy.run(lambda: tf.constant(4.0))
     r = strategy.experimental_local_results(out)
     result = {"is_tuple": isinstance(r, tuple), "values": [x.numpy().tolist() for x in r],
               "devices": [x.device for x in r]}
     """, strategy="OD")

case("local_results.one_device_cpu1_device", CS,
     "OneDeviceStrategy('CPU:1'): run results live on CPU:1",
     """
     out = strategy.run(lambda: np.float32(4.0))
     r = strategy.experimental_local_results(out)
     result = {"values": [np.asarray(x).tolist() for x in r], "devices": [x.device for x in r]}
     """,
     """
     out = strategy.run(lambda: tf.constant(4.0))
     r = strategy.experimental_local_results(out)
     result = {"values": [x.numpy().tolist() for x in r], "devices": [x.device for x in r]}
     """, strategy="OD1")

# ---------------------------------------------------------------- values from function
case("values_from_function.mirrored4_float64", CS,
     "value_fn returning float64 arrays depending on the replica id (4 replicas)",
     """
     dv = strategy.experimental_distribute_values_from_function(
         lambda ctx: np.full((2,), ctx.replica_id_in_sync_group, np.float64))
     vals = strategy.experimental_local_results(dv)
     result = {"values": [np.asarray(v).tolist() for v in vals], "dtype": np.asarray(vals[0]).dtype.name,
               "per_replica": isinstance(dv, idist.PerReplica)}
     """,
     """
     dv = strategy.experimental_distribute_values_from_function(
         lambda ctx: tf.fill((2,), tf.constant(ctx.replica_id_in_sync_group, tf.float64)))
     vals = strategy.experimental_local_results(dv)
     result = {"values": [v.numpy().tolist() for v in vals], "dtype": vals[0].dtype.name,
               "per_replica": type(dv).__name__ == "PerReplica"}
     """, strategy="M4")

case("values_from_function.context_fields", CS,
     "the ValueContext each replica sees: [replica_id_in_sync_group, num_replicas_in_sync] (3 replicas)",
     """
     dv = strategy.experimental_distribute_values_from_function(
         lambda ctx: np.array([ctx.replica_id_in_sync_group, ctx.num_replicas_in_sync], np.int32))
     result = [np.asarray(v).tolist() for v in strategy.experimental_local_results(dv)]
     """,
     """
     dv = strategy.experimental_distribute_values_from_function(
         lambda ctx: tf.constant([ctx.replica_id_in_sync_group, ctx.num_replicas_in_sync]))
     result = [v.numpy().tolist() for v in strategy.experimental_local_results(dv)]
     """, strategy="M3")

case("values_from_function.tuple_return", CS,
     "value_fn returning a tuple: local results are tuples",
     """
     dv = strategy.experimental_distribute_values_from_function(
         lambda ctx: (np.int32(ctx.replica_id_in_sync_group), np.float32(ctx.replica_id_in_sync_group) * np.float32(2.0)))
     out = strategy.run(lambda a: a[0] + np.int32(1), args=(dv,))
     result = {"local": [[np.asarray(x).tolist() for x in r] for r in strategy.experimental_local_results(dv)],
               "run": [np.asarray(v).tolist() for v in strategy.experimental_local_results(out)]}
     """,
     """
     dv = strategy.experimental_distribute_values_from_function(
         lambda ctx: (tf.constant(ctx.replica_id_in_sync_group), tf.constant(ctx.replica_id_in_sync_group * 2.0)))
     out = strategy.run(lambda a: a[0] + 1, args=(dv,))
     result = {"local": [[x.numpy().tolist() for x in r] for r in strategy.experimental_local_results(dv)],
               "run": [v.numpy().tolist() for v in strategy.experimental_local_results(out)]}
     """)

case("values_from_function.dict_return", CS,
     "value_fn returning a dict: run sees the replica's dict",
     """
     dv = strategy.experimental_distribute_values_from_function(
         lambda ctx: {"x": np.float32(ctx.replica_id_in_sync_group), "y": np.float32(10.0)})
     out = strategy.run(lambda d: d["x"] + d["y"], args=(dv,))
     result = [np.asarray(v).tolist() for v in strategy.experimental_local_results(out)]
     """,
     """
     dv = strategy.experimental_distribute_values_from_function(
         lambda ctx: {"x": tf.constant(float(ctx.replica_id_in_sync_group)), "y": tf.constant(10.0)})
     out = strategy.run(lambda d: d["x"] + d["y"], args=(dv,))
     result = [v.numpy().tolist() for v in strategy.experimental_local_results(out)]
     """, strategy="M3")

case("values_from_function.one_device", CS,
     "OneDeviceStrategy: value_fn is called once, with replica 0 of 1",
     """
     dv = strategy.experimental_distribute_values_from_function(
         lambda ctx: np.array([ctx.replica_id_in_sync_group, ctx.num_replicas_in_sync], np.int32))
     result = [np.asarray(v).tolist() for v in strategy.experimental_local_results(dv)]
     """,
     """
     dv = strategy.experimental_distribute_values_from_function(
         lambda ctx: tf.constant([ctx.replica_id_in_sync_group, ctx.num_replicas_in_sync]))
     result = [v.numpy().tolist() for v in strategy.experimental_local_results(dv)]
     """, strategy="OD")

case("values_from_function.reduce_sum_mirrored4", CS,
     "values_from_function then reduce SUM on 4 replicas",
     """
     dv = strategy.experimental_distribute_values_from_function(
         lambda ctx: np.array([ctx.replica_id_in_sync_group, 1], np.int64))
     result = np.asarray(strategy.reduce("SUM", dv, axis=None)).tolist()
     """,
     """
     dv = strategy.experimental_distribute_values_from_function(
         lambda ctx: tf.constant([ctx.replica_id_in_sync_group, 1], tf.int64))
     result = strategy.reduce("SUM", dv, axis=None).numpy().tolist()
     """, strategy="M4")

case("values_from_function.python_float_values", CS,
     "value_fn returning Python floats: local results are those floats",
     """
     dv = strategy.experimental_distribute_values_from_function(lambda ctx: ctx.replica_id_in_sync_group + 0.5)
     result = [np.asarray(v).tolist() for v in strategy.experimental_local_results(dv)]
     """,
     """
     dv = strategy.experimental_distribute_values_from_function(lambda ctx: ctx.replica_id_in_sync_group + 0.5)
     result = [np.asarray(v).tolist() for v in strategy.experimental_local_results(dv)]
     """)

case("values_from_function.component_devices", CS,
     "TF does not place value_fn's results: values made in value_fn stay on the host CPU:0 (placement only happens inside run); run results are on the replica devices",
     """
     dv = strategy.experimental_distribute_values_from_function(lambda ctx: np.float32(ctx.replica_id_in_sync_group))
     out = strategy.run(lambda x: x + np.float32(1.0), args=(dv,))
     result = {"dv_devices": [x.device for x in strategy.experimental_local_results(dv)],
               "run_devices": [x.device for x in strategy.experimental_local_results(out)]}
     """,
     """
     dv = strategy.experimental_distribute_values_from_function(lambda ctx: tf.constant(float(ctx.replica_id_in_sync_group)))
     out = strategy.run(lambda x: x + 1.0, args=(dv,))
     result = {"dv_devices": [x.device for x in strategy.experimental_local_results(dv)],
               "run_devices": [x.device for x in strategy.experimental_local_results(out)]}
     """, strategy="M3")

case("values_from_function.same_object_still_per_replica", CS,
     "value_fn returning the very same object on every replica still gives a PerReplica (values_from_function always wraps, unlike run)",
     """
     same = np.array([1.0, 2.0], np.float32)
     dv = strategy.experimental_distribute_values_from_function(lambda ctx: same)
     result = {"per_replica": isinstance(dv, idist.PerReplica),
               "local": [np.asarray(v).tolist() for v in strategy.experimental_local_results(dv)]}
     """,
     """
     same = tf.constant([1.0, 2.0])
     dv = strategy.experimental_distribute_values_from_function(lambda ctx: same)
     result = {"per_replica": type(dv).__name__ == "PerReplica",
               "local": [v.numpy().tolist() for v in strategy.experimental_local_results(dv)]}
     """)

case("values_from_function.mirrored1_still_per_replica", CS,
     "with one replica, values_from_function still returns a PerReplica (run would return a plain value)",
     """
     dv = strategy.experimental_distribute_values_from_function(lambda ctx: np.float32(2.0))
     out = strategy.run(lambda x: x * np.float32(2.0), args=(dv,))
     result = {"dv_per_replica": isinstance(dv, idist.PerReplica),
               "run_per_replica": isinstance(out, idist.PerReplica),
               "run_value": np.asarray(out).tolist()}
     """,
     """
     dv = strategy.experimental_distribute_values_from_function(lambda ctx: tf.constant(2.0))
     out = strategy.run(lambda x: x * 2.0, args=(dv,))
     result = {"dv_per_replica": type(dv).__name__ == "PerReplica",
               "run_per_replica": type(out).__name__ == "PerReplica",
               "run_value": out.numpy().tolist()}
     """, strategy="M1")
