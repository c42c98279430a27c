"""``tf.data.Options`` and the auto-sharding policy it carries.

Only the options that matter to distribution are modelled. They behave like
TF's: unknown attributes cannot be set (``AttributeError``), values are type
checked (``TypeError``), and :meth:`Options.merge` lets options that were set
explicitly override, so ``ds.with_options(a).with_options(b)`` sees ``b``
wherever ``b`` says something.
"""

from __future__ import annotations

import copy
import enum
from typing import Any, ClassVar


class AutoShardPolicy(enum.IntEnum):
    """How ``experimental_distribute_dataset`` splits a dataset across workers.

    Same names and values as ``tf.data.experimental.AutoShardPolicy``.

    * ``OFF``: every worker reads the whole dataset.
    * ``AUTO``: ``FILE`` when the dataset reads files (and there are at least
      as many files as workers), ``DATA`` otherwise.
    * ``FILE``: each worker reads a subset of the source files.
    * ``DATA``: every worker runs the whole pipeline and keeps every
      ``num_workers``-th element.
    * ``HINT``: TF replaces ``shard(SHARD_HINT, SHARD_HINT)`` placeholders;
      interdist has no placeholders, so this shards nothing.

    Examples
    --------
    >>> import interdist as idist
    >>> opts = idist.data.Options()
    >>> opts.experimental_distribute.auto_shard_policy = idist.data.experimental.AutoShardPolicy.OFF
    >>> idist.data.Dataset.range(4).with_options(opts).options().experimental_distribute.auto_shard_policy
    <AutoShardPolicy.OFF: -1>
    """

    OFF = -1
    AUTO = 0
    FILE = 1
    DATA = 2
    HINT = 3


class _OptionsBase:
    """Attribute holder with a fixed set of typed fields and explicit-set tracking."""

    # name -> (accepted types, default). A type tuple containing type(None)
    # allows the "unset" value None.
    _fields: ClassVar[dict[str, tuple[tuple[type, ...], Any]]] = {}

    _explicit: set[str]

    def __init__(self) -> None:
        object.__setattr__(self, "_explicit", set())
        for name, (_, default) in self._fields.items():
            object.__setattr__(self, name, copy.deepcopy(default))

    def __setattr__(self, name: str, value: Any) -> None:
        if name not in self._fields:
            raise AttributeError(f"Cannot set the property {name} on {type(self).__name__}.")
        types, _ = self._fields[name]
        # bool is an int subclass; an int must not pass as a bool option.
        bad_bool = bool in types and int not in types and isinstance(value, int)
        if not isinstance(value, types) or (bad_bool and not isinstance(value, bool)):
            expected = " or ".join(repr(t) for t in types)
            raise TypeError(f'Property "{name}" must be of type {expected}, got: {value!r} (type: {type(value)!r})')
        object.__setattr__(self, name, value)
        self._explicit.add(name)

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return all(getattr(self, n) == getattr(other, n) for n in self._fields)

    __hash__ = None  # type: ignore[assignment]  # mutable, like TF's options

    def __repr__(self) -> str:
        body = ", ".join(f"{n}={getattr(self, n)!r}" for n in self._fields)
        return f"{type(self).__name__}({body})"

    def _merged(self, other: _OptionsBase) -> Any:
        """A copy of ``self`` overridden by what ``other`` set explicitly."""
        result = copy.deepcopy(self)
        for name in self._fields:
            mine, theirs = getattr(result, name), getattr(other, name)
            if isinstance(mine, _OptionsBase) and isinstance(theirs, _OptionsBase):
                object.__setattr__(result, name, mine._merged(theirs))
            elif name in other._explicit:
                object.__setattr__(result, name, copy.deepcopy(theirs))
                result._explicit.add(name)
        return result


class DistributeOptions(_OptionsBase):
    """``tf.data.experimental.DistributeOptions``.

    Attributes
    ----------
    auto_shard_policy : AutoShardPolicy
        Default ``AutoShardPolicy.AUTO``.
    num_devices : int or None
        Number of devices attached to this input pipeline (informational).

    Examples
    --------
    >>> import interdist as idist
    >>> opts = idist.data.Options()
    >>> isinstance(opts.experimental_distribute, idist.data.experimental.DistributeOptions)
    True
    >>> opts.experimental_distribute.auto_shard_policy
    <AutoShardPolicy.AUTO: 0>
    """

    _fields: ClassVar[dict[str, tuple[tuple[type, ...], Any]]] = {
        "auto_shard_policy": ((AutoShardPolicy,), AutoShardPolicy.AUTO),
        "num_devices": ((int, type(None)), None),
    }

    auto_shard_policy: AutoShardPolicy
    num_devices: int | None


class Options(_OptionsBase):
    """``tf.data.Options``: settings attached to a dataset with ``with_options``.

    Attributes
    ----------
    experimental_distribute : DistributeOptions
        Distribution settings, notably ``auto_shard_policy``.
    deterministic : bool or None
        Whether elements must come in a fixed order (interdist always is).
    experimental_slack : bool or None
        Accepted for compatibility; no effect.

    Examples
    --------
    >>> opts = Options()
    >>> opts.experimental_distribute.auto_shard_policy = AutoShardPolicy.DATA
    """

    _fields: ClassVar[dict[str, tuple[tuple[type, ...], Any]]] = {
        "experimental_distribute": ((DistributeOptions,), DistributeOptions()),
        "deterministic": ((bool, type(None)), None),
        "experimental_slack": ((bool, type(None)), None),
    }

    experimental_distribute: DistributeOptions
    deterministic: bool | None
    experimental_slack: bool | None

    @property
    def experimental_deterministic(self) -> bool | None:
        """Deprecated alias of :attr:`deterministic`, as in TF."""
        return self.deterministic

    @experimental_deterministic.setter
    def experimental_deterministic(self, value: bool | None) -> None:
        # Reached only through __setattr__'s alias routing; kept for typing.
        self.deterministic = value

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "experimental_deterministic":
            # The alias is not in the field table; route it to the real field.
            self.deterministic = value
            return
        super().__setattr__(name, value)

    def merge(self, options: Options) -> Options:
        """New options: ``self`` overridden by what ``options`` set explicitly."""
        if not isinstance(options, Options):
            raise TypeError(f"merge() expects Options, got {type(options).__name__}")
        merged: Options = self._merged(options)
        return merged
