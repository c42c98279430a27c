"""Distributed variables: mirrored, sync-on-read, aggregation, attributes."""
from record import case

SE = "strategy_extended.txt"
ST = "strategy.txt"
PS = "parameter_server_strategy.txt"

LRV = "[np.asarray(c).tolist() for c in strategy.experimental_local_results(v)]"
LRVT = "[c.numpy().tolist() for c in strategy.experimental_local_results(v)]"
RID = "np.float32(idist.get_replica_context().replica_id_in_sync_group)"
RIDT = "tf.cast(tf.distribute.get_replica_context().replica_id_in_sync_group, tf.float32)"

# ------------------------------------------------- mirrored, replica-context updates
for agg in ["SUM", "MEAN", "ONLY_FIRST_REPLICA", "NONE"]:
    for meth, sign in [("assign", ""), ("assign_sub", "")]:
        case(f"variables.replica_{meth}.{agg}.mirrored3", SE,
             f"mirrored variable (10.0, aggregation {agg}) on 3 replicas: each replica calls v.{meth}(replica_id + 1) in replica context",
             f"""
             with strategy.scope():
                 v = idist.Variable(np.float32(10.0), aggregation=idist.VariableAggregation.{agg})
             strategy.run(lambda: v.{meth}({RID} + np.float32(1.0)))
             result = {LRV}
             """,
             f"""
             with strategy.scope():
                 v = tf.Variable(10.0, aggregation=tf.VariableAggregation.{agg})
             strategy.run(lambda: v.{meth}({RIDT} + 1.0))
             result = {LRVT}
             """, strategy="M3")

case("variables.replica_assign_add.SUM.mirrored4", SE,
     "mirrored SUM variable on 4 replicas, assign_add(replica_id + 1) in replica context: 0 + 10",
     f"""
     with strategy.scope():
         v = idist.Variable(np.float32(0.0), aggregation=idist.VariableAggregation.SUM)
     strategy.run(lambda: v.assign_add({RID} + np.float32(1.0)))
     result = {LRV}
     """,
     f"""
     with strategy.scope():
         v = tf.Variable(0.0, aggregation=tf.VariableAggregation.SUM)
     strategy.run(lambda: v.assign_add({RIDT} + 1.0))
     result = {LRVT}
     """, strategy="M4")

case("variables.replica_assign_add.MEAN.int32_raises", SE,
     "MEAN aggregation on an int32 mirrored variable: TF refuses to create it (ValueError: aggregation=MEAN with a non-floating dtype)",
     f"""
     with strategy.scope():
         v = idist.Variable(np.int32(1), aggregation=idist.VariableAggregation.MEAN)
     strategy.run(lambda: v.assign_add(idist.get_replica_context().replica_id_in_sync_group + np.int32(1)))
     result = {LRV}
     """,
     f"""
     with strategy.scope():
         v = tf.Variable(1, aggregation=tf.VariableAggregation.MEAN)
     strategy.run(lambda: v.assign_add(tf.distribute.get_replica_context().replica_id_in_sync_group + 1))
     result = {LRVT}
     """)

case("variables.replica_assign_add.SUM.int32", SE,
     "SUM aggregation on an int32 mirrored variable, assign_add in replica context",
     f"""
     with strategy.scope():
         v = idist.Variable(np.int32(1), aggregation=idist.VariableAggregation.SUM)
     strategy.run(lambda: v.assign_add(idist.get_replica_context().replica_id_in_sync_group + np.int32(1)))
     result = {{"values": {LRV}, "dtype": v.dtype.name}}
     """,
     f"""
     with strategy.scope():
         v = tf.Variable(1, aggregation=tf.VariableAggregation.SUM)
     strategy.run(lambda: v.assign_add(tf.distribute.get_replica_context().replica_id_in_sync_group + 1))
     result = {{"values": {LRVT}, "dtype": v.dtype.name}}
     """)

