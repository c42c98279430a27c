"""Round-8 case definitions (recorded with ``record.py --round 8`` into tf_cases_8.json): variables as replica
code sees them (captured and created inside ``run``), ``strategy.extended`` inside ``merge_fn``, Python numbers
from ``experimental_distribute_values_from_function``, ParameterServerStrategy ``args`` kinds."""
import cases8_ext  # noqa: F401
import cases8_misc  # noqa: F401
import cases8_vars  # noqa: F401
