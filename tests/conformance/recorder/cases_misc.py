"""Cluster resolvers, CentralStorageStrategy, OneDeviceStrategy, construction errors, optimizer, doc examples."""
from record import case

ST = "strategy.txt"
PS = "parameter_server_strategy.txt"
CS = "central_storage_strategy.txt"
MD = "module_tf_distribute.txt"
SE = "strategy_extended.txt"

# ---------------------------------------------------------------- cluster resolvers
TFC = '{"cluster": {"worker": ["localhost:12345", "localhost:23456"], "ps": ["localhost:34567"]}, "task": {"type": "worker", "index": 1}}'

case("cluster_resolver.tf_config.worker1", PS,
     "TFConfigClusterResolver reading TF_CONFIG (2 workers, 1 ps, task worker:1): cluster_spec().as_dict(), task_type, task_id, master(), num_accelerators(); TF_CONFIG restored afterwards",
     f"""
     import os, json
     old = os.environ.get("TF_CONFIG")
     os.environ["TF_CONFIG"] = json.dumps({TFC})
     try:
         r = idist.cluster_resolver.TFConfigClusterResolver()
         result = {{"cluster": r.cluster_spec().as_dict(), "task_type": r.task_type, "task_id": r.task_id,
                   "master": r.master(), "num_accelerators": dict(r.num_accelerators())}}
     finally:
         if old is None:
             del os.environ["TF_CONFIG"]
         else:
             os.environ["TF_CONFIG"] = old
     """,
     f"""
     import os, json
     old = os.environ.get("TF_CONFIG")
     os.environ["TF_CONFIG"] = json.dumps({TFC})
     try:
         r = tf.distribute.cluster_resolver.TFConfigClusterResolver()
         result = {{"cluster": r.cluster_spec().as_dict(), "task_type": r.task_type, "task_id": r.task_id,
                   "master": r.master(), "num_accelerators": dict(r.num_accelerators())}}
     finally:
         if old is None:
             del os.environ["TF_CONFIG"]
         else:
             os.environ["TF_CONFIG"] = old
     """, strategy=None)

case("cluster_resolver.tf_config.master_of_other_task", PS,
     "TFConfigClusterResolver.master('ps', 0) and master('worker', 0); cluster_spec jobs, num_tasks, task_indices, task_address",
     f"""
     import os, json
     old = os.environ.get("TF_CONFIG")
     os.environ["TF_CONFIG"] = json.dumps({TFC})
     try:
         r = idist.cluster_resolver.TFConfigClusterResolver()
         cs = r.cluster_spec()
         result = {{"master_ps0": r.master("ps", 0), "master_worker0": r.master("worker", 0),
                   "jobs": sorted(cs.jobs), "num_workers": cs.num_tasks("worker"),
                   "worker_indices": list(cs.task_indices("worker")), "ps0": cs.task_address("ps", 0)}}
     finally:
         if old is None:
             del os.environ["TF_CONFIG"]
         else:
             os.environ["TF_CONFIG"] = old
     """,
     f"""
     import os, json
     old = os.environ.get("TF_CONFIG")
     os.environ["TF_CONFIG"] = json.dumps({TFC})
     try:
         r = tf.distribute.cluster_resolver.TFConfigClusterResolver()
         cs = r.cluster_spec()
         result = {{"master_ps0": r.master("ps", 0), "master_worker0": r.master("worker", 0),
                   "jobs": sorted(cs.jobs), "num_workers": cs.num_tasks("worker"),
                   "worker_indices": list(cs.task_indices("worker")), "ps0": cs.task_address("ps", 0)}}
     finally:
         if old is None:
             del os.environ["TF_CONFIG"]
         else:
             os.environ["TF_CONFIG"] = old
     """, strategy=None)

case("cluster_resolver.tf_config.rpc_layer", PS,
     "TF_CONFIG with rpc_layer 'grpc': master() is prefixed 'grpc://'",
     """
     import os, json
     old = os.environ.get("TF_CONFIG")
     os.environ["TF_CONFIG"] = json.dumps({"cluster": {"chief": ["host0:2222"], "worker": ["host1:2222"]},
                                           "task": {"type": "chief", "index": 0}, "rpc_layer": "grpc"})
     try:
         r = idist.cluster_resolver.TFConfigClusterResolver()
         result = {"master": r.master(), "rpc_layer": r.rpc_layer, "task_type": r.task_type, "task_id": r.task_id,
                   "cluster": r.cluster_spec().as_dict()}
     finally:
         if old is None:
             del os.environ["TF_CONFIG"]
         else:
             os.environ["TF_CONFIG"] = old
     """,
     """
     import os, json
     old = os.environ.get("TF_CONFIG")
     os.environ["TF_CONFIG"] = json.dumps({"cluster": {"chief": ["host0:2222"], "worker": ["host1:2222"]},
                                           "task": {"type": "chief", "index": 0}, "rpc_layer": "grpc"})
     try:
         r = tf.distribute.cluster_resolver.TFConfigClusterResolver()
         result = {"master": r.master(), "rpc_layer": r.rpc_layer, "task_type": r.task_type, "task_id": r.task_id,
                   "cluster": r.cluster_spec().as_dict()}
     finally:
         if old is None:
             del os.environ["TF_CONFIG"]
         else:
             os.environ["TF_CONFIG"] = old
     """, strategy=None)

