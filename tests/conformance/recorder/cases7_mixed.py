"""Round 7: replicas passing different dtypes or shapes to one collective (all_reduce, reduce,
reduce_to, batch_reduce_to, all_gather, gather), complex MEAN, bool/string reductions.

TF never casts across replicas: it fails. Which class depends on TF's code path (an aborted
collective is ``InternalError``, an ``AddN`` of mixed inputs is ``InvalidArgumentError``, recorded
as ``ValueError``); interdist raises ``ReplicaMismatchError``, which is both."""
from cases3_common import SE, ST, c3

RID = "def rid():\n    return int(idist.get_replica_context().replica_id_in_sync_group)\n"

c3("mixed.all_reduce.f32_f64.M2", ST, "ctx.all_reduce(SUM): replica 0 passes float32, replica 1 float64", RID + """
r = strategy.run(lambda: idist.get_replica_context().all_reduce("SUM", np.array(1.0, [np.float32, np.float64][rid()])))
result = L(r)
""")
c3("mixed.all_reduce.f64_f32_mean.M2", ST, "ctx.all_reduce(MEAN): float64 on replica 0, float32 on replica 1", RID + """
r = strategy.run(lambda: idist.get_replica_context().all_reduce("MEAN", np.array([1.0, 2.0], [np.float64, np.float32][rid()])))
result = L(r)
""")
c3("mixed.all_reduce.i32_f32.M2", ST, "ctx.all_reduce(SUM): int32 on replica 0, float32 on replica 1", RID + """
r = strategy.run(lambda: idist.get_replica_context().all_reduce("SUM", np.array(1, [np.int32, np.float32][rid()])))
result = L(r)
""")
c3("mixed.all_reduce.f32_i32.M2", ST, "ctx.all_reduce(SUM): float32 on replica 0, int32 on replica 1", RID + """
r = strategy.run(lambda: idist.get_replica_context().all_reduce("SUM", np.array(1, [np.float32, np.int32][rid()])))
result = L(r)
""")
c3("mixed.all_reduce.one_of_three.M3", ST, "ctx.all_reduce(SUM): float32 on replicas 0 and 1, float64 on replica 2", RID + """
r = strategy.run(lambda: idist.get_replica_context().all_reduce("SUM", np.array(1.0, [np.float32, np.float32, np.float64][rid()])))
result = L(r)
""", strategy="M3")
c3("mixed.all_reduce.nest_second_leaf.M2", ST, "ctx.all_reduce(SUM) of a list whose second leaf is float32 / float64", RID + """
r = strategy.run(lambda: idist.get_replica_context().all_reduce("SUM", [np.float32(1.0), np.array(1.0, [np.float32, np.float64][rid()])]))
result = [L(x) for x in r]
""")
c3("mixed.all_reduce.shapes.M2", ST, "ctx.all_reduce(SUM): shape [2] on replica 0, [3] on replica 1", RID + """
r = strategy.run(lambda: idist.get_replica_context().all_reduce("SUM", np.ones([2, 3][rid()], np.float32)))
result = L(r)
""")
c3("mixed.all_reduce.same_dtype_ok.M2", ST, "ctx.all_reduce(SUM) of float64 on every replica still works (values, dtype)", RID + """
r = strategy.run(lambda: idist.get_replica_context().all_reduce("SUM", np.array(rid() + 0.5, np.float64)))
result = {"v": L(r), "dtype": [str(np.asarray(c).dtype) for c in strategy.experimental_local_results(r)]}
""")
c3("mixed.reduce.f32_f64.M2", ST, "strategy.reduce(SUM, axis=None) of a PerReplica float32 / float64", RID + """
pr = strategy.run(lambda: np.array(1.0, [np.float32, np.float64][rid()]))
result = np.asarray(strategy.reduce("SUM", pr, axis=None)).tolist()
""")
c3("mixed.reduce.mean_axis0.M2", ST, "strategy.reduce(MEAN, axis=0) of a PerReplica float32 / float64", RID + """
pr = strategy.run(lambda: np.ones([2], [np.float32, np.float64][rid()]))
result = np.asarray(strategy.reduce("MEAN", pr, axis=0)).tolist()
""")
c3("mixed.reduce.i32_f32.M2", ST, "strategy.reduce(SUM) of a PerReplica int32 / float32", RID + """
pr = strategy.run(lambda: np.array(1, [np.int32, np.float32][rid()]))
result = np.asarray(strategy.reduce("SUM", pr, axis=None)).tolist()
""")
c3("mixed.reduce.shapes.M2", ST, "strategy.reduce(SUM, axis=None) of a PerReplica with shapes [2] / [3]", RID + """
pr = strategy.run(lambda: np.ones([2, 3][rid()], np.float32))
result = np.asarray(strategy.reduce("SUM", pr, axis=None)).tolist()
""")
c3("mixed.reduce.shapes_axis0.M2", ST, "strategy.reduce(SUM, axis=0) of shapes [2] / [3] works (each replica sums its own first)", RID + """
pr = strategy.run(lambda: np.ones([2, 3][rid()], np.float32))
result = np.asarray(strategy.reduce("SUM", pr, axis=0)).tolist()
""")
c3("mixed.reduce.values_from_function.M2", ST, "strategy.reduce of a PerReplica from values_from_function with float32 / float64", """
pr = strategy.experimental_distribute_values_from_function(
    lambda ctx: np.array(1.0, [np.float32, np.float64][ctx.replica_id_in_sync_group]))
result = np.asarray(strategy.reduce("SUM", pr, axis=None)).tolist()
""")
c3("mixed.reduce_to.f32_f64.M2", SE, "extended.reduce_to(SUM, PerReplica float32/float64, destinations=the value)", RID + """
pr = strategy.run(lambda: np.array(1.0, [np.float32, np.float64][rid()]))
result = L(strategy.extended.reduce_to("SUM", pr, pr))
""")
c3("mixed.reduce_to.device_string.M2", SE, "extended.reduce_to(SUM, PerReplica float32/float64, '/cpu:0')", RID + """
pr = strategy.run(lambda: np.array(1.0, [np.float32, np.float64][rid()]))
result = np.asarray(strategy.extended.reduce_to("SUM", pr, "/cpu:0")).tolist()
""")
c3("mixed.batch_reduce_to.f32_f64.M2", SE, "extended.batch_reduce_to(SUM, [(PerReplica float32/float64, itself)])", RID + """
pr = strategy.run(lambda: np.array(1.0, [np.float32, np.float64][rid()]))
result = [L(x) for x in strategy.extended.batch_reduce_to("SUM", [(pr, pr)])]
""")
c3("mixed.all_gather.f32_f64.M2", ST, "ctx.all_gather(axis=0): float32 on replica 0, float64 on replica 1", RID + """
r = strategy.run(lambda: idist.get_replica_context().all_gather(np.ones([1], [np.float32, np.float64][rid()]), axis=0))
result = L(r)
""")
c3("mixed.gather.f32_f64.M2", ST, "strategy.gather(axis=0) of a PerReplica float32 / float64", RID + """
pr = strategy.run(lambda: np.ones([1], [np.float32, np.float64][rid()]))
result = np.asarray(strategy.gather(pr, axis=0)).tolist()
""")
c3("mixed.merge_call_reduce.f32_f64.M2", ST, "merge_call(lambda s, x: s.reduce(SUM, x)) with float32 / float64 arguments", RID + """
r = strategy.run(lambda: idist.get_replica_context().merge_call(lambda s, x: s.reduce("SUM", x, axis=None), args=(np.array(1.0, [np.float32, np.float64][rid()]),)))
result = L(r)
""")
for key in ["M2", "M3"]:
    c3(f"mixed.reduce.complex_mean.{key}", ST, "strategy.reduce(MEAN, axis=None) of complex64 1+2j(i+1): keeps the imaginary part and dtype", RID + """
pr = strategy.run(lambda: np.complex64(1 + 2j * (rid() + 1)))
m = np.asarray(strategy.reduce("MEAN", pr, axis=None))
result = {"re": float(m.real), "im": float(m.imag), "dtype": str(m.dtype)}
""", strategy=key)
c3("mixed.reduce.complex_mean_axis0.M2", ST, "strategy.reduce(MEAN, axis=0) of complex64 arrays: keeps the imaginary part and dtype", RID + """
pr = strategy.run(lambda: np.array([1 + 2j * (rid() + 1), 3j], np.complex64))
m = np.asarray(strategy.reduce("MEAN", pr, axis=0))
result = {"re": float(m.real), "im": float(m.imag), "dtype": str(m.dtype)}
""")
c3("mixed.all_reduce.complex.M2", ST, "ctx.all_reduce(MEAN) of a complex64 value", RID + """
r = strategy.run(lambda: idist.get_replica_context().all_reduce("MEAN", np.complex64(1 + 2j * (rid() + 1))))
result = [[float(np.asarray(c).real), float(np.asarray(c).imag)] for c in strategy.experimental_local_results(r)]
""")
c3("mixed.reduce.bool.M2", ST, "strategy.reduce(SUM) of a PerReplica of bools", RID + """
pr = strategy.run(lambda: np.bool_(rid() == 0))
result = np.asarray(strategy.reduce("SUM", pr, axis=None)).tolist()
""")
c3("mixed.all_reduce.string.M2", ST, "ctx.all_reduce(SUM) of a string value", RID + """
r = strategy.run(lambda: idist.get_replica_context().all_reduce("SUM", np.array("a" * (rid() + 1))))
result = L(r)
""", tf_sub=[('np.array("a" * (rid() + 1))', 'tf.constant("a" * (rid() + 1))')])
