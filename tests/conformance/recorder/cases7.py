"""Round-7 case definitions (recorded with ``record.py --round 7`` into tf_cases_7.json): replicas
passing different dtypes/shapes/ops to one collective, variables used across strategies, plain
variables in ``run``."""
import cases7_mixed  # noqa: F401
import cases7_xstrat  # noqa: F401
