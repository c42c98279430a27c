"""``tf.experimental.Optional`` of a distributed iterator: the next element, or nothing.

``DistributedIterator.get_next_as_optional()`` returns one: ``has_value()`` is a boolean tensor
(``bool()`` of it works), ``get_value()`` the element (a ``PerReplica`` structure, or the plain
values on one replica) and ``element_spec`` the iterator's. At the end of the data ``has_value()``
is False and ``get_value()`` raises ``ValueError``, where TF raises ``InvalidArgumentError``
("The given optional does not have a value.").
"""

from __future__ import annotations

from typing import Any

import numpy as np

from interdist import device as device_lib
from interdist.values.tensor import Tensor

_NOTHING = object()


class Optional:
    """A value that may be missing: the result of ``get_next_as_optional``."""

    def __init__(self, value: Any, element_spec: Any) -> None:
        self._value = value
        self._element_spec = element_spec

    @staticmethod
    def empty(element_spec: Any) -> Optional:
        """An ``Optional`` without a value."""
        return Optional(_NOTHING, element_spec)

    @property
    def element_spec(self) -> Any:
        """The spec of the value (the distributed iterator's ``element_spec``)."""
        return self._element_spec

    def has_value(self) -> Tensor:
        """A boolean tensor on the host's CPU: True when there is a value."""
        return Tensor(np.bool_(self._value is not _NOTHING), device_lib.host_device())

    def get_value(self) -> Any:
        """The value; ``ValueError`` when there is none (check ``has_value()`` first)."""
        if self._value is _NOTHING:
            raise ValueError(
                "The given optional does not have a value: the iterator is at the end of its data "
                "(check has_value() before get_value())"
            )
        return self._value

    def __repr__(self) -> str:
        return f"<interdist Optional has_value={self._value is not _NOTHING}>"
