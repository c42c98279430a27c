"""Dataset distribution, InputContext, InputOptions, ReduceOp and other module-level classes."""
from record import case

ST = "strategy.txt"
PS = "parameter_server_strategy.txt"
CS = "central_storage_strategy.txt"
MD = "module_tf_distribute.txt"

STEPS_I = "[[np.asarray(v).tolist() for v in strategy.experimental_local_results(x)] for x in dd]"
STEPS_T = "[[v.numpy().tolist() for v in strategy.experimental_local_results(x)] for x in dd]"

def _split(id, what, ds_i, key, seed=PS, ds_t=None):
    ds_t = ds_t or ds_i.replace("idist.data.Dataset", "tf.data.Dataset")
    case(id, seed, what,
         f"""
         dd = strategy.experimental_distribute_dataset({ds_i})
         result = {STEPS_I}
         """,
         f"""
         dd = strategy.experimental_distribute_dataset({ds_t})
         result = {STEPS_T}
         """, strategy=key)

_split("distribute_dataset.range10_batch4.mirrored2", "range(10).batch(4) on 2 replicas: [2,2] per step, last partial batch of 2 splits [1,1]",
       "idist.data.Dataset.range(10).batch(4)", "M2")
_split("distribute_dataset.range10_batch4.mirrored3", "range(10).batch(4) on 3 replicas: 4 splits [2,2,0]; the last batch of 2 splits [1,1,0]",
       "idist.data.Dataset.range(10).batch(4)", "M3", ST)
_split("distribute_dataset.range9_batch3.mirrored2", "range(9).batch(3) on 2 replicas: a batch of 3 splits [2,1]",
       "idist.data.Dataset.range(9).batch(3)", "M2")
_split("distribute_dataset.range7_batch4.mirrored4", "range(7).batch(4) on 4 replicas: [1,1,1,1] then the last batch of 3 splits [1,1,1,0]",
       "idist.data.Dataset.range(7).batch(4)", "M4", ST)
_split("distribute_dataset.range10_batch5.mirrored2", "range(10).batch(5) on 2 replicas: a batch of 5 splits [3,2]",
       "idist.data.Dataset.range(10).batch(5)", "M2")
_split("distribute_dataset.range12_batch6.mirrored4", "range(12).batch(6) on 4 replicas: a batch of 6 splits [2,2,2,0]",
       "idist.data.Dataset.range(12).batch(6)", "M4", ST)
_split("distribute_dataset.range5_batch5.mirrored4", "range(5).batch(5) on 4 replicas: a batch of 5 splits [2,2,1,0]",
       "idist.data.Dataset.range(5).batch(5)", "M4", ST)
_split("distribute_dataset.range3_batch4.mirrored4", "range(3).batch(4) on 4 replicas: the single partial batch of 3 splits [1,1,1,0]",
       "idist.data.Dataset.range(3).batch(4)", "M4", ST)
_split("distribute_dataset.range1_batch2.mirrored2", "range(1).batch(2) on 2 replicas: a batch of 1 splits [1,0]",
       "idist.data.Dataset.range(1).batch(2)", "M2")
_split("distribute_dataset.drop_remainder.mirrored2", "range(10).batch(4, drop_remainder=True) on 2 replicas: the partial batch is dropped",
       "idist.data.Dataset.range(10).batch(4, drop_remainder=True)", "M2")
_split("distribute_dataset.drop_remainder.mirrored3", "range(9).batch(3, drop_remainder=True) on 3 replicas: one element each",
       "idist.data.Dataset.range(9).batch(3, drop_remainder=True)", "M3", ST)
_split("distribute_dataset.map_take.mirrored2", "range(100).map(x*10).batch(4).take(2) on 2 replicas",
       "idist.data.Dataset.range(100).map(lambda x: x * 10).batch(4).take(2)", "M2")
_split("distribute_dataset.repeat.mirrored2", "range(3).repeat(2).batch(4) on 2 replicas",
       "idist.data.Dataset.range(3).repeat(2).batch(4)", "M2")
