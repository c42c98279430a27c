"""``Sequential``: layers called one after the other."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from interdist.layers._base import Input, Layer, _unique


class Sequential(Layer):
    """Layers called one after the other (``keras.Sequential``).

    Examples
    --------
    >>> import interdist as idist, numpy as np
    >>> model = idist.layers.Sequential(
    ...     [idist.layers.Input(shape=(3,)), idist.layers.Dense(4, activation="relu"), idist.layers.Dense(1)]
    ... )
    >>> model.count_params(), model(np.ones((2, 3), np.float32)).shape
    (21, (2, 1))
    """

    def __init__(self, layers: Iterable[Any] | None = None, name: str | None = None) -> None:
        super().__init__(name or _unique("sequential"))
        self.layers: list[Layer] = []
        self._input_shape: tuple[Any, ...] | None = None
        for layer in layers or ():
            self.add(layer)

    def add(self, layer: Any) -> None:
        if isinstance(layer, Input):
            if self.layers:
                raise ValueError("An Input must be the first layer of a Sequential model")
            self._input_shape = layer.shape
            return
        if not isinstance(layer, Layer):
            raise TypeError(f"Sequential takes idist.layers.Layer instances, got {type(layer).__name__}")
        if not self.layers and self._input_shape is None and layer._batch_input_shape is not None:
            self._input_shape = layer._batch_input_shape
        if layer.built:
            raise ValueError(f"Layer {layer.name!r} is already built: a Sequential builds its layers itself")
        self.layers.append(layer)
        if self._input_shape is not None:
            self._build_checked(self._input_shape)

    def _sublayers(self) -> list[Layer]:
        return self.layers

    def build(self, input_shape: Any) -> None:
        shape = tuple(input_shape)
        for layer in self.layers:
            if not layer.built:
                layer._path = f"{self.name}/{layer.name}"
                layer.build(shape)
                layer.built = True
            shape = layer.compute_output_shape(shape)
        self.built = True
        self._apply_pending()

    def compute_output_shape(self, input_shape: Any) -> tuple[Any, ...]:
        shape = tuple(input_shape)
        for layer in self.layers:
            shape = layer.compute_output_shape(shape)
        return shape

    def __call__(self, inputs: Any, training: bool | None = None) -> Any:
        if not self.built or not all(layer.built for layer in self.layers):
            self._build_checked(np.shape(inputs))
        x = inputs
        for layer in self.layers:
            x = layer(x, training=training)
        return x

    def summary(self) -> str:
        """One line per layer: name, type, parameters (returned and printed)."""
        lines = [f'Model: "{self.name}"']
        lines += [f"  {layer.name:<20} {type(layer).__name__:<14} {layer.count_params():>10,}" for layer in self.layers]
        lines.append(f"  Total params: {self.count_params():,}")
        text = "\n".join(lines)
        print(text)
        return text
