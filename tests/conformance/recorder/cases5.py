"""Round-5 case definitions (recorded with ``record.py --round 5`` into tf_cases_5.json): components of
distributed variables are variables, ``extended.update``'s results, and the return types of
``reduce_to``/``batch_reduce_to``/``broadcast_to``."""
import cases5_ext  # noqa: F401
import cases5_vars  # noqa: F401