case("variables.replica_assign.MEAN.vector", SE,
     "MEAN mirrored vector variable, assign in replica context of [i, 2i]",
     f"""
     with strategy.scope():
         v = idist.Variable(np.zeros(2, np.float32), aggregation=idist.VariableAggregation.MEAN)
     strategy.run(lambda: v.assign({RID} * np.array([1.0, 2.0], np.float32)))
     result = {LRV}
     """,
     f"""
     with strategy.scope():
         v = tf.Variable(tf.zeros(2), aggregation=tf.VariableAggregation.MEAN)
     strategy.run(lambda: v.assign({RIDT} * tf.constant([1.0, 2.0])))
     result = {LRVT}
     """, strategy="M4")

case("variables.replica_assign_returns", SE,
     "what v.assign_add returns inside run for a SUM mirrored variable: the updated value on each replica",
     f"""
     with strategy.scope():
         v = idist.Variable(np.float32(1.0), aggregation=idist.VariableAggregation.SUM)
     out = strategy.run(lambda: v.assign_add({RID} + np.float32(1.0)) * np.float32(1.0))
     result = [np.asarray(x).tolist() for x in strategy.experimental_local_results(out)]
     """,
     f"""
     with strategy.scope():
         v = tf.Variable(1.0, aggregation=tf.VariableAggregation.SUM)
     out = strategy.run(lambda: v.assign_add({RIDT} + 1.0) * 1.0)
     result = [x.numpy().tolist() for x in strategy.experimental_local_results(out)]
     """)

case("variables.read_inside_run", SE,
     "reading a mirrored variable inside run gives each replica's copy",
     f"""
     with strategy.scope():
         v = idist.Variable(np.float32(2.5))
     out = strategy.run(lambda: v.read_value() * np.float32(2.0))
     result = {{"values": [np.asarray(x).tolist() for x in strategy.experimental_local_results(out)],
               "devices": [x.device for x in strategy.experimental_local_results(out)]}}
     """,
     f"""
     with strategy.scope():
         v = tf.Variable(2.5)
     out = strategy.run(lambda: v.read_value() * 2.0)
     result = {{"values": [x.numpy().tolist() for x in strategy.experimental_local_results(out)],
               "devices": [x.device for x in strategy.experimental_local_results(out)]}}
     """, strategy="M3")

case("variables.none_aggregation_diverges_then_read", SE,
     "NONE-aggregation mirrored variable updated differently per replica: cross-replica read_value gives the primary (replica 0) copy",
     f"""
     with strategy.scope():
         v = idist.Variable(np.float32(0.0))
     strategy.run(lambda: v.assign({RID} + np.float32(5.0)))
     result = {{"local": {LRV}, "read": np.asarray(v.read_value()).tolist()}}
     """,
     f"""
     with strategy.scope():
         v = tf.Variable(0.0)
     strategy.run(lambda: v.assign({RIDT} + 5.0))
     result = {{"local": {LRVT}, "read": v.read_value().numpy().tolist()}}
     """, strategy="M3")

# ------------------------------------------------- mirrored, cross-replica updates
case("variables.cross_replica_assign_sub_and_read", SE,
     "cross-replica assign_sub on a mirrored variable and read_value",
     f"""
     with strategy.scope():
         v = idist.Variable(np.array([1.0, 2.0], np.float32))
     v.assign_sub(np.array([0.5, 0.5], np.float32))
     result = {{"local": {LRV}, "read": np.asarray(v.read_value()).tolist()}}
     """,
     f"""
     with strategy.scope():
         v = tf.Variable([1.0, 2.0])
     v.assign_sub([0.5, 0.5])
     result = {{"local": {LRVT}, "read": v.read_value().numpy().tolist()}}
     """, strategy="M3")

case("variables.cross_replica_assign_per_replica", SE,
     "assigning a PerReplica value to a mirrored variable in cross-replica context: TF 2.21 does not raise (despite the docs); each copy gets its replica's component, so the copies diverge",
     f"""
     with strategy.scope():
         v = idist.Variable(np.float32(0.0))
     pr = strategy.experimental_distribute_values_from_function(lambda ctx: np.float32(ctx.replica_id_in_sync_group))
     v.assign(pr)
     result = {LRV}
     """,
     f"""
     with strategy.scope():
         v = tf.Variable(0.0)
     pr = strategy.experimental_distribute_values_from_function(lambda ctx: tf.constant(float(ctx.replica_id_in_sync_group)))
     v.assign(pr)
     result = {LRVT}
     """)

