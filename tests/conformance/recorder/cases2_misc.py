"""Round 2: contexts, OneDevice/CentralStorage end to end, ReduceOp, InputContext/InputOptions, misuse errors."""
from cases2_common import CS, MD, PS, SE, ST, c2

# ---------------------------------------------------------------- contexts
CTX = """
def info():
    s = idist.get_strategy()
    c = idist.get_replica_context()
    return {"strategy_is": s is strategy, "has_strategy": idist.has_strategy(),
            "in_cross": idist.in_cross_replica_context(),
            "ctx_none": c is None,
            "ctx_is_replica_context": isinstance(c, idist.ReplicaContext)}
"""

for key in ["M2", "OD", "CS2"]:
    c2(f"context.everywhere.{key}", MD,
       "get_strategy/has_strategy/get_replica_context/in_cross_replica_context at top level, in scope, in run (per replica), in merge_fn",
       CTX + """
top = info()
with strategy.scope():
    sc = info()
def merge_fn(s):
    return np.float32(1.0) if info() == MF else np.float32(0.0)
MF = {"strategy_is": True, "has_strategy": True, "in_cross": True, "ctx_none": True,
      "ctx_is_replica_context": False}
def fn():
    d = info()
    ok = idist.get_replica_context().merge_call(merge_fn)
    return [np.float32(d["strategy_is"]), np.float32(d["has_strategy"]), np.float32(d["in_cross"]),
            np.float32(d["ctx_is_replica_context"]), ok]
r = strategy.run(fn)
result = {"top": top, "scope": sc, "run": [L(x) for x in r]}
""", strategy=key)

c2("context.replica_context_attributes.M3", MD, "ReplicaContext attributes inside run: num_replicas_in_sync, replica_id dtype, strategy is strategy, devices", """
def fn():
    c = idist.get_replica_context()
    rid = c.replica_id_in_sync_group
    return [np.int32(c.num_replicas_in_sync), rid, np.int32(c.strategy is strategy),
            np.int32(np.asarray(rid).dtype == np.int32)]
r = strategy.run(fn)
result = [L(x) for x in r]
""", strategy="M3")

c2("context.replica_context_in_update_fn.M2", SE, "inside the fn of extended.update: in_cross_replica_context(), get_replica_context() is None?", """
with strategy.scope():
    v = idist.Variable(np.float32(0.0))
def upd(var):
    return var.assign(np.float32(idist.in_cross_replica_context()) * np.float32(10.0)
                      + np.float32(idist.get_replica_context() is None))
strategy.extended.update(v, upd)
result = L(v)
""")

c2("context.default_strategy_attributes", MD, "the default strategy (no scope): num_replicas_in_sync, worker_devices length, run returns plain value, reduce identity", """
s = idist.get_strategy()
r = s.run(lambda x: x * 2, args=(np.float32(3.0),))
result = {"num": s.num_replicas_in_sync, "run": np.asarray(r).tolist(),
          "reduce": np.asarray(s.reduce("SUM", r, axis=None)).tolist(),
          "local": [np.asarray(v).tolist() for v in s.experimental_local_results(r)],
          "has_strategy": idist.has_strategy(), "in_cross": idist.in_cross_replica_context()}
""", strategy=None)

c2("context.default_replica_context_all_gather", MD, "the default replica context at top level: all_gather of a vector is the identity", """
c = idist.get_replica_context()
r = c.all_gather(np.array([1.0, 2.0], np.float32), axis=0)
result = {"value": np.asarray(r).tolist(), "num": c.num_replicas_in_sync,
          "rid": int(np.asarray(c.replica_id_in_sync_group))}
""", strategy=None)

c2("context.get_strategy_after_scope_exit.M2", MD, "after leaving strategy.scope(), get_strategy() is the default strategy again (not this strategy)", """
with strategy.scope():
    inside = idist.get_strategy() is strategy
outside = idist.get_strategy() is strategy
result = [inside, outside, idist.has_strategy()]
""")

c2("context.experimental_set_strategy_run_and_clear.M2", MD, "experimental_set_strategy(strategy): get_strategy is it; run works; set_strategy(None) clears", """
idist.experimental_set_strategy(strategy)
try:
    a = idist.get_strategy() is strategy
    r = L(idist.get_strategy().run(lambda: np.float32(idist.get_replica_context().replica_id_in_sync_group)))
finally:
    idist.experimental_set_strategy(None)
result = [a, r, idist.get_strategy() is strategy, idist.has_strategy()]
""")

