"""strategy.ship(module): the user's own module next to the notebook, usable in replica functions on
workers that do not have the file (issue 14, item 7)."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import numpy as np
import pytest

import interdist as idist


def _write(path: Path, scale: int) -> None:
    path.write_text(
        "import numpy as np\n\n"
        f"SCALE = {scale}\n\n"
        "def scaled(x):\n"
        "    return np.float32(x) * SCALE\n\n"
        "class Box:\n"
        "    def __init__(self, v):\n"
        "        self.v = v\n"
    )


def test_a_module_only_the_notebook_has_works_once_shipped(
    mirrored2: idist.MirroredStrategy, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    s = mirrored2
    s.run(lambda: 0)  # the workers exist before the module's directory is on the notebook's path
    # (not "*_test.py": pytest would import it through its assertion rewriter, whose loader holds pytest's
    # own objects and does not pickle)
    _write(tmp_path / "mylib_shipped.py", 3)
    monkeypatch.syspath_prepend(str(tmp_path))
    import mylib_shipped as mylib  # type: ignore[import-not-found]

    def step() -> object:
        r = idist.get_replica_context().replica_id_in_sync_group
        return mylib.scaled(r + 1), mylib.Box(r).v

    with pytest.raises(ModuleNotFoundError, match="mylib_shipped"):
        s.run(step)  # the workers cannot import it
    s.ship(mylib)
    out = s.run(step)
    assert [(float(a), int(b)) for a, b in s.experimental_local_results(out)] == [(3.0, 0), (6.0, 1)]
    # edit the file, reload, ship again: the next step runs the new code
    _write(tmp_path / "mylib_shipped.py", 10)
    mylib = importlib.reload(mylib)
    s.ship("mylib_shipped")
    out = s.run(step)
    assert [float(a) for a, _ in s.experimental_local_results(out)] == [10.0, 20.0]
    sys.modules.pop("mylib_shipped", None)


@pytest.mark.parametrize(("what", "error"), [(np, ValueError), ("json", ValueError), (3, TypeError)])
def test_ship_refuses_what_the_workers_have_or_what_is_not_a_module(
    mirrored2: idist.MirroredStrategy, what: object, error: type[Exception]
) -> None:
    with pytest.raises(error):
        mirrored2.ship(what)