_split("distribute_dataset.shard_then_batch.mirrored2", "range(8).shard(2, 1).batch(2) on 2 replicas",
       "idist.data.Dataset.range(8).shard(2, 1).batch(2)", "M2")
_split("distribute_dataset.from_tensors_repeat.mirrored2", "from_tensors([1., 2.]).repeat(4).batch(4) on 2 replicas: each replica gets 2 rows",
       "idist.data.Dataset.from_tensors(np.array([1., 2.], np.float32)).repeat(4).batch(4)", "M2",
       ds_t="tf.data.Dataset.from_tensors(tf.constant([1., 2.])).repeat(4).batch(4)")
_split("distribute_dataset.matrix_slices.mirrored2", "from_tensor_slices of a 6x2 float32 matrix, batch(3) on 2 replicas",
       "idist.data.Dataset.from_tensor_slices(np.arange(12, dtype=np.float32).reshape(6, 2)).batch(3)", "M2",
       ds_t="tf.data.Dataset.from_tensor_slices(np.arange(12, dtype=np.float32).reshape(6, 2)).batch(3)")
_split("distribute_dataset.one_device", "OneDeviceStrategy: batches are passed whole (no splitting)",
       "idist.data.Dataset.range(5).batch(2)", "OD", ST)
_split("distribute_dataset.mirrored1", "one-device MirroredStrategy: batches are passed whole",
       "idist.data.Dataset.range(5).batch(2)", "M1", ST)
_split("distribute_dataset.central_storage3", "CentralStorageStrategy with 3 compute devices: range(6).batch(3) splits [1,1,1]",
       "idist.data.Dataset.range(6).batch(3)", "CS3", CS)
_split("distribute_dataset.central_storage2_partial", "CentralStorageStrategy with 2 compute devices: range(5).batch(4) splits [2,2] then [1,0]",
       "idist.data.Dataset.range(5).batch(4)", "CS2", CS)

case("distribute_dataset.element_type_and_dtype", ST,
     "elements of a distributed dataset on 2 replicas are PerReplica values; range gives int64; devices are the replica devices",
     """
     dd = strategy.experimental_distribute_dataset(idist.data.Dataset.range(4).batch(2))
     x = next(iter(dd))
     vals = strategy.experimental_local_results(x)
     result = {"per_replica": isinstance(x, idist.PerReplica), "dtypes": [np.asarray(v).dtype.name for v in vals],
               "devices": [v.device for v in vals]}
     """,
     """
     dd = strategy.experimental_distribute_dataset(tf.data.Dataset.range(4).batch(2))
     x = next(iter(dd))
     vals = strategy.experimental_local_results(x)
     result = {"per_replica": type(x).__name__ == "PerReplica", "dtypes": [v.dtype.name for v in vals],
               "devices": [v.device for v in vals]}
     """)

case("distribute_dataset.one_device_element_plain", ST,
     "OneDeviceStrategy: elements of a distributed dataset are plain values on the strategy's device",
     """
     dd = strategy.experimental_distribute_dataset(idist.data.Dataset.range(4).batch(2))
     x = next(iter(dd))
     result = {"per_replica": isinstance(x, idist.PerReplica), "value": np.asarray(x).tolist(), "device": x.device}
     """,
     """
     dd = strategy.experimental_distribute_dataset(tf.data.Dataset.range(4).batch(2))
     x = next(iter(dd))
     result = {"per_replica": type(x).__name__ == "PerReplica", "value": x.numpy().tolist(), "device": x.device}
     """, strategy="OD1")

