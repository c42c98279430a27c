"""Round 6: ParameterServerStrategy with a variable_partitioner: TF's ShardedVariable (shards, names,
devices, full value, assign of the whole and of one shard, uneven splits, the partitioners).

The TF side runs an in-process cluster (2 ps, 2 workers, tf.distribute.Server); the interdist side a
Dask cluster whose workers are named as the tasks (ps-0, ps-1, worker-0, worker-1)."""
import textwrap

from cases2_common import PS
from record import case

TF_SETUP = '''
import socket
def _port():
    s = socket.socket(); s.bind(("localhost", 0)); p = s.getsockname()[1]; s.close(); return p
_spec = {"worker": ["localhost:%d" % _port() for _ in range(2)], "ps": ["localhost:%d" % _port() for _ in range(2)]}
_cs = tf.train.ClusterSpec(_spec)
_servers = [tf.distribute.Server(_cs, job_name=j, task_index=i, protocol="grpc", start=True)
            for j in ("worker", "ps") for i in range(2)]
_resolver = tf.distribute.cluster_resolver.SimpleClusterResolver(_cs, rpc_layer="grpc")
def make_strategy(partitioner):
    return tf.distribute.experimental.ParameterServerStrategy(_resolver, variable_partitioner=partitioner)
partitioners = tf.distribute.experimental.partitioners
Variable = tf.Variable
'''

ID_SETUP = '''
import logging
from distributed import LocalCluster, Nanny
_cl = LocalCluster(n_workers=0, host="127.0.0.1", dashboard_address="127.0.0.1:0", silence_logs=logging.ERROR)
async def _add(name):
    n = Nanny(_cl.scheduler_address, name=name, nthreads=1, host="127.0.0.1", memory_limit=0, silence_logs=logging.ERROR)
    await n
    return n
_nannies = [_cl.sync(_add, n) for n in ["ps-0", "ps-1", "worker-0", "worker-1"]]
_made = []
def make_strategy(partitioner):
    s = idist.experimental.ParameterServerStrategy(cluster=_cl.scheduler_address, variable_partitioner=partitioner)
    _made.append(s)
    return s
partitioners = idist.experimental.partitioners
Variable = idist.Variable
'''

ID_TEARDOWN = '''
for _s in _made:
    _s.close()
for _n in _nannies:
    try:
        _cl.sync(_n.close, timeout=10)
    except Exception:
        pass
_cl.close(timeout=20)
'''


def ps_case(id, what, body, tf_body=None):
    body = textwrap.dedent(body).strip("\n") + "\n"
    icode = ID_SETUP + "try:\n" + textwrap.indent(body, "    ") + "finally:\n" + textwrap.indent(ID_TEARDOWN, "    ")
    tcode = TF_SETUP + (body if tf_body is None else textwrap.dedent(tf_body).strip("\n") + "\n")
    case(id, PS, what, icode, tcode, strategy=None, raw=True)


ps_case("ps.sharded_variable_basics", "FixedShardsPartitioner(2): shards' names/shapes/devices, full value, assign of the whole and of one shard", """
strategy = make_strategy(partitioners.FixedShardsPartitioner(2))
with strategy.scope():
    v = Variable(np.arange(10, dtype=np.float32).reshape(5, 2), name="v")
    w = Variable(np.arange(3, dtype=np.float32), name="w")
    u = Variable(1.0, name="u")
    one = Variable(np.array([4.0], np.float32), name="one")
res = {}
res["v"] = [v.name, list(v.shape), len(v.variables), [x.name for x in v.variables],
            [list(x.shape) for x in v.variables], [x.device for x in v.variables], v.numpy().tolist()]
res["w"] = [[list(x.shape) for x in w.variables], [x.device for x in w.variables]]
res["u"] = [u.name, u.device, float(u.numpy())]
res["one"] = [len(getattr(one, "variables", [one])), one.numpy().tolist()]
v.assign(np.full((5, 2), 7.0, np.float32))
res["assign"] = v.numpy().tolist()
v.variables[1].assign_add(np.ones((2, 2), np.float32))
res["shard_assign_add"] = [v.numpy().tolist(), np.asarray(v.variables[1].read_value()).tolist(), v.variables[0].numpy().tolist()]
v.variables[0].assign(np.zeros((3, 2), np.float32))
res["shard_assign"] = v.numpy().tolist()
v.assign_sub(np.ones((5, 2), np.float32))
res["assign_sub"] = v.numpy().tolist()
try:
    v.assign(np.ones((4, 2), np.float32))
    res["bad_shape"] = "no error"
except Exception as e:
    res["bad_shape"] = "ValueError" if type(e).__name__ == "InvalidArgumentError" else type(e).__name__
result = res
""")

ps_case("ps.partitioners_splits", "MinSizePartitioner/MaxSizePartitioner/FixedShardsPartitioner(3): shard shapes of (7, 2), (5,), (2, 3) float32 variables", """
out = []
for p in [partitioners.MinSizePartitioner(min_shard_bytes=8, max_shards=3),
          partitioners.MaxSizePartitioner(max_shard_bytes=16),
          partitioners.FixedShardsPartitioner(3)]:
    strategy = make_strategy(p)
    shapes = []
    with strategy.scope():
        for shape in [(7, 2), (5,), (2, 3)]:
            z = Variable(np.zeros(shape, np.float32))
            shapes.append([list(x.shape) for x in getattr(z, "variables", [z])])
    out.append(shapes)
result = out
""")
