"""Round 2: distributed datasets (dicts/tuples/map/repeat/take/element_spec) and datasets from a function."""
from cases2_common import CS, PS, ST, c2

STEPS = "[L(x) for x in dd]"

c2("distribute_dataset.dict_map_batch.M2", ST, "from_tensor_slices(dict).map(add a key).batch(4) on 2 replicas: keys and per-replica values", """
ds = idist.data.Dataset.from_tensor_slices({"x": np.arange(6, dtype=np.float32), "y": np.arange(6, dtype=np.int64) * 10})
ds = ds.map(lambda d: {"x": d["x"] * 2, "y": d["y"], "z": d["x"] + 1}).batch(4)
dd = strategy.experimental_distribute_dataset(ds)
result = [{k: L(v) for k, v in sorted(el.items())} for el in dd]
""")

c2("distribute_dataset.tuple_map_repeat_take.M3", ST, "from_tensor_slices((x, y)).map(swap).repeat(2).batch(3).take(3) on 3 replicas", """
x = np.array([1.0, 2.0, 3.0, 4.0], np.float32)
y = np.array([10, 20, 30, 40], np.int32)
ds = idist.data.Dataset.from_tensor_slices((x, y)).map(lambda a, b: (b, a)).repeat(2).batch(3).take(3)
dd = strategy.experimental_distribute_dataset(ds)
result = [[L(a), L(b)] for a, b in dd]
""", strategy="M3")

c2("distribute_dataset.nested_tuple_dict.M2", ST, "elements (x, {'a': y}) batched by 2 on 2 replicas", """
ds = idist.data.Dataset.from_tensor_slices((np.arange(4, dtype=np.int32), {"a": np.arange(4, dtype=np.float32) / 2}))
dd = strategy.experimental_distribute_dataset(ds.batch(2))
result = [[L(x), L(d["a"])] for x, d in dd]
""")

c2("distribute_dataset.next_iter_twice.M2", ST, "next(iter(dd)) twice gives the first batch both times (a fresh iterator each time)", """
dd = strategy.experimental_distribute_dataset(idist.data.Dataset.range(8).batch(4))
a = next(iter(dd))
b = next(iter(dd))
result = [L(a), L(b)]
""")

c2("distribute_dataset.one_iterator_next.M2", ST, "one iterator: next() three times, then the rest by a for loop", """
dd = strategy.experimental_distribute_dataset(idist.data.Dataset.range(10).batch(2))
it = iter(dd)
first = [L(next(it)) for _ in range(3)]
rest = [L(x) for x in it]
result = [first, rest]
""")

c2("distribute_dataset.iterate_twice_with_map.M3", ST, "iterate a mapped distributed dataset twice: both passes equal", """
dd = strategy.experimental_distribute_dataset(idist.data.Dataset.range(6).map(lambda x: x * x).batch(3))
result = [[L(x) for x in dd], [L(x) for x in dd]]
""", strategy="M3")

c2("distribute_dataset.drop_remainder_dict.M2", ST, "dict dataset, batch(3, drop_remainder=True) on 2 replicas: last partial batch dropped", """
ds = idist.data.Dataset.from_tensor_slices({"v": np.arange(7, dtype=np.int64)}).batch(3, drop_remainder=True)
dd = strategy.experimental_distribute_dataset(ds)
result = [L(el["v"]) for el in dd]
""")

c2("distribute_dataset.repeat_take_count.M4", ST, "range(5).repeat().batch(4).take(3) on 4 replicas: an infinite dataset cut by take", """
dd = strategy.experimental_distribute_dataset(idist.data.Dataset.range(5).repeat().batch(4).take(3))
result = [L(x) for x in dd]
""", strategy="M4")

c2("distribute_dataset.take_then_batch.M2", ST, "range(10).take(5).batch(2) on 2 replicas", """
dd = strategy.experimental_distribute_dataset(idist.data.Dataset.range(10).take(5).batch(2))
result = [L(x) for x in dd]
""")