case("distribute_dataset.tuple_elements", ST,
     "from_tensor_slices((x, y)).batch(4) on 2 replicas: each element is a tuple of PerReplica",
     """
     x = np.arange(8, dtype=np.float32).reshape(4, 2)
     y = np.array([0, 1, 2, 3], np.int32)
     dd = strategy.experimental_distribute_dataset(idist.data.Dataset.from_tensor_slices((x, y)).batch(4))
     el = next(iter(dd))
     result = {"type": type(el).__name__, "len": len(el),
               "x": [np.asarray(v).tolist() for v in strategy.experimental_local_results(el[0])],
               "y": [np.asarray(v).tolist() for v in strategy.experimental_local_results(el[1])]}
     """,
     """
     x = np.arange(8, dtype=np.float32).reshape(4, 2)
     y = np.array([0, 1, 2, 3], np.int32)
     dd = strategy.experimental_distribute_dataset(tf.data.Dataset.from_tensor_slices((x, y)).batch(4))
     el = next(iter(dd))
     result = {"type": type(el).__name__, "len": len(el),
               "x": [v.numpy().tolist() for v in strategy.experimental_local_results(el[0])],
               "y": [v.numpy().tolist() for v in strategy.experimental_local_results(el[1])]}
     """)

case("distribute_dataset.dict_elements", ST,
     "from_tensor_slices({'a': ..., 'b': ...}).batch(3) on 3 replicas: each element is a dict of PerReplica",
     """
     d = {"a": np.array([1, 2, 3], np.int64), "b": np.array([0.5, 1.5, 2.5], np.float64)}
     dd = strategy.experimental_distribute_dataset(idist.data.Dataset.from_tensor_slices(d).batch(3))
     el = next(iter(dd))
     result = {"keys": sorted(el), "a": [np.asarray(v).tolist() for v in strategy.experimental_local_results(el["a"])],
               "b": [np.asarray(v).tolist() for v in strategy.experimental_local_results(el["b"])],
               "b_dtype": np.asarray(strategy.experimental_local_results(el["b"])[0]).dtype.name}
     """,
     """
     d = {"a": np.array([1, 2, 3], np.int64), "b": np.array([0.5, 1.5, 2.5], np.float64)}
     dd = strategy.experimental_distribute_dataset(tf.data.Dataset.from_tensor_slices(d).batch(3))
     el = next(iter(dd))
     result = {"keys": sorted(el), "a": [v.numpy().tolist() for v in strategy.experimental_local_results(el["a"])],
               "b": [v.numpy().tolist() for v in strategy.experimental_local_results(el["b"])],
               "b_dtype": strategy.experimental_local_results(el["b"])[0].dtype.name}
     """, strategy="M3")

case("distribute_dataset.run_tuple_elements", ST,
     "run over a distributed (x, y) dataset: per-replica sum of x*y, reduced with SUM axis=None per step",
     """
     x = np.arange(6, dtype=np.float32)
     y = np.full(6, 2.0, np.float32)
     dd = strategy.experimental_distribute_dataset(idist.data.Dataset.from_tensor_slices((x, y)).batch(4))
     totals = []
     for batch in dd:
         out = strategy.run(lambda b: np.sum(b[0] * b[1]), args=(batch,))
         totals.append(np.asarray(strategy.reduce("SUM", out, axis=None)).tolist())
     result = totals
     """,
     """
     x = np.arange(6, dtype=np.float32)
     y = np.full(6, 2.0, np.float32)
     dd = strategy.experimental_distribute_dataset(tf.data.Dataset.from_tensor_slices((x, y)).batch(4))
     totals = []
     for batch in dd:
         out = strategy.run(lambda b: tf.reduce_sum(b[0] * b[1]), args=(batch,))
         totals.append(strategy.reduce("SUM", out, axis=None).numpy().tolist())
     result = totals
     """)

case("distribute_dataset.partial_batch_reduce_mean_axis0", PS,
     "run over range(6).batch(4) on 2 replicas, float cast, reduce MEAN axis=0 per step: means 1.5 and 4.5",
     """
     dd = strategy.experimental_distribute_dataset(idist.data.Dataset.range(6).batch(4))
     means = []
     for batch in dd:
         out = strategy.run(lambda b: b.astype(np.float32), args=(batch,))
         means.append(np.asarray(strategy.reduce("MEAN", out, axis=0)).tolist())
     result = means
     """,
     """
     dd = strategy.experimental_distribute_dataset(tf.data.Dataset.range(6).batch(4))
     means = []
     for batch in dd:
         out = strategy.run(lambda b: tf.cast(b, tf.float32), args=(batch,))
         means.append(strategy.reduce("MEAN", out, axis=0).numpy().tolist())
     result = means
     """)