case("variables.cross_replica_assign_from_mirrored_variable", SE,
     "assigning another mirrored variable to a mirrored variable in cross-replica context",
     f"""
     with strategy.scope():
         v = idist.Variable(np.float32(0.0))
         w = idist.Variable(np.float32(7.0))
     v.assign(w)
     result = {LRV}
     """,
     f"""
     with strategy.scope():
         v = tf.Variable(0.0)
         w = tf.Variable(7.0)
     v.assign(w)
     result = {LRVT}
     """)

case("variables.cross_replica_assign_outside_scope", ST,
     "a mirrored variable can be assigned outside strategy.scope() (the variable captures its strategy)",
     f"""
     with strategy.scope():
         v = idist.Variable(np.float32(1.0))
     v.assign(np.float32(4.0))
     v.assign_add(np.float32(1.0))
     result = {LRV}
     """,
     f"""
     with strategy.scope():
         v = tf.Variable(1.0)
     v.assign(4.0)
     v.assign_add(1.0)
     result = {LRVT}
     """, strategy="M4")

case("variables.cross_replica_assign_shape_mismatch", SE,
     "cross-replica assign of a (3,) value to a (2,) mirrored variable",
     f"""
     with strategy.scope():
         v = idist.Variable(np.zeros(2, np.float32))
     v.assign(np.ones(3, np.float32))
     result = {LRV}
     """,
     f"""
     with strategy.scope():
         v = tf.Variable(tf.zeros(2))
     v.assign(tf.ones(3))
     result = {LRVT}
     """)

case("variables.assign_dtype_mismatch", SE,
     "cross-replica assign of a float64 value to a float32 mirrored variable",
     f"""
     with strategy.scope():
         v = idist.Variable(np.float32(0.0))
     v.assign(np.float64(1.5))
     result = {{"values": {LRV}, "dtype": v.dtype.name}}
     """,
     f"""
     with strategy.scope():
         v = tf.Variable(0.0)
     v.assign(tf.constant(1.5, tf.float64))
     result = {{"values": {LRVT}, "dtype": v.dtype.name}}
     """)

case("variables.assign_python_float_to_int_variable", SE,
     "cross-replica assign of a Python float 2.5 to an int32 mirrored variable",
     f"""
     with strategy.scope():
         v = idist.Variable(np.int32(0))
     v.assign(2.5)
     result = {LRV}
     """,
     f"""
     with strategy.scope():
         v = tf.Variable(0)
     v.assign(2.5)
     result = {LRVT}
     """)

# ------------------------------------------------- sync on read
for agg in ["SUM", "MEAN", "ONLY_FIRST_REPLICA"]:
    case(f"variables.sync_on_read.{agg}.mirrored3", SE,
         f"sync-on-read {agg} variable: replica i assigns (i+1)*2 locally; per-replica copies and the cross-replica read",
         f"""
         with strategy.scope():
             v = idist.Variable(np.float32(0.0), synchronization=idist.VariableSynchronization.ON_READ,
                                aggregation=idist.VariableAggregation.{agg})
         strategy.run(lambda: v.assign(({RID} + np.float32(1.0)) * np.float32(2.0)))
         result = {{"local": {LRV}, "read": np.asarray(v.read_value()).tolist()}}
         """,
         f"""
         with strategy.scope():
             v = tf.Variable(0.0, synchronization=tf.VariableSynchronization.ON_READ,
                             aggregation=tf.VariableAggregation.{agg})
         strategy.run(lambda: v.assign(({RIDT} + 1.0) * 2.0))
         result = {{"local": {LRVT}, "read": v.read_value().numpy().tolist()}}
         """, strategy="M3")
    case(f"variables.sync_on_read.{agg}.cross_replica_assign", SE,
         f"sync-on-read {agg} variable on 4 replicas: cross-replica assign(8.0) (the checkpoint-restore case)",
         f"""
         with strategy.scope():
             v = idist.Variable(np.float32(0.0), synchronization=idist.VariableSynchronization.ON_READ,
                                aggregation=idist.VariableAggregation.{agg})
         v.assign(np.float32(8.0))
         result = {{"local": {LRV}, "read": np.asarray(v.read_value()).tolist()}}
         """,
         f"""
         with strategy.scope():
             v = tf.Variable(0.0, synchronization=tf.VariableSynchronization.ON_READ,
                             aggregation=tf.VariableAggregation.{agg})
         v.assign(8.0)
         result = {{"local": {LRVT}, "read": v.read_value().numpy().tolist()}}
         """, strategy="M4")