# ---------------------------------------------------------------- OneDevice end to end
c2("one_device.end_to_end", ST, "OneDeviceStrategy('CPU:1'): variable, dataset loop with run, reduce, device strings, local results", """
with strategy.scope():
    v = idist.Variable(np.float32(0.0), aggregation=idist.VariableAggregation.SUM)
dd = strategy.experimental_distribute_dataset(idist.data.Dataset.range(6).batch(3))
outs = []
for x in dd:
    def fn(b):
        v.assign_add(np.float32(np.sum(np.asarray(b))))
        return np.asarray(b) + 1
    r = strategy.run(fn, args=(x,))
    outs.append([np.asarray(r).tolist(), np.asarray(strategy.reduce("MEAN", r, axis=0)).tolist()])
result = {"outs": outs, "v": L(v), "vdev": v.device, "worker_devices": list(strategy.extended.worker_devices),
          "parameter_devices": list(strategy.extended.parameter_devices), "num": strategy.num_replicas_in_sync}
""", strategy="OD1")

c2("one_device.merge_call_and_all_reduce", ST, "OneDeviceStrategy: all_reduce SUM/MEAN and merge_call inside run are identities", """
def merge_fn(s, x):
    return s.reduce("SUM", x, axis=None)
def fn():
    c = idist.get_replica_context()
    x = np.array([1.0, 3.0], np.float32)
    return [c.all_reduce("SUM", x), c.all_reduce("MEAN", x), c.merge_call(merge_fn, args=(x,)), c.all_gather(x, axis=0)]
r = strategy.run(fn)
result = [np.asarray(t).tolist() for t in r]
""", strategy="OD")

c2("one_device.values_from_function_and_gather", ST, "OneDeviceStrategy: values_from_function, local results, reduce axis 0 and gather", """
pr = strategy.experimental_distribute_values_from_function(lambda ctx: np.array([ctx.replica_id_in_sync_group, ctx.num_replicas_in_sync], np.int32))
result = {"local": L(pr), "reduce_mean": np.asarray(strategy.reduce("MEAN", pr, axis=0)).tolist(),
          "gather": np.asarray(strategy.gather(pr, axis=0)).tolist()}
""", strategy="OD")

c2("one_device.sync_on_read_and_mirrored_types", ST, "OneDeviceStrategy: variables in scope are not DistributedValues; experimental_local_results of a variable is a 1-tuple", """
with strategy.scope():
    a = idist.Variable(np.float32(1.0))
    b = idist.Variable(np.float32(1.0), synchronization=idist.VariableSynchronization.ON_READ, aggregation=idist.VariableAggregation.SUM)
result = {"a_dv": isinstance(a, idist.DistributedValues), "b_dv": isinstance(b, idist.DistributedValues),
          "a_local": L(a), "b_local": L(b), "a_len": len(strategy.experimental_local_results(a))}
""", strategy="OD")

c2("one_device.reduce_to_and_update", SE, "OneDeviceStrategy.extended.reduce_to(SUM, plain, v) and update(v, fn)", """
with strategy.scope():
    v = idist.Variable(np.array([1.0, 2.0], np.float32))
r = strategy.extended.reduce_to("SUM", np.array([3.0, 4.0], np.float32), v)
strategy.extended.update(v, lambda var, x: var.assign_add(x), args=(r,))
result = {"r": np.asarray(r).tolist(), "v": L(v)}
""", strategy="OD")

c2("one_device.datasets_from_function_steps", PS, "OneDeviceStrategy.distribute_datasets_from_function: all steps, values plain", """
dd = strategy.distribute_datasets_from_function(lambda ctx: idist.data.Dataset.range(5).batch(2))
result = [np.asarray(x).tolist() for x in dd]
""", strategy="OD")

# ---------------------------------------------------------------- CentralStorage
c2("central_storage.run_all_reduce_and_local_results.CS3", CS, "CentralStorage 3 compute devices: run result local results, devices, all_reduce SUM", """
def fn():
    c = idist.get_replica_context()
    i = np.float32(c.replica_id_in_sync_group)
    return c.all_reduce("SUM", i * np.float32(2.0))
r = strategy.run(fn)
result = {"vals": L(r), "devices": [c.device for c in strategy.experimental_local_results(r)]}
""", strategy="CS3")