case("cluster_resolver.tf_config.unset", PS,
     "TFConfigClusterResolver with no TF_CONFIG: empty cluster spec, task_type/task_id None, master() ''",
     """
     import os
     old = os.environ.pop("TF_CONFIG", None)
     try:
         r = idist.cluster_resolver.TFConfigClusterResolver()
         result = {"cluster": r.cluster_spec().as_dict(), "task_type": r.task_type, "task_id": r.task_id,
                   "master": r.master()}
     finally:
         if old is not None:
             os.environ["TF_CONFIG"] = old
     """,
     """
     import os
     old = os.environ.pop("TF_CONFIG", None)
     try:
         r = tf.distribute.cluster_resolver.TFConfigClusterResolver()
         result = {"cluster": r.cluster_spec().as_dict(), "task_type": r.task_type, "task_id": r.task_id,
                   "master": r.master()}
     finally:
         if old is not None:
             os.environ["TF_CONFIG"] = old
     """, strategy=None)

case("cluster_resolver.tf_config.explicit_task", PS,
     "TFConfigClusterResolver(task_type='ps', task_id=0) overrides the task in TF_CONFIG",
     f"""
     import os, json
     old = os.environ.get("TF_CONFIG")
     os.environ["TF_CONFIG"] = json.dumps({TFC})
     try:
         r = idist.cluster_resolver.TFConfigClusterResolver(task_type="ps", task_id=0)
         result = {{"task_type": r.task_type, "task_id": r.task_id, "master": r.master()}}
     finally:
         if old is None:
             del os.environ["TF_CONFIG"]
         else:
             os.environ["TF_CONFIG"] = old
     """,
     f"""
     import os, json
     old = os.environ.get("TF_CONFIG")
     os.environ["TF_CONFIG"] = json.dumps({TFC})
     try:
         r = tf.distribute.cluster_resolver.TFConfigClusterResolver(task_type="ps", task_id=0)
         result = {{"task_type": r.task_type, "task_id": r.task_id, "master": r.master()}}
     finally:
         if old is None:
             del os.environ["TF_CONFIG"]
         else:
             os.environ["TF_CONFIG"] = old
     """, strategy=None)

case("cluster_resolver.simple", MD,
     "SimpleClusterResolver(ClusterSpec, task_type, task_id, master): accessors",
     """
     cs = idist.cluster_resolver.ClusterSpec({"worker": ["a:1", "b:2"], "ps": ["c:3"]})
     r = idist.cluster_resolver.SimpleClusterResolver(cs, task_type="worker", task_id=1, master="grpc://b:2")
     result = {"cluster": r.cluster_spec().as_dict(), "task_type": r.task_type, "task_id": r.task_id,
               "master": r.master(), "num_accelerators": dict(r.num_accelerators())}
     """,
     """
     cs = tf.train.ClusterSpec({"worker": ["a:1", "b:2"], "ps": ["c:3"]})
     r = tf.distribute.cluster_resolver.SimpleClusterResolver(cs, task_type="worker", task_id=1, master="grpc://b:2")
     result = {"cluster": r.cluster_spec().as_dict(), "task_type": r.task_type, "task_id": r.task_id,
               "master": r.master(), "num_accelerators": dict(r.num_accelerators())}
     """, strategy=None)

case("cluster_resolver.cluster_spec_sparse", MD,
     "ClusterSpec with a sparse job ({1: 'b:2', 3: 'c:3'}): as_dict keeps the dict, task_indices [1, 3], num_tasks 2",
     """
     cs = idist.cluster_resolver.ClusterSpec({"worker": {1: "b:2", 3: "c:3"}})
     d = cs.as_dict()
     result = {"as_dict": {k: {str(i): a for i, a in v.items()} if isinstance(v, dict) else v for k, v in d.items()},
               "task_indices": list(cs.task_indices("worker")), "num_tasks": cs.num_tasks("worker"),
               "address_3": cs.task_address("worker", 3)}
     """,
     """
     cs = tf.train.ClusterSpec({"worker": {1: "b:2", 3: "c:3"}})
     d = cs.as_dict()
     result = {"as_dict": {k: {str(i): a for i, a in v.items()} if isinstance(v, dict) else v for k, v in d.items()},
               "task_indices": list(cs.task_indices("worker")), "num_tasks": cs.num_tasks("worker"),
               "address_3": cs.task_address("worker", 3)}
     """, strategy=None)

case("cluster_resolver.cluster_spec_str", MD,
     "str(ClusterSpec) sorts the jobs: \"ClusterSpec({'ps': [...], 'worker': [...]})\"",
     """
     cs = idist.cluster_resolver.ClusterSpec({"worker": ["a:1", "b:2"], "ps": ["c:3"]})
     result = {"str": str(cs), "jobs": list(cs.jobs)}
     """,
     """
     cs = tf.train.ClusterSpec({"worker": ["a:1", "b:2"], "ps": ["c:3"]})
     result = {"str": str(cs), "jobs": list(cs.jobs)}
     """, strategy=None)