case("variables.sync_on_read.NONE_allowed", SE,
     "creating a sync-on-read variable with aggregation NONE under MirroredStrategy is allowed in TF 2.21",
     """
     with strategy.scope():
         v = idist.Variable(np.float32(0.0), synchronization=idist.VariableSynchronization.ON_READ)
     result = [np.asarray(c).tolist() for c in strategy.experimental_local_results(v)]
     """,
     """
     with strategy.scope():
         v = tf.Variable(0.0, synchronization=tf.VariableSynchronization.ON_READ)
     result = [c.numpy().tolist() for c in strategy.experimental_local_results(v)]
     """)

case("variables.sync_on_read.read_inside_run", SE,
     "reading a sync-on-read SUM variable inside run gives each replica's local copy (no aggregation)",
     f"""
     with strategy.scope():
         v = idist.Variable(np.float32(0.0), synchronization=idist.VariableSynchronization.ON_READ,
                            aggregation=idist.VariableAggregation.SUM)
     strategy.run(lambda: v.assign({RID} + np.float32(1.0)))
     out = strategy.run(lambda: v.read_value() * np.float32(10.0))
     result = [np.asarray(x).tolist() for x in strategy.experimental_local_results(out)]
     """,
     f"""
     with strategy.scope():
         v = tf.Variable(0.0, synchronization=tf.VariableSynchronization.ON_READ,
                         aggregation=tf.VariableAggregation.SUM)
     strategy.run(lambda: v.assign({RIDT} + 1.0))
     out = strategy.run(lambda: v.read_value() * 10.0)
     result = [x.numpy().tolist() for x in strategy.experimental_local_results(out)]
     """, strategy="M3")

case("variables.sync_on_read.assign_add_in_replica", SE,
     "sync-on-read MEAN vector variable: assign_add in replica context twice; cross-replica read is the mean",
     f"""
     with strategy.scope():
         v = idist.Variable(np.zeros(2, np.float32), synchronization=idist.VariableSynchronization.ON_READ,
                            aggregation=idist.VariableAggregation.MEAN)
     for _ in range(2):
         strategy.run(lambda: v.assign_add({RID} * np.array([1.0, -1.0], np.float32)))
     result = {{"local": {LRV}, "read": np.asarray(v.read_value()).tolist()}}
     """,
     f"""
     with strategy.scope():
         v = tf.Variable(tf.zeros(2), synchronization=tf.VariableSynchronization.ON_READ,
                         aggregation=tf.VariableAggregation.MEAN)
     for _ in range(2):
         strategy.run(lambda: v.assign_add({RIDT} * tf.constant([1.0, -1.0])))
     result = {{"local": {LRVT}, "read": v.read_value().numpy().tolist()}}
     """)

case("variables.sync_on_read.cross_replica_assign_add_sum_raises", SE,
     "sync-on-read SUM variable: assign_add in cross-replica context raises ValueError",
     f"""
     with strategy.scope():
         v = idist.Variable(np.float32(1.0), synchronization=idist.VariableSynchronization.ON_READ,
                            aggregation=idist.VariableAggregation.SUM)
     v.assign_add(np.float32(4.0))
     result = {{"local": {LRV}, "read": np.asarray(v.read_value()).tolist()}}
     """,
     f"""
     with strategy.scope():
         v = tf.Variable(1.0, synchronization=tf.VariableSynchronization.ON_READ,
                         aggregation=tf.VariableAggregation.SUM)
     v.assign_add(4.0)
     result = {{"local": {LRVT}, "read": v.read_value().numpy().tolist()}}
     """)

