"""Round-2 case definitions (recorded with ``record.py --round2`` into tf_cases_2.json)."""
import cases2_opt  # noqa: F401
import cases2_vars  # noqa: F401
import cases2_ext  # noqa: F401
import cases2_data  # noqa: F401
import cases2_misc  # noqa: F401