c2("distribute_dataset.python_list_slices.M2", ST, "from_tensor_slices of Python lists [1,2,3,4] and [1.,2.,3.,4.]: dtypes int32 and float32", """
dd = strategy.experimental_distribute_dataset(idist.data.Dataset.from_tensor_slices(([1, 2, 3, 4], [1.0, 2.0, 3.0, 4.0])).batch(2))
a, b = next(iter(dd))
result = {"a": L(a), "b": L(b), "dtypes": [np.asarray(strategy.experimental_local_results(a)[0]).dtype.name,
                                          np.asarray(strategy.experimental_local_results(b)[0]).dtype.name]}
""")

c2("distribute_dataset.run_sum_then_reduce_axis0.M3", ST, "for each batch, run(sum of rows) and reduce SUM with axis=0 over uneven/empty replica batches", """
dd = strategy.experimental_distribute_dataset(idist.data.Dataset.from_tensor_slices(np.arange(10, dtype=np.float32).reshape(5, 2)).batch(4))
out = []
for x in dd:
    per = strategy.run(lambda b: np.asarray(b) * np.float32(2.0), args=(x,))
    out.append(np.asarray(strategy.reduce("SUM", per, axis=0)).tolist())
result = out
""", strategy="M3")

c2("distribute_dataset.loss_reduce_mean.M2", ST, "run per batch returning the per-replica mean, reduce MEAN axis None per step", """
dd = strategy.experimental_distribute_dataset(idist.data.Dataset.range(12).map(lambda x: x * 2).batch(6))
out = []
for x in dd:
    per = strategy.run(lambda b: np.float32(np.mean(np.asarray(b))), args=(x,))
    out.append(float(strategy.reduce("MEAN", per, axis=None)))
result = out
""")

c2("distribute_dataset.element_spec_dataset", ST, "element_spec of a plain batched dataset: shape and dtype of each component", """
ds = idist.data.Dataset.from_tensor_slices((np.zeros((6, 2), np.float32), np.arange(6, dtype=np.int64))).batch(4)
result = [[list(s.shape), s.dtype.name] for s in ds.element_spec]
""", strategy=None)

c2("distribute_dataset.element_spec_drop_remainder", ST, "element_spec of range(8).batch(4, drop_remainder=True): static batch dimension", """
ds = idist.data.Dataset.range(8).batch(4, drop_remainder=True)
s = ds.element_spec
result = [list(s.shape), s.dtype.name]
""", strategy=None)

c2("distribute_dataset.element_spec_str.M2", ST, "str(distributed dataset element_spec) for range(8).batch(4) on 2 replicas", """
dd = strategy.experimental_distribute_dataset(idist.data.Dataset.range(8).batch(4))
result = str(dd.element_spec)
""")

c2("distribute_dataset.element_spec_str.one_device", ST, "str(distributed dataset element_spec) on OneDeviceStrategy", """
dd = strategy.experimental_distribute_dataset(idist.data.Dataset.range(8).batch(4))
result = str(dd.element_spec)
""", strategy="OD")

c2("distribute_dataset.element_spec_dict_str.M2", ST, "str(element_spec) of a distributed dict dataset on 2 replicas", """
dd = strategy.experimental_distribute_dataset(idist.data.Dataset.from_tensor_slices({"a": np.zeros((4, 3), np.float32)}).batch(2))
result = str(dd.element_spec)
""")

c2("distribute_dataset.dataset_element_spec_str", ST, "str(element_spec) of a plain dataset of (float32 (None,2), int64 (None,))", """
ds = idist.data.Dataset.from_tensor_slices((np.zeros((6, 2), np.float32), np.arange(6, dtype=np.int64))).batch(4)
result = str(ds.element_spec)
""", strategy=None)

