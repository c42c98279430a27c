"""Values the notebook holds: ``PerReplica``/``Mirrored``, handles to results, and variables.

``distributed.py`` (``DistributedValues``), ``tensor.py`` (handles to values that stay on the
workers), ``variables.py`` (``Variable`` and its TF enums), ``distributed_variable.py``
(``MirroredVariable``, ``SyncOnReadVariable``) and ``ps_variable.py`` (parameter-server variables).
"""