case("cluster_resolver.cluster_spec_unknown_job_raises", MD,
     "ClusterSpec.num_tasks of an unknown job raises ValueError",
     """
     cs = idist.cluster_resolver.ClusterSpec({"worker": ["a:1"]})
     result = cs.num_tasks("ps")
     """,
     """
     cs = tf.train.ClusterSpec({"worker": ["a:1"]})
     result = cs.num_tasks("ps")
     """, strategy=None)

case("cluster_resolver.strategy_property_with_tf_config", ST,
     "single-worker strategies' cluster_resolver is None even when TF_CONFIG is set",
     """
     import os, json
     old = os.environ.get("TF_CONFIG")
     os.environ["TF_CONFIG"] = json.dumps({"cluster": {"worker": ["localhost:12345"]}, "task": {"type": "worker", "index": 0}})
     try:
         s = idist.MirroredStrategy(["CPU:0", "CPU:1"])
         try:
             result = s.cluster_resolver is None
         finally:
             s.close()
     finally:
         if old is None:
             del os.environ["TF_CONFIG"]
         else:
             os.environ["TF_CONFIG"] = old
     """,
     """
     import os, json
     old = os.environ.get("TF_CONFIG")
     os.environ["TF_CONFIG"] = json.dumps({"cluster": {"worker": ["localhost:12345"]}, "task": {"type": "worker", "index": 0}})
     try:
         s = tf.distribute.MirroredStrategy(["CPU:0", "CPU:1"])
         result = s.cluster_resolver is None
     finally:
         if old is None:
             del os.environ["TF_CONFIG"]
         else:
             os.environ["TF_CONFIG"] = old
     """, strategy=None)

# ---------------------------------------------------------------- CentralStorageStrategy
case("central_storage.variable_placement", CS,
     "CentralStorageStrategy: a variable created in scope lives on the parameter device; experimental_local_results gives ONE value (not one per replica); it is not a DistributedValues of the replicas",
     """
     with strategy.scope():
         v = idist.Variable(np.float32(1.0))
     lr = strategy.experimental_local_results(v)
     result = {"device": v.device, "n_local": len(lr), "local": [np.asarray(x).tolist() for x in lr],
               "local_devices": [x.device for x in lr]}
     """,
     """
     with strategy.scope():
         v = tf.Variable(1.0)
     lr = strategy.experimental_local_results(v)
     result = {"device": v.device, "n_local": len(lr), "local": [x.numpy().tolist() for x in lr],
               "local_devices": [x.device for x in lr]}
     """, strategy="CS3")

case("central_storage.run_and_reduce", CS,
     "CentralStorageStrategy with 3 compute devices: run result is a PerReplica on the compute devices; reduce SUM",
     """
     out = strategy.run(lambda: np.float32(idist.get_replica_context().replica_id_in_sync_group) * np.float32(2.0))
     vals = strategy.experimental_local_results(out)
     result = {"per_replica": isinstance(out, idist.PerReplica), "values": [np.asarray(v).tolist() for v in vals],
               "devices": [v.device for v in vals], "sum": np.asarray(strategy.reduce("SUM", out, axis=None)).tolist()}
     """,
     """
     out = strategy.run(lambda: tf.cast(tf.distribute.get_replica_context().replica_id_in_sync_group, tf.float32) * 2.0)
     vals = strategy.experimental_local_results(out)
     result = {"per_replica": type(out).__name__ == "PerReplica", "values": [v.numpy().tolist() for v in vals],
               "devices": [v.device for v in vals], "sum": strategy.reduce("SUM", out, axis=None).numpy().tolist()}
     """, strategy="CS3")

for agg, tag in [("SUM", "sum"), ("MEAN", "mean"), ("ONLY_FIRST_REPLICA", "only_first")]:
    case(f"central_storage.replica_assign_add.{tag}", CS,
         f"CentralStorageStrategy (2 compute devices): variable with aggregation {agg}, assign_add(replica_id + 1) in replica context",
         f"""
         with strategy.scope():
             v = idist.Variable(np.float32(1.0), aggregation=idist.VariableAggregation.{agg})
         strategy.run(lambda: v.assign_add(np.float32(idist.get_replica_context().replica_id_in_sync_group) + np.float32(1.0)))
         result = [np.asarray(x).tolist() for x in strategy.experimental_local_results(v)]
         """,
         f"""
         with strategy.scope():
             v = tf.Variable(1.0, aggregation=tf.VariableAggregation.{agg})
         strategy.run(lambda: v.assign_add(tf.cast(tf.distribute.get_replica_context().replica_id_in_sync_group, tf.float32) + 1.0))
         result = [x.numpy().tolist() for x in strategy.experimental_local_results(v)]
         """, strategy="CS2")