case("variables.sync_on_read.int_mean_raises", SE,
     "sync-on-read MEAN int32 variable: TF refuses to create it (ValueError, MEAN needs a floating dtype)",
     """
     with strategy.scope():
         v = idist.Variable(np.int32(0), synchronization=idist.VariableSynchronization.ON_READ,
                            aggregation=idist.VariableAggregation.MEAN)
     strategy.run(lambda: v.assign(idist.get_replica_context().replica_id_in_sync_group + np.int32(1)))
     r = v.read_value()
     result = {"read": np.asarray(r).tolist(), "dtype": np.asarray(r).dtype.name}
     """,
     """
     with strategy.scope():
         v = tf.Variable(0, synchronization=tf.VariableSynchronization.ON_READ,
                         aggregation=tf.VariableAggregation.MEAN)
     strategy.run(lambda: v.assign(tf.distribute.get_replica_context().replica_id_in_sync_group + 1))
     r = v.read_value()
     result = {"read": r.numpy().tolist(), "dtype": r.dtype.name}
     """)

# ------------------------------------------------- attributes
case("variables.attributes.mirrored", SE,
     "attributes of a mirrored variable: name, shape, dtype, device (primary), aggregation, synchronization (AUTO becomes ON_WRITE), trainable",
     """
     with strategy.scope():
         v = idist.Variable(np.zeros((2, 3), np.float32), name="w")
     result = {"name": v.name, "shape": list(v.shape), "dtype": v.dtype.name, "device": v.device,
               "aggregation": v.aggregation.name, "synchronization": v.synchronization.name,
               "trainable": v.trainable, "distributed": isinstance(v, idist.DistributedValues),
               "is_mirrored": isinstance(v, idist.Mirrored)}
     """,
     """
     with strategy.scope():
         v = tf.Variable(tf.zeros((2, 3)), name="w")
     result = {"name": v.name, "shape": list(v.shape), "dtype": v.dtype.name, "device": v.device,
               "aggregation": v.aggregation.name, "synchronization": v.synchronization.name,
               "trainable": v.trainable, "distributed": isinstance(v, tf.distribute.DistributedValues),
               "is_mirrored": type(v).__name__ == "MirroredVariable"}
     """, strategy="M3")

case("variables.attributes.sync_on_read", SE,
     "attributes of a sync-on-read SUM variable: trainable defaults to False for ON_READ",
     """
     with strategy.scope():
         v = idist.Variable(np.int64(3), name="counter", synchronization=idist.VariableSynchronization.ON_READ,
                            aggregation=idist.VariableAggregation.SUM)
     result = {"name": v.name, "shape": list(v.shape), "dtype": v.dtype.name, "device": v.device,
               "aggregation": v.aggregation.name, "synchronization": v.synchronization.name,
               "trainable": v.trainable, "is_mirrored": isinstance(v, idist.Mirrored),
               "local_names": [c.name for c in strategy.experimental_local_results(v)]}
     """,
     """
     with strategy.scope():
         v = tf.Variable(tf.constant(3, tf.int64), name="counter", synchronization=tf.VariableSynchronization.ON_READ,
                         aggregation=tf.VariableAggregation.SUM)
     result = {"name": v.name, "shape": list(v.shape), "dtype": v.dtype.name, "device": v.device,
               "aggregation": v.aggregation.name, "synchronization": v.synchronization.name,
               "trainable": v.trainable, "is_mirrored": type(v).__name__ == "MirroredVariable",
               "local_names": [c.name for c in strategy.experimental_local_results(v)]}
     """)

case("variables.attributes.trainable_false", SE,
     "a mirrored variable created with trainable=False",
     """
     with strategy.scope():
         v = idist.Variable(np.float32(1.0), trainable=False)
     result = {"trainable": v.trainable, "synchronization": v.synchronization.name}
     """,
     """
     with strategy.scope():
         v = tf.Variable(1.0, trainable=False)
     result = {"trainable": v.trainable, "synchronization": v.synchronization.name}
     """)

case("variables.attributes.sync_on_read_trainable_true", SE,
     "a sync-on-read MEAN variable created with trainable=True explicitly",
     """
     with strategy.scope():
         v = idist.Variable(np.float32(1.0), trainable=True, synchronization=idist.VariableSynchronization.ON_READ,
                            aggregation=idist.VariableAggregation.MEAN)
     result = {"trainable": v.trainable}
     """,
     """
     with strategy.scope():
         v = tf.Variable(1.0, trainable=True, synchronization=tf.VariableSynchronization.ON_READ,
                         aggregation=tf.VariableAggregation.MEAN)
     result = {"trainable": v.trainable}
     """)

