"""Round 7: a variable created in one strategy's scope used in another strategy's ``run`` (reads,
assigns, optimizers), ``variable_created_in_scope``, ``reduce`` of another strategy's PerReplica,
and a plain variable (made outside any scope) assigned inside a Mirrored ``run``."""
from cases3_common import SE, ST, c3

OTHER = {
    "M2": 'idist.MirroredStrategy(["CPU:0", "CPU:1"])',
    "M3": 'idist.MirroredStrategy(["CPU:0", "CPU:1", "CPU:2"])',
    "OD": 'idist.OneDeviceStrategy("CPU:0")',
    "CS2": 'idist.experimental.CentralStorageStrategy(compute_devices=["CPU:0", "CPU:1"], parameter_device="CPU:0")',
}
CLOSE = [("other.close()", "pass")]


def xc(id, seed, what, body, owner, user, **kw):
    """``body`` runs with ``v`` made in ``strategy`` (``owner``) and ``other`` (``user``) at hand."""
    code = f"other = {OTHER[user]}\ntry:\n" + "".join("    " + ln + "\n" for ln in body.strip("\n").splitlines())
    code += "finally:\n    other.close()\n"
    c3(id, seed, what, code, strategy=owner, tf_sub=CLOSE, **kw)


MK = "with strategy.scope():\n    v = idist.Variable(np.float32(1.0))\n"
LO = "def LO(x):\n    return [np.asarray(c).tolist() for c in other.experimental_local_results(x)]\n"

for owner, user in [("M2", "M2"), ("M2", "OD"), ("OD", "M2"), ("CS2", "M2"), ("M2", "CS2")]:
    tag = f"{owner}_to_{user}"
    xc(f"xstrat.read_value.{tag}", ST, f"v.read_value() of a {owner} variable inside {user}'s run", MK + LO + """
result = LO(other.run(lambda: v.read_value()))
""", owner, user)
    xc(f"xstrat.arith.{tag}", ST, f"v + 1 (v converted as a tensor) of a {owner} variable inside {user}'s run", MK + LO + """
result = LO(other.run(lambda: v + np.float32(1.0)))
""", owner, user)
    xc(f"xstrat.assign.{tag}", ST, f"v.assign(3) of a {owner} variable inside {user}'s run; then its value", MK + LO + """
try:
    out = LO(other.run(lambda: v.assign(np.float32(3.0))))
except Exception as e:
    out = type(e).__name__
result = {"out": out, "after": np.asarray(v).tolist()}
""", owner, user)
    xc(f"xstrat.assign_add.{tag}", ST, f"v.assign_add(1) of a {owner} variable inside {user}'s run; then its value", MK + LO + """
try:
    out = LO(other.run(lambda: v.assign_add(np.float32(1.0))))
except Exception as e:
    out = type(e).__name__
result = {"out": out, "after": np.asarray(v).tolist()}
""", owner, user)

