"""StrategyExtended: reduce_to, batch_reduce_to, broadcast_to, update, value_container, properties."""
from record import case

SE = "strategy_extended.txt"
ST = "strategy.txt"
CS = "central_storage_strategy.txt"
MD = "module_tf_distribute.txt"

PR_I = "strategy.experimental_distribute_values_from_function(lambda ctx: np.float32(ctx.replica_id_in_sync_group) + np.float32(1.0))"
PR_T = "strategy.experimental_distribute_values_from_function(lambda ctx: tf.constant(ctx.replica_id_in_sync_group + 1.0))"
RUN_I = "strategy.run(lambda: np.float32(idist.get_replica_context().replica_id_in_sync_group) + np.float32(1.0))"
RUN_T = "strategy.run(lambda: tf.cast(tf.distribute.get_replica_context().replica_id_in_sync_group, tf.float32) + 1.0)"

for dest_i, dest_t, tag in [('"CPU:0"', '"CPU:0"', "cpu0"), ('"CPU:1"', '"CPU:1"', "cpu1"),
                            ('"/job:localhost/replica:0/task:0/device:CPU:2"', '"/job:localhost/replica:0/task:0/device:CPU:2"', "full_cpu2")]:
    case(f"extended.reduce_to.device_string.{tag}", SE,
         f"cross-replica extended.reduce_to(SUM, run result, destinations={dest_i}) on 3 replicas: value, type and device(s)",
         f"""
         pr = {RUN_I}
         r = strategy.extended.reduce_to(idist.ReduceOp.SUM, pr, destinations={dest_i})
         result = {{"values": [np.asarray(x).tolist() for x in strategy.experimental_local_results(r)],
                   "devices": [x.device for x in strategy.experimental_local_results(r)],
                   "distributed": isinstance(r, idist.DistributedValues)}}
         """,
         f"""
         pr = {RUN_T}
         r = strategy.extended.reduce_to(tf.distribute.ReduceOp.SUM, pr, destinations={dest_t})
         result = {{"values": [x.numpy().tolist() for x in strategy.experimental_local_results(r)],
                   "devices": [x.device for x in strategy.experimental_local_results(r)],
                   "distributed": isinstance(r, tf.distribute.DistributedValues)}}
         """, strategy="M3")

case("extended.reduce_to.variable_destination", SE,
     "reduce_to(MEAN, per-replica value, destinations=mirrored variable): a Mirrored value on the variable's devices",
     f"""
     with strategy.scope():
         v = idist.Variable(np.float32(0.0))
     pr = {RUN_I}
     r = strategy.extended.reduce_to(idist.ReduceOp.MEAN, pr, v)
     result = {{"values": [np.asarray(x).tolist() for x in strategy.experimental_local_results(r)],
               "devices": [x.device for x in strategy.experimental_local_results(r)],
               "mirrored": isinstance(r, idist.Mirrored)}}
     """,
     f"""
     with strategy.scope():
         v = tf.Variable(0.0)
     pr = {RUN_T}
     r = strategy.extended.reduce_to(tf.distribute.ReduceOp.MEAN, pr, v)
     result = {{"values": [x.numpy().tolist() for x in strategy.experimental_local_results(r)],
               "devices": [x.device for x in strategy.experimental_local_results(r)],
               "mirrored": type(r).__name__ == "Mirrored"}}
     """, strategy="M3")

case("extended.reduce_to.per_replica_destination", SE,
     "reduce_to(SUM, value, destinations=value itself): the result is mirrored on the replica devices",
     f"""
     pr = {RUN_I}
     r = strategy.extended.reduce_to("SUM", pr, pr)
     result = {{"values": [np.asarray(x).tolist() for x in strategy.experimental_local_results(r)],
               "devices": [x.device for x in strategy.experimental_local_results(r)]}}
     """,
     f"""
     pr = {RUN_T}
     r = strategy.extended.reduce_to("SUM", pr, pr)
     result = {{"values": [x.numpy().tolist() for x in strategy.experimental_local_results(r)],
               "devices": [x.device for x in strategy.experimental_local_results(r)]}}
     """)

