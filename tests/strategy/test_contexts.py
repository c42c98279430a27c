"""Which strategy is current: ``scope()``, ``experimental_set_strategy`` and the default strategy, as TF
2.21 has them (``scope`` checked when it is entered, a second strategy's scope inside the first refused,
the default back after either ends, even by an exception)."""

from __future__ import annotations

import pytest

import interdist as idist


def test_scope_set_strategy_and_the_default(mirrored2: idist.MirroredStrategy) -> None:
    s = mirrored2
    default = idist.get_strategy()
    # Outside any scope: the default strategy, in its default replica context (TF 2.21: not cross-replica).
    assert not idist.has_strategy() and not idist.in_cross_replica_context()
    for _ in range(2):  # twice: what the first time left behind must not stick
        with s.scope() as entered:
            assert entered is s and idist.get_strategy() is s and idist.has_strategy()
            assert idist.in_cross_replica_context()
            with s.scope() as again:  # the same strategy again: fine
                assert again is s
            assert idist.get_strategy() is s
        assert idist.get_strategy() is default and not idist.has_strategy()
    idist.experimental_set_strategy(s)
    try:
        assert idist.get_strategy() is s and idist.has_strategy()
        with s.scope():
            assert idist.get_strategy() is s
        assert idist.get_strategy() is s
    finally:
        idist.experimental_set_strategy(None)
    assert idist.get_strategy() is default and not idist.has_strategy()
    with pytest.raises(ZeroDivisionError):
        with s.scope():
            1 / 0  # noqa: B018
    assert idist.get_strategy() is default


def test_another_strategys_scope_inside_is_refused_when_entered(mirrored2: idist.MirroredStrategy) -> None:
    other = idist.MirroredStrategy(["CPU:0"])
    try:
        inner = other.scope()  # nothing is checked before the ``with``, as in TF
        with mirrored2.scope():
            with pytest.raises(RuntimeError, match="Mixing different tf.distribute.Strategy objects"):
                with inner:
                    pass
            assert idist.get_strategy() is mirrored2
    finally:
        other.close()
    closed = other.scope()
    with pytest.raises(RuntimeError, match="closed"):
        with closed:
            pass
    assert not idist.has_strategy()
