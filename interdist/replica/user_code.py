"""Where a replica calls its user's function: the one place an interrupt from the notebook may land.

The notebook's Kernel > Interrupt reaches a replica as a ``KeyboardInterrupt`` raised in the thread
that runs its program (``worker/thread.py``), but only while that thread runs the user's own code:
below :func:`call_user`, with no interdist frame in between. Inside interdist's code (a collective
half sent, a variable update, ``merge_fn``, the bookkeeping around a program) it waits, and the
step's abort releases the collectives instead, so an interrupt never leaves a transport, a
variable or a reply half done.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from types import FrameType
from typing import Any

_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


def call_user(fn: Callable[..., Any], args: Any, kwargs: Any) -> Any:
    """``fn(*args, **kwargs)``: a replica function (or a fused loop's step function) of the user."""
    return fn(*args, **kwargs)


def in_user_code(frame: FrameType | None) -> bool:
    """Whether ``frame`` (a thread's innermost frame) is the user's code called by :func:`call_user`."""
    while frame is not None:
        code = frame.f_code
        if code is call_user.__code__:
            return True
        if code.co_filename.startswith(_PACKAGE_DIR):
            return False  # interdist's own code (called from the user's, or not in a replica function at all)
        frame = frame.f_back
    return False
