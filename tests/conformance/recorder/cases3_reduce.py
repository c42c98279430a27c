"""Round 3: all_reduce of Python numbers / int64 / float64 / bools, MEAN on ints, reduce with axis on
2-D/3-D, gather of uneven shapes, RunOptions."""
from cases3_common import MD, SE, ST, c3

DT = "def D(x):\n    return [str(np.asarray(c).dtype) for c in strategy.experimental_local_results(x)]\n"

for key in ["M2", "M3", "OD"]:
    c3(f"all_reduce.python_int.{key}", ST, "ctx.all_reduce(SUM, python int 1 + replica id as int): values", """
def fn():
    c = idist.get_replica_context()
    return c.all_reduce("SUM", 1)
r = strategy.run(fn)
result = L(r)
""", strategy=key)

    c3(f"all_reduce.python_float_mean.{key}", ST, "ctx.all_reduce(MEAN, python float 2.5)", """
r = strategy.run(lambda: idist.get_replica_context().all_reduce("MEAN", 2.5))
result = L(r)
""", strategy=key)

for key in ["M2", "M3"]:
    c3(f"all_reduce.int64_sum.{key}", ST, "all_reduce SUM of an int64 array depending on replica id: values and dtype", DT + """
def fn():
    i = int(idist.get_replica_context().replica_id_in_sync_group)
    return idist.get_replica_context().all_reduce("SUM", np.array([i, 10 * i + 1], np.int64))
r = strategy.run(fn)
result = {"v": L(r), "dtype": D(r)}
""", strategy=key)

    c3(f"all_reduce.float64_mean.{key}", ST, "all_reduce MEAN of a float64 array: values and dtype", DT + """
def fn():
    i = float(idist.get_replica_context().replica_id_in_sync_group)
    return idist.get_replica_context().all_reduce("MEAN", np.array([i, i * 0.5], np.float64))
r = strategy.run(fn)
result = {"v": L(r), "dtype": D(r)}
""", strategy=key)

    c3(f"all_reduce.int32_mean.{key}", ST, "all_reduce MEAN of an int32 value (1 + replica id): integer division or not, dtype", DT + """
def fn():
    i = int(idist.get_replica_context().replica_id_in_sync_group)
    return idist.get_replica_context().all_reduce("MEAN", np.int32(i + 1))
try:
    r = strategy.run(fn)
    res = {"v": L(r), "dtype": D(r)}
except Exception as e:
    res = {"err": type(e).__name__}
result = res
""", strategy=key)

    c3(f"all_reduce.int64_mean_array.{key}", ST, "all_reduce MEAN of int64 array [1+i, 2]: values", DT + """
def fn():
    i = int(idist.get_replica_context().replica_id_in_sync_group)
    return idist.get_replica_context().all_reduce("MEAN", np.array([1 + i, 2], np.int64))
try:
    r = strategy.run(fn)
    res = {"v": L(r), "dtype": D(r)}
except Exception as e:
    res = {"err": type(e).__name__}
result = res
""", strategy=key)

    c3(f"all_reduce.bool.{key}", ST, "all_reduce SUM of a bool value", """
def fn():
    i = int(idist.get_replica_context().replica_id_in_sync_group)
    return idist.get_replica_context().all_reduce("SUM", np.bool_(i == 0))
try:
    r = strategy.run(fn)
    res = {"v": L(r)}
except Exception as e:
    res = {"err": type(e).__name__}
result = res
""", strategy=key)

c3("all_reduce.python_int_dtype.M2", ST, "dtype of all_reduce(SUM, 3) (python int) and all_reduce(SUM, 1.5) (python float)", DT + """
r = strategy.run(lambda: [idist.get_replica_context().all_reduce("SUM", 3), idist.get_replica_context().all_reduce("SUM", 1.5)])
result = {"int": [L(r[0]), D(r[0])], "float": [L(r[1]), D(r[1])]}
""")

c3("all_reduce.mixed_list.M2", ST, "all_reduce SUM of a list [float32 array, float32 scalar, float64 scalar]", """
def fn():
    i = int(idist.get_replica_context().replica_id_in_sync_group)
    return idist.get_replica_context().all_reduce("SUM", [np.array([1.0, float(i)], np.float32), np.float32(i + 2), np.float64(0.5)])
r = strategy.run(fn)
result = [L(x) for x in r]
""")

