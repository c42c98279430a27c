"""The replica engine: runs one replica's programs for its step, inside a replica context (SPMD).

Runs on a Dask worker for every strategy, and in the notebook for the default strategy; it knows
nothing of Dask: whoever builds a ``Replica`` hands it a collectives transport and an ``emit``
for events (``worker/plugin.py`` on a worker). ``replica.py`` holds the replica and its store,
``context.py`` the ``ReplicaContext``, ``view.py`` the strategy that replica code sees (``extended_view.py``
its ``extended``), ``variable.py`` the per-replica variable copies (``component.py`` their components),
``central.py`` and ``central_variable.py``
CentralStorageStrategy's state, messages and variable, ``programs.py``/``fused.py`` what the
notebook asks a replica to do, ``user_code.py`` where the user's replica function is called (and an
interrupt may land), and ``ps_*.py`` the ParameterServerStrategy step on a worker.
"""
