"""The README's demo (make demo) runs and trains to the true weights."""

from __future__ import annotations

import pytest


def test_demo_trains(capsys: pytest.CaptureFixture[str]) -> None:
    from interdist.demo import main

    w, b = main()
    out = capsys.readouterr().out
    assert abs(w - 3) < 0.05 and abs(b - 2) < 0.05
    assert "Dask dashboard: http://127.0.0.1:" in out and "per-replica loss" in out