c2("distribute_dataset.one_device_dict_loop", ST, "OneDeviceStrategy: iterate a dict dataset, run(x*y) and reduce SUM", """
ds = idist.data.Dataset.from_tensor_slices({"x": np.arange(4, dtype=np.float32), "y": np.ones(4, np.float32) * 3}).batch(2)
dd = strategy.experimental_distribute_dataset(ds)
out = []
for el in dd:
    r = strategy.run(lambda d: np.asarray(d["x"]) * np.asarray(d["y"]), args=(el,))
    out.append([np.asarray(r).tolist(), np.asarray(strategy.reduce("SUM", r, axis=0)).tolist()])
result = out
""", strategy="OD1")

c2("distribute_dataset.central_storage_dict.CS2", CS, "CentralStorage (2 compute devices): dict dataset batch(3) split per replica", """
ds = idist.data.Dataset.from_tensor_slices({"x": np.arange(6, dtype=np.int32)}).batch(3)
dd = strategy.experimental_distribute_dataset(ds)
result = [L(el["x"]) for el in dd]
""", strategy="CS2")

c2("distribute_dataset.central_storage_devices.CS3", CS, "CentralStorage (compute CPU:1..3): device of each component of a distributed batch", """
dd = strategy.experimental_distribute_dataset(idist.data.Dataset.range(6).batch(3))
x = next(iter(dd))
result = [c.device for c in strategy.experimental_local_results(x)]
""", strategy="CS3")

c2("distribute_dataset.not_a_dataset_raises.M2", ST, "experimental_distribute_dataset of a Python list raises", """
dd = strategy.experimental_distribute_dataset([1, 2, 3])
result = "no error"
""")

c2("distribute_dataset.fetch_false_options.M2", ST, "InputOptions(experimental_fetch_to_device=False) with a batch split over 2 replicas: values and devices", """
dd = strategy.experimental_distribute_dataset(idist.data.Dataset.range(4).batch(4),
                                              options=idist.InputOptions(experimental_fetch_to_device=False))
x = next(iter(dd))
result = {"vals": L(x), "devices": [c.device for c in strategy.experimental_local_results(x)]}
""")

# ---------------------------------------------------------------- distribute_datasets_from_function
ENC = """
def dataset_fn(ctx):
    row = np.array([ctx.input_pipeline_id, ctx.num_input_pipelines, ctx.num_replicas_in_sync,
                    ctx.get_per_replica_batch_size(12)], np.int64)
    return idist.data.Dataset.from_tensors(row).repeat(4).batch(2)
"""

for key in ["M2", "M3", "OD"]:
    c2(f"datasets_from_function.encoded_context_per_worker.{key}", PS,
       "PER_WORKER (default): dataset_fn encodes (input_pipeline_id, num_input_pipelines, num_replicas_in_sync, per-replica batch of 12) into its data; first step's values",
       ENC + """
dd = strategy.distribute_datasets_from_function(dataset_fn)
x = next(iter(dd))
result = L(x)
""", strategy=key)
    c2(f"datasets_from_function.encoded_context_per_replica.{key}", PS,
       "PER_REPLICA (fetch_to_device False): each replica's dataset_fn call encodes its InputContext into the data; first step",
       ENC + """
opts = idist.InputOptions(experimental_fetch_to_device=False,
                          experimental_replication_mode=idist.InputReplicationMode.PER_REPLICA)
dd = strategy.distribute_datasets_from_function(dataset_fn, options=opts)
x = next(iter(dd))
result = L(x)
""", strategy=key)

c2("datasets_from_function.per_replica_fetch_default.M2", PS, "PER_REPLICA with experimental_fetch_to_device=True (the default): works", ENC + """
opts = idist.InputOptions(experimental_replication_mode=idist.InputReplicationMode.PER_REPLICA)
dd = strategy.distribute_datasets_from_function(dataset_fn, options=opts)
result = L(next(iter(dd)))
""")

