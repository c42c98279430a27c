"""``tf.math`` names the tutorials use that NumPy spells differently (the rest: use NumPy, e.g.
``tf.reduce_sum`` -> ``np.sum``, ``tf.argmax`` -> ``np.argmax``; docs/porting.md).

Examples
--------
>>> import numpy as np, interdist as idist
>>> idist.math.add_n([np.float32(1.0), np.float32(2.0)])
np.float32(3.0)
"""

from interdist.nn import add_n

__all__ = ["add_n"]
