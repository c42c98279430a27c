"""Round 3: InputContext / distribute_datasets_from_function with InputReplicationMode on 3-4 replicas,
experimental_distribute_dataset with InputOptions, dict elements, repeat/take, exhausted iterators."""
from cases3_common import MD, ST, c3

for key in ["M3", "M4"]:
    c3(f"dsff.input_context_fields.{key}", ST, "distribute_datasets_from_function: fields of the InputContext(s) passed in, and how many calls", """
def dataset_fn(ictx):
    f = np.array([[ictx.num_input_pipelines, ictx.input_pipeline_id, ictx.num_replicas_in_sync,
                   ictx.get_per_replica_batch_size(12)]], np.int64)
    return idist.data.Dataset.from_tensor_slices(np.repeat(f, 8, axis=0)).batch(2)
dd = strategy.distribute_datasets_from_function(dataset_fn)
result = L(next(iter(dd)))
""", strategy=key)

    c3(f"dsff.per_worker_mode.{key}", ST, "distribute_datasets_from_function with InputOptions(PER_WORKER): batches per step", """
def dataset_fn(ictx):
    return idist.data.Dataset.range(8).batch(2)
dd = strategy.distribute_datasets_from_function(dataset_fn, options=idist.InputOptions(experimental_replication_mode=idist.InputReplicationMode.PER_WORKER))
result = [L(x) for x in dd]
""", strategy=key)

    c3(f"dsff.per_replica_mode.{key}", ST, "distribute_datasets_from_function with InputOptions(PER_REPLICA, fetch_to_device=False): each replica's dataset made with its own InputContext", """
def dataset_fn(ictx):
    return idist.data.Dataset.range(4).map(lambda x: x + 100 * ictx.input_pipeline_id).batch(2)
opts = idist.InputOptions(experimental_fetch_to_device=False, experimental_replication_mode=idist.InputReplicationMode.PER_REPLICA)
try:
    dd = strategy.distribute_datasets_from_function(dataset_fn, options=opts)
    res = {"steps": [L(x) for x in dd]}
except Exception as e:
    res = {"err": type(e).__name__}
result = res
""", strategy=key)

    c3(f"dsff.shard_by_context.{key}", ST, "dataset_fn shards range(12) by input_pipeline_id: elements seen per replica", """
def dataset_fn(ictx):
    return idist.data.Dataset.range(12).shard(ictx.num_input_pipelines, ictx.input_pipeline_id).batch(2)
dd = strategy.distribute_datasets_from_function(dataset_fn)
result = [L(x) for x in dd]
""", strategy=key)

    c3(f"distribute_dataset.input_options_per_worker.{key}", ST, "experimental_distribute_dataset(ds, options=InputOptions(experimental_replication_mode=PER_WORKER))", """
ds = idist.data.Dataset.range(12).batch(6)
dd = strategy.experimental_distribute_dataset(ds, options=idist.InputOptions(experimental_replication_mode=idist.InputReplicationMode.PER_WORKER))
result = [L(x) for x in dd]
""", strategy=key)

    c3(f"distribute_dataset.input_options_per_replica.{key}", ST, "experimental_distribute_dataset with InputOptions(PER_REPLICA): raises or not", """
ds = idist.data.Dataset.range(12).batch(6)
try:
    dd = strategy.experimental_distribute_dataset(ds, options=idist.InputOptions(experimental_replication_mode=idist.InputReplicationMode.PER_REPLICA))
    res = {"steps": [L(x) for x in dd]}
except Exception as e:
    res = {"err": type(e).__name__}
result = res
""", strategy=key)

    c3(f"distribute_dataset.dict_repeat_take.{key}", ST, "dict-of-arrays dataset .repeat().batch(4).take(2): keys and per-replica values", """
ds = idist.data.Dataset.from_tensor_slices({"a": np.arange(5, dtype=np.float32), "b": np.arange(5, dtype=np.int64) * 2})
dd = strategy.experimental_distribute_dataset(ds.repeat().batch(4).take(2))
result = [{k: L(v) for k, v in sorted(el.items())} for el in dd]
""", strategy=key)

    c3(f"distribute_dataset.exhausted_iterator.{key}", ST, "iterate an iterator to the end, then next() again: StopIteration each time", """
dd = strategy.experimental_distribute_dataset(idist.data.Dataset.range(8).batch(4))
it = iter(dd)
got = [L(next(it)), L(next(it))]
flags = []
for _ in range(2):
    try:
        next(it)
        flags.append("value")
    except StopIteration:
        flags.append("StopIteration")
    except Exception as e:
        flags.append(type(e).__name__)
result = {"got": got, "after": flags}
""", strategy=key)