c2("central_storage.variable_read_in_run_after_cross_assign.CS2", CS, "CentralStorage: cross-replica assign then read in run on each replica", """
with strategy.scope():
    v = idist.Variable(np.array([0.0, 0.0], np.float32))
v.assign(np.array([1.5, 2.5], np.float32))
result = {"run": L(strategy.run(lambda: v.read_value())), "v": L(v), "device": v.device}
""", strategy="CS2")

c2("central_storage.sum_vector_steps.CS3", CS, "CentralStorage SUM vector variable: assign_add([i, 1]) in run twice", """
with strategy.scope():
    v = idist.Variable(np.zeros(2, np.float32), aggregation=idist.VariableAggregation.SUM)
def fn():
    i = np.float32(idist.get_replica_context().replica_id_in_sync_group)
    v.assign_add(np.array([i, 1.0], np.float32))
    return np.float32(0.0)
strategy.run(fn)
strategy.run(fn)
result = L(v)
""", strategy="CS3")

c2("central_storage.reduce_variable_mean.CS2", CS, "CentralStorage: strategy.reduce('MEAN', variable)", """
with strategy.scope():
    v = idist.Variable(np.float32(3.0))
result = np.asarray(strategy.reduce("MEAN", v, axis=None)).tolist()
""", strategy="CS2")

c2("central_storage.update_group_false.CS2", CS, "CentralStorage: extended.update(v, fn, group=False) result length and values", """
with strategy.scope():
    v = idist.Variable(np.float32(1.0))
r = strategy.extended.update(v, lambda var, x: var.assign_add(x), args=(np.float32(2.0),), group=False)
result = {"len": len(r), "vals": [np.asarray(x).tolist() for x in r], "v": L(v)}
""", strategy="CS2")

c2("central_storage.merge_call_per_replica.CS3", CS, "CentralStorage: merge_fn sees a PerReplica of the replicas' values (local results)", """
def merge_fn(s, x):
    return np.float32(sum(np.asarray(t) for t in s.experimental_local_results(x)))
def fn():
    i = np.float32(idist.get_replica_context().replica_id_in_sync_group)
    return idist.get_replica_context().merge_call(merge_fn, args=(i + np.float32(1.0),))
r = strategy.run(fn)
result = L(r)
""", strategy="CS3")

# ---------------------------------------------------------------- ReduceOp
c2("reduce_op.values_and_names", MD, "ReduceOp members: value, name, ReduceOp['MEAN'], ReduceOp('SUM') is ReduceOp.SUM, str()", """
R = idist.ReduceOp
result = {"values": [R.SUM.value, R.MEAN.value], "names": [R.SUM.name, R.MEAN.name],
          "getitem": R["MEAN"] is R.MEAN, "call": R("SUM") is R.SUM, "str": str(R.SUM),
          "eq_str": R.SUM == "SUM", "list": [m.name for m in R]}
""", strategy=None)

c2("reduce_op.getitem_lowercase_raises", MD, "ReduceOp['sum'] raises KeyError", """
result = idist.ReduceOp["sum"].name
""", strategy=None)

c2("reduce_op.reduce_with_none_raises.M2", MD, "strategy.reduce(None, per_replica) raises", """
pr = strategy.experimental_distribute_values_from_function(lambda ctx: np.float32(ctx.replica_id_in_sync_group))
result = np.asarray(strategy.reduce(None, pr, axis=None)).tolist()
""")

c2("reduce_op.reduce_with_int_raises.M2", MD, "strategy.reduce(0, per_replica) raises", """
pr = strategy.experimental_distribute_values_from_function(lambda ctx: np.float32(ctx.replica_id_in_sync_group))
result = np.asarray(strategy.reduce(0, pr, axis=None)).tolist()
""")

c2("reduce_op.all_reduce_with_enum_from_value.M3", MD, "all_reduce(ReduceOp('MEAN'), ...) inside run", """
def fn():
    i = np.float32(idist.get_replica_context().replica_id_in_sync_group)
    return idist.get_replica_context().all_reduce(idist.ReduceOp("MEAN"), i * np.float32(3.0))
result = L(strategy.run(fn))
""", strategy="M3")

