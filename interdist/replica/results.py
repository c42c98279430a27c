"""A replica function's arguments held on the replica, and what its result becomes in the reply.

Values a replica holds (an earlier ``run``'s results, a distributed dataset's batches) are passed to a user's
function as copies (``held_copy``): a function that updates its argument in place (``x += 1``) leaves the held
value as it was, as a TF tensor is never changed by the step that reads it; the copy is what a later failure's
retry and the notebook still read.

``encode``: each leaf of the result is kept in the replica's store and described to the notebook (``ValueMeta``,
small values inline), or named as one of the program's arguments (``ArgRef``: the notebook hands back the object
it passed, as TF returns an input returned unchanged) when it is one and still holds what it held.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from interdist import _gpu, _nest
from interdist._convert import content_digest, same_bits
from interdist.config import settings
from interdist.protocol import ArgRef, StoreRef, ValueMeta, VarRef
from interdist.replica.variable import ReplicaVariable

if TYPE_CHECKING:
    from interdist.replica.replica import Replica


def held_copy(replica: Replica, held: dict[int, Any], x: Any) -> Any:
    """``x`` for a user's function: a held array copied (the copy's id -> the held array in ``held``)."""
    if not isinstance(x, StoreRef):
        return x
    value = replica._deref(x)
    if isinstance(value, np.ndarray) or _gpu.is_cupy(value):
        copy = value.copy()
        held[id(copy)] = value
        return copy
    return value


def _may_change(x: Any) -> bool:
    """Whether a function could have changed ``x`` in place (a writable array)."""
    return (isinstance(x, np.ndarray) and x.flags.writeable) or _gpu.is_cupy(x)


def encode(replica: Replica, result: Any, step: int, arg_ids: dict[int, int], held: dict[int, Any]) -> Any:
    """Keep the leaves of ``result`` in the store; the reply's description of them. ``arg_ids``: id -> index of
    the program's arguments (flattened); ``held``: the copies ``held_copy`` made."""
    counter = iter(range(1 << 30))
    shared = replica.shared_results

    def kept(x: Any) -> ValueMeta:
        key = f"{step}.{next(counter)}"
        replica.store[key] = x
        if isinstance(x, (np.ndarray, np.generic)):
            a = np.asarray(x)
            small = a.nbytes <= settings.inline_bytes
            return ValueMeta(key, a.shape, a.dtype.str, x if small else None, small, shared=id(x) in shared)
        if _gpu.is_cupy(x):  # kept on the GPU; the notebook gets NumPy (small values inline)
            small = x.nbytes <= settings.inline_bytes
            value = x.get() if small else None
            return ValueMeta(key, tuple(x.shape), x.dtype.str, value, small, shared=id(x) in shared)
        # Python values travel as they are (TF leaves them unconverted); one merge_fn returned
        # (a float, a string) is one object in TF, handed back as such (not a PerReplica)
        return ValueMeta(key, None, None, x, True, shared=id(x) in shared)

    def leaf(x: Any) -> Any:
        if x is None:
            return None
        if isinstance(x, ReplicaVariable):
            return VarRef(x.var_id)
        index = arg_ids.get(id(x)) if arg_ids else None
        if index is None:
            return kept(x)
        source = held.get(id(x))
        if source is not None:  # the copy of a held value: the held one's handle if the copy is unchanged
            return ArgRef(index) if same_bits(x, source) else kept(x)
        if not _may_change(x):
            return ArgRef(index)
        # An array the notebook sent: only it can tell whether this is still what it sent
        return ArgRef(index, content_digest(x), kept(x))

    return _nest.map_structure(leaf, result)
