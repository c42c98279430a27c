"""Round 3: colocate_vars_with + update, value_container, variable_created_in_scope, devices of every
strategy kind/spelling, CentralStorage defaults, OneDevice spellings, cross_device_ops, cluster_resolver."""
from cases3_common import CS, MD, SE, ST, c3

for key in ["M2", "M3", "OD", "CS2"]:
    c3(f"colocate.seed_update.{key}", SE, "seed: var2/var3 created under colocate_vars_with(var1); extended.update(var1, fn, args=(var2, var3)) with fn assigning v1 = v2 + v3", """
with strategy.scope():
    var1 = idist.Variable(np.float32(1.0))
    with strategy.extended.colocate_vars_with(var1):
        var2 = idist.Variable(np.float32(2.0))
        var3 = idist.Variable(np.float32(3.0))
def fn(v1, v2, v3):
    return v1.assign(v2 + v3)
strategy.extended.update(var1, fn, args=(var2, var3))
result = {"v1": L(var1), "v2": L(var2), "v3": L(var3), "n": [len(L(var2)), len(L(var3))],
          "in_scope": [strategy.extended.variable_created_in_scope(var2), strategy.extended.variable_created_in_scope(var3)]}
""", strategy=key)

c3("colocate.update_group_false.M2", SE, "colocated vars: update(var1, fn, args=(var2,), group=False) returns one value per copy", """
with strategy.scope():
    var1 = idist.Variable(np.array([1.0, 1.0], np.float32))
    with strategy.extended.colocate_vars_with(var1):
        var2 = idist.Variable(np.array([0.5, 2.0], np.float32))
r = strategy.extended.update(var1, lambda a, b: a.assign_add(b), args=(var2,), group=False)
result = {"len": len(r), "vals": [np.asarray(x).tolist() for x in r], "v1": L(var1)}
""")

c3("colocate.update_kwargs.M2", SE, "colocated vars: update(var1, fn, kwargs={'other': var2}) fn multiplies", """
with strategy.scope():
    var1 = idist.Variable(np.float32(3.0))
    with strategy.extended.colocate_vars_with(var1):
        var2 = idist.Variable(np.float32(4.0))
strategy.extended.update(var1, lambda a, other=None: a.assign(a * other), kwargs={"other": var2})
result = L(var1)
""")

c3("colocate.outside_scope.M2", SE, "colocate_vars_with used outside strategy.scope()", """
with strategy.scope():
    var1 = idist.Variable(np.float32(1.0))
try:
    with strategy.extended.colocate_vars_with(var1):
        v = idist.Variable(np.float32(2.0))
    res = {"ok": [strategy.extended.variable_created_in_scope(v), len(L(v))]}
except Exception as e:
    res = {"err": type(e).__name__}
result = res
""")

c3("colocate.update_in_merge_fn.M2", SE, "colocated vars: update(var1, fn, args=(reduced, var2)) inside merge_fn", """
with strategy.scope():
    var1 = idist.Variable(np.float32(0.0))
    with strategy.extended.colocate_vars_with(var1):
        var2 = idist.Variable(np.float32(10.0))
def merge_fn(s, g):
    red = s.extended.reduce_to("SUM", g, var1)
    s.extended.update(var1, lambda a, x, y: a.assign(x + y), args=(red, var2))
    return np.float32(0.0)
strategy.run(lambda: idist.get_replica_context().merge_call(merge_fn, args=(np.float32(idist.get_replica_context().replica_id_in_sync_group) + 1,)))
result = L(var1)
""")

# ----------------------------------------------------------------- value_container
for key in ["M2", "OD", "CS2"]:
    c3(f"value_container.kinds.{key}", SE, "extended.value_container of a variable (is the variable), of a local result component, of a plain value (identity)", """
with strategy.scope():
    v = idist.Variable(np.float32(1.0))
comp = strategy.experimental_local_results(v)[0]
x = np.float32(5.0)
result = [strategy.extended.value_container(v) is v, strategy.extended.value_container(comp) is v,
          strategy.extended.value_container(x) is x]
""", strategy=key)

# ----------------------------------------------------------------- variable_created_in_scope
c3("variable_created_in_scope.other_strategy.M2", SE, "variable_created_in_scope for a variable of another strategy and one created outside any scope", """
other = idist.MirroredStrategy(["CPU:0", "CPU:1"])
try:
    with other.scope():
        o = idist.Variable(np.float32(1.0))
    plain = idist.Variable(np.float32(2.0))
    with strategy.scope():
        mine = idist.Variable(np.float32(3.0))
    res = [strategy.extended.variable_created_in_scope(o), strategy.extended.variable_created_in_scope(plain),
           strategy.extended.variable_created_in_scope(mine), other.extended.variable_created_in_scope(mine)]
finally:
    other.close()
result = res
""", tf_sub=[("    other.close()\n", "    pass\n")])