case("central_storage.replica_assign_add.none_raises", CS,
     "CentralStorageStrategy: a NONE-aggregation variable updated in replica context raises ValueError ('You must specify an aggregation method to update a AggregatingVariable in Replica Context'), unlike MirroredStrategy where the copies just diverge",
     """
     with strategy.scope():
         v = idist.Variable(np.float32(1.0))
     strategy.run(lambda: v.assign_add(np.float32(idist.get_replica_context().replica_id_in_sync_group) + np.float32(1.0)))
     result = [np.asarray(x).tolist() for x in strategy.experimental_local_results(v)]
     """,
     """
     with strategy.scope():
         v = tf.Variable(1.0)
     strategy.run(lambda: v.assign_add(tf.cast(tf.distribute.get_replica_context().replica_id_in_sync_group, tf.float32) + 1.0))
     result = [x.numpy().tolist() for x in strategy.experimental_local_results(v)]
     """, strategy="CS2")

case("central_storage.read_in_run", CS,
     "CentralStorageStrategy: each replica reads the single central variable inside run",
     """
     with strategy.scope():
         v = idist.Variable(np.array([1.0, 2.0], np.float32))
     out = strategy.run(lambda: v.read_value() * (np.float32(idist.get_replica_context().replica_id_in_sync_group) + np.float32(1.0)))
     result = [np.asarray(x).tolist() for x in strategy.experimental_local_results(out)]
     """,
     """
     with strategy.scope():
         v = tf.Variable([1.0, 2.0])
     out = strategy.run(lambda: v.read_value() * (tf.cast(tf.distribute.get_replica_context().replica_id_in_sync_group, tf.float32) + 1.0))
     result = [x.numpy().tolist() for x in strategy.experimental_local_results(out)]
     """, strategy="CS3")

case("central_storage.cross_replica_assign", CS,
     "CentralStorageStrategy: cross-replica assign and read_value",
     """
     with strategy.scope():
         v = idist.Variable(np.float32(1.0))
     v.assign(np.float32(5.0))
     v.assign_sub(np.float32(2.0))
     result = {"read": np.asarray(v.read_value()).tolist(), "local": [np.asarray(x).tolist() for x in strategy.experimental_local_results(v)]}
     """,
     """
     with strategy.scope():
         v = tf.Variable(1.0)
     v.assign(5.0)
     v.assign_sub(2.0)
     result = {"read": v.read_value().numpy().tolist(), "local": [x.numpy().tolist() for x in strategy.experimental_local_results(v)]}
     """, strategy="CS2")

case("central_storage.all_reduce", CS,
     "CentralStorageStrategy: ReplicaContext.all_reduce SUM across the compute replicas",
     """
     out = strategy.run(lambda: idist.get_replica_context().all_reduce("SUM", np.float32(idist.get_replica_context().replica_id_in_sync_group) + np.float32(1.0)))
     result = [np.asarray(x).tolist() for x in strategy.experimental_local_results(out)]
     """,
     """
     out = strategy.run(lambda: tf.distribute.get_replica_context().all_reduce("SUM", tf.cast(tf.distribute.get_replica_context().replica_id_in_sync_group, tf.float32) + 1.0))
     result = [x.numpy().tolist() for x in strategy.experimental_local_results(out)]
     """, strategy="CS3")

case("central_storage.variable_attributes", CS,
     "CentralStorageStrategy variable attributes: aggregation, synchronization, trainable, isinstance DistributedValues",
     """
     with strategy.scope():
         v = idist.Variable(np.float32(1.0), aggregation=idist.VariableAggregation.MEAN)
     result = {"aggregation": v.aggregation.name, "synchronization": v.synchronization.name, "trainable": v.trainable,
               "distributed": isinstance(v, idist.DistributedValues), "name": v.name, "device": v.device}
     """,
     """
     with strategy.scope():
         v = tf.Variable(1.0, aggregation=tf.VariableAggregation.MEAN)
     result = {"aggregation": v.aggregation.name, "synchronization": v.synchronization.name, "trainable": v.trainable,
               "distributed": isinstance(v, tf.distribute.DistributedValues), "name": v.name, "device": v.device}
     """, strategy="CS2")

case("central_storage.default_devices", CS,
     "CentralStorageStrategy() with no arguments on a CPU-only host: one compute device CPU:0, parameter device CPU:0 (here both canonical)",
     """
     s = idist.experimental.CentralStorageStrategy()
     try:
         result = {"worker_devices": list(s.extended.worker_devices), "parameter_devices": list(s.extended.parameter_devices),
                   "num_replicas_in_sync": s.num_replicas_in_sync}
     finally:
         s.close()
     """,
     """
     s = tf.distribute.experimental.CentralStorageStrategy()
     result = {"worker_devices": list(s.extended.worker_devices), "parameter_devices": list(s.extended.parameter_devices),
               "num_replicas_in_sync": s.num_replicas_in_sync}
     """, strategy=None)