c3("distribute_dataset.repeat_then_take.M3", ST, "range(4).repeat(3).take(10).batch(3) on 3 replicas", """
dd = strategy.experimental_distribute_dataset(idist.data.Dataset.range(4).repeat(3).take(10).batch(3))
result = [L(x) for x in dd]
""", strategy="M3")

c3("distribute_dataset.dict_run_sum.M2", ST, "dict dataset: run(fn, args=(el,)) returning el['x'] * el['w'] summed, reduce over steps", """
ds = idist.data.Dataset.from_tensor_slices({"x": np.arange(8, dtype=np.float32), "w": np.full(8, 0.5, np.float32)}).batch(4)
dd = strategy.experimental_distribute_dataset(ds)
tot = []
for el in dd:
    r = strategy.run(lambda d: np.sum(np.asarray(d["x"]) * np.asarray(d["w"])), args=(el,))
    tot.append(np.asarray(strategy.reduce("SUM", r, axis=None)).tolist())
result = tot
""")

c3("distribute_dataset.dict_element_kinds.M2", ST, "dict element of a distributed dataset: type of the element, isinstance PerReplica of its values", """
ds = idist.data.Dataset.from_tensor_slices({"a": np.arange(4, dtype=np.float32)}).batch(2)
el = next(iter(strategy.experimental_distribute_dataset(ds)))
result = {"type": type(el).__name__, "per_replica": isinstance(el["a"], idist.PerReplica), "keys": sorted(el)}
""")

c3("distribute_dataset.exhausted_for_loop_again.M2", ST, "iterate a distributed dataset fully with one iterator, then a for loop over the same iterator yields nothing", """
dd = strategy.experimental_distribute_dataset(idist.data.Dataset.range(4).batch(2))
it = iter(dd)
a = [L(x) for x in it]
b = [L(x) for x in it]
result = [a, b]
""")

c3("distribute_dataset.element_kind.OD", ST, "OneDevice: element of a distributed dataset is a plain value (not PerReplica)", """
el = next(iter(strategy.experimental_distribute_dataset(idist.data.Dataset.range(4).batch(2))))
result = {"per_replica": isinstance(el, idist.PerReplica), "dv": isinstance(el, idist.DistributedValues), "v": L(el)}
""", strategy="OD")

c3("distribute_dataset.element_kind.M2", ST, "M2: element of a distributed dataset is PerReplica", """
el = next(iter(strategy.experimental_distribute_dataset(idist.data.Dataset.range(4).batch(2))))
result = {"per_replica": isinstance(el, idist.PerReplica), "dv": isinstance(el, idist.DistributedValues), "v": L(el)}
""")

c3("dsff.exhausted.M3", ST, "distribute_datasets_from_function: iterator exhausted then next() raises StopIteration", """
dd = strategy.distribute_datasets_from_function(lambda ictx: idist.data.Dataset.range(3).batch(1))
it = iter(dd)
got = []
try:
    while True:
        got.append(L(next(it)))
except StopIteration:
    got.append("StopIteration")
result = got
""", strategy="M3")

c3("input_context.defaults", MD, "InputContext() defaults and get_per_replica_batch_size on a custom context (3 pipelines, 6 replicas)", """
a = idist.InputContext()
b = idist.InputContext(num_input_pipelines=3, input_pipeline_id=2, num_replicas_in_sync=6)
try:
    bad = b.get_per_replica_batch_size(7)
except Exception as e:
    bad = type(e).__name__
result = [[a.num_input_pipelines, a.input_pipeline_id, a.num_replicas_in_sync],
          [b.num_input_pipelines, b.input_pipeline_id, b.num_replicas_in_sync, b.get_per_replica_batch_size(12)], bad]
""", strategy=None, helper=False)

c3("input_options.defaults", MD, "InputOptions() defaults: fetch_to_device, replication mode is PER_WORKER, place_dataset_on_device, per_replica_buffer_size", """
o = idist.InputOptions()
result = [o.experimental_fetch_to_device, o.experimental_replication_mode == idist.InputReplicationMode.PER_WORKER,
          o.experimental_place_dataset_on_device, o.experimental_per_replica_buffer_size]
""", strategy=None, helper=False)

c3("input_replication_mode.values", MD, "InputReplicationMode members' .value", """
result = [idist.InputReplicationMode.PER_WORKER.value, idist.InputReplicationMode.PER_REPLICA.value]
""", strategy=None, helper=False)
