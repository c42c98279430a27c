"""Round-6 case definitions (recorded with ``record.py --round 6`` into tf_cases_6.json):
input (get_next_as_optional, exhausted iterators, distribute_datasets_from_function call counts,
CentralStorageStrategy defaults) and parameter servers (sharded variables)."""
import cases6_input  # noqa: F401
import cases6_ps  # noqa: F401