case("distribute_dataset.empty_replica_reduce_sum_axis0", PS,
     "3 replicas, range(4).batch(4) splits [2,2,0]: SUM axis=0 over the step includes the empty replica",
     """
     dd = strategy.experimental_distribute_dataset(idist.data.Dataset.range(4).batch(4))
     out = strategy.run(lambda b: b * 2, args=(next(iter(dd)),))
     result = {"sum": np.asarray(strategy.reduce("SUM", out, axis=0)).tolist(),
               "mean": np.asarray(strategy.reduce("MEAN", out, axis=0)).tolist()}
     """,
     """
     dd = strategy.experimental_distribute_dataset(tf.data.Dataset.range(4).batch(4))
     out = strategy.run(lambda b: b * 2, args=(next(iter(dd)),))
     result = {"sum": strategy.reduce("SUM", out, axis=0).numpy().tolist(),
               "mean": strategy.reduce("MEAN", out, axis=0).numpy().tolist()}
     """, strategy="M3")

case("distribute_dataset.iterator_exhausted", ST,
     "next() on an exhausted distributed-dataset iterator raises StopIteration",
     """
     it = iter(strategy.experimental_distribute_dataset(idist.data.Dataset.range(4).batch(2)))
     next(it); next(it)
     result = next(it)
     """,
     """
     it = iter(strategy.experimental_distribute_dataset(tf.data.Dataset.range(4).batch(2)))
     next(it); next(it)
     result = next(it)
     """)

case("distribute_dataset.iterate_twice", ST,
     "a distributed dataset can be iterated twice; each pass starts from the beginning",
     """
     dd = strategy.experimental_distribute_dataset(idist.data.Dataset.range(4).batch(2))
     first = [[np.asarray(v).tolist() for v in strategy.experimental_local_results(x)] for x in dd]
     second = [[np.asarray(v).tolist() for v in strategy.experimental_local_results(x)] for x in dd]
     result = {"first": first, "second": second}
     """,
     """
     dd = strategy.experimental_distribute_dataset(tf.data.Dataset.range(4).batch(2))
     first = [[v.numpy().tolist() for v in strategy.experimental_local_results(x)] for x in dd]
     second = [[v.numpy().tolist() for v in strategy.experimental_local_results(x)] for x in dd]
     result = {"first": first, "second": second}
     """)

case("distribute_dataset.no_more_transformations", PS,
     "a DistributedDataset accepts no further transformations: .batch raises AttributeError",
     """
     dd = strategy.experimental_distribute_dataset(idist.data.Dataset.range(4).batch(2))
     result = len(list(dd.batch(2)))
     """,
     """
     dd = strategy.experimental_distribute_dataset(tf.data.Dataset.range(4).batch(2))
     result = len(list(dd.batch(2)))
     """)

case("distribute_dataset.unbatched_raises", PS,
     "distributing an unbatched dataset (range(4), scalar elements) on 2 replicas fails when iterated; TF 2.21 raises IndexError (list index out of range) here -- not one of the usual classes",
     """
     dd = strategy.experimental_distribute_dataset(idist.data.Dataset.range(4))
     result = [[np.asarray(v).tolist() for v in strategy.experimental_local_results(x)] for x in dd]
     """,
     """
     dd = strategy.experimental_distribute_dataset(tf.data.Dataset.range(4))
     result = [[v.numpy().tolist() for v in strategy.experimental_local_results(x)] for x in dd]
     """)

