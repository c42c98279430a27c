"""The replica engine: runs one replica's programs for its step, inside a replica context (SPMD).

Runs on a Dask worker for every strategy, and in the notebook for the default strategy; it knows
nothing of Dask: whoever builds a ``Replica`` hands it a collectives transport and an ``emit``
for events (``worker/plugin.py`` on a worker). ``replica.py`` holds the replica and its store,
``view.py`` the strategy and ``ReplicaContext`` that replica code sees, ``variable.py`` and
``central.py`` the per-replica variable copies, ``programs.py``/``fused.py`` what the notebook
asks a replica to do, and ``ps_*.py`` the ParameterServerStrategy step on a worker.
"""
