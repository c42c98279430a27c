"""``tf.random.set_seed`` for interdist's own draws: layer weights from unseeded initializers and Dropout
masks (NumPy's draws, not TF's: a seed makes a run repeat itself, not match TF's numbers).

>>> import interdist as idist, numpy as np
>>> idist.random.set_seed(7); first = idist.layers.Dense(2)(np.ones((1, 3), np.float32))
>>> idist.random.set_seed(7); again = idist.layers.Dense(2)(np.ones((1, 3), np.float32))
>>> bool((first == again).all())
True
"""

from __future__ import annotations

import random as _random

import numpy as np

from interdist import initializers

__all__ = ["set_seed"]


def set_seed(seed: int) -> None:
    """Make the draws that follow repeatable: interdist's initializers and Dropout, Python's ``random`` and
    NumPy's global generator (as ``tf.keras.utils.set_random_seed`` seeds Python, NumPy and TF).

    >>> import interdist as idist
    >>> idist.random.set_seed(1); a = idist.initializers.GlorotUniform()((2, 2))
    >>> idist.random.set_seed(1); b = idist.initializers.GlorotUniform()((2, 2))
    >>> bool((a == b).all())
    True
    """
    initializers.set_global_seed(seed)
    _random.seed(seed)
    np.random.seed(seed)