case("extended.reduce_to.string_op", SE,
     "reduce_to accepts the op as a string ('mean')",
     f"""
     pr = {PR_I}
     r = strategy.extended.reduce_to("mean", pr, "CPU:0")
     result = [np.asarray(x).tolist() for x in strategy.experimental_local_results(r)]
     """,
     f"""
     pr = {PR_T}
     r = strategy.extended.reduce_to("mean", pr, "CPU:0")
     result = [x.numpy().tolist() for x in strategy.experimental_local_results(r)]
     """, strategy="M4")

case("extended.reduce_to.plain_value_sum", SE,
     "reduce_to(SUM) of a plain (non-distributed) value on 2 replicas",
     """
     r = strategy.extended.reduce_to(idist.ReduceOp.SUM, np.float32(3.0), "CPU:0")
     result = [np.asarray(x).tolist() for x in strategy.experimental_local_results(r)]
     """,
     """
     r = strategy.extended.reduce_to(tf.distribute.ReduceOp.SUM, tf.constant(3.0), "CPU:0")
     result = [x.numpy().tolist() for x in strategy.experimental_local_results(r)]
     """)

case("extended.reduce_to.plain_value_mean", SE,
     "reduce_to(MEAN) of a plain value on 2 replicas: the value, on the destination",
     """
     r = strategy.extended.reduce_to(idist.ReduceOp.MEAN, np.float32(3.0), "CPU:1")
     result = {"values": [np.asarray(x).tolist() for x in strategy.experimental_local_results(r)],
               "devices": [x.device for x in strategy.experimental_local_results(r)]}
     """,
     """
     r = strategy.extended.reduce_to(tf.distribute.ReduceOp.MEAN, tf.constant(3.0), "CPU:1")
     result = {"values": [x.numpy().tolist() for x in strategy.experimental_local_results(r)],
               "devices": [x.device for x in strategy.experimental_local_results(r)]}
     """)

case("extended.reduce_to.in_replica_context_raises", SE,
     "extended.reduce_to called directly inside run (replica context) raises RuntimeError",
     """
     out = strategy.run(lambda: strategy.extended.reduce_to("SUM", np.float32(1.0), "CPU:0"))
     result = [np.asarray(x).tolist() for x in strategy.experimental_local_results(out)]
     """,
     """
     out = strategy.run(lambda: strategy.extended.reduce_to("SUM", tf.constant(1.0), "CPU:0"))
     result = [x.numpy().tolist() for x in strategy.experimental_local_results(out)]
     """)

case("extended.reduce_to.one_device", SE,
     "OneDeviceStrategy: reduce_to(SUM, plain value, 'CPU:0') returns the value",
     """
     r = strategy.extended.reduce_to("SUM", np.array([1.0, 2.0], np.float32), "CPU:0")
     result = [np.asarray(x).tolist() for x in strategy.experimental_local_results(r)]
     """,
     """
     r = strategy.extended.reduce_to("SUM", tf.constant([1.0, 2.0]), "CPU:0")
     result = [x.numpy().tolist() for x in strategy.experimental_local_results(r)]
     """, strategy="OD")

case("extended.batch_reduce_to.cross_replica", SE,
     "batch_reduce_to(SUM, [(a, 'CPU:0'), (b, var)]) in cross-replica context: a list of results, one per pair",
     f"""
     with strategy.scope():
         v = idist.Variable(np.zeros(2, np.float32))
     a = {RUN_I}
     b = strategy.run(lambda: np.array([1.0, 2.0], np.float32) * np.float32(idist.get_replica_context().replica_id_in_sync_group))
     res = strategy.extended.batch_reduce_to(idist.ReduceOp.SUM, [(a, "CPU:0"), (b, v)])
     result = {{"type": type(res).__name__, "len": len(res),
               "a": [np.asarray(x).tolist() for x in strategy.experimental_local_results(res[0])],
               "b": [np.asarray(x).tolist() for x in strategy.experimental_local_results(res[1])]}}
     """,
     f"""
     with strategy.scope():
         v = tf.Variable(tf.zeros(2))
     a = {RUN_T}
     b = strategy.run(lambda: tf.constant([1.0, 2.0]) * tf.cast(tf.distribute.get_replica_context().replica_id_in_sync_group, tf.float32))
     res = strategy.extended.batch_reduce_to(tf.distribute.ReduceOp.SUM, [(a, "CPU:0"), (b, v)])
     result = {{"type": type(res).__name__, "len": len(res),
               "a": [x.numpy().tolist() for x in strategy.experimental_local_results(res[0])],
               "b": [x.numpy().tolist() for x in strategy.experimental_local_results(res[1])]}}
     """, strategy="M3")

