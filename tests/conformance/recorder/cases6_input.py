"""Round 6: DistributedIterator.get_next_as_optional (TF's Optional), exhausted iterators (get_next
raises OutOfRangeError, next raises StopIteration), distribute_datasets_from_function (dataset_fn
called once per input pipeline, in the caller's process), CentralStorageStrategy() defaults."""
from cases3_common import CS, ST, c3

# Optional at the end of the data and with a partial final batch (5 elements, global batch 4).
for key in ["M1", "M2", "M3", "OD", "CS2"]:
    c3(f"optional.partial_final_batch.{key}", ST, "get_next_as_optional over range(5).batch(4): has_value, each replica's part, then empty", """
it = iter(strategy.experimental_distribute_dataset(idist.data.Dataset.range(5).batch(4)))
steps = []
for _ in range(3):
    o = it.get_next_as_optional()
    hv = o.has_value()
    steps.append([bool(hv), L(o.get_value()) if hv else None])
result = steps
""", strategy=key)

    c3(f"optional.empty_get_value.{key}", ST, "get_value() of an empty Optional (after the last batch) raises (InvalidArgumentError in TF)", """
it = iter(strategy.experimental_distribute_dataset(idist.data.Dataset.range(4).batch(4)))
it.get_next_as_optional()
o = it.get_next_as_optional()
try:
    o.get_value()
    res = "no error"
except Exception as e:
    res = type(e).__name__
result = [bool(o.has_value()), res]
""", strategy=key)

    c3(f"iterator.get_next_at_end.{key}", ST, "get_next() past the end raises OutOfRangeError (not StopIteration); next() raises StopIteration", """
it = iter(strategy.experimental_distribute_dataset(idist.data.Dataset.range(4).batch(4)))
first = L(it.get_next())
out = {}
try:
    it.get_next()
except BaseException as e:
    out["get_next"] = [type(e).__name__, isinstance(e, StopIteration)]
try:
    next(it)
except BaseException as e:
    out["next"] = type(e).__name__
result = [first, out]
""", strategy=key)

for key in ["M2", "M3"]:
    c3(f"optional.drop_remainder.{key}", ST, "get_next_as_optional over range(5).batch(4, drop_remainder=True): one step, then empty", """
it = iter(strategy.experimental_distribute_dataset(idist.data.Dataset.range(5).batch(4, drop_remainder=True)))
steps = []
for _ in range(2):
    o = it.get_next_as_optional()
    steps.append([bool(o.has_value()), L(o.get_value()) if o.has_value() else None])
result = steps
""", strategy=key)

    c3(f"optional.types_and_spec.{key}", ST, "Optional: get_value() is a PerReplica, element_spec is set, bool(has_value()) works", """
dd = strategy.experimental_distribute_dataset(idist.data.Dataset.range(8).batch(4))
it = iter(dd)
o = it.get_next_as_optional()
v = o.get_value()
result = [isinstance(v, idist.PerReplica), o.element_spec is not None, isinstance(bool(o.has_value()), bool)]
""", strategy=key)

    c3(f"optional.dsff_loop.{key}", ST, "while-loop on get_next_as_optional over a distribute_datasets_from_function dataset, then get_next raises", """
dd = strategy.distribute_datasets_from_function(lambda ctx: idist.data.Dataset.range(6).batch(2))
it = iter(dd)
steps = []
while True:
    o = it.get_next_as_optional()
    if not o.has_value():
        break
    steps.append(L(o.get_value()))
try:
    it.get_next()
    end = "no error"
except Exception as e:
    end = type(e).__name__
result = [steps, end]
""", strategy=key)

c3("optional.dict_elements.M2", ST, "get_next_as_optional of dict elements: the value is the dict of PerReplica", """
ds = idist.data.Dataset.from_tensor_slices({"a": np.arange(6, dtype=np.float32), "b": np.arange(6, dtype=np.int64)}).batch(4)
it = iter(strategy.experimental_distribute_dataset(ds))
o1, o2, o3 = it.get_next_as_optional(), it.get_next_as_optional(), it.get_next_as_optional()
result = [sorted(o1.get_value()), {k: L(v) for k, v in sorted(o2.get_value().items())}, bool(o3.has_value())]
""", strategy="M2")

c3("optional.for_loop_after_optional.M2", ST, "get_next_as_optional, then a for loop over the same iterator takes the rest", """
it = iter(strategy.experimental_distribute_dataset(idist.data.Dataset.range(8).batch(2)))
first = L(it.get_next_as_optional().get_value())
result = [first, [L(x) for x in it]]
""", strategy="M2")

