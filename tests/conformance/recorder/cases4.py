"""Round-4 case definitions (recorded with ``record.py --round 4`` into tf_cases_4.json)."""
import cases4_who  # noqa: F401
import cases4_reduce  # noqa: F401
import cases4_struct  # noqa: F401
