"""``InputContext``, ``InputOptions`` and ``InputReplicationMode``.

These are the small value types ``tf.distribute`` hands to and takes from
input functions. They carry no engine state, so they pickle and can travel to
Dask workers with the dataset function.
"""

from __future__ import annotations

import enum
import operator
from dataclasses import dataclass

from interdist.input.options import AutoShardPolicy

__all__ = [
    "AutoShardPolicy",
    "InputContext",
    "InputOptions",
    "InputReplicationMode",
    "check_options_for_datasets_from_function",
    "check_options_for_distribute_dataset",
]


class InputContext:
    """What an input function needs to know to batch and shard its dataset.

    ``strategy.distribute_datasets_from_function`` calls the function once
    per input pipeline (one per worker) with one of these.

    Parameters
    ----------
    num_input_pipelines : int
        Total number of input pipelines (workers calling the function).
    input_pipeline_id : int
        Which pipeline this call builds, in ``[0, num_input_pipelines)``.
    num_replicas_in_sync : int
        Number of replicas that consume one global batch per step.

    Examples
    --------
    >>> ctx = InputContext(num_replicas_in_sync=2)
    >>> ctx.get_per_replica_batch_size(4)
    2
    """

    def __init__(
        self,
        num_input_pipelines: int = 1,
        input_pipeline_id: int = 0,
        num_replicas_in_sync: int = 1,
    ) -> None:
        self._num_input_pipelines = operator.index(num_input_pipelines)
        self._input_pipeline_id = operator.index(input_pipeline_id)
        self._num_replicas_in_sync = operator.index(num_replicas_in_sync)

    @property
    def num_input_pipelines(self) -> int:
        """The total number of input pipelines (workers)."""
        return self._num_input_pipelines

    @property
    def input_pipeline_id(self) -> int:
        """The id of the pipeline being built, in ``[0, num_input_pipelines)``."""
        return self._input_pipeline_id

    @property
    def num_replicas_in_sync(self) -> int:
        """The number of replicas that take part in each step."""
        return self._num_replicas_in_sync

    def get_per_replica_batch_size(self, global_batch_size: int) -> int:
        """``global_batch_size // num_replicas_in_sync``.

        Raises
        ------
        ValueError
            If the global batch does not divide evenly among the replicas.
        """
        if global_batch_size % self._num_replicas_in_sync != 0:
            # TF's message, trailing space included.
            raise ValueError(
                f"The `global_batch_size` {global_batch_size!r} is not divisible by "
                f"`num_replicas_in_sync` {self._num_replicas_in_sync!r} "
            )
        return global_batch_size // self._num_replicas_in_sync

    def __repr__(self) -> str:
        # TF defines this text as __str__; here it serves both.
        return (
            f"tf.distribute.InputContext(input pipeline id {self._input_pipeline_id}, "
            f"total: {self._num_input_pipelines})"
        )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, InputContext):
            return NotImplemented
        return (
            self._num_input_pipelines,
            self._input_pipeline_id,
            self._num_replicas_in_sync,
        ) == (other._num_input_pipelines, other._input_pipeline_id, other._num_replicas_in_sync)

    def __hash__(self) -> int:
        return hash((self._num_input_pipelines, self._input_pipeline_id, self._num_replicas_in_sync))


class InputReplicationMode(enum.Enum):
    """How often an input function is called (``tf.distribute.InputReplicationMode``).

    * ``PER_WORKER``: once per worker; the worker's replicas share the dataset.
    * ``PER_REPLICA``: once per replica, each replica with its own dataset.

    Examples
    --------
    >>> import interdist as idist, numpy as np
    >>> opts = idist.InputOptions(
    ...     experimental_replication_mode=idist.InputReplicationMode.PER_REPLICA, experimental_fetch_to_device=False
    ... )
    >>> with idist.MirroredStrategy(["CPU:0", "CPU:1"]) as s:
    ...     def dataset_fn(ctx):  # called once per replica: ctx.input_pipeline_id is the replica's
    ...         return idist.data.Dataset.from_tensors(np.int64(ctx.input_pipeline_id))
    ...     dist = s.distribute_datasets_from_function(dataset_fn, options=opts)
    ...     [[int(x) for x in s.experimental_local_results(batch)] for batch in dist]
    [[0, 1]]
    """

    PER_WORKER = "PER_WORKER"
    PER_REPLICA = "PER_REPLICA"