case("extended.batch_reduce_to.mean", SE,
     "batch_reduce_to('MEAN', [(a, a), (a, 'CPU:1')]) on a run result: the first result is mirrored on both replicas, the second a single value on CPU:1",
     f"""
     a = {RUN_I}
     res = strategy.extended.batch_reduce_to("MEAN", [(a, a), (a, "CPU:1")])
     result = [[np.asarray(x).tolist() for x in strategy.experimental_local_results(r)] for r in res]
     """,
     f"""
     a = {RUN_T}
     res = strategy.extended.batch_reduce_to("MEAN", [(a, a), (a, "CPU:1")])
     result = [[x.numpy().tolist() for x in strategy.experimental_local_results(r)] for r in res]
     """)

case("extended.broadcast_to.variable", SE,
     "broadcast_to(tensor, destinations=mirrored variable): a value mirrored on the variable's devices",
     """
     with strategy.scope():
         v = idist.Variable(np.float32(0.0))
     r = strategy.extended.broadcast_to(np.array([1.0, 2.0], np.float32), v)
     result = {"values": [np.asarray(x).tolist() for x in strategy.experimental_local_results(r)],
               "devices": [x.device for x in strategy.experimental_local_results(r)],
               "mirrored": isinstance(r, idist.Mirrored)}
     """,
     """
     with strategy.scope():
         v = tf.Variable(0.0)
     r = strategy.extended.broadcast_to(tf.constant([1.0, 2.0]), v)
     result = {"values": [x.numpy().tolist() for x in strategy.experimental_local_results(r)],
               "devices": [x.device for x in strategy.experimental_local_results(r)],
               "mirrored": type(r).__name__ == "Mirrored"}
     """, strategy="M3")

case("extended.broadcast_to.device_string", SE,
     "broadcast_to(tensor, 'CPU:1'): a single value on CPU:1",
     """
     r = strategy.extended.broadcast_to(np.float32(5.0), "CPU:1")
     result = {"values": [np.asarray(x).tolist() for x in strategy.experimental_local_results(r)],
               "devices": [x.device for x in strategy.experimental_local_results(r)]}
     """,
     """
     r = strategy.extended.broadcast_to(tf.constant(5.0), "CPU:1")
     result = {"values": [x.numpy().tolist() for x in strategy.experimental_local_results(r)],
               "devices": [x.device for x in strategy.experimental_local_results(r)]}
     """)

case("extended.broadcast_to.then_run", SE,
     "a value broadcast to a variable's devices, passed into run: each replica gets its copy",
     """
     with strategy.scope():
         v = idist.Variable(np.float32(0.0))
     b = strategy.extended.broadcast_to(np.float32(2.0), v)
     out = strategy.run(lambda x: x * (np.float32(idist.get_replica_context().replica_id_in_sync_group) + np.float32(1.0)), args=(b,))
     result = [np.asarray(x).tolist() for x in strategy.experimental_local_results(out)]
     """,
     """
     with strategy.scope():
         v = tf.Variable(0.0)
     b = strategy.extended.broadcast_to(tf.constant(2.0), v)
     out = strategy.run(lambda x: x * (tf.cast(tf.distribute.get_replica_context().replica_id_in_sync_group, tf.float32) + 1.0), args=(b,))
     result = [x.numpy().tolist() for x in strategy.experimental_local_results(out)]
     """)

# ---------------------------------------------------------------- update
case("extended.update.plain_arg_group_true", SE,
     "extended.update(v, assign_add, args=(plain,)) in cross-replica context, group=True (default): every copy updated; result is the updated value",
     """
     with strategy.scope():
         v = idist.Variable(np.float32(1.0))
     r = strategy.extended.update(v, lambda var, x: var.assign_add(x), args=(np.float32(2.0),))
     result = {"v": [np.asarray(c).tolist() for c in strategy.experimental_local_results(v)],
               "r": [np.asarray(c).tolist() for c in strategy.experimental_local_results(r)]}
     """,
     """
     with strategy.scope():
         v = tf.Variable(1.0)
     r = strategy.extended.update(v, lambda var, x: var.assign_add(x), args=(tf.constant(2.0),))
     result = {"v": [c.numpy().tolist() for c in strategy.experimental_local_results(v)],
               "r": [c.numpy().tolist() for c in strategy.experimental_local_results(r)]}
     """, strategy="M3")

