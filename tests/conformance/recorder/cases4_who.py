"""Round 4: "who am I" inside replica code (isinstance of get_strategy(), ReplicaContext.strategy,
merge_fn's and update's strategy), ReplicaContext made directly, the public namespace."""
from cases3_common import MD, ST, c3

CLS = {"M1": "idist.MirroredStrategy", "M2": "idist.MirroredStrategy", "OD": "idist.OneDeviceStrategy",
       "CS2": "idist.experimental.CentralStorageStrategy"}
NAME = {"M1": "MirroredStrategy", "M2": "MirroredStrategy", "OD": "OneDeviceStrategy", "CS2": "CentralStorageStrategy"}

FLAGS = """
def flags(g):
    return {"mirrored": isinstance(g, idist.MirroredStrategy), "one_device": isinstance(g, idist.OneDeviceStrategy),
            "central": isinstance(g, idist.experimental.CentralStorageStrategy), "strategy": isinstance(g, idist.Strategy),
            "is_strategy": g is strategy, "name": type(g).__name__ == "%s",
            "extended": isinstance(g.extended, idist.StrategyExtended)}
"""

for key in ["M1", "M2", "OD", "CS2"]:
    c3(f"who.get_strategy_in_run.{key}", ST, "inside run: isinstance of get_strategy() and ReplicaContext.strategy "
       "against each strategy class, identity, type name, extended's class", FLAGS % NAME[key] + """
def fn():
    return {"get": flags(idist.get_strategy()), "rc": flags(idist.get_replica_context().strategy)}
result = strategy.run(fn)
""", strategy=key)

for key in ["M2", "OD", "CS2"]:
    c3(f"who.merge_fn_strategy.{key}", ST, "inside merge_fn: isinstance flags of its strategy argument and of get_strategy()",
       FLAGS % NAME[key] + """
def merge_fn(s):
    return {"arg": flags(s), "get": flags(idist.get_strategy()), "cross": idist.in_cross_replica_context()}
result = strategy.run(lambda: idist.get_replica_context().merge_call(merge_fn))
""", strategy=key)

    c3(f"who.update_fn_strategy.{key}", ST, "inside extended.update's fn: get_strategy() is the strategy, isinstance of "
       "its class and of Strategy (as a number per copy)", """
with strategy.scope():
    v = idist.Variable(1.0)
def upd(var):
    g = idist.get_strategy()
    return np.float32(1 * isinstance(g, %s) + 2 * isinstance(g, idist.Strategy) + 4 * (g is strategy))
result = L(strategy.extended.update(v, upd))
""" % CLS[key], strategy=key, tf_sub=[("return np.float32(", "return tf.constant(")])  # TF's update returns None for NumPy

c3("who.default_strategy_is_a_strategy", MD, "the default strategy: isinstance of Strategy (outside and inside its run), "
   "not a MirroredStrategy, has_strategy", """
d = idist.get_strategy()
def fn():
    g = idist.get_strategy()
    return [isinstance(g, idist.Strategy), g is d, isinstance(idist.get_replica_context(), idist.ReplicaContext)]
result = {"outside": isinstance(d, idist.Strategy), "mirrored": isinstance(d, idist.MirroredStrategy),
          "run": d.run(fn), "has": idist.has_strategy()}
""", strategy=None, helper=False)

c3("who.subclass_in_run.M2", ST, "a MirroredStrategy subclass defined in the program: inside run, get_strategy() is it, "
   "is a MirroredStrategy and a Strategy, its type's name is the subclass's", """
class MyStrategy(idist.MirroredStrategy):
    pass
s = MyStrategy(["CPU:0", "CPU:1"])
try:
    def fn():
        g = idist.get_strategy()
        return [g is s, isinstance(g, idist.MirroredStrategy), isinstance(g, idist.Strategy),
                type(g).__name__ == "MyStrategy"]
    result = s.run(fn)
finally:
    s.close()
""", tf_sub=[("    s.close()\n", "    pass\n")], strategy=None, helper=False)

c3("who.subclass_isinstance_in_run.M2", ST, "a MirroredStrategy subclass defined in the program: inside run, "
   "isinstance(get_strategy(), TheSubclass)", """
class MyStrategy(idist.MirroredStrategy):
    pass
s = MyStrategy(["CPU:0", "CPU:1"])
try:
    result = s.run(lambda: isinstance(idist.get_strategy(), MyStrategy))
finally:
    s.close()
""", tf_sub=[("    s.close()\n", "    pass\n")], strategy=None, helper=False)