c3("all_reduce.dict_values.M3", ST, "all_reduce MEAN of a dict {'a': float32 2-D, 'b': float32 scalar}", """
def fn():
    i = np.float32(idist.get_replica_context().replica_id_in_sync_group)
    return idist.get_replica_context().all_reduce("MEAN", {"a": np.ones((2, 2), np.float32) * i, "b": i * 3})
r = strategy.run(fn)
result = {k: L(r[k]) for k in sorted(r)}
""", strategy="M3")

c3("all_reduce.int64_reduce_op_enum.M2", ST, "all_reduce with ReduceOp.SUM enum on an int64 scalar", """
def fn():
    i = int(idist.get_replica_context().replica_id_in_sync_group)
    return idist.get_replica_context().all_reduce(idist.ReduceOp.SUM, np.int64(5 * i + 1))
r = strategy.run(fn)
result = L(r)
""")

# ----------------------------------------------------------------- strategy.reduce with axis
for key in ["M2", "M3"]:
    for op in ["SUM", "MEAN"]:
        for ax in [0, 1]:
            c3(f"reduce.axis{ax}_2d.{op}.{key}", ST, f"strategy.reduce({op}, per-replica (2, 3) array, axis={ax})", """
def fn():
    i = np.float32(idist.get_replica_context().replica_id_in_sync_group)
    return np.arange(6, dtype=np.float32).reshape(2, 3) + i * np.float32(10.0)
r = strategy.run(fn)
s = strategy.reduce("OP", r, axis=AX)
result = {"v": np.asarray(s).tolist(), "shape": list(np.shape(s))}
""".replace("OP", op).replace("AX", str(ax)), strategy=key)

    for op in ["SUM", "MEAN"]:
        c3(f"reduce.axis2_3d.{op}.{key}", ST, f"strategy.reduce({op}, per-replica (2, 2, 2) array, axis=2)", """
def fn():
    i = np.float32(idist.get_replica_context().replica_id_in_sync_group)
    return np.arange(8, dtype=np.float32).reshape(2, 2, 2) * (i + np.float32(1.0))
r = strategy.run(fn)
s = strategy.reduce("OP", r, axis=2)
result = {"v": np.asarray(s).tolist(), "shape": list(np.shape(s))}
""".replace("OP", op), strategy=key)

c3("reduce.axis_uneven_mean.M2", ST, "strategy.reduce(MEAN, per-replica arrays of lengths 1 and 3 (from distribute_values_from_function), axis=0): mean over all elements", """
def vf(ctx):
    return np.arange(1 + 2 * ctx.replica_id_in_sync_group, dtype=np.float32) + np.float32(1.0)
pr = strategy.experimental_distribute_values_from_function(vf)
s = strategy.reduce("MEAN", pr, axis=0)
result = {"v": np.asarray(s).tolist(), "local": L(pr)}
""")

c3("reduce.axis_uneven_sum_2d.M2", ST, "strategy.reduce(SUM, per-replica (1,2) and (2,2) arrays, axis=0)", """
def vf(ctx):
    return np.ones((1 + ctx.replica_id_in_sync_group, 2), np.float32) * np.float32(ctx.replica_id_in_sync_group + 1)
pr = strategy.experimental_distribute_values_from_function(vf)
s = strategy.reduce("SUM", pr, axis=0)
result = np.asarray(s).tolist()
""")

c3("reduce.axis_neg1_3d.MEAN.M3", ST, "strategy.reduce(MEAN, (2, 3) per replica, axis=-1)", """
r = strategy.run(lambda: np.arange(6, dtype=np.float32).reshape(2, 3) * np.float32(idist.get_replica_context().replica_id_in_sync_group + 1))
try:
    s = strategy.reduce("MEAN", r, axis=-1)
    res = {"v": np.asarray(s).tolist()}
except Exception as e:
    res = {"err": type(e).__name__}
result = res
""", strategy="M3")

c3("reduce.int32_mean_axis0.M2", ST, "strategy.reduce(MEAN, int32 per-replica vectors, axis=0): value and dtype", """
r = strategy.run(lambda: np.array([1, 2, 4], np.int32) + np.int32(idist.get_replica_context().replica_id_in_sync_group))
s = strategy.reduce("MEAN", r, axis=0)
result = {"v": np.asarray(s).tolist(), "dtype": str(np.asarray(s).dtype)}
""")