c3("variable_created_in_scope.default_strategy", SE, "default strategy's extended.variable_created_in_scope of a plain variable", """
v = idist.Variable(np.float32(1.0))
result = idist.get_strategy().extended.variable_created_in_scope(v)
""", strategy=None, helper=False)

c3("variable_created_in_scope.sync_on_read.OD", SE, "OneDevice: variable_created_in_scope of an ON_READ variable and of a variable made inside run", """
with strategy.scope():
    s = idist.Variable(np.float32(0.0), synchronization=idist.VariableSynchronization.ON_READ, aggregation=idist.VariableAggregation.SUM)
result = strategy.extended.variable_created_in_scope(s)
""", strategy="OD")

# ----------------------------------------------------------------- devices
DEV = """
result = {"worker": list(strategy.extended.worker_devices), "param": list(strategy.extended.parameter_devices),
          "n": strategy.num_replicas_in_sync, "wtype": type(strategy.extended.worker_devices).__name__}
"""
for key in ["M1", "M2", "M3", "M4", "OD", "OD1", "CS2", "CS3"]:
    c3(f"devices.every_kind.{key}", SE, "extended.worker_devices / parameter_devices (full names), their type, num_replicas_in_sync", DEV, strategy=key)

SPELL = {
    "mirrored_lower": ('idist.MirroredStrategy(["/cpu:0", "/cpu:1"])', "MirroredStrategy(['/cpu:0', '/cpu:1'])"),
    "mirrored_full": ('idist.MirroredStrategy(["/job:localhost/replica:0/task:0/device:CPU:0", "/device:CPU:1"])', "full device names"),
    "mirrored_full_both": ('idist.MirroredStrategy(["/job:localhost/replica:0/task:0/device:CPU:0", "/job:localhost/replica:0/task:0/device:CPU:1"])', "full device names for both"),
    "mirrored_tuple": ('idist.MirroredStrategy(("CPU:1", "CPU:0"))', "tuple of devices in reverse order"),
    "od_lower": ('idist.OneDeviceStrategy("/cpu:0")', "OneDeviceStrategy('/cpu:0')"),
    "od_upper": ('idist.OneDeviceStrategy("CPU:0")', "OneDeviceStrategy('CPU:0')"),
    "od_device_prefix": ('idist.OneDeviceStrategy("/device:CPU:2")', "OneDeviceStrategy('/device:CPU:2')"),
    "cs_default": ("idist.experimental.CentralStorageStrategy()", "CentralStorageStrategy() with no arguments"),
    "cs_param_lower": ('idist.experimental.CentralStorageStrategy(compute_devices=["CPU:0", "CPU:1"], parameter_device="/cpu:0")', "parameter_device='/cpu:0'"),
    "cs_one_compute": ('idist.experimental.CentralStorageStrategy(compute_devices=["CPU:1"])', "one compute device, no parameter_device"),
    "cs_two_no_param": ('idist.experimental.CentralStorageStrategy(compute_devices=["CPU:0", "CPU:1"])', "two compute devices, no parameter_device"),
}
for name, (ctor, what) in SPELL.items():
    code = f"""
s = {ctor}
try:
    with s.scope():
        v = idist.Variable(np.float32(1.0))
    r = s.run(lambda: np.float32(idist.get_replica_context().replica_id_in_sync_group))
    res = {{"worker": list(s.extended.worker_devices), "param": list(s.extended.parameter_devices),
           "n": s.num_replicas_in_sync, "v_local": len(s.experimental_local_results(v)),
           "run": [np.asarray(x).tolist() for x in s.experimental_local_results(r)],
           "cluster_resolver_none": s.cluster_resolver is None}}
finally:
    s.close()
result = res
"""
    c3(f"devices.spelling.{name}", SE, what + ": devices, replicas, variable copies, run, cluster_resolver",
       code, tf_sub=[("    s.close()\n", "    pass\n")], strategy=None, helper=False)

c3("onedevice.variable_device.lower", ST, "OneDeviceStrategy('/cpu:0'): the variable's .device and the run result's device suffix", """
s = idist.OneDeviceStrategy("/cpu:0")
try:
    with s.scope():
        v = idist.Variable(np.float32(1.0))
    res = {"v_device_endswith": v.device.endswith("CPU:0"), "local_n": len(s.experimental_local_results(v)),
           "v_is_dv": isinstance(v, idist.DistributedValues)}
finally:
    s.close()
result = res
""", tf_sub=[("    s.close()\n", "    pass\n")], strategy=None, helper=False)

c3("central_storage.default_run_reduce", CS, "CentralStorageStrategy(): run, reduce SUM, variable read, assign in run", """
s = idist.experimental.CentralStorageStrategy()
try:
    with s.scope():
        v = idist.Variable(np.float32(2.0))
    r = s.run(lambda: v.assign_add(np.float32(1.0)) * np.float32(0.0) + np.float32(idist.get_replica_context().replica_id_in_sync_group + 1))
    res = {"reduce": np.asarray(s.reduce("SUM", r, axis=None)).tolist(), "v": np.asarray(v.read_value()).tolist(),
           "n": s.num_replicas_in_sync}
finally:
    s.close()
result = res
""", tf_sub=[("    s.close()\n", "    pass\n")], strategy=None, helper=False)

