"""``tf.train``'s checkpoint API: ``idist.train.Checkpoint``, ``CheckpointManager`` and ``latest_checkpoint``.

>>> import interdist as idist, numpy as np, tempfile
>>> from interdist import train
>>> directory = tempfile.mkdtemp()
>>> v = idist.Variable(np.float32(1.0))
>>> ckpt = train.Checkpoint(v=v)
>>> first = ckpt.save(directory + "/model")
>>> second = ckpt.save(directory + "/model")
>>> second.rsplit("/", 1)[1], train.latest_checkpoint(directory) == second
('model-2', True)
>>> train.latest_checkpoint(tempfile.mkdtemp()) is None
True
"""

from __future__ import annotations

import os

from interdist.checkpoint import STATE_FILE, Checkpoint, CheckpointManager
from interdist.checkpoint import latest_checkpoint as _latest_checkpoint

__all__ = ["Checkpoint", "CheckpointManager", "latest_checkpoint"]


def latest_checkpoint(checkpoint_dir: str | os.PathLike[str], latest_filename: str | None = None) -> str | None:
    """The path of the latest checkpoint in ``checkpoint_dir`` (what ``Checkpoint.restore`` takes), or None,
    as ``tf.train.latest_checkpoint``.

    The latest is the last one ``Checkpoint.save`` or ``CheckpointManager.save`` wrote there; None
    when there is none (or the directory does not exist, or that checkpoint was deleted since).
    ``latest_filename`` names the file that records it: interdist's is always ``checkpoint.json``
    (TF's ``checkpoint``), so any other name finds nothing, as TF with a state file that is not there.

    Examples
    --------
    >>> import interdist as idist, numpy as np, tempfile
    >>> with tempfile.TemporaryDirectory() as directory:
    ...     before = idist.train.latest_checkpoint(directory)
    ...     path = idist.train.Checkpoint(v=idist.Variable(np.float32(1.0))).save(directory + "/ckpt")
    ...     before, idist.train.latest_checkpoint(directory) == path, path.endswith("ckpt-1")
    (None, True, True)
    """
    if latest_filename is not None and latest_filename != STATE_FILE:
        return None
    return _latest_checkpoint(checkpoint_dir)