c2("reduce_op.from_variable_aggregation_results", MD, "ReduceOp.from_variable_aggregation(SUM/MEAN) returns the ReduceOp members", """
R = idist.ReduceOp
result = [R.from_variable_aggregation(idist.VariableAggregation.SUM) is R.SUM,
          R.from_variable_aggregation(idist.VariableAggregation.MEAN) is R.MEAN]
""", strategy=None)

c2("reduce_op.reduce_mean_lowercase_axis0.M2", MD, "strategy.reduce('mean', ..., axis=0) on int32 vectors: float64", """
pr = strategy.experimental_distribute_values_from_function(lambda ctx: np.array([1, ctx.replica_id_in_sync_group + 2], np.int32))
r = np.asarray(strategy.reduce("mean", pr, axis=0))
result = [r.tolist(), r.dtype.name]
""")

# ---------------------------------------------------------------- InputContext / InputOptions
c2("input_context.fields_and_batch_sizes", PS, "InputContext(2, 1, 4): fields; get_per_replica_batch_size for 8, 16, 4", """
c = idist.InputContext(num_input_pipelines=2, input_pipeline_id=1, num_replicas_in_sync=4)
result = [c.num_input_pipelines, c.input_pipeline_id, c.num_replicas_in_sync,
          c.get_per_replica_batch_size(8), c.get_per_replica_batch_size(16), c.get_per_replica_batch_size(4)]
""", strategy=None)

c2("input_context.batch_size_not_divisible_raises", PS, "InputContext(num_replicas_in_sync=3).get_per_replica_batch_size(10) raises", """
result = idist.InputContext(num_replicas_in_sync=3).get_per_replica_batch_size(10)
""", strategy=None)

c2("input_context.negative_batch", PS, "InputContext(num_replicas_in_sync=2).get_per_replica_batch_size(-4)", """
result = idist.InputContext(num_replicas_in_sync=2).get_per_replica_batch_size(-4)
""", strategy=None)

c2("input_context.str_defaults", PS, "str(InputContext()) with defaults", """
result = str(idist.InputContext())
""", strategy=None)

c2("input_options.explicit_fields", PS, "InputOptions with every field set: read back", """
o = idist.InputOptions(experimental_fetch_to_device=False, experimental_replication_mode=idist.InputReplicationMode.PER_REPLICA,
                       experimental_place_dataset_on_device=True, experimental_per_replica_buffer_size=3)
result = [o.experimental_fetch_to_device, o.experimental_replication_mode.name, o.experimental_place_dataset_on_device,
          o.experimental_per_replica_buffer_size]
""", strategy=None)

c2("input_options.unknown_kwarg_raises", PS, "InputOptions(bogus=1) raises TypeError", """
o = idist.InputOptions(bogus=1)
result = "created"
""", strategy=None)

c2("input_options.place_on_device_with_fetch_raises.M2", PS,
   "distribute_datasets_from_function with place_dataset_on_device=True and fetch_to_device=True (PER_REPLICA)", """
opts = idist.InputOptions(experimental_place_dataset_on_device=True, experimental_fetch_to_device=True,
                          experimental_replication_mode=idist.InputReplicationMode.PER_REPLICA)
dd = strategy.distribute_datasets_from_function(lambda ctx: idist.data.Dataset.range(4).batch(1), options=opts)
result = L(next(iter(dd)))
""")

c2("input_options.place_on_device_per_worker_raises.M2", PS,
   "distribute_datasets_from_function with place_dataset_on_device=True and PER_WORKER", """
opts = idist.InputOptions(experimental_place_dataset_on_device=True, experimental_fetch_to_device=False)
dd = strategy.distribute_datasets_from_function(lambda ctx: idist.data.Dataset.range(4).batch(1), options=opts)
result = L(next(iter(dd)))
""")

c2("input_replication_mode.values", PS, "InputReplicationMode member values", """
result = [idist.InputReplicationMode.PER_WORKER.value, idist.InputReplicationMode.PER_REPLICA.value]
""", strategy=None)

# ---------------------------------------------------------------- misuse errors
c2("errors.run_not_callable.M2", ST, "strategy.run(5) raises", """
strategy.run(5)
result = "no error"
""")