@dataclass(frozen=True)
class InputOptions:
    """Options for ``experimental_distribute_dataset(s_from_function)``.

    Same fields and defaults as ``tf.distribute.InputOptions`` in TF 2.21.
    As there, ``experimental_fetch_to_device=None`` is stored as ``True``.
    Consistency is checked when the options are used, not here (TF accepts
    any combination at construction): see
    :func:`check_options_for_datasets_from_function`.

    Attributes
    ----------
    experimental_fetch_to_device : bool
        Prefetch elements to the replica devices (``True``) or keep them on
        the host (``False``).
    experimental_replication_mode : InputReplicationMode
        ``PER_WORKER`` (default) or ``PER_REPLICA``.
    experimental_place_dataset_on_device : bool
        Build the dataset on the device; needs ``PER_REPLICA``.
    experimental_per_replica_buffer_size : int
        Prefetch depth per replica (0 disables prefetching).

    Examples
    --------
    >>> import interdist as idist
    >>> opts = idist.InputOptions(experimental_fetch_to_device=False)
    >>> opts.experimental_fetch_to_device, opts.experimental_replication_mode
    (False, <InputReplicationMode.PER_WORKER: 'PER_WORKER'>)
    """

    experimental_fetch_to_device: bool | None = None
    experimental_replication_mode: InputReplicationMode = InputReplicationMode.PER_WORKER
    experimental_place_dataset_on_device: bool = False
    experimental_per_replica_buffer_size: int = 1

    def __post_init__(self) -> None:
        if self.experimental_fetch_to_device is None:
            object.__setattr__(self, "experimental_fetch_to_device", True)


def check_options_for_distribute_dataset(options: InputOptions | None) -> None:
    """Validate options given to ``experimental_distribute_dataset``.

    Raises
    ------
    NotImplementedError
        For ``PER_REPLICA``, which TF only supports with
        ``distribute_datasets_from_function``.
    """
    if options is not None and (options.experimental_replication_mode == InputReplicationMode.PER_REPLICA):
        raise NotImplementedError(
            "InputReplicationMode.PER_REPLICA is only supported in `distribute_datasets_from_function`."
        )


def check_options_for_datasets_from_function(options: InputOptions | None, per_replica_supported: bool = True) -> None:
    """Validate options given to ``distribute_datasets_from_function``.

    Parameters
    ----------
    options : InputOptions or None
        The options to check.
    per_replica_supported : bool
        False for strategies other than ``MirroredStrategy``, which reject
        ``PER_REPLICA`` in TF.

    Raises
    ------
    NotImplementedError
        ``PER_REPLICA`` on a strategy that does not support it.
    ValueError
        ``experimental_place_dataset_on_device`` without ``PER_REPLICA``, or
        together with ``experimental_fetch_to_device`` under ``PER_REPLICA``
        (the checks TF makes in ``input_util``).
    """
    if options is None:
        return
    per_replica = options.experimental_replication_mode == InputReplicationMode.PER_REPLICA
    if per_replica and not per_replica_supported:
        raise NotImplementedError(
            "InputReplicationMode.PER_REPLICA is only supported in "
            "`experimental_distribute_datasets_from_function` of tf.distribute.MirroredStrategy"
        )
    if not per_replica and options.experimental_place_dataset_on_device:
        raise ValueError(
            "When `experimental_place_dataset_on_device` is set for dataset placement, "
            "you must also specify `PER_REPLICA` for the replication mode"
        )
    if per_replica and options.experimental_fetch_to_device and options.experimental_place_dataset_on_device:
        raise ValueError(
            "`experimental_place_dataset_on_device` can not be set to True when "
            "experimental_fetch_to_device is True and replication mode is set to `PER_REPLICA`"
        )