case("distribute_dataset.per_replica_mode_raises", PS,
     "experimental_distribute_dataset with InputOptions(experimental_replication_mode=PER_REPLICA) raises NotImplementedError (only supported in distribute_datasets_from_function)",
     """
     opts = idist.InputOptions(experimental_replication_mode=idist.InputReplicationMode.PER_REPLICA)
     dd = strategy.experimental_distribute_dataset(idist.data.Dataset.range(4).batch(2), options=opts)
     result = [[np.asarray(v).tolist() for v in strategy.experimental_local_results(x)] for x in dd]
     """,
     """
     opts = tf.distribute.InputOptions(experimental_replication_mode=tf.distribute.InputReplicationMode.PER_REPLICA)
     dd = strategy.experimental_distribute_dataset(tf.data.Dataset.range(4).batch(2), options=opts)
     result = [[v.numpy().tolist() for v in strategy.experimental_local_results(x)] for x in dd]
     """)

case("distribute_dataset.fetch_to_device_false", PS,
     "InputOptions(experimental_fetch_to_device=False): the split is the same; the per-replica values stay on the host CPU:0",
     """
     opts = idist.InputOptions(experimental_fetch_to_device=False)
     dd = strategy.experimental_distribute_dataset(idist.data.Dataset.range(4).batch(4), options=opts)
     x = next(iter(dd))
     result = {"values": [np.asarray(v).tolist() for v in strategy.experimental_local_results(x)],
               "devices": [v.device for v in strategy.experimental_local_results(x)]}
     """,
     """
     opts = tf.distribute.InputOptions(experimental_fetch_to_device=False)
     dd = strategy.experimental_distribute_dataset(tf.data.Dataset.range(4).batch(4), options=opts)
     x = next(iter(dd))
     result = {"values": [v.numpy().tolist() for v in strategy.experimental_local_results(x)],
               "devices": [v.device for v in strategy.experimental_local_results(x)]}
     """)

# ---------------------------------------------------------------- distribute_datasets_from_function
CTX_DS_I = "idist.data.Dataset.from_tensors(np.array([ctx.num_input_pipelines, ctx.input_pipeline_id, ctx.num_replicas_in_sync], np.int32)).repeat({n})"
CTX_DS_T = "tf.data.Dataset.from_tensors(tf.constant([ctx.num_input_pipelines, ctx.input_pipeline_id, ctx.num_replicas_in_sync])).repeat({n})"

for key, n, seed in [("M2", 2, PS), ("M3", 3, CS), ("M4", 4, PS), ("OD", 1, CS)]:
    case(f"datasets_from_function.input_context.{key.lower()}", seed,
         f"distribute_datasets_from_function on {key}: each replica's first element encodes the InputContext it was made with [num_input_pipelines, input_pipeline_id, num_replicas_in_sync] (PER_WORKER: one call for the worker)",
         f"""
         dd = strategy.distribute_datasets_from_function(lambda ctx: {CTX_DS_I.format(n=n)})
         x = next(iter(dd))
         result = [np.asarray(v).tolist() for v in strategy.experimental_local_results(x)]
         """,
         f"""
         dd = strategy.distribute_datasets_from_function(lambda ctx: {CTX_DS_T.format(n=n)})
         x = next(iter(dd))
         result = [v.numpy().tolist() for v in strategy.experimental_local_results(x)]
         """, strategy=key)

case("datasets_from_function.per_replica_mode", PS,
     "InputOptions(experimental_replication_mode=PER_REPLICA, experimental_fetch_to_device=False): dataset_fn is called once per replica with num_input_pipelines=2 and input_pipeline_id=replica id",
     f"""
     opts = idist.InputOptions(experimental_replication_mode=idist.InputReplicationMode.PER_REPLICA,
                               experimental_fetch_to_device=False)
     dd = strategy.distribute_datasets_from_function(lambda ctx: {CTX_DS_I.format(n=1)}, options=opts)
     x = next(iter(dd))
     result = [np.asarray(v).tolist() for v in strategy.experimental_local_results(x)]
     """,
     f"""
     opts = tf.distribute.InputOptions(experimental_replication_mode=tf.distribute.InputReplicationMode.PER_REPLICA,
                                       experimental_fetch_to_device=False)
     dd = strategy.distribute_datasets_from_function(lambda ctx: {CTX_DS_T.format(n=1)}, options=opts)
     x = next(iter(dd))
     result = [v.numpy().tolist() for v in strategy.experimental_local_results(x)]
     """)