# distribute_datasets_from_function: how many calls, with which InputContext, and what each replica gets.
for key in ["M1", "M2", "M3", "OD", "CS2"]:
    c3(f"dsff.calls_in_caller.{key}", ST, "dataset_fn is called once (in the caller's process), with InputContext(1, 0, N); replicas take consecutive batches of range(8).batch(2)", """
calls = []
def dataset_fn(ctx):
    calls.append([ctx.num_input_pipelines, ctx.input_pipeline_id, ctx.num_replicas_in_sync, ctx.get_per_replica_batch_size(6)])
    return idist.data.Dataset.range(8).batch(2)
dd = strategy.distribute_datasets_from_function(dataset_fn)
result = [calls, [L(x) for x in dd]]
""", strategy=key)

for key in ["M2", "M3"]:
    c3(f"dsff.per_replica_calls.{key}", ST, "PER_REPLICA: dataset_fn called once per replica with InputContext(N, i, N); each replica gets its own whole dataset", """
calls = []
def dataset_fn(ctx):
    calls.append([ctx.num_input_pipelines, ctx.input_pipeline_id, ctx.num_replicas_in_sync])
    return idist.data.Dataset.range(4).map(lambda x: x + 10 * ctx.input_pipeline_id).batch(2)
opts = idist.InputOptions(experimental_replication_mode=idist.InputReplicationMode.PER_REPLICA)
dd = strategy.distribute_datasets_from_function(dataset_fn, options=opts)
result = [calls, [L(x) for x in dd]]
""", strategy=key)

    c3(f"dsff.iterations_do_not_call_again.{key}", ST, "iterating the distributed dataset twice does not call dataset_fn again", """
calls = []
def dataset_fn(ctx):
    calls.append(1)
    return idist.data.Dataset.range(4).batch(1)
dd = strategy.distribute_datasets_from_function(dataset_fn)
a = [L(x) for x in dd]
b = [L(x) for x in dd]
result = [len(calls), a == b, a]
""", strategy=key)

c3("dsff.per_replica_central_storage.CS2", CS, "CentralStorageStrategy with PER_REPLICA (fetch_to_device default): one call with InputContext(1, 0, 2), batches split as PER_WORKER", """
calls = []
def dataset_fn(ctx):
    calls.append([ctx.num_input_pipelines, ctx.input_pipeline_id, ctx.num_replicas_in_sync])
    return idist.data.Dataset.range(8).batch(2)
opts = idist.InputOptions(experimental_replication_mode=idist.InputReplicationMode.PER_REPLICA)
dd = strategy.distribute_datasets_from_function(dataset_fn, options=opts)
result = [calls, [L(x) for x in dd]]
""", strategy="CS2")

c3("dsff.per_replica_central_storage_no_fetch.CS2", CS, "CentralStorageStrategy, PER_REPLICA with fetch_to_device=False: what comes out (TF: one batch per step, not per replica)", """
calls = []
def dataset_fn(ctx):
    calls.append([ctx.num_input_pipelines, ctx.input_pipeline_id, ctx.num_replicas_in_sync])
    return idist.data.Dataset.range(8).batch(2)
opts = idist.InputOptions(experimental_fetch_to_device=False, experimental_replication_mode=idist.InputReplicationMode.PER_REPLICA)
try:
    dd = strategy.distribute_datasets_from_function(dataset_fn, options=opts)
    result = [calls, [L(x) for x in dd]]
except Exception as e:
    result = type(e).__name__
""", strategy="CS2")

c3("dsff.per_replica_one_device.OD", ST, "OneDeviceStrategy rejects PER_REPLICA", """
try:
    strategy.distribute_datasets_from_function(lambda ctx: idist.data.Dataset.range(4).batch(2),
        options=idist.InputOptions(experimental_replication_mode=idist.InputReplicationMode.PER_REPLICA))
    result = "no error"
except Exception as e:
    result = type(e).__name__
""", strategy="OD")

c3("dsff.not_a_dataset.M2", ST, "dataset_fn returning a list: the error class, raised by distribute_datasets_from_function itself", """
calls = []
def dataset_fn(ctx):
    calls.append(1)
    return [1, 2, 3]
try:
    strategy.distribute_datasets_from_function(dataset_fn)
    result = "no error"
except Exception as e:
    result = [isinstance(e, (TypeError, AttributeError, ValueError)), len(calls)]
""", strategy="M2")

# CentralStorageStrategy() with no arguments on a CPU-only host.
c3("central_storage.default_devices", CS, "CentralStorageStrategy(): one replica on CPU:0, parameter device CPU:0, a distributed batch is a plain tensor on CPU:0", """
s = idist.experimental.CentralStorageStrategy()
try:
    dd = s.experimental_distribute_dataset(idist.data.Dataset.range(6).batch(4))
    xs = list(dd)
    r = s.run(lambda x: x * 2, args=(xs[0],))
    with s.scope():
        v = idist.Variable(1.0)
    result = [s.num_replicas_in_sync, list(s.extended.worker_devices), list(s.extended.parameter_devices),
              [np.asarray(x).tolist() for x in xs], [x.device for x in xs], isinstance(xs[0], idist.PerReplica),
              np.asarray(r).tolist(), v.device]
finally:
    if hasattr(s, "close"):
        s.close()
""", strategy=None)
