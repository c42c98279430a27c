"""Optimizers whose ``apply_gradients`` works in replica context (steps 2-4 of the seed).

In replica context ``apply_gradients`` does ``merge_call`` → ``batch_reduce_to(SUM)``
→ ``extended.update``, as Keras optimizers do under a ``tf.distribute`` strategy (for mirrored
variables and NumPy gradients, the same all-reduce and updates without the merge_call's exchange).
Gradients are summed across replicas: scale the loss by the global batch size.

Each optimizer's update is Keras 3's ``update_step``, operation for operation in the variable's
dtype (the same ``assign``/``assign_add``/``assign_sub`` of the same values), so that its results
equal TF 2.21's eager ones, for float16, float32 and float64 variables alike (hyperparameters rounded
where Keras rounds them: ``rules._cast``, ``rules._operand``).

Where the slots (momentum, Adam's moments, RMSprop's velocity, Adagrad's accumulators) live:

* on a Mirrored, MultiWorkerMirrored or OneDevice strategy, each replica keeps them next to its copy
  of the variable (``replica.store``), and they stay equal across replicas because every update is
  the same; on a CentralStorage strategy, only the replica holding the variable keeps them;
* on a ParameterServerStrategy, on the ps tasks, sharded as their variable: a scheduled step reads
  them with its variables and sends its slot updates with its variable updates (one message per ps
  task, applied once), so every worker's step updates the same slots, as TF's do. A slot is made on
  the ps by the first step that needs it; ``optimizer.build(var_list)`` in the notebook makes them
  before any step runs (do so when several workers start at once: two first steps both finding a
  slot missing would both make it, and the later one would reset the other's first update);
* outside any strategy, in the optimizer itself.

``interdist.Checkpoint(optimizer=opt, model=...)`` saves and restores them (with ``iterations``).

Examples
--------
>>> import interdist as idist, numpy as np
>>> with idist.MirroredStrategy(["CPU:0", "CPU:1"]) as s:
...     with s.scope():
...         w = idist.Variable(np.float32(1.0))
...         opt = idist.optimizers.SGD(learning_rate=0.1)
...     def step():
...         with idist.GradientTape() as tape:
...             loss = w * np.float32(idist.get_replica_context().replica_id_in_sync_group + 1)
...         opt.apply_gradients([(tape.gradient(loss, w), w)])  # gradients 1 and 2, summed: 3
...     _ = s.run(step)
...     w.numpy(), int(opt.iterations.numpy())
(array(0.7, dtype=float32), 1)
"""

from __future__ import annotations

from interdist.optimizers.base import Optimizer
from interdist.optimizers.rules import SGD, Adagrad, Adam, RMSprop
from interdist.optimizers.rules import _power as _power
from interdist.optimizers.slots import _store_key as _store_key

__all__ = ["SGD", "Adagrad", "Adam", "Optimizer", "RMSprop"]