case("central_storage.parameter_device_cpu1", CS,
     "CentralStorageStrategy(compute_devices=['CPU:0', 'CPU:2'], parameter_device='CPU:1'): variables on CPU:1; parameter_devices as given",
     """
     s = idist.experimental.CentralStorageStrategy(compute_devices=["CPU:0", "CPU:2"], parameter_device="CPU:1")
     try:
         with s.scope():
             v = idist.Variable(np.float32(2.0))
         result = {"parameter_devices": list(s.extended.parameter_devices), "variable_device": v.device,
                   "worker_devices": list(s.extended.worker_devices)}
     finally:
         s.close()
     """,
     """
     s = tf.distribute.experimental.CentralStorageStrategy(compute_devices=["CPU:0", "CPU:2"], parameter_device="CPU:1")
     with s.scope():
         v = tf.Variable(2.0)
     result = {"parameter_devices": list(s.extended.parameter_devices), "variable_device": v.device,
               "worker_devices": list(s.extended.worker_devices)}
     """, strategy=None)

case("central_storage.merge_call_update", CS,
     "CentralStorageStrategy: the merge_call / reduce_to / update pattern on a central variable",
     """
     with strategy.scope():
         v = idist.Variable(np.float32(1.0))
     def merge_fn(s, g):
         r = s.extended.reduce_to(idist.ReduceOp.SUM, g, v)
         return s.extended.update(v, lambda var, x: var.assign_sub(x), args=(r,))
     def fn():
         ctx = idist.get_replica_context()
         ctx.merge_call(merge_fn, args=(np.float32(ctx.replica_id_in_sync_group) + np.float32(0.5),))
         return np.float32(0.0)
     strategy.run(fn)
     result = [np.asarray(x).tolist() for x in strategy.experimental_local_results(v)]
     """,
     """
     with strategy.scope():
         v = tf.Variable(1.0)
     def merge_fn(s, g):
         r = s.extended.reduce_to(tf.distribute.ReduceOp.SUM, g, v)
         return s.extended.update(v, lambda var, x: var.assign_sub(x), args=(r,))
     def fn():
         ctx = tf.distribute.get_replica_context()
         ctx.merge_call(merge_fn, args=(tf.cast(ctx.replica_id_in_sync_group, tf.float32) + 0.5,))
         return tf.constant(0.0)
     strategy.run(fn)
     result = [x.numpy().tolist() for x in strategy.experimental_local_results(v)]
     """, strategy="CS2")

case("central_storage.duplicate_compute_devices", CS,
     "CentralStorageStrategy(compute_devices=['CPU:0', 'CPU:0']) is accepted (no duplicate check, unlike MirroredStrategy)",
     """
     s = idist.experimental.CentralStorageStrategy(compute_devices=["CPU:0", "CPU:0"], parameter_device="CPU:0")
     try:
         result = {"worker_devices": list(s.extended.worker_devices), "num_replicas_in_sync": s.num_replicas_in_sync}
     finally:
         s.close()
     """,
     """
     s = tf.distribute.experimental.CentralStorageStrategy(compute_devices=["CPU:0", "CPU:0"], parameter_device="CPU:0")
     result = {"worker_devices": list(s.extended.worker_devices), "num_replicas_in_sync": s.num_replicas_in_sync}
     """, strategy=None)

# ---------------------------------------------------------------- OneDeviceStrategy
case("one_device.run_plain_value", ST,
     "OneDeviceStrategy.run returns a plain value on the device, not a PerReplica",
     """
     out = strategy.run(lambda x: x + np.float32(1.0), args=(np.array([1.0, 2.0], np.float32),))
     result = {"per_replica": isinstance(out, idist.PerReplica), "distributed": isinstance(out, idist.DistributedValues),
               "value": np.asarray(out).tolist(), "device": out.device}
     """,
     """
     out = strategy.run(lambda x: x + 1.0, args=(tf.constant([1.0, 2.0]),))
     result = {"per_replica": type(out).__name__ == "PerReplica", "distributed": isinstance(out, tf.distribute.DistributedValues),
               "value": out.numpy().tolist(), "device": out.device}
     """, strategy="OD1")

case("one_device.replica_context", ST,
     "OneDeviceStrategy: inside run the replica id is 0 (int32) and num_replicas_in_sync 1",
     """
     out = strategy.run(lambda: (idist.get_replica_context().replica_id_in_sync_group, np.int32(idist.get_replica_context().num_replicas_in_sync)))
     result = {"id": np.asarray(out[0]).tolist(), "dtype": np.asarray(out[0]).dtype.name, "n": np.asarray(out[1]).tolist()}
     """,
     """
     out = strategy.run(lambda: (tf.identity(tf.distribute.get_replica_context().replica_id_in_sync_group), tf.constant(tf.distribute.get_replica_context().num_replicas_in_sync)))
     result = {"id": out[0].numpy().tolist(), "dtype": out[0].dtype.name, "n": out[1].numpy().tolist()}
     """, strategy="OD")

case("one_device.reduce_mean_axis_none", ST,
     "OneDeviceStrategy.reduce('MEAN', value, axis=None) is the value itself; axis=0 averages along the batch",
     """
     out = strategy.run(lambda: np.array([1.0, 2.0, 6.0], np.float32))
     result = [np.asarray(strategy.reduce("MEAN", out, axis=None)).tolist(), np.asarray(strategy.reduce("MEAN", out, axis=0)).tolist()]
     """,
     """
     out = strategy.run(lambda: tf.constant([1.0, 2.0, 6.0]))
     result = [strategy.reduce("MEAN", out, axis=None).numpy().tolist(), strategy.reduce("MEAN", out, axis=0).numpy().tolist()]
     """, strategy="OD")