case("variables.attributes.dtype_argument", SE,
     "dtype argument converts the initial value: Variable(1, dtype=float64) and Variable(2.0, dtype=int32)",
     """
     with strategy.scope():
         a = idist.Variable(1, dtype=np.float64)
     result = {"a_dtype": a.dtype.name, "a": [np.asarray(c).tolist() for c in strategy.experimental_local_results(a)]}
     """,
     """
     with strategy.scope():
         a = tf.Variable(1, dtype=tf.float64)
     result = {"a_dtype": a.dtype.name, "a": [c.numpy().tolist() for c in strategy.experimental_local_results(a)]}
     """)

case("variables.attributes.python_initial_values", SE,
     "dtypes inferred from Python initial values: 1.0 -> float32, 1 -> int32, [1, 2] -> int32",
     """
     with strategy.scope():
         a = idist.Variable(1.0)
         b = idist.Variable(1)
         c = idist.Variable([1, 2])
     result = [a.dtype.name, b.dtype.name, c.dtype.name, list(c.shape)]
     """,
     """
     with strategy.scope():
         a = tf.Variable(1.0)
         b = tf.Variable(1)
         c = tf.Variable([1, 2])
     result = [a.dtype.name, b.dtype.name, c.dtype.name, list(c.shape)]
     """)

case("variables.attributes.names_default", SE,
     "default names: every unnamed variable is 'Variable:0' in eager mode; replica copies are 'Variable/replica_<i>:0'",
     """
     with strategy.scope():
         a = idist.Variable(1.0)
         b = idist.Variable(2.0)
         c = idist.Variable(3.0, name="c")
     result = [a.name, b.name, c.name, [x.name for x in strategy.experimental_local_results(c)]]
     """,
     """
     with strategy.scope():
         a = tf.Variable(1.0)
         b = tf.Variable(2.0)
         c = tf.Variable(3.0, name="c")
     result = [a.name, b.name, c.name, [x.name for x in strategy.experimental_local_results(c)]]
     """)

case("variables.outside_scope_regular", ST,
     "a variable created outside any scope is a regular variable: not distributed, aggregation NONE, device CPU:0",
     """
     v = idist.Variable(np.float32(1.0))
     result = {"distributed": isinstance(v, idist.DistributedValues), "device": v.device,
               "aggregation": v.aggregation.name, "synchronization": v.synchronization.name,
               "local": [np.asarray(x).tolist() for x in strategy.experimental_local_results(v)]}
     """,
     """
     v = tf.Variable(1.0)
     result = {"distributed": isinstance(v, tf.distribute.DistributedValues), "device": v.device,
               "aggregation": v.aggregation.name, "synchronization": v.synchronization.name,
               "local": [x.numpy().tolist() for x in strategy.experimental_local_results(v)]}
     """)

case("variables.outside_scope_used_in_run", ST,
     "a regular variable (created outside scope) read inside run: every replica reads the same value",
     """
     v = idist.Variable(np.float32(3.0))
     out = strategy.run(lambda: v.read_value() + np.float32(idist.get_replica_context().replica_id_in_sync_group))
     result = [np.asarray(x).tolist() for x in strategy.experimental_local_results(out)]
     """,
     """
     v = tf.Variable(3.0)
     out = strategy.run(lambda: v.read_value() + tf.cast(tf.distribute.get_replica_context().replica_id_in_sync_group, tf.float32))
     result = [x.numpy().tolist() for x in strategy.experimental_local_results(out)]
     """)

case("variables.one_device_variable", ST,
     "OneDeviceStrategy('CPU:1'): a variable created in scope is a plain variable on CPU:1",
     """
     with strategy.scope():
         v = idist.Variable(np.float32(1.0))
     result = {"distributed": isinstance(v, idist.DistributedValues), "device": v.device,
               "local": [np.asarray(x).tolist() for x in strategy.experimental_local_results(v)]}
     """,
     """
     with strategy.scope():
         v = tf.Variable(1.0)
     result = {"distributed": isinstance(v, tf.distribute.DistributedValues), "device": v.device,
               "local": [x.numpy().tolist() for x in strategy.experimental_local_results(v)]}
     """, strategy="OD1")