c2("errors.all_reduce_in_cross_replica.M2", ST, "get_replica_context() in scope is None: calling all_reduce on it raises AttributeError", """
with strategy.scope():
    idist.get_replica_context().all_reduce("SUM", np.float32(1.0))
result = "no error"
""")

c2("errors.reduce_inside_run_with_get_strategy.M2", ST, "idist.get_strategy().reduce(...) inside run raises RuntimeError", """
def fn():
    return idist.get_strategy().reduce("SUM", np.float32(1.0), axis=None)
strategy.run(fn)
result = "no error"
""")

c2("errors.values_from_function_inside_run.M2", ST, "experimental_distribute_values_from_function inside run (TF: no error)", """
def fn():
    return idist.get_strategy().experimental_distribute_values_from_function(lambda ctx: np.float32(1.0))
strategy.run(fn)
result = "no error"
""")

c2("errors.distribute_dataset_inside_run.M2", ST, "experimental_distribute_dataset inside run (TF: no error)", """
def fn():
    idist.get_strategy().experimental_distribute_dataset(idist.data.Dataset.range(4).batch(2))
    return np.float32(0.0)
strategy.run(fn)
result = "no error"
""")

c2("errors.variable_creation_inside_run.M2", ST, "creating a variable inside run (under MirroredStrategy) raises?", """
def fn():
    w = idist.Variable(np.float32(1.0))
    return w.read_value()
result = L(strategy.run(fn))
""")

c2("errors.merge_call_args_not_tuple.M2", ST, "merge_call(merge_fn, args=5) raises", """
def fn():
    return idist.get_replica_context().merge_call(lambda s, x: x, args=5)
strategy.run(fn)
result = "no error"
""")

c2("errors.run_args_list.M2", ST, "strategy.run(fn, args=[x]) with a list instead of a tuple works", """
result = L(strategy.run(lambda x: x * np.float32(2.0), args=[np.float32(1.5)]))
""")

c2("errors.all_gather_bad_axis.M2", ST, "all_gather with axis 2 on vectors raises", """
def fn():
    return idist.get_replica_context().all_gather(np.array([1.0], np.float32), axis=2)
strategy.run(fn)
result = "no error"
""")

c2("errors.sync_on_read_assign_add_shape_mismatch.M2", SE, "sync-on-read variable: assign_add with a wrong shape inside run raises", """
with strategy.scope():
    m = idist.Variable(np.zeros(2, np.float32), synchronization=idist.VariableSynchronization.ON_READ,
                       aggregation=idist.VariableAggregation.SUM)
def fn():
    m.assign_add(np.zeros(3, np.float32))
    return np.float32(0.0)
strategy.run(fn)
result = "no error"
""")

c2("errors.variable_bad_aggregation_type.M2", SE, "Variable(aggregation='sum') (a string) raises", """
with strategy.scope():
    v = idist.Variable(np.float32(0.0), aggregation="sum")
result = "created"
""")

c2("errors.sync_on_read_with_none_aggregation_replica_assign.M2", SE, "sync-on-read NONE aggregation: replica-context assign_add works locally; local results", """
with strategy.scope():
    m = idist.Variable(np.float32(0.0), synchronization=idist.VariableSynchronization.ON_READ,
                       aggregation=idist.VariableAggregation.NONE)
def fn():
    m.assign_add(np.float32(idist.get_replica_context().replica_id_in_sync_group) + np.float32(1.0))
    return m.read_value()
result = L(strategy.run(fn))
""")

c2("errors.mirrored_on_read_sync_bad.M2", SE, "Variable(synchronization=ON_READ) without aggregation: default aggregation NONE? read raises?", """
with strategy.scope():
    m = idist.Variable(np.float32(1.0), synchronization=idist.VariableSynchronization.ON_READ)
result = {"agg": m.aggregation.name, "sync": m.synchronization.name, "trainable": m.trainable}
""")

c2("errors.synchronization_none_raises.M2", SE, "Variable(synchronization=NONE, trainable=True) raises ValueError", """
with strategy.scope():
    m = idist.Variable(np.float32(1.0), synchronization=idist.VariableSynchronization.NONE, trainable=True)
result = "created"
""")
