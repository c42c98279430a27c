"""``tf.math`` names the tutorials use that NumPy spells differently (the rest: use NumPy, e.g.
``tf.reduce_sum`` -> ``np.sum``, ``tf.argmax`` -> ``np.argmax``; docs/porting.md)."""

from interdist.nn import add_n

__all__ = ["add_n"]