case("datasets_from_function.per_worker_dequeue_order", PS,
     "PER_WORKER: the replicas dequeue consecutive batches of the one dataset: range(8).batch(2) gives [0,1] and [2,3] in step 1",
     """
     dd = strategy.distribute_datasets_from_function(lambda ctx: idist.data.Dataset.range(8).batch(2))
     result = [[np.asarray(v).tolist() for v in strategy.experimental_local_results(x)] for x in dd]
     """,
     """
     dd = strategy.distribute_datasets_from_function(lambda ctx: tf.data.Dataset.range(8).batch(2))
     result = [[v.numpy().tolist() for v in strategy.experimental_local_results(x)] for x in dd]
     """)

case("datasets_from_function.per_worker_odd_count", PS,
     "PER_WORKER on 2 replicas with 5 batches: what happens to the last step where only replica 0 has data",
     """
     dd = strategy.distribute_datasets_from_function(lambda ctx: idist.data.Dataset.range(5).batch(1))
     result = [[np.asarray(v).tolist() for v in strategy.experimental_local_results(x)] for x in dd]
     """,
     """
     dd = strategy.distribute_datasets_from_function(lambda ctx: tf.data.Dataset.range(5).batch(1))
     result = [[v.numpy().tolist() for v in strategy.experimental_local_results(x)] for x in dd]
     """)

case("datasets_from_function.per_replica_batch_size_and_shard", CS,
     "dataset_fn batches by ctx.get_per_replica_batch_size(6) on 3 replicas and shards by the pipeline: range(12)",
     """
     def dataset_fn(ctx):
         b = ctx.get_per_replica_batch_size(6)
         return idist.data.Dataset.range(12).shard(ctx.num_input_pipelines, ctx.input_pipeline_id).batch(b)
     dd = strategy.distribute_datasets_from_function(dataset_fn)
     result = [[np.asarray(v).tolist() for v in strategy.experimental_local_results(x)] for x in dd]
     """,
     """
     def dataset_fn(ctx):
         b = ctx.get_per_replica_batch_size(6)
         return tf.data.Dataset.range(12).shard(ctx.num_input_pipelines, ctx.input_pipeline_id).batch(b)
     dd = strategy.distribute_datasets_from_function(dataset_fn)
     result = [[v.numpy().tolist() for v in strategy.experimental_local_results(x)] for x in dd]
     """, strategy="M3")

case("datasets_from_function.bad_global_batch_raises", CS,
     "dataset_fn calling get_per_replica_batch_size(5) on 2 replicas raises ValueError",
     """
     dd = strategy.distribute_datasets_from_function(
         lambda ctx: idist.data.Dataset.range(10).batch(ctx.get_per_replica_batch_size(5)))
     result = [[np.asarray(v).tolist() for v in strategy.experimental_local_results(x)] for x in dd]
     """,
     """
     dd = strategy.distribute_datasets_from_function(
         lambda ctx: tf.data.Dataset.range(10).batch(ctx.get_per_replica_batch_size(5)))
     result = [[v.numpy().tolist() for v in strategy.experimental_local_results(x)] for x in dd]
     """)

case("datasets_from_function.central_storage", CS,
     "CentralStorageStrategy.distribute_datasets_from_function: 'dataset_fn is called once'; each replica dequeues a batch",
     f"""
     dd = strategy.distribute_datasets_from_function(lambda ctx: {CTX_DS_I.format(n=2)})
     x = next(iter(dd))
     result = [np.asarray(v).tolist() for v in strategy.experimental_local_results(x)]
     """,
     f"""
     dd = strategy.distribute_datasets_from_function(lambda ctx: {CTX_DS_T.format(n=2)})
     x = next(iter(dd))
     result = [v.numpy().tolist() for v in strategy.experimental_local_results(x)]
     """, strategy="CS2")

