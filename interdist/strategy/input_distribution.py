"""``Strategy``'s input distribution: datasets and values given to the replicas, one part each.

``experimental_distribute_dataset`` and ``distribute_datasets_from_function`` wrap the datasets of
``interdist.input``; ``experimental_distribute_values_from_function`` makes one value per replica in
the notebook. A mixin of ``Strategy`` (base.py): the public input methods in one place, apart from
the variables and the reductions.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

from interdist import _context, _nest
from interdist import device as device_lib
from interdist.input.dataset import Dataset
from interdist.input.distributed_dataset import DistributedDataset, DistributedDatasetsFromFunction
from interdist.replica import programs
from interdist.strategy.dispatch import ReplicaDispatch
from interdist.values.distributed import PerReplica, regroup
from interdist.values.tensor import Tensor


class InputMixin(ReplicaDispatch):
    """The input of the replicas: distributed datasets and per-replica values made from a function."""

    def experimental_distribute_values_from_function(self, value_fn: Callable[..., Any]) -> Any:
        """A ``PerReplica`` whose component ``i`` is ``value_fn(ValueContext(i, n))``, made on replica ``i``.

        A nest (dict, tuple, list) gives that nest of ``PerReplica`` values, as TF's ``regroup`` (replicas
        whose structures differ: ``AssertionError``, as TF).
        """
        if not callable(value_fn):
            raise TypeError(f"value_fn must be callable, but got {type(value_fn).__name__}")
        # Called in the notebook, once per replica, as TF does; each value travels to its
        # replica with the next program that uses it.
        values = []
        for r in range(self.num_replicas_in_sync):
            with _context.enter(self, None):
                v = value_fn(programs.ValueContext(r, self.num_replicas_in_sync))
            # TF leaves value_fn's results on the host's CPU:0 until a run uses them.
            values.append(
                _nest.map_structure(
                    lambda x: Tensor(x, device_lib.host_device()) if isinstance(x, (np.ndarray, np.generic)) else x,
                    _nest.map_structure(programs.convert_value, v),
                )
            )
        return regroup(values, lambda vs: PerReplica(vs, self))

    def experimental_distribute_dataset(self, dataset: Any, options: Any = None) -> Any:
        """Split each global batch of ``dataset`` into per-replica batches (see ``interdist.input``)."""

        return DistributedDataset(self, dataset, options)

    def distribute_datasets_from_function(self, dataset_fn: Callable[..., Any], options: Any = None) -> Any:
        """Call ``dataset_fn(InputContext)`` once per input pipeline, here, as TF does (once with
        ``InputContext(1, 0, N)``; N times under ``PER_REPLICA``); the workers then read the data
        themselves and the replicas dequeue consecutive batches."""

        return DistributedDatasetsFromFunction(self, dataset_fn, options)

    def experimental_distribute_datasets_from_function(
        self, dataset_fn: Callable[..., Any], options: Any = None
    ) -> Any:
        return self.distribute_datasets_from_function(dataset_fn, options)

    def experimental_make_numpy_dataset(self, numpy_input: Any) -> Any:
        """A ``Dataset`` of the slices of ``numpy_input`` (deprecated, as in TF)."""
        warnings.warn(
            "experimental_make_numpy_dataset is deprecated: use interdist.data.Dataset.from_tensor_slices instead",
            DeprecationWarning,
            stacklevel=2,
        )

        return Dataset.from_tensor_slices(numpy_input)