case("extended.update.group_false", SE,
     "extended.update with group=False returns the per-device results (a tuple, one per copy)",
     """
     with strategy.scope():
         v = idist.Variable(np.float32(1.0))
     r = strategy.extended.update(v, lambda var, x: var.read_value() + x, args=(np.float32(2.0),), group=False)
     result = {"type": type(r).__name__, "len": len(r), "values": [np.asarray(c).tolist() for c in r]}
     """,
     """
     with strategy.scope():
         v = tf.Variable(1.0)
     r = strategy.extended.update(v, lambda var, x: var.read_value() + x, args=(tf.constant(2.0),), group=False)
     result = {"type": type(r).__name__, "len": len(r), "values": [c.numpy().tolist() for c in r]}
     """)

case("extended.update.per_replica_arg", SE,
     "extended.update(v, assign, args=(PerReplica,)) in cross-replica context: each copy gets its own replica's component",
     """
     with strategy.scope():
         v = idist.Variable(np.float32(0.0))
     pr = strategy.experimental_distribute_values_from_function(lambda ctx: np.float32(10.0 * (ctx.replica_id_in_sync_group + 1)))
     strategy.extended.update(v, lambda var, x: var.assign(x), args=(pr,))
     result = [np.asarray(c).tolist() for c in strategy.experimental_local_results(v)]
     """,
     """
     with strategy.scope():
         v = tf.Variable(0.0)
     pr = strategy.experimental_distribute_values_from_function(lambda ctx: tf.constant(10.0 * (ctx.replica_id_in_sync_group + 1)))
     strategy.extended.update(v, lambda var, x: var.assign(x), args=(pr,))
     result = [c.numpy().tolist() for c in strategy.experimental_local_results(v)]
     """, strategy="M3")

case("extended.update.kwargs", SE,
     "extended.update with kwargs",
     """
     with strategy.scope():
         v = idist.Variable(np.float32(3.0))
     strategy.extended.update(v, lambda var, scale=1.0: var.assign(var.read_value() * scale), kwargs={"scale": np.float32(2.0)})
     result = [np.asarray(c).tolist() for c in strategy.experimental_local_results(v)]
     """,
     """
     with strategy.scope():
         v = tf.Variable(3.0)
     strategy.extended.update(v, lambda var, scale=1.0: var.assign(var.read_value() * scale), kwargs={"scale": tf.constant(2.0)})
     result = [c.numpy().tolist() for c in strategy.experimental_local_results(v)]
     """)

case("extended.update.in_replica_context", SE,
     "extended.update called directly inside run (replica context): TF 2.21 does not raise; each replica updates its own copy (3 + 1 on each)",
     """
     with strategy.scope():
         v = idist.Variable(np.float32(3.0))
     strategy.run(lambda: strategy.extended.update(v, lambda var: var.assign_add(np.float32(1.0))))
     result = [np.asarray(c).tolist() for c in strategy.experimental_local_results(v)]
     """,
     """
     with strategy.scope():
         v = tf.Variable(3.0)
     strategy.run(lambda: strategy.extended.update(v, lambda var: var.assign_add(1.0)))
     result = [c.numpy().tolist() for c in strategy.experimental_local_results(v)]
     """)

case("extended.update.one_device", SE,
     "OneDeviceStrategy: extended.update on its (plain) variable",
     """
     with strategy.scope():
         v = idist.Variable(np.float32(3.0))
     r = strategy.extended.update(v, lambda var, x: var.assign_sub(x), args=(np.float32(1.0),))
     result = {"v": np.asarray(v.read_value()).tolist(), "r": np.asarray(r).tolist()}
     """,
     """
     with strategy.scope():
         v = tf.Variable(3.0)
     r = strategy.extended.update(v, lambda var, x: var.assign_sub(x), args=(tf.constant(1.0),))
     result = {"v": v.read_value().numpy().tolist(), "r": r.numpy().tolist()}
     """, strategy="OD")

