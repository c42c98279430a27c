"""Whether this process can run compiled kernels: numba, the optional ``fast`` extra.

Only the check lives here; the kernels are modules of their own, imported the first time one runs
(``collectives/_ring_kernels.py``, ``replica/_update_kernels.py``), so ``import interdist`` never imports
numba. numba compiles a kernel the first time a process calls it and keeps the machine code in its cache
(``cache=True``: beside the module, or in the user's cache where that is read-only), which later processes
load in milliseconds.
"""

from __future__ import annotations

import functools


@functools.cache
def unavailable_reason() -> str:
    """Why compiled kernels cannot run here ("" when they can)."""
    try:
        import numba  # noqa: F401
    except ImportError:
        return "numba is not installed (pip install 'interdist[fast]')"
    except Exception as e:  # noqa: BLE001 - a numba that does not load (e.g. too old for this NumPy)
        return f"numba does not load here ({type(e).__name__}: {e})"
    return ""
