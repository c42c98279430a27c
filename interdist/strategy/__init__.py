"""The ``tf.distribute`` surface: one module per strategy, on top of the notebook's side.

``base.py`` (``Strategy``) and ``extended.py`` (``StrategyExtended``) hold what every strategy
shares; ``default.py``, ``mirrored.py``, ``one_device.py``, ``central_storage.py``,
``multi_worker.py`` and ``parameter_server.py`` (with ``coordinator.py``) are TF's strategies.
"""