case("extended.update.sync_on_read_variable", SE,
     "extended.update on a sync-on-read SUM variable in cross-replica context with assign_add of 1 on each copy",
     """
     with strategy.scope():
         v = idist.Variable(np.float32(0.0), synchronization=idist.VariableSynchronization.ON_READ,
                            aggregation=idist.VariableAggregation.SUM)
     strategy.extended.update(v, lambda var, x: var.assign_add(x), args=(np.float32(1.0),))
     result = {"local": [np.asarray(c).tolist() for c in strategy.experimental_local_results(v)],
               "read": np.asarray(v.read_value()).tolist()}
     """,
     """
     with strategy.scope():
         v = tf.Variable(0.0, synchronization=tf.VariableSynchronization.ON_READ,
                         aggregation=tf.VariableAggregation.SUM)
     strategy.extended.update(v, lambda var, x: var.assign_add(x), args=(tf.constant(1.0),))
     result = {"local": [c.numpy().tolist() for c in strategy.experimental_local_results(v)],
               "read": v.read_value().numpy().tolist()}
     """)

# ---------------------------------------------------------------- value_container, variable_created_in_scope
case("extended.value_container.component", SE,
     "value_container of a mirrored variable's component is the mirrored variable; of the variable itself, the variable",
     """
     with strategy.scope():
         v = idist.Variable(np.float32(1.0))
     comp = strategy.experimental_local_results(v)[1]
     result = {"component": strategy.extended.value_container(comp) is v,
               "itself": strategy.extended.value_container(v) is v}
     """,
     """
     with strategy.scope():
         v = tf.Variable(1.0)
     comp = strategy.experimental_local_results(v)[1]
     result = {"component": strategy.extended.value_container(comp) is v,
               "itself": strategy.extended.value_container(v) is v}
     """)

case("extended.value_container.plain_value", SE,
     "value_container of a plain value (not in any container) returns the value itself",
     """
     x = np.array([1.0], np.float32)
     result = strategy.extended.value_container(x) is x
     """,
     """
     x = tf.constant([1.0])
     result = strategy.extended.value_container(x) is x
     """)

case("extended.value_container.local_results_roundtrip", SE,
     "value in experimental_local_results(value_container(value)) for each component of a sync-on-read variable",
     """
     with strategy.scope():
         v = idist.Variable(np.float32(1.0), synchronization=idist.VariableSynchronization.ON_READ,
                            aggregation=idist.VariableAggregation.MEAN)
     comps = strategy.experimental_local_results(v)
     result = [any(c is x for x in strategy.experimental_local_results(strategy.extended.value_container(c))) for c in comps]
     """,
     """
     with strategy.scope():
         v = tf.Variable(1.0, synchronization=tf.VariableSynchronization.ON_READ,
                         aggregation=tf.VariableAggregation.MEAN)
     comps = strategy.experimental_local_results(v)
     result = [any(c is x for x in strategy.experimental_local_results(strategy.extended.value_container(c))) for c in comps]
     """, strategy="M3")

case("extended.variable_created_in_scope", SE,
     "variable_created_in_scope: True for a variable created in this strategy's scope, False for one created outside or in another strategy's scope",
     """
     other = idist.MirroredStrategy(["CPU:2", "CPU:3"])
     try:
         with strategy.scope():
             a = idist.Variable(np.float32(1.0))
         b = idist.Variable(np.float32(1.0))
         with other.scope():
             c = idist.Variable(np.float32(1.0))
         result = [strategy.extended.variable_created_in_scope(a), strategy.extended.variable_created_in_scope(b),
                   strategy.extended.variable_created_in_scope(c), other.extended.variable_created_in_scope(c)]
     finally:
         other.close()
     """,
     """
     other = tf.distribute.MirroredStrategy(["CPU:2", "CPU:3"])
     with strategy.scope():
         a = tf.Variable(1.0)
     b = tf.Variable(1.0)
     with other.scope():
         c = tf.Variable(1.0)
     result = [strategy.extended.variable_created_in_scope(a), strategy.extended.variable_created_in_scope(b),
               strategy.extended.variable_created_in_scope(c), other.extended.variable_created_in_scope(c)]
     """)

