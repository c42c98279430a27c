"""A ParameterServerStrategy step on its worker: the step's strategy view and the step runner.

``run_step`` runs one scheduled step inside its ``StepContext`` (``ps_step.py``): the variables
it reads are fetched from the ps tasks at its start and its updates are sent at its end. Inside,
``get_strategy()`` is a ``PSWorkerView``: one replica, the worker's device, and the dataset
descriptions a ``dataset_fn`` may make (``ps_input.py``).
"""

from __future__ import annotations

import traceback
from collections.abc import Callable
from contextlib import contextmanager
from typing import Any

import cloudpickle
import numpy as np

from interdist import _context, _nest, _reduction, autodiff
from interdist.collectives.local import local_group
from interdist.protocol import GroupSpec
from interdist.protocol_errors import dump_exception
from interdist.reduce_op import resolve
from interdist.replica.context import ReplicaContext
from interdist.replica.ps_input import DistributedDataset, DistributedDatasetsFromFunction
from interdist.replica.ps_step import VARIABLE_IN_STEP, Connection, StepContext, materialize
from interdist.replica.replica import Replica
from interdist.values.distributed import DistributedValues


def run_step(
    conn: Connection, store: str, step_id: str, fn_bytes: bytes, args_bytes: bytes, device: str
) -> dict[str, Any]:
    """Run one scheduled step on this worker; never raises (a failure is the reply)."""
    ctx = StepContext(step_id, conn, store, device)
    try:
        with _context.ps_step_context(ctx):
            fn = cloudpickle.loads(fn_bytes)  # variable handles register with ctx as they unpickle
            args, kwargs = cloudpickle.loads(args_bytes)
            ctx.prefetch()
            with _context.enter(worker_view(ctx), None):
                result = materialize(fn(*args, **kwargs))
            ctx.flush()
        return {"ok": True, "result": cloudpickle.dumps(result)}
    except BaseException as exc:  # noqa: BLE001 - every failure must reach the coordinator
        err = dump_exception(exc)
        return {
            "ok": False,
            "error": err,
            "type": type(exc).__name__,
            "message": str(exc),
            "traceback": traceback.format_exc(),
        }


def worker_view(ctx: StepContext) -> Any:
    if ctx.view is None:
        ctx.view = PSWorkerView(ctx.store, ctx.device)
    return ctx.view


class PSWorkerView:
    """The ``ParameterServerStrategy`` as a step sees it on its worker: one replica, the worker's CPU."""

    def __init__(self, store: str, device: str) -> None:

        self._store = store
        spec: GroupSpec = {"world_size": 1, "devices": [device], "kind": "parameter_server"}
        self._replica = Replica(f"ps-{store}", 0, spec, local_group(1)[0], lambda e: None, lambda s, r: None)
        self._replica.view = self  # type: ignore[assignment]  # this view stands in for ReplicaStrategyView
        self._replica_context = ReplicaContext._for_replica(self._replica)
        self.extended = self  # the few StrategyExtended members a step needs live here
        self.worker_devices = (device,)

    num_replicas_in_sync = 1
    cluster_resolver = None

    @contextmanager
    def scope(self) -> Any:
        with _context.enter(self, None):
            yield self

    def run(self, fn: Callable[..., Any], args: Any = (), kwargs: Any = None, options: Any = None) -> Any:
        args, kwargs = _nest.check_call_args(fn, args, kwargs)  # as TF: args a list or tuple (else ValueError)
        self._replica.step += 1
        self._replica.seq = 0
        with _context.enter(self, self._replica_context):
            return autodiff.detach(fn(*args, **kwargs))

    def reduce(self, reduce_op: Any, value: Any, axis: int | None = None) -> Any:
        op = resolve(reduce_op)
        if isinstance(value, DistributedValues):
            return _reduction.reduce_components(op, [np.asarray(c) for c in value.values], axis)
        return value if axis is None else _reduction.reduce_components(op, [np.asarray(value)], axis)

    # What an optimizer's merge_call uses (TF: the step's gradients are applied to the variables on
    # the ps tasks). One replica: a sum or a mean is the value itself.
    def reduce_to(self, reduce_op: Any, value: Any, destinations: Any, options: Any = None) -> Any:
        resolve(reduce_op)
        return value.values[0] if isinstance(value, DistributedValues) else value

    def batch_reduce_to(self, reduce_op: Any, value_destination_pairs: Any, options: Any = None) -> list[Any]:
        return [self.reduce_to(reduce_op, v, d, options) for v, d in value_destination_pairs]

    def update(self, var: Any, fn: Callable[..., Any], args: Any = (), kwargs: Any = None, group: bool = True) -> Any:
        """``fn(var, *args, **kwargs)`` in cross-replica context; its writes go to the ps tasks at the step's end."""
        with _context.enter(self, None):
            out = fn(var, *tuple(args), **dict(kwargs or {}))
        return out if group else (out,)

    def experimental_local_results(self, value: Any) -> tuple[Any, ...]:
        return value.values if isinstance(value, DistributedValues) else (value,)

    def call_for_each_replica(self, fn: Callable[..., Any], args: Any = (), kwargs: Any = None) -> Any:
        return self.run(fn, args, kwargs)

    # A dataset_fn given to ClusterCoordinator.create_per_worker_dataset runs on the worker and may
    # call these (TF's example does): the same descriptions the notebook's strategy makes.
    def experimental_distribute_dataset(self, dataset: Any, options: Any = None) -> Any:

        return DistributedDataset(dataset, options)

    def distribute_datasets_from_function(self, dataset_fn: Callable[..., Any], options: Any = None) -> Any:

        return DistributedDatasetsFromFunction(dataset_fn, options)

    def experimental_distribute_datasets_from_function(
        self, dataset_fn: Callable[..., Any], options: Any = None
    ) -> Any:
        return self.distribute_datasets_from_function(dataset_fn, options)

    def _create_variable(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(VARIABLE_IN_STEP)

    def __repr__(self) -> str:
        return f"<interdist ParameterServerStrategy view on {self.worker_devices[0]}>"
