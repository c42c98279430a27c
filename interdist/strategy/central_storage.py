"""``CentralStorageStrategy``: variables in one place, compute replicated on the compute devices.

Each variable has ONE value, kept by one worker (the *holder*); the other compute
replicas keep only its name, shape and dtype. ``experimental_local_results(v)`` is
``(v,)`` and its device the parameter device, as in TF.

Where the value lives
    When the parameter device is one of the compute devices (``compute_devices=["CPU:0",
    "CPU:1"], parameter_device="CPU:0"``), that device's worker holds it (the first one,
    if the device is listed twice). Otherwise (TF's default ``"/device:CPU:0"`` next to
    GPUs, or ``compute_devices=["CPU:1", "CPU:2"], parameter_device="CPU:0"``) replica 0's
    worker holds it, in host memory. Not the notebook, although TF would call its CPU
    the host CPU too:

    - replicas read variables and apply reduced updates *during* a step (``assign_add``
      then ``read_value`` in one replica function, an optimizer step then a read), and a
      worker cannot reach the notebook then: the notebook is a Dask client, not a server,
      and waits for the replies. Holding values there would mean shipping every variable
      with every program, and the updates back with every reply, two hops a step;
    - ``run_steps`` runs many steps in one call, without the notebook;
    - in TF the parameter device is the host CPU *of the machine that computes*; the
      notebook may be another machine. Replica 0's worker is on that machine.

    So the parameter device is a placement (what ``v.device`` says and where the value
    is, in host memory), and the worker that holds it is chosen as above.

How replicas read and update (replica/variable.py)
    A replica that does not hold a variable fetches its value from the holder,
    worker to worker, at its first read in a step, and keeps it until the variable is
    written or the program ends: one message each way, only for the variables the
    step reads (shipping all of them with each program would make the notebook fetch
    them from the holder first). Writes in replica context are reduced onto the holder
    (the others send their part and go on) and applied once there; cross-replica
    writes (``merge_fn``, ``extended.update``, the notebook) are applied once, on the
    holder. Every replica counts the writes of a program, so a read always sees the
    value at its own point of the program, even when the holder is ahead.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

from interdist import _context, _nest
from interdist import device as device_lib
from interdist._convert import convert_for_variable
from interdist.client.gpus import visible_gpus
from interdist.errors import WorkerLostError
from interdist.protocol import VariableMeta
from interdist.replica import central_variable as rv
from interdist.strategy.base import Strategy
from interdist.strategy.extended import StrategyExtended
from interdist.strategy.mirrored import resolve_devices
from interdist.values.distributed import DistributedValues, PerReplica
from interdist.values.tensor import ArrayValue
from interdist.values.variables import Variable


def default_local_devices() -> list[str]:
    """TF's devices for ``CentralStorageStrategy()`` and ``MultiWorkerMirroredStrategy()`` on one host.

    Every GPU, else only ``CPU:0``: unlike ``MirroredStrategy()``, TF 2.21 does not take the logical CPU
    devices (with 2 or 4 configured, both strategies have 1 replica on CPU:0).
    """
    n_gpu = visible_gpus()
    return [f"GPU:{i}" for i in range(n_gpu)] if n_gpu else ["CPU:0"]


class _CentralExtended(StrategyExtended):
    experimental_between_graph = True  # as TF 2.21 reports it for CentralStorageStrategy

    @property
    def worker_devices(self) -> Any:
        return list(self._strategy._devices)  # a list here, not a tuple (as TF 2.21)


class CentralStorageStrategy(Strategy):
    """A one-machine strategy that puts all variables on a single device.

    ``security`` (a ``distributed.security.Security``): the TLS credentials to reach the scheduler named
    by ``cluster`` (an address or a cluster object); with no ``cluster``, the embedded cluster speaks
    TLS with these credentials instead of ones made for it alone, so that other clients holding them
    (and only those) can reach it.

    >>> import interdist as idist, numpy as np
    >>> s = idist.experimental.CentralStorageStrategy(["CPU:0", "CPU:1"], parameter_device="CPU:0")
    >>> with s.scope():
    ...     v = idist.Variable(np.float32(1.0), aggregation=idist.VariableAggregation.SUM)
    >>> _ = s.run(lambda: v.assign_add(np.float32(1.0)))
    >>> float(np.asarray(v)), len(s.experimental_local_results(v))
    (3.0, 1)
    >>> s.close()
    """

    _extended_class = _CentralExtended

    _kind = "central_storage"

    def __init__(
        self,
        compute_devices: Any = None,
        parameter_device: str | None = None,
        cluster: Any = None,
        security: Any = None,
    ) -> None:
        if compute_devices is None or (not isinstance(compute_devices, str) and not list(compute_devices)):
            compute_devices = default_local_devices()
        devices = resolve_devices(compute_devices, allow_duplicates=True)
        if parameter_device is None:
            # TF's default with several compute devices is the host's CPU, spelled "/device:CPU:0".
            parameter_device = devices[0] if len(devices) == 1 else "/device:CPU:0"
        self._parameter_device_as_given = parameter_device  # TF reports parameter_devices as given
        self._parameter_device = device_lib.canonicalize(parameter_device)
        # The worker that holds the values (see the module docstring).
        self._holder = devices.index(self._parameter_device) if self._parameter_device in devices else 0
        super().__init__(
            devices,
            cluster,
            spec={"parameter_devices": [self._parameter_device], "central_holder": self._holder},
            security=security,
        )

    def _parameter_devices(self) -> list[str]:
        return [self._parameter_device_as_given]

    def _variable_kind(self, args: dict[str, Any]) -> str:
        return "central"

    def _variable_devices(self, kind: str) -> list[str]:
        return [self._parameter_device]

    # -- one copy, on the holder ------------------------------------------------------
    def _create_on_replicas(self, var_id: int, meta: VariableMeta, value: np.ndarray) -> None:
        meta.update({"shape": list(value.shape), "dtype": value.dtype.str, "device": self._parameter_device})
        h = self._holder
        # The value travels to the holder only; the others learn the name, shape and dtype.
        self._system(
            rv.create_central_variable,
            per_rank=[(var_id, meta, value if r == h else None) for r in range(self.num_replicas_in_sync)],
        )

    def _read_copy(self, var: Any, rank: int) -> Any:
        return self._group.read_variable(self._holder, var._var_id)

    def _assign_variable(self, var: Any, op: str, value: Any) -> Any:
        if _context.get_replica_context() is not None and not _context.is_default(_context.get_strategy()):
            raise RuntimeError("a distributed variable was assigned in the notebook inside a replica context")
        if isinstance(value, PerReplica) and self.num_replicas_in_sync > 1:
            parts = [np.asarray(c) for c in self._select_values(value)]
        else:
            if isinstance(value, DistributedValues):
                value = value.values[0]
            parts = [np.asarray(value) if isinstance(value, (Variable, ArrayValue)) else value]
        # Every component is checked (the errors TF gives); the one variable takes the first.
        checked = [convert_for_variable(p, var.dtype, var.shape, var._name) for p in parts]
        h = self._holder
        self._system(
            rv.assign_central_variable,
            per_rank=[(var._var_id, op, checked[0] if r == h else None) for r in range(self.num_replicas_in_sync)],
        )
        return None

    def _assign_copy(self, var: Any, rank: int, op: str, value: np.ndarray) -> None:
        self._assign_variable(var, op, value)  # the one copy is the variable

    def _update(
        self, var: Any, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any], group: bool
    ) -> Any:
        if not self.extended.variable_created_in_scope(var):
            raise ValueError(f"update() requires a variable created in this strategy's scope, but got {var!r}")
        h = self._holder
        v, a, k = self._select(h, (var, args, kwargs))
        skip: tuple[Any, ...] = (None, None, (), {})
        per_rank: list[tuple[tuple[Any, ...], dict[str, Any]]] = [
            ((fn, v, a, k) if r == h else skip, {}) for r in range(self.num_replicas_in_sync)
        ]
        results = self._group.execute(rv.update_central_variable, per_rank, system=True, what=f"update of {var._name}")
        # TF returns the AggregatingVariable's inner variable (an assign's result, or ``fn``'s own
        # argument) rather than the strategy's variable: here, its one component.
        out = _nest.map_structure(lambda x: var._values[0] if x is var else x, self._decode(h, results[h]))
        # One copy, one result: group=False gives each leaf of fn's result as a 1-tuple (TF's local results).
        return out if group else _nest.pack_sequence_as(out, [(x,) for x in _nest.flatten(out)])

    def _decode(self, rank: int, result: Any) -> Any:
        return _nest.map_structure(lambda m: self._decode_leaf(rank, m), result)

    def _restore_replicas(self, ranks: list[int]) -> None:
        """After a worker restart: the replaced replicas learn the variables again (no values)."""
        self._lease.addresses = list(self._group.addresses)
        if self._holder in ranks:
            raise WorkerLostError(
                f"the worker holding this CentralStorageStrategy's variables (replica {self._holder}, parameter "
                f"device {self._parameter_device}) was lost, and the variables lived only there: create a new "
                "strategy and restore them from a checkpoint"
            )
        names = []
        for var_id, meta in list(self._var_metas.items()):
            if self._variable_by_id(var_id) is None:
                continue
            for r in ranks:
                self._group.restore_variable(r, var_id, meta, None)
            names.append(meta["name"])
        warnings.warn(
            f"replica(s) {ranks} of {self!r} were restarted on new workers; the {len(names)} variable(s) are intact "
            f"on replica {self._holder}. Values the lost replicas held (run results, dataset iterators) are gone.",
            UserWarning,
            stacklevel=4,
        )