case("datasets_from_function.tuple_dataset_run", PS,
     "dataset_fn returning a (features, labels) dataset; run computes features + labels per replica",
     """
     def dataset_fn(ctx):
         f = np.arange(8, dtype=np.float32)
         l = np.full(8, 100.0, np.float32)
         return idist.data.Dataset.from_tensor_slices((f, l)).batch(ctx.get_per_replica_batch_size(4))
     dd = strategy.distribute_datasets_from_function(dataset_fn)
     steps = []
     for batch in dd:
         out = strategy.run(lambda b: b[0] + b[1], args=(batch,))
         steps.append([np.asarray(v).tolist() for v in strategy.experimental_local_results(out)])
     result = steps
     """,
     """
     def dataset_fn(ctx):
         f = np.arange(8, dtype=np.float32)
         l = np.full(8, 100.0, np.float32)
         return tf.data.Dataset.from_tensor_slices((f, l)).batch(ctx.get_per_replica_batch_size(4))
     dd = strategy.distribute_datasets_from_function(dataset_fn)
     steps = []
     for batch in dd:
         out = strategy.run(lambda b: b[0] + b[1], args=(batch,))
         steps.append([v.numpy().tolist() for v in strategy.experimental_local_results(out)])
     result = steps
     """)

# ---------------------------------------------------------------- InputContext
def _ic(id, what, code_i, seed=CS):
    case(id, seed, what, code_i, strategy=None)

_ic("input_context.defaults", "InputContext() defaults: 1 pipeline, id 0, 1 replica; per-replica batch of 7 is 7",
    """
    c = idist.InputContext()
    result = [c.num_input_pipelines, c.input_pipeline_id, c.num_replicas_in_sync, c.get_per_replica_batch_size(7)]
    """)
_ic("input_context.four_replicas", "InputContext(num_input_pipelines=2, input_pipeline_id=1, num_replicas_in_sync=4): per-replica batch of 8 is 2",
    """
    c = idist.InputContext(num_input_pipelines=2, input_pipeline_id=1, num_replicas_in_sync=4)
    result = [c.num_input_pipelines, c.input_pipeline_id, c.num_replicas_in_sync, c.get_per_replica_batch_size(8)]
    """)
_ic("input_context.positional_args", "InputContext(2, 1, 3) positional order is (num_input_pipelines, input_pipeline_id, num_replicas_in_sync)",
    """
    c = idist.InputContext(2, 1, 3)
    result = [c.num_input_pipelines, c.input_pipeline_id, c.num_replicas_in_sync, c.get_per_replica_batch_size(9)]
    """)
_ic("input_context.str", "str(InputContext(2, 1, 4)) is 'tf.distribute.InputContext(input pipeline id 1, total: 2)'",
    """
    result = str(idist.InputContext(2, 1, 4))
    """)
_ic("input_context.not_divisible_4", "get_per_replica_batch_size(6) with 4 replicas raises ValueError",
    """
    result = idist.InputContext(num_replicas_in_sync=4).get_per_replica_batch_size(6)
    """)
_ic("input_context.zero_batch", "get_per_replica_batch_size(0) is 0",
    """
    result = idist.InputContext(num_replicas_in_sync=4).get_per_replica_batch_size(0)
    """)
_ic("input_context.no_validation", "InputContext does not validate its arguments: input_pipeline_id=5 with 2 pipelines is kept",
    """
    c = idist.InputContext(num_input_pipelines=2, input_pipeline_id=5, num_replicas_in_sync=4)
    result = [c.num_input_pipelines, c.input_pipeline_id, c.num_replicas_in_sync]
    """)

