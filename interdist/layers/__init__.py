"""The Keras layers TF's distribution tutorials use, over interdist variables and NumPy arrays.

``Dense``, ``Conv2D``, ``MaxPooling2D``, ``Flatten``, ``Dropout`` and ``Sequential`` hold their weights in
``idist.Variable``s: made inside ``strategy.scope()`` they are mirrored (or central, or sharded on the
parameter servers) as any variable, and a replica function calls the model on its batch. The forward
pass is plain NumPy, so a ``GradientTape`` records it (``interdist.autodiff``).

A layer is built (its variables made) when it learns its input shape: at once for a ``Sequential``
that starts with ``Input(shape=...)``, at ``model.build(input_shape)``, or at its first call. Build it
in the notebook, inside the strategy's scope: a layer first called inside ``strategy.run`` would make
its variables on one replica only, so that raises a ``RuntimeError`` saying so.

Weights are in Keras' order (``get_weights``/``set_weights``), and their names are Keras 3's paths
(``sequential/dense/kernel``), so a TF model's weights load as they are.

Examples
--------
>>> import interdist as idist, numpy as np
>>> with idist.MirroredStrategy(["CPU:0", "CPU:1"]) as s:
...     with s.scope():  # built here: its variables are mirrored
...         model = idist.layers.Sequential([idist.layers.Input(shape=(3,)), idist.layers.Dense(1, "relu")])
...     out = s.run(model, args=(np.ones((2, 3), np.float32),))
...     type(model.weights[0]).__name__, [np.shape(x) for x in s.experimental_local_results(out)]
('MirroredVariable', [(2, 1), (2, 1)])
"""

from __future__ import annotations

from interdist.layers._base import Input, Layer, clear_session
from interdist.layers._core import Conv2D, Dense, Dropout, Flatten, MaxPooling2D
from interdist.layers._sequential import Sequential

__all__ = ["Conv2D", "Dense", "Dropout", "Flatten", "Input", "Layer", "MaxPooling2D", "Sequential", "clear_session"]
