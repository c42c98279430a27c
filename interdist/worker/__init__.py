"""The Dask binding on a worker: one ``WorkerPlugin`` owns all of the worker's interdist state.

``plugin.py`` (``ReplicaRuntime``, found as ``worker.plugins[PLUGIN_NAME]``) holds the worker's
replicas, registers the handlers the notebook calls and builds each replica's transport;
``thread.py`` is the replica thread programs run in (an embedded worker's main thread, where the
notebook's interrupt reaches them); ``process.py`` is an embedded worker's process;
``control_server.py`` the same-host Unix socket that programs take instead of Dask comms;
``ps_store.py`` a parameter server's shards.
"""
