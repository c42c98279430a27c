"""Collectives between the replicas of a group: transports (backends), the algorithms on top of them.

``base.py`` holds the ``Transport`` (which is also the backend protocol) and the packet format,
``mailbox.py`` where a rank's incoming messages wait (``mailbox_channels.py`` reads its channels and
lanes), ``algorithms.py`` the ``Collectives`` a replica uses (all_reduce algorithms, exchange, broadcast;
``two_round.py`` the reduce-broadcast and reduce-scatter ones, ``small.py`` the small batches),
``cross_device_ops.py`` TF's ``CrossDeviceOps``
(which all_reduce algorithm a strategy's replicas run) and ``registry.py`` the backends by name
(``config.settings.collectives_backend``), one module each.

The built-in backends register here, as distributed registers its comm transports
(``distributed.comm._register_transports``): by ``"module:Class"`` name, imported only
when a backend is asked for, so that importing the engine never imports Dask or CuPy.

- ``local``: ranks are threads of one process (the reference; the default strategy).
- ``shm``: large packets through POSIX shared memory, around an inner transport.
- ``dask``: worker to worker over Dask comms, same-host packets over Unix control
  sockets and shared memory (what workers use by default).
- ``cuda_ipc``, ``nccl``, ``gpu``: device-resident all-reduces of CuPy arrays between GPU replicas
  (CUDA IPC between processes that share a GPU, NCCL between GPUs, ``gpu`` choosing between them and
  host staging by the cost model), around ``dask``; registered in ``registry.DEVICE_BACKENDS``.
  Not yet run on a GPU: see docs/gpu.md.
"""

from __future__ import annotations

from interdist.collectives.registry import register_backend


def _register_backends() -> None:
    register_backend("local", "interdist.collectives.local:LocalTransport")
    register_backend("shm", "interdist.collectives.shared_memory:SharedMemoryTransport")
    register_backend("dask", "interdist.collectives.dask_comms:DaskTransport")
    register_backend("nccl", "interdist.collectives.nccl:NcclTransport")


_register_backends()