case("one_device.reduce_bad_op", ST,
     "OneDeviceStrategy.reduce with an unknown op string raises ValueError",
     """
     result = np.asarray(strategy.reduce("min", np.float32(1.0), axis=None)).tolist()
     """,
     """
     result = strategy.reduce("min", tf.constant(1.0), axis=None).numpy().tolist()
     """, strategy="OD")

case("one_device.reduce_int_mean_axis_0", ST,
     "OneDeviceStrategy.reduce('MEAN', int32 vector, axis=0): dtype as TF gives it",
     """
     r = strategy.reduce("MEAN", np.array([1, 2], np.int32), axis=0)
     result = {"value": np.asarray(r).tolist(), "dtype": np.asarray(r).dtype.name}
     """,
     """
     r = strategy.reduce("MEAN", tf.constant([1, 2]), axis=0)
     result = {"value": r.numpy().tolist(), "dtype": r.dtype.name}
     """, strategy="OD")

case("one_device.device_string_forms", ST,
     "OneDeviceStrategy('/cpu:1') canonicalises its device",
     """
     s = idist.OneDeviceStrategy("/cpu:1")
     try:
         result = {"worker_devices": list(s.extended.worker_devices), "parameter_devices": list(s.extended.parameter_devices)}
     finally:
         s.close()
     """,
     """
     s = tf.distribute.OneDeviceStrategy("/cpu:1")
     result = {"worker_devices": list(s.extended.worker_devices), "parameter_devices": list(s.extended.parameter_devices)}
     """, strategy=None)

case("one_device.list_argument_raises", ST,
     "OneDeviceStrategy(['CPU:0']) (a list instead of a device string) raises TypeError",
     """
     s = idist.OneDeviceStrategy(["CPU:0"])
     s.close()
     result = "no error"
     """,
     """
     s = tf.distribute.OneDeviceStrategy(["CPU:0"])
     result = "no error"
     """, strategy=None)

case("one_device.unknown_device_type_raises", ST,
     "OneDeviceStrategy('XPU:0') (unknown device type) raises ValueError",
     """
     s = idist.OneDeviceStrategy("XPU:0")
     s.close()
     result = "no error"
     """,
     """
     s = tf.distribute.OneDeviceStrategy("XPU:0")
     result = "no error"
     """, strategy=None)

# ---------------------------------------------------------------- construction errors
case("construction.duplicate_devices_raises", ST,
     "MirroredStrategy(['CPU:0', 'CPU:0']): TF raises AssertionError ('No duplicates allowed in `devices` argument') -- an AssertionError, not ValueError",
     """
     s = idist.MirroredStrategy(["CPU:0", "CPU:0"])
     s.close()
     result = "no error"
     """,
     """
     s = tf.distribute.MirroredStrategy(["CPU:0", "CPU:0"])
     result = "no error"
     """, strategy=None)

case("construction.duplicate_devices_different_spelling_raises", ST,
     "MirroredStrategy(['CPU:1', '/device:cpu:1']): the same device spelled twice is a duplicate (AssertionError)",
     """
     s = idist.MirroredStrategy(["CPU:1", "/device:cpu:1"])
     s.close()
     result = "no error"
     """,
     """
     s = tf.distribute.MirroredStrategy(["CPU:1", "/device:cpu:1"])
     result = "no error"
     """, strategy=None)

case("construction.unknown_device_type_raises", ST,
     "MirroredStrategy(['XPU:0']) (unknown device type) raises ValueError",
     """
     s = idist.MirroredStrategy(["XPU:0"])
     s.close()
     result = "no error"
     """,
     """
     s = tf.distribute.MirroredStrategy(["XPU:0"])
     result = "no error"
     """, strategy=None)

case("construction.garbage_device_raises", ST,
     "MirroredStrategy(['not a device']) raises ValueError",
     """
     s = idist.MirroredStrategy(["not a device"])
     s.close()
     result = "no error"
     """,
     """
     s = tf.distribute.MirroredStrategy(["not a device"])
     result = "no error"
     """, strategy=None)

case("construction.string_instead_of_list_raises", ST,
     "MirroredStrategy('CPU:0') (a string, not a list): TF iterates it character by character and raises ValueError",
     """
     s = idist.MirroredStrategy("CPU:0")
     s.close()
     result = "no error"
     """,
     """
     s = tf.distribute.MirroredStrategy("CPU:0")
     result = "no error"
     """, strategy=None)

case("construction.tuple_devices", ST,
     "MirroredStrategy(devices=('CPU:1', 'CPU:0')) accepts a tuple and keeps the order",
     """
     s = idist.MirroredStrategy(devices=("CPU:1", "CPU:0"))
     try:
         result = {"worker_devices": list(s.extended.worker_devices), "n": s.num_replicas_in_sync}
     finally:
         s.close()
     """,
     """
     s = tf.distribute.MirroredStrategy(devices=("CPU:1", "CPU:0"))
     result = {"worker_devices": list(s.extended.worker_devices), "n": s.num_replicas_in_sync}
     """, strategy=None)