c2("datasets_from_function.per_replica_all_steps.M2", PS, "PER_REPLICA: dataset_fn gives range(3)+10*pipeline_id batched by 2; all steps", """
def dataset_fn(ctx):
    return idist.data.Dataset.range(3).map(lambda x: x + 10 * ctx.input_pipeline_id).batch(2)
opts = idist.InputOptions(experimental_fetch_to_device=False,
                          experimental_replication_mode=idist.InputReplicationMode.PER_REPLICA)
dd = strategy.distribute_datasets_from_function(dataset_fn, options=opts)
result = [L(x) for x in dd]
""")

c2("datasets_from_function.per_worker_shard_idiom.M2", PS,
   "the seed idiom: batch(get_per_replica_batch_size(4)) then shard(num_input_pipelines, input_pipeline_id), over range(8)", """
def dataset_fn(ctx):
    bs = ctx.get_per_replica_batch_size(4)
    d = idist.data.Dataset.range(8).batch(bs)
    return d.shard(ctx.num_input_pipelines, ctx.input_pipeline_id)
dd = strategy.distribute_datasets_from_function(dataset_fn)
result = [L(x) for x in dd]
""")

c2("datasets_from_function.dict_elements.M2", PS, "dataset_fn returning a dict dataset: each step is a dict of per-replica values", """
def dataset_fn(ctx):
    return idist.data.Dataset.from_tensor_slices({"a": np.arange(4, dtype=np.float32), "b": np.arange(4, dtype=np.int32)}).batch(1)
dd = strategy.distribute_datasets_from_function(dataset_fn)
result = [{k: L(v) for k, v in sorted(el.items())} for el in dd]
""")

c2("datasets_from_function.run_and_reduce.M3", PS, "datasets from function on 3 replicas: run(x*2) and reduce SUM axis=0 per step", """
def dataset_fn(ctx):
    return idist.data.Dataset.range(9).batch(ctx.get_per_replica_batch_size(3))
dd = strategy.distribute_datasets_from_function(dataset_fn)
out = []
for x in dd:
    out.append(np.asarray(strategy.reduce("SUM", strategy.run(lambda b: b * 2, args=(x,)), axis=0)).tolist())
result = out
""", strategy="M3")

c2("datasets_from_function.element_spec_str.M2", PS, "str(element_spec) of a distribute_datasets_from_function dataset on 2 replicas", """
dd = strategy.distribute_datasets_from_function(lambda ctx: idist.data.Dataset.range(4).batch(1))
result = str(dd.element_spec)
""")

c2("datasets_from_function.iterate_twice.M2", PS, "distribute_datasets_from_function: iterating twice gives the same steps (dataset_fn call count observed through the data)", """
def dataset_fn(ctx):
    return idist.data.Dataset.range(4).batch(1)
dd = strategy.distribute_datasets_from_function(dataset_fn)
result = [[L(x) for x in dd], [L(x) for x in dd]]
""")

c2("datasets_from_function.returns_non_dataset_raises.M2", PS, "dataset_fn returning a list instead of a dataset raises", """
dd = strategy.distribute_datasets_from_function(lambda ctx: [1, 2, 3])
result = [L(x) for x in dd]
""")

c2("datasets_from_function.central_storage3", CS, "CentralStorage (3 compute devices) PER_WORKER: encoded InputContext, first step", ENC + """
dd = strategy.distribute_datasets_from_function(dataset_fn)
result = L(next(iter(dd)))
""", strategy="CS3")

c2("datasets_from_function.central_storage3_full", CS, "CentralStorage (3 compute devices) PER_WORKER: encoded InputContext, 6 batches, all steps", """
def dataset_fn(ctx):
    row = np.array([ctx.input_pipeline_id, ctx.num_input_pipelines, ctx.num_replicas_in_sync], np.int64)
    return idist.data.Dataset.from_tensors(row).repeat(6).batch(1)
dd = strategy.distribute_datasets_from_function(dataset_fn)
result = [L(x) for x in dd]
""", strategy="CS3")