case("variables.one_device_assign_in_run", ST,
     "OneDeviceStrategy: assign_add inside run updates the variable",
     """
     with strategy.scope():
         v = idist.Variable(np.float32(1.0), aggregation=idist.VariableAggregation.SUM)
     strategy.run(lambda: v.assign_add(np.float32(2.0)))
     result = np.asarray(v.read_value()).tolist()
     """,
     """
     with strategy.scope():
         v = tf.Variable(1.0, aggregation=tf.VariableAggregation.SUM)
     strategy.run(lambda: v.assign_add(2.0))
     result = v.read_value().numpy().tolist()
     """, strategy="OD")

case("variables.mirrored1_is_distributed", ST,
     "one-device MirroredStrategy: a variable created in scope is still a (1-copy) mirrored variable",
     """
     with strategy.scope():
         v = idist.Variable(np.float32(1.0))
     result = {"distributed": isinstance(v, idist.DistributedValues),
               "local": [np.asarray(x).tolist() for x in strategy.experimental_local_results(v)]}
     """,
     """
     with strategy.scope():
         v = tf.Variable(1.0)
     result = {"distributed": isinstance(v, tf.distribute.DistributedValues),
               "local": [x.numpy().tolist() for x in strategy.experimental_local_results(v)]}
     """, strategy="M1")

case("variables.initial_value_callable", ST,
     "a variable created in scope from a callable initial value: the callable's value on every replica",
     """
     with strategy.scope():
         v = idist.Variable(lambda: np.array([1.0, 2.0], np.float32))
     result = [np.asarray(x).tolist() for x in strategy.experimental_local_results(v)]
     """,
     """
     with strategy.scope():
         v = tf.Variable(lambda: tf.constant([1.0, 2.0]))
     result = [x.numpy().tolist() for x in strategy.experimental_local_results(v)]
     """)

case("variables.replica_assign_then_reduce", SE,
     "SUM mirrored variable updated twice in two run steps, then strategy.reduce('MEAN') of the variable",
     f"""
     with strategy.scope():
         v = idist.Variable(np.float32(0.0), aggregation=idist.VariableAggregation.SUM)
     for _ in range(2):
         strategy.run(lambda: v.assign_add({RID}))
     result = np.asarray(strategy.reduce("MEAN", v, axis=None)).tolist()
     """,
     f"""
     with strategy.scope():
         v = tf.Variable(0.0, aggregation=tf.VariableAggregation.SUM)
     for _ in range(2):
         strategy.run(lambda: v.assign_add({RIDT}))
     result = strategy.reduce("MEAN", v, axis=None).numpy().tolist()
     """, strategy="M3")

case("variables.sync_on_read.NONE_read_raises", SE,
     "a sync-on-read variable with aggregation NONE can be created, but its cross-replica read_value raises ValueError (NONE cannot be converted to a ReduceOp)",
     """
     with strategy.scope():
         v = idist.Variable(np.float32(1.0), synchronization=idist.VariableSynchronization.ON_READ)
     result = np.asarray(v.read_value()).tolist()
     """,
     """
     with strategy.scope():
         v = tf.Variable(1.0, synchronization=tf.VariableSynchronization.ON_READ)
     result = v.read_value().numpy().tolist()
     """)

case("variables.run_returns_variable", SE,
     "fn returning a mirrored variable itself: every replica returns the same object, so run returns the mirrored variable (not a PerReplica)",
     """
     with strategy.scope():
         v = idist.Variable(np.float32(1.0))
     out = strategy.run(lambda: v)
     result = {"is_v": out is v, "per_replica": isinstance(out, idist.PerReplica)}
     """,
     """
     with strategy.scope():
         v = tf.Variable(1.0)
     out = strategy.run(lambda: v)
     result = {"is_v": out is v, "per_replica": type(out).__name__ == "PerReplica"}
     """)