case("construction.device_index_beyond_host", ST,
     "MirroredStrategy(['CPU:0', 'CPU:7']) on a host with 4 CPU devices: construction does not check that the device exists; worker_devices and num_replicas_in_sync as given",
     """
     s = idist.MirroredStrategy(["CPU:0", "CPU:7"])
     try:
         result = {"worker_devices": list(s.extended.worker_devices), "n": s.num_replicas_in_sync}
     finally:
         s.close()
     """,
     """
     s = tf.distribute.MirroredStrategy(["CPU:0", "CPU:7"])
     result = {"worker_devices": list(s.extended.worker_devices), "n": s.num_replicas_in_sync}
     """, strategy=None)

# ---------------------------------------------------------------- optimizer
case("optimizer.sgd_momentum_two_steps", SE,
     "SGD(0.1, momentum=0.9).apply_gradients in replica context on 2 replicas, gradient replica_id + 1 (summed to 3), two steps: 1 -> 0.7 -> 0.13",
     """
     with strategy.scope():
         v = idist.Variable(np.float32(1.0))
         opt = idist.optimizers.SGD(0.1, momentum=0.9)
     def fn():
         g = np.float32(idist.get_replica_context().replica_id_in_sync_group) + np.float32(1.0)
         opt.apply_gradients([(g, v)])
         return np.float32(0.0)
     steps = []
     for _ in range(2):
         strategy.run(fn)
         steps.append([np.asarray(c).tolist() for c in strategy.experimental_local_results(v)])
     result = steps
     """,
     """
     with strategy.scope():
         v = tf.Variable(1.0)
         opt = tf.keras.optimizers.SGD(0.1, momentum=0.9)
     def fn():
         g = tf.cast(tf.distribute.get_replica_context().replica_id_in_sync_group, tf.float32) + 1.0
         opt.apply_gradients([(g, v)])
         return tf.constant(0.0)
     steps = []
     for _ in range(2):
         strategy.run(fn)
         steps.append([c.numpy().tolist() for c in strategy.experimental_local_results(v)])
     result = steps
     """)

case("optimizer.sgd_cross_replica", SE,
     "SGD(0.5).apply_gradients in cross-replica context (outside run) on a mirrored variable: one update applied to every copy",
     """
     with strategy.scope():
         v = idist.Variable(np.float32(1.0))
         opt = idist.optimizers.SGD(0.5)
     opt.apply_gradients([(np.float32(1.0), v)])
     result = [np.asarray(c).tolist() for c in strategy.experimental_local_results(v)]
     """,
     """
     with strategy.scope():
         v = tf.Variable(1.0)
         opt = tf.keras.optimizers.SGD(0.5)
     opt.apply_gradients([(tf.constant(1.0), v)])
     result = [c.numpy().tolist() for c in strategy.experimental_local_results(v)]
     """, strategy="M3")

case("optimizer.sgd_vector_mirrored4", SE,
     "SGD(0.1) on a vector variable with 4 replicas, per-replica gradient [i, 1]: summed gradient [6, 4]",
     """
     with strategy.scope():
         v = idist.Variable(np.array([1.0, 1.0], np.float32))
         opt = idist.optimizers.SGD(0.1)
     def fn():
         i = np.float32(idist.get_replica_context().replica_id_in_sync_group)
         opt.apply_gradients([(np.array([1.0, 0.0], np.float32) * i + np.array([0.0, 1.0], np.float32), v)])
         return np.float32(0.0)
     strategy.run(fn)
     result = [np.asarray(c).tolist() for c in strategy.experimental_local_results(v)]
     """,
     """
     with strategy.scope():
         v = tf.Variable([1.0, 1.0])
         opt = tf.keras.optimizers.SGD(0.1)
     def fn():
         i = tf.cast(tf.distribute.get_replica_context().replica_id_in_sync_group, tf.float32)
         opt.apply_gradients([(tf.constant([1.0, 0.0]) * i + tf.constant([0.0, 1.0]), v)])
         return tf.constant(0.0)
     strategy.run(fn)
     result = [c.numpy().tolist() for c in strategy.experimental_local_results(v)]
     """, strategy="M4")

case("optimizer.sgd_one_device", SE,
     "OneDeviceStrategy: SGD(0.5).apply_gradients inside run",
     """
     with strategy.scope():
         v = idist.Variable(np.array([1.0, 2.0], np.float32))
         opt = idist.optimizers.SGD(0.5)
     def fn():
         opt.apply_gradients([(np.array([1.0, 1.0], np.float32), v)])
         return np.float32(0.0)
     strategy.run(fn)
     result = np.asarray(v.read_value()).tolist()
     """,
     """
     with strategy.scope():
         v = tf.Variable([1.0, 2.0])
         opt = tf.keras.optimizers.SGD(0.5)
     def fn():
         opt.apply_gradients([(tf.constant([1.0, 1.0]), v)])
         return tf.constant(0.0)
     strategy.run(fn)
     result = v.read_value().numpy().tolist()
     """, strategy="OD")

