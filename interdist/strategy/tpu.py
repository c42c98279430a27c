"""``TPUStrategy``: in the namespace as in TF, refused on construction (interdist has no TPUs)."""

from __future__ import annotations

from typing import Any

from interdist.strategy.base import Strategy


class TPUStrategy(Strategy):
    """``tf.distribute.TPUStrategy``: not supported; constructing one raises ``NotImplementedError``.

    The name exists so that code written for TF imports, and ``isinstance(s, TPUStrategy)`` checks
    work (they are False for every strategy interdist makes).

    Examples
    --------
    >>> import interdist as idist
    >>> try:
    ...     idist.TPUStrategy()
    ... except NotImplementedError as e:
    ...     print(str(e).split(":")[0])
    interdist has no TPU support
    >>> isinstance(idist.get_strategy(), idist.TPUStrategy)
    False
    """

    _kind = "tpu"

    def __init__(
        self,
        tpu_cluster_resolver: Any = None,
        experimental_device_assignment: Any = None,
        experimental_spmd_xla_partitioning: bool = False,
    ) -> None:
        raise NotImplementedError(
            "interdist has no TPU support: its replicas are CPU or GPU Dask worker processes. "
            "Use MirroredStrategy (one machine) or MultiWorkerMirroredStrategy (several) instead"
        )
