"""Use after close, CentralStorage's own paths (a module of its own: test_use_after_close.py keeps a closed
strategy's scope entered for its whole module)."""

from __future__ import annotations

import numpy as np
import pytest

import interdist as idist

CLOSED = r"^the strategy was closed \(strategy\.close\(\)\); create a new one"


def test_a_closed_central_storage_strategy_says_so_too() -> None:
    """CentralStorage reads one copy through the group directly, and updates through the dispatch path: the
    same words as every other strategy (they said KeyError, and 'this strategy was closed')."""
    s = idist.experimental.CentralStorageStrategy(["CPU:0", "CPU:1"])
    with s.scope():
        v = idist.Variable(np.float32(1.0))
    s.close()
    for use in (lambda: np.asarray(v), lambda: v.assign(np.float32(2.0)), lambda: s.run(lambda: 1)):
        with pytest.raises(RuntimeError, match=CLOSED):
            use()
