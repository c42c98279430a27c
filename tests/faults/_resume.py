"""Resume a frozen replica as its error tells a user to: SIGCONT to the process the error names."""

from __future__ import annotations

import os
import re
import signal


def resume_frozen(error: BaseException) -> None:
    """SIGCONT to the process a ``ReplicaFrozenError`` names ("... worker process (pid 1234) ...")."""
    match = re.search(r"pid (\d+)", str(error))
    assert match, f"the error names no process: {error}"
    os.kill(int(match.group(1)), signal.SIGCONT)