case("optimizer.sgd_two_variables", SE,
     "SGD(0.1).apply_gradients with two (gradient, variable) pairs in replica context on 3 replicas",
     """
     with strategy.scope():
         w = idist.Variable(np.float32(0.0))
         b = idist.Variable(np.float32(0.0))
         opt = idist.optimizers.SGD(0.1)
     def fn():
         i = np.float32(idist.get_replica_context().replica_id_in_sync_group)
         opt.apply_gradients([(i, w), (np.float32(1.0) + i * np.float32(0.0), b)])
         return np.float32(0.0)
     strategy.run(fn)
     result = {"w": [np.asarray(c).tolist() for c in strategy.experimental_local_results(w)],
               "b": [np.asarray(c).tolist() for c in strategy.experimental_local_results(b)]}
     """,
     """
     with strategy.scope():
         w = tf.Variable(0.0)
         b = tf.Variable(0.0)
         opt = tf.keras.optimizers.SGD(0.1)
     def fn():
         i = tf.cast(tf.distribute.get_replica_context().replica_id_in_sync_group, tf.float32)
         opt.apply_gradients([(i, w), (1.0 + i * 0.0, b)])
         return tf.constant(0.0)
     strategy.run(fn)
     result = {"w": [c.numpy().tolist() for c in strategy.experimental_local_results(w)],
               "b": [c.numpy().tolist() for c in strategy.experimental_local_results(b)]}
     """, strategy="M3")

# ---------------------------------------------------------------- doc examples
case("docs.custom_training_loop_total", ST,
     "the Strategy page's custom loop: total_result += reduce(SUM, run(replica_fn, x), axis=None) over a distributed dataset (replica_fn = sum of the batch)",
     """
     dataset = idist.data.Dataset.range(10).batch(4)
     with strategy.scope():
         def replica_fn(input):
             return np.sum(input)
         dist_dataset = strategy.experimental_distribute_dataset(dataset)
         total_result = 0
         for x in dist_dataset:
             per_replica_result = strategy.run(replica_fn, args=(x,))
             total_result += strategy.reduce(idist.ReduceOp.SUM, per_replica_result, axis=None)
     result = np.asarray(total_result).tolist()
     """,
     """
     dataset = tf.data.Dataset.range(10).batch(4)
     with strategy.scope():
         def replica_fn(input):
             return tf.reduce_sum(input)
         dist_dataset = strategy.experimental_distribute_dataset(dataset)
         total_result = 0
         for x in dist_dataset:
             per_replica_result = strategy.run(replica_fn, args=(x,))
             total_result += strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica_result, axis=None)
     result = total_result.numpy().tolist()
     """, strategy="M3")

case("docs.scope_mirrored_variable_names", ST,
     "Strategy.scope example: the mirrored variable's components are 'Variable:0' and 'Variable/replica_1:0'; the regular one is 'Variable:0'",
     """
     with strategy.scope():
         mirrored_variable = idist.Variable(np.float32(1.0))
     regular_variable = idist.Variable(np.float32(1.0))
     result = {"mirrored": [c.name for c in strategy.experimental_local_results(mirrored_variable)],
               "regular": regular_variable.name}
     """,
     """
     with strategy.scope():
         mirrored_variable = tf.Variable(1.0)
     regular_variable = tf.Variable(1.0)
     result = {"mirrored": [c.name for c in strategy.experimental_local_results(mirrored_variable)],
               "regular": regular_variable.name}
     """)

case("docs.scope_get_strategy_default_after", PS,
     "'Outside this scope, it returns the default no-op strategy': get_strategy() inside scope is the strategy; after it, a different (default) strategy with 1 replica",
     """
     with strategy.scope():
         inside = idist.get_strategy() is strategy
     after = idist.get_strategy()
     result = {"inside": inside, "after_is_strategy": after is strategy, "after_replicas": after.num_replicas_in_sync}
     """,
     """
     with strategy.scope():
         inside = tf.distribute.get_strategy() is strategy
     after = tf.distribute.get_strategy()
     result = {"inside": inside, "after_is_strategy": after is strategy, "after_replicas": after.num_replicas_in_sync}
     """, strategy="M3")

case("docs.run_enters_scope", PS,
     "'Some strategy APIs (such as run and reduce) enter the scope for you': inside run get_strategy().num_replicas_in_sync is the strategy's",
     """
     out = strategy.run(lambda: np.int32(idist.get_strategy().num_replicas_in_sync) + idist.get_replica_context().replica_id_in_sync_group * 0)
     result = [np.asarray(x).tolist() for x in strategy.experimental_local_results(out)]
     """,
     """
     out = strategy.run(lambda: tf.constant(tf.distribute.get_strategy().num_replicas_in_sync) + tf.distribute.get_replica_context().replica_id_in_sync_group * 0)
     result = [x.numpy().tolist() for x in strategy.experimental_local_results(out)]
     """, strategy="M3")