c3("reduce.int32_mean_none.M2", ST, "strategy.reduce(MEAN, int32 scalars 1 and 2, axis=None): value and dtype", """
r = strategy.run(lambda: np.int32(idist.get_replica_context().replica_id_in_sync_group + 1))
s = strategy.reduce("MEAN", r, axis=None)
result = {"v": np.asarray(s).tolist(), "dtype": str(np.asarray(s).dtype)}
""")

# ----------------------------------------------------------------- gather uneven
c3("gather.uneven_axis0.M3", ST, "strategy.gather of per-replica arrays with 1, 2, 3 rows (axis=0)", """
def vf(ctx):
    return np.full((ctx.replica_id_in_sync_group + 1, 2), np.float32(ctx.replica_id_in_sync_group), np.float32)
pr = strategy.experimental_distribute_values_from_function(vf)
g = strategy.gather(pr, axis=0)
result = {"v": np.asarray(g).tolist(), "shape": list(np.shape(g))}
""", strategy="M3")

c3("gather.uneven_axis1.M2", ST, "strategy.gather of (2,1) and (2,3) arrays along axis=1", """
def vf(ctx):
    return np.ones((2, 1 + 2 * ctx.replica_id_in_sync_group), np.float32) * np.float32(ctx.replica_id_in_sync_group + 1)
pr = strategy.experimental_distribute_values_from_function(vf)
g = strategy.gather(pr, axis=1)
result = {"v": np.asarray(g).tolist(), "shape": list(np.shape(g))}
""")

c3("gather.uneven_wrong_axis.M2", ST, "strategy.gather of (1,2) and (2,3) arrays along axis=0: non-gather dims differ", """
def vf(ctx):
    return np.ones((1 + ctx.replica_id_in_sync_group, 2 + ctx.replica_id_in_sync_group), np.float32)
pr = strategy.experimental_distribute_values_from_function(vf)
try:
    g = strategy.gather(pr, axis=0)
    res = {"shape": list(np.shape(g))}
except Exception as e:
    res = {"err": type(e).__name__}
result = res
""")

c3("gather.empty_component.M2", ST, "strategy.gather where replica 0 has a (0, 2) array and replica 1 a (2, 2) array", """
def vf(ctx):
    return np.ones((2 * ctx.replica_id_in_sync_group, 2), np.float32)
pr = strategy.experimental_distribute_values_from_function(vf)
g = strategy.gather(pr, axis=0)
result = {"v": np.asarray(g).tolist(), "shape": list(np.shape(g))}
""")

c3("all_gather.uneven_in_run.M2", ST, "ctx.all_gather of per-replica arrays of lengths 1 and 2 (axis=0) inside run", """
def fn():
    i = idist.get_replica_context().replica_id_in_sync_group
    x = np.arange(int(i) + 1, dtype=np.float32) + np.float32(10.0) * np.float32(i)
    return idist.get_replica_context().all_gather(x, axis=0)
try:
    r = strategy.run(fn)
    res = {"v": L(r)}
except Exception as e:
    res = {"err": type(e).__name__}
result = res
""")

# ----------------------------------------------------------------- RunOptions
c3("run_options.accepted.M2", ST, "strategy.run(fn, args, options=RunOptions()) and with experimental_enable_dynamic_batch_size=False", """
r1 = strategy.run(lambda x: x * 2, args=(np.float32(3.0),), options=idist.RunOptions())
r2 = strategy.run(lambda x: x + np.float32(idist.get_replica_context().replica_id_in_sync_group), args=(np.float32(1.0),),
                  options=idist.RunOptions(experimental_enable_dynamic_batch_size=False, experimental_bucketizing_dynamic_shape=True))
o = idist.RunOptions()
result = {"r1": L(r1), "r2": L(r2), "defaults": [o.experimental_enable_dynamic_batch_size, o.experimental_bucketizing_dynamic_shape]}
""")

c3("run_options.kwargs.OD", ST, "OneDeviceStrategy.run(fn, kwargs=..., options=RunOptions(experimental_xla_options=None))", """
r = strategy.run(lambda a=None: a * np.float32(4.0), kwargs={"a": np.float32(2.0)}, options=idist.RunOptions(experimental_xla_options=None))
result = L(r)
""", strategy="OD")
