"""All case definitions; each module below calls ``record.case`` for its cases."""
import cases_run  # noqa: F401
import cases_replica  # noqa: F401
import cases_vars  # noqa: F401
import cases_extended  # noqa: F401
import cases_data  # noqa: F401
import cases_misc  # noqa: F401