xc("xstrat.read_value_raises.M2_to_M2", ST, "v.read_value() of a Mirrored variable in another Mirrored strategy's run: the exception", MK + """
other.run(lambda: v.read_value())
result = None
""", "M2", "M2")
xc("xstrat.assign_raises.M2_to_OD", ST, "v.assign(3) of a Mirrored variable in OneDevice's run: the exception", MK + """
other.run(lambda: v.assign(np.float32(3.0)))
result = None
""", "M2", "OD")
xc("xstrat.created_in_scope.M2_OD", SE, "extended.variable_created_in_scope for variables of the own / another strategy", MK + """
with other.scope():
    w = idist.Variable(np.float32(2.0))
result = [strategy.extended.variable_created_in_scope(v), other.extended.variable_created_in_scope(v),
          strategy.extended.variable_created_in_scope(w), other.extended.variable_created_in_scope(w)]
""", "M2", "OD")
xc("xstrat.returned_variable.M2_to_M2", ST, "another strategy's run returning the Mirrored variable itself: the same object back", MK + """
r = other.run(lambda: v)
result = [r is v, isinstance(r, idist.PerReplica)]
""", "M2", "M2")
xc("xstrat.sgd.OD_to_M2", ST, "SGD.apply_gradients inside a Mirrored run on a OneDevice variable: value after", MK + """
opt = idist.optimizers.SGD(learning_rate=0.5)
def step():
    opt.apply_gradients([(np.float32(1.0), v)])
try:
    other.run(step)
    out = "ok"
except Exception as e:
    out = type(e).__name__
result = {"out": out, "after": np.asarray(v).tolist()}
""", "OD", "M2")
xc("xstrat.sgd.M2_to_M2", ST, "SGD.apply_gradients inside another Mirrored strategy's run on a Mirrored variable", MK + """
opt = idist.optimizers.SGD(learning_rate=0.5)
def step():
    opt.apply_gradients([(np.float32(1.0), v)])
try:
    other.run(step)
    out = "ok"
except Exception as e:
    out = type(e).__name__
result = {"out": out, "after": np.asarray(v).tolist()}
""", "M2", "M2")

xc("xstrat.reduce_foreign_per_replica.M2_M2", ST, "strategy.reduce of a PerReplica made by another strategy's run", """
pr = strategy.run(lambda: np.float32(idist.get_replica_context().replica_id_in_sync_group + 1))
result = np.asarray(other.reduce("SUM", pr, axis=None)).tolist()
""", "M2", "M2")

# plain variables (default strategy) inside a Mirrored run
PV = "p = idist.Variable(np.float32(10.0))\n"
for key in ["M2", "M3"]:
    c3(f"plain.assign_add_in_run.{key}", ST, "a variable made outside any scope, assign_add(1) in run: once per replica", PV + """
strategy.run(lambda: p.assign_add(np.float32(1.0)))
result = np.asarray(p).tolist()
""", strategy=key)
    c3(f"plain.assign_add_returns.{key}", ST, "what run returns for p.assign_add(1) on a plain variable (kind, local values)", PV + """
r = strategy.run(lambda: p.assign_add(np.float32(1.0)))
result = {"per_replica": isinstance(r, idist.PerReplica), "local": L(r), "after": np.asarray(p).tolist()}
""", strategy=key)
    c3(f"plain.read_in_run.{key}", ST, "a plain variable read inside run (read_value and v + 0)", PV + """
r = strategy.run(lambda: [p.read_value(), p + np.float32(0.0)])
result = [L(x) for x in r]
""", strategy=key)
c3("plain.assign_sub_in_run.M2", ST, "assign_sub(1) of a plain variable in run (read_value=False)", PV + """
r = strategy.run(lambda: p.assign_sub(np.float32(1.0), read_value=False))
result = {"r": r, "after": np.asarray(p).tolist()}
""")
c3("plain.assign_in_run.M3", ST, "assign(replica id) of a plain variable in run: the last replica's value stays", PV + """
strategy.run(lambda: p.assign(np.float32(idist.get_replica_context().replica_id_in_sync_group)))
result = np.asarray(p).tolist()
""", strategy="M3")
c3("plain.returned_variable.M2", ST, "run returning a plain variable: the variable itself", PV + """
r = strategy.run(lambda: p)
result = [r is p, isinstance(r, idist.PerReplica)]
""")
c3("plain.assign_add_in_run.OD", ST, "a plain variable assign_add(1) in OneDevice's run", PV + """
strategy.run(lambda: p.assign_add(np.float32(1.0)))
result = np.asarray(p).tolist()
""", strategy="OD")
c3("plain.two_runs.M2", ST, "two runs, each assign_add(1) on a plain variable, then a run reading it", PV + """
strategy.run(lambda: p.assign_add(np.float32(1.0)))
strategy.run(lambda: p.assign_add(np.float32(1.0)))
result = {"after": np.asarray(p).tolist(), "read": L(strategy.run(lambda: p + np.float32(0.0)))}
""")