case("extended.variable_created_in_scope.one_device", SE,
     "OneDeviceStrategy.extended.variable_created_in_scope for variables created inside and outside its scope",
     """
     with strategy.scope():
         a = idist.Variable(np.float32(1.0))
     b = idist.Variable(np.float32(1.0))
     result = [strategy.extended.variable_created_in_scope(a), strategy.extended.variable_created_in_scope(b)]
     """,
     """
     with strategy.scope():
         a = tf.Variable(1.0)
     b = tf.Variable(1.0)
     result = [strategy.extended.variable_created_in_scope(a), strategy.extended.variable_created_in_scope(b)]
     """, strategy="OD")

case("extended.colocate_vars_with.outside_scope", SE,
     "colocate_vars_with used outside strategy.scope()",
     """
     with strategy.scope():
         v = idist.Variable(np.float32(1.0))
     with strategy.extended.colocate_vars_with(v):
         w = idist.Variable(np.float32(2.0))
     result = {"distributed": isinstance(w, idist.DistributedValues)}
     """,
     """
     with strategy.scope():
         v = tf.Variable(1.0)
     with strategy.extended.colocate_vars_with(v):
         w = tf.Variable(2.0)
     result = {"distributed": isinstance(w, tf.distribute.DistributedValues)}
     """)

case("extended.call_for_each_replica.outside_scope", SE,
     "extended.call_for_each_replica called outside strategy.scope()",
     """
     out = strategy.extended.call_for_each_replica(lambda: np.float32(idist.get_replica_context().replica_id_in_sync_group))
     result = [np.asarray(x).tolist() for x in strategy.experimental_local_results(out)]
     """,
     """
     out = strategy.extended.call_for_each_replica(lambda: tf.cast(tf.distribute.get_replica_context().replica_id_in_sync_group, tf.float32))
     result = [x.numpy().tolist() for x in strategy.experimental_local_results(out)]
     """)

case("extended.call_for_each_replica.kwargs", SE,
     "extended.call_for_each_replica in scope with args and kwargs (a PerReplica kwarg is unwrapped per replica)",
     """
     pr = strategy.experimental_distribute_values_from_function(lambda ctx: np.float32(ctx.replica_id_in_sync_group))
     with strategy.scope():
         out = strategy.extended.call_for_each_replica(lambda a, b=None: a * b, args=(np.float32(3.0),), kwargs={"b": pr})
     result = [np.asarray(x).tolist() for x in strategy.experimental_local_results(out)]
     """,
     """
     pr = strategy.experimental_distribute_values_from_function(lambda ctx: tf.constant(float(ctx.replica_id_in_sync_group)))
     with strategy.scope():
         out = strategy.extended.call_for_each_replica(lambda a, b=None: a * b, args=(tf.constant(3.0),), kwargs={"b": pr})
     result = [x.numpy().tolist() for x in strategy.experimental_local_results(out)]
     """, strategy="M3")

# ---------------------------------------------------------------- properties
for key, name in [("M2", "mirrored2"), ("M1", "mirrored1"), ("OD", "one_device"), ("OD1", "one_device_cpu1"), ("CS2", "central_storage2"), ("CS3", "central_storage3")]:
    seed = CS if key.startswith("CS") else SE
    case(f"extended.properties.{name}", seed,
         f"StrategyExtended boolean properties and device tuples for {name}",
         """
         e = strategy.extended
         result = {"experimental_between_graph": e.experimental_between_graph,
                   "experimental_require_static_shapes": e.experimental_require_static_shapes,
                   "experimental_should_init": e.experimental_should_init,
                   "should_checkpoint": e.should_checkpoint, "should_save_summary": e.should_save_summary,
                   "worker_devices": list(e.worker_devices), "parameter_devices": list(e.parameter_devices),
                   "num_replicas_in_sync": strategy.num_replicas_in_sync,
                   "cluster_resolver_is_none": strategy.cluster_resolver is None}
         """,
         """
         e = strategy.extended
         result = {"experimental_between_graph": e.experimental_between_graph,
                   "experimental_require_static_shapes": e.experimental_require_static_shapes,
                   "experimental_should_init": e.experimental_should_init,
                   "should_checkpoint": e.should_checkpoint, "should_save_summary": e.should_save_summary,
                   "worker_devices": list(e.worker_devices), "parameter_devices": list(e.parameter_devices),
                   "num_replicas_in_sync": strategy.num_replicas_in_sync,
                   "cluster_resolver_is_none": strategy.cluster_resolver is None}
         """, strategy=key)

