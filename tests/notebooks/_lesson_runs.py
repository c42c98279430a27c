"""Each lesson run once per test session, shared by the modules that check it.

One module, imported everywhere by this absolute name, holds the runs: pytest imports a test module under a
name of its own (``notebooks.test_lessons``), so state kept in a test module and imported from another under
``tests.notebooks...`` would be two copies, and a lesson would run twice.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import nbclient
import nbformat

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"
_executed: dict[str, tuple[Any, float]] = {}
RAN_IN_JUPYTERLAB: Path | None = None  # set by conftest.py: where tests/lab saved the lessons it ran


def executed(name: str) -> Any:
    """The notebook, run once per test session in a fresh kernel (its directory as the working directory).

    When tests/lab/test_notebook_browser.py ran it already in this session (Run All in JupyterLab, then saved),
    its saved outputs are read instead of running it again: the same cells in the same kind of kernel, and the
    lesson's time is the browser's, from Run All to the last cell's count."""
    saved = RAN_IN_JUPYTERLAB / name if RAN_IN_JUPYTERLAB else None
    if name not in _executed and saved is not None and saved.exists():
        nb = nbformat.read(saved, as_version=4)
        _executed[name] = (nb, float(saved.with_name(name + ".seconds").read_text()))
        print(f"\n[lessons] {name}: the outputs of its JupyterLab run in this session")
    if name not in _executed:
        nb = nbformat.read(NOTEBOOKS / name, as_version=4)
        t0 = time.monotonic()
        nbclient.NotebookClient(nb, timeout=150, kernel_name="python3",
                                resources={"metadata": {"path": str(NOTEBOOKS)}}).execute()
        _executed[name] = (nb, time.monotonic() - t0)
    return _executed[name][0]


def facts(nb: Any, tag: str) -> dict[str, Any]:
    """The JSON lines printed by the cell tagged ``tag``, merged into one dict."""
    cells = [c for c in nb.cells if tag in c.get("metadata", {}).get("tags", [])]
    assert len(cells) == 1, f"one cell tagged {tag!r} expected, found {len(cells)}"
    out: dict[str, Any] = {}
    for o in cells[0].get("outputs", []):
        if o.get("output_type") == "stream" and o.get("name") == "stdout":
            for line in o["text"].splitlines():
                if line.startswith("{"):
                    out.update(json.loads(line))
    assert out, f"the cell tagged {tag!r} printed no JSON line"
    return out
