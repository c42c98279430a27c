"""The ``tf.distribute`` surface: one module per strategy, on top of the notebook's side.

``base.py`` (``Strategy``) and ``extended.py`` (``StrategyExtended``) hold what every strategy
shares; ``Strategy`` inherits its parts from ``dispatch.py``, ``variables.py``, ``cross_replica.py``
and ``input_distribution.py``. ``default.py``, ``mirrored.py``, ``one_device.py``,
``central_storage.py``, ``multi_worker.py`` and ``parameter_server.py`` (with ``coordinator.py``,
``coordinator_values.py`` and ``coordinator_datasets.py``) are TF's strategies.
"""