for key in ["M2", "OD"]:
    c3(f"replica_context.direct.{key}", MD, "ReplicaContext(strategy, replica_id_in_sync_group=1) made directly: id, "
       "num_replicas, strategy, `with ctx` (what it binds, the current context/strategy), after, merge_call inside", """
rc = idist.ReplicaContext(strategy, replica_id_in_sync_group=1)
with rc as bound:
    inside = [bound is None, idist.get_replica_context() is rc, idist.get_strategy() is strategy,
              idist.in_cross_replica_context(), idist.has_strategy()]
    merged = rc.merge_call(lambda s, x: [s is strategy, idist.in_cross_replica_context(),
                                         idist.get_replica_context() is None, x], args=(4,))
after = [idist.get_replica_context() is rc, idist.has_strategy()]
result = {"id": int(rc.replica_id_in_sync_group), "n": rc.num_replicas_in_sync, "strategy": rc.strategy is strategy,
          "inside": inside, "merged": merged, "after": after}
""", strategy=key)

    c3(f"replica_context.direct_errors.{key}", MD, "ReplicaContext made directly: errors outside `with` (devices, "
       "all_reduce, merge_call), inside it (strategy.run, strategy.scope), missing or non-integer id", """
def err(f):
    try:
        f()
        return "ok"
    except Exception as e:
        return type(e).__name__
rc = idist.ReplicaContext(strategy, 0)
out = {"devices": err(lambda: rc.devices), "all_reduce": err(lambda: rc.all_reduce("SUM", np.float32(1.0))),
       "merge_call": err(lambda: rc.merge_call(lambda s: 1)),
       "no_id": err(lambda: idist.ReplicaContext(strategy)), "str_id": err(lambda: idist.ReplicaContext(strategy, "a")),
       "float_id": err(lambda: idist.ReplicaContext(strategy, 1.5)), "big_id": err(lambda: idist.ReplicaContext(strategy, 5))}
with rc:
    out["run"] = err(lambda: strategy.run(lambda: 1))
    def enter_scope():
        with strategy.scope():
            pass
    out["scope"] = err(enter_scope)
result = out
""", strategy=key)

c3("replica_context.direct_all_reduce.M2", MD, "ReplicaContext made directly, inside `with`: all_reduce hands the "
   "value back (MEAN of an array, SUM of a dict)", """
rc = idist.ReplicaContext(strategy, replica_id_in_sync_group=1)
with rc:
    a = rc.all_reduce("MEAN", np.array([1.0, 3.0], np.float32))
    b = rc.all_reduce("SUM", {"a": np.float32(2.0)})
result = {"a": np.asarray(a).tolist(), "b": float(np.asarray(b["a"]))}
""", tf_sub=[("np.array([1.0, 3.0], np.float32)", "tf.constant([1.0, 3.0])"), ("np.float32(2.0)", "tf.constant(2.0)")])

c3("replica_context.direct_default", MD, "ReplicaContext(default strategy, 0): id, num_replicas, strategy", """
d = idist.get_strategy()
rc = idist.ReplicaContext(d, 0)
result = [int(rc.replica_id_in_sync_group), rc.num_replicas_in_sync, rc.strategy is d]
""", strategy=None, helper=False)

TF_NAMES = ["CrossDeviceOps", "DistributedDataset", "DistributedIterator", "DistributedValues",
            "HierarchicalCopyAllReduce", "InputContext", "InputOptions", "InputReplicationMode", "MirroredStrategy",
            "MultiWorkerMirroredStrategy", "NcclAllReduce", "OneDeviceStrategy", "ParameterServerStrategy", "ReduceOp",
            "ReductionToOneDevice", "ReplicaContext", "RunOptions", "Server", "Strategy", "StrategyExtended",
            "TPUStrategy", "cluster_resolver", "coordinator", "experimental", "experimental_set_strategy",
            "get_replica_context", "get_strategy", "has_strategy", "in_cross_replica_context"]
c3("namespace.tf_distribute_names", MD, "every public name of tf.distribute exists; names TF does not have "
   "(annotations, get_cross_replica_context) do not", f"""
import inspect
names = {TF_NAMES!r}
result = {{"missing": [n for n in names if not hasattr(idist, n)],
          "classes": [n for n in names if inspect.isclass(getattr(idist, n, None))],
          "extra": [n for n in ["annotations", "get_cross_replica_context"] if hasattr(idist, n)]}}
""", strategy=None, helper=False, tf_sub=[("(idist, ", "(tf.distribute, ")])

c3("namespace.experimental_names", MD, "tf.distribute.experimental's strategies and options that interdist has",
   """
names = ["CentralStorageStrategy", "CollectiveCommunication", "CommunicationImplementation", "CommunicationOptions",
         "MultiWorkerMirroredStrategy", "ParameterServerStrategy", "TPUStrategy", "ValueContext", "coordinator",
         "partitioners"]
result = [n for n in names if hasattr(idist.experimental, n)]
""", strategy=None, helper=False)

c3("namespace.strategy_subclasses", MD, "which strategy classes are subclasses of Strategy", """
names = ["MirroredStrategy", "OneDeviceStrategy", "MultiWorkerMirroredStrategy", "ParameterServerStrategy", "TPUStrategy"]
result = {n: issubclass(getattr(idist, n), idist.Strategy) for n in names}
result["central"] = issubclass(idist.experimental.CentralStorageStrategy, idist.Strategy)
""", strategy=None, helper=False, tf_sub=[("(idist, ", "(tf.distribute, ")])