# ----------------------------------------------------------------- cross_device_ops
CDO = {
    "hierarchical": "idist.HierarchicalCopyAllReduce()",
    "hierarchical_packs0": "idist.HierarchicalCopyAllReduce(num_packs=0)",
    "nccl": "idist.NcclAllReduce()",
    "reduction_to_one": "idist.ReductionToOneDevice()",
    "reduction_to_one_dev": 'idist.ReductionToOneDevice(reduce_to_device="CPU:1")',
}
for name, ctor in CDO.items():
    c3(f"cross_device_ops.{name}.construct_and_reduce", ST, f"MirroredStrategy(cross_device_ops={ctor}): run + reduce SUM/MEAN, ctx.all_reduce", f"""
s = idist.MirroredStrategy(["CPU:0", "CPU:1"], cross_device_ops={ctor})
try:
    def fn():
        i = np.float32(idist.get_replica_context().replica_id_in_sync_group)
        return idist.get_replica_context().all_reduce("SUM", i + np.float32(1.0))
    try:
        r = s.run(fn)
        ar = [np.asarray(x).tolist() for x in s.experimental_local_results(r)]
    except Exception as e:
        ar = type(e).__name__
    try:
        p = s.run(lambda: np.float32(idist.get_replica_context().replica_id_in_sync_group) + np.float32(1.0))
        red = [np.asarray(s.reduce("SUM", p, axis=None)).tolist(), np.asarray(s.reduce("MEAN", p, axis=None)).tolist()]
    except Exception as e:
        red = type(e).__name__
    res = {{"all_reduce": ar, "reduce": red}}
finally:
    s.close()
result = res
""", tf_sub=[("    s.close()\n", "    pass\n")], strategy=None, helper=False)

ERRS = {
    "hierarchical_neg_packs": "idist.HierarchicalCopyAllReduce(num_packs=-1)",
    "nccl_neg_packs": "idist.NcclAllReduce(num_packs=-1)",
    "base_cross_device_ops": "idist.CrossDeviceOps()",
    "nccl_packs_2": "idist.NcclAllReduce(num_packs=2)",
}
for name, ctor in ERRS.items():
    c3(f"cross_device_ops.ctor.{name}", ST, f"constructing {ctor}: raises or not; isinstance CrossDeviceOps", f"""
try:
    o = {ctor}
    res = {{"ok": isinstance(o, idist.CrossDeviceOps)}}
except Exception as e:
    res = {{"err": type(e).__name__}}
result = res
""", strategy=None, helper=False)

c3("cross_device_ops.reduce_to_reduction_to_one", SE, "ReductionToOneDevice().reduce(SUM, per_replica, destinations=per_replica) used directly", """
s = idist.MirroredStrategy(["CPU:0", "CPU:1"], cross_device_ops=idist.ReductionToOneDevice())
try:
    pr = s.experimental_distribute_values_from_function(lambda ctx: np.float32(ctx.replica_id_in_sync_group) + np.float32(2.0))
    m = s.extended.reduce_to("SUM", pr, pr)
    br = s.extended.batch_reduce_to("MEAN", [(pr, pr), (pr, pr)])
    res = {"m": [np.asarray(x).tolist() for x in s.experimental_local_results(m)],
           "br": [[np.asarray(x).tolist() for x in s.experimental_local_results(b)] for b in br]}
finally:
    s.close()
result = res
""", tf_sub=[("    s.close()\n", "    pass\n")], strategy=None, helper=False)

c3("cross_device_ops.wrong_type", ST, "MirroredStrategy(cross_device_ops='nccl') (a string)", """
try:
    s = idist.MirroredStrategy(["CPU:0", "CPU:1"], cross_device_ops="nccl")
    try:
        r = s.run(lambda: idist.get_replica_context().all_reduce("SUM", np.float32(1.0)))
        res = {"ok": [np.asarray(x).tolist() for x in s.experimental_local_results(r)]}
    except Exception as e:
        res = {"run_raises": type(e).__name__}
    finally:
        s.close()
except Exception as e:
    res = {"err": type(e).__name__}
result = res
""", tf_sub=[("        s.close()\n", "        pass\n")], strategy=None, helper=False)

# ----------------------------------------------------------------- cluster_resolver
for key in ["M1", "M2", "OD", "CS2"]:
    c3(f"cluster_resolver.none.{key}", MD, "strategy.cluster_resolver for a local strategy is None", """
result = [strategy.cluster_resolver is None, idist.get_strategy().cluster_resolver is None]
""", strategy=key, helper=False)