case("extended.properties.mirrored4_device_order", ST,
     "MirroredStrategy(['CPU:3', 'CPU:1', 'CPU:2', 'CPU:0']): worker_devices keep the given order? replica ids map to devices",
     """
     s = idist.MirroredStrategy(["CPU:3", "CPU:1", "CPU:2", "CPU:0"])
     try:
         out = s.run(lambda: idist.get_replica_context().replica_id_in_sync_group)
         result = {"worker_devices": list(s.extended.worker_devices),
                   "result_devices": [x.device for x in s.experimental_local_results(out)],
                   "ids": [np.asarray(x).tolist() for x in s.experimental_local_results(out)]}
     finally:
         s.close()
     """,
     """
     s = tf.distribute.MirroredStrategy(["CPU:3", "CPU:1", "CPU:2", "CPU:0"])
     out = s.run(lambda: tf.identity(tf.distribute.get_replica_context().replica_id_in_sync_group))
     result = {"worker_devices": list(s.extended.worker_devices),
               "result_devices": [x.device for x in s.experimental_local_results(out)],
               "ids": [x.numpy().tolist() for x in s.experimental_local_results(out)]}
     """, strategy=None)

case("extended.properties.device_spellings_mixed_job_raises", ST,
     "mixing job-qualified ('/job:localhost/replica:0/task:0/device:CPU:2') and unqualified ('/cpu:1', '/device:CPU:0') device strings: TF sees two different workers and raises RuntimeError ('In-graph multi-worker training with MirroredStrategy is not supported in eager mode')",
     """
     s = idist.MirroredStrategy(["/cpu:1", "/device:CPU:0", "/job:localhost/replica:0/task:0/device:CPU:2"])
     try:
         result = list(s.extended.worker_devices)
     finally:
         s.close()
     """,
     """
     s = tf.distribute.MirroredStrategy(["/cpu:1", "/device:CPU:0", "/job:localhost/replica:0/task:0/device:CPU:2"])
     result = list(s.extended.worker_devices)
     """, strategy=None)

case("extended.properties.lowercase_device", ST,
     "device strings in lower case ('cpu:0', 'cpu:1') are accepted and canonicalised",
     """
     s = idist.MirroredStrategy(["cpu:0", "cpu:1"])
     try:
         result = list(s.extended.worker_devices)
     finally:
         s.close()
     """,
     """
     s = tf.distribute.MirroredStrategy(["cpu:0", "cpu:1"])
     result = list(s.extended.worker_devices)
     """, strategy=None)

case("extended.properties.device_spellings", ST,
     "device strings given as '/cpu:1', '/device:CPU:0', 'CPU:2' are canonicalised to full device names in the given order",
     """
     s = idist.MirroredStrategy(["/cpu:1", "/device:CPU:0", "CPU:2"])
     try:
         result = list(s.extended.worker_devices)
     finally:
         s.close()
     """,
     """
     s = tf.distribute.MirroredStrategy(["/cpu:1", "/device:CPU:0", "CPU:2"])
     result = list(s.extended.worker_devices)
     """, strategy=None)

case("extended.properties.full_device_names", ST,
     "fully qualified device names are kept as they are",
     """
     s = idist.MirroredStrategy(["/job:localhost/replica:0/task:0/device:CPU:1", "/job:localhost/replica:0/task:0/device:CPU:3"])
     try:
         out = s.run(lambda: np.float32(1.0) + np.float32(idist.get_replica_context().replica_id_in_sync_group))
         result = {"worker_devices": list(s.extended.worker_devices),
                   "devices": [x.device for x in s.experimental_local_results(out)]}
     finally:
         s.close()
     """,
     """
     s = tf.distribute.MirroredStrategy(["/job:localhost/replica:0/task:0/device:CPU:1", "/job:localhost/replica:0/task:0/device:CPU:3"])
     out = s.run(lambda: 1.0 + tf.cast(tf.distribute.get_replica_context().replica_id_in_sync_group, tf.float32))
     result = {"worker_devices": list(s.extended.worker_devices),
               "devices": [x.device for x in s.experimental_local_results(out)]}
     """, strategy=None)