# ---------------------------------------------------------------- InputOptions / InputReplicationMode / ReduceOp
case("input_options.defaults", MD,
     "InputOptions() defaults",
     """
     o = idist.InputOptions()
     result = {"experimental_fetch_to_device": o.experimental_fetch_to_device,
               "experimental_replication_mode": o.experimental_replication_mode.name,
               "experimental_place_dataset_on_device": o.experimental_place_dataset_on_device,
               "experimental_per_replica_buffer_size": o.experimental_per_replica_buffer_size}
     """,
     """
     o = tf.distribute.InputOptions()
     result = {"experimental_fetch_to_device": o.experimental_fetch_to_device,
               "experimental_replication_mode": o.experimental_replication_mode.name,
               "experimental_place_dataset_on_device": o.experimental_place_dataset_on_device,
               "experimental_per_replica_buffer_size": o.experimental_per_replica_buffer_size}
     """, strategy=None)

case("input_replication_mode.members", MD,
     "InputReplicationMode members and values",
     """
     result = [[m.name, m.value] for m in idist.InputReplicationMode]
     """,
     """
     result = [[m.name, m.value] for m in tf.distribute.InputReplicationMode]
     """, strategy=None)

case("reduce_op.members", MD,
     "ReduceOp members and values; ReduceOp('SUM') is ReduceOp.SUM",
     """
     result = {"members": [[m.name, m.value] for m in idist.ReduceOp],
               "from_value": idist.ReduceOp("MEAN") is idist.ReduceOp.MEAN}
     """,
     """
     result = {"members": [[m.name, m.value] for m in tf.distribute.ReduceOp],
               "from_value": tf.distribute.ReduceOp("MEAN") is tf.distribute.ReduceOp.MEAN}
     """, strategy=None)

case("reduce_op.lowercase_value_raises", MD,
     "ReduceOp('sum') (lower case) raises ValueError: the enum itself is case-sensitive; only the strategy APIs upper-case strings",
     """
     result = idist.ReduceOp("sum").name
     """,
     """
     result = tf.distribute.ReduceOp("sum").name
     """, strategy=None)

case("reduce_op.from_variable_aggregation", MD,
     "ReduceOp.from_variable_aggregation(SUM / MEAN)",
     """
     result = [idist.ReduceOp.from_variable_aggregation(idist.VariableAggregation.SUM).name,
               idist.ReduceOp.from_variable_aggregation(idist.VariableAggregation.MEAN).name]
     """,
     """
     result = [tf.distribute.ReduceOp.from_variable_aggregation(tf.VariableAggregation.SUM).name,
               tf.distribute.ReduceOp.from_variable_aggregation(tf.VariableAggregation.MEAN).name]
     """, strategy=None)

case("reduce_op.from_variable_aggregation_none_raises", MD,
     "ReduceOp.from_variable_aggregation(NONE) raises ValueError",
     """
     result = idist.ReduceOp.from_variable_aggregation(idist.VariableAggregation.NONE).name
     """,
     """
     result = tf.distribute.ReduceOp.from_variable_aggregation(tf.VariableAggregation.NONE).name
     """, strategy=None)

case("reduce_op.from_variable_aggregation_first_replica_raises", MD,
     "ReduceOp.from_variable_aggregation(ONLY_FIRST_REPLICA) raises ValueError",
     """
     result = idist.ReduceOp.from_variable_aggregation(idist.VariableAggregation.ONLY_FIRST_REPLICA).name
     """,
     """
     result = tf.distribute.ReduceOp.from_variable_aggregation(tf.VariableAggregation.ONLY_FIRST_REPLICA).name
     """, strategy=None)

case("variable_enums.members", MD,
     "VariableAggregation and VariableSynchronization members and integer values",
     """
     result = {"aggregation": [[m.name, int(m.value)] for m in idist.VariableAggregation],
               "synchronization": [[m.name, int(m.value)] for m in idist.VariableSynchronization]}
     """,
     """
     result = {"aggregation": [[m.name, int(m.value)] for m in tf.VariableAggregation],
               "synchronization": [[m.name, int(m.value)] for m in tf.VariableSynchronization]}
     """, strategy=None)
