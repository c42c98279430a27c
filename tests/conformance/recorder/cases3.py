"""Round-3 case definitions (recorded with ``record.py --round3`` into tf_cases_3.json)."""
import cases3_types  # noqa: F401
import cases3_reduce  # noqa: F401
import cases3_ext  # noqa: F401
import cases3_data  # noqa: F401
