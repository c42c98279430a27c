"""The lessons' outputs are shared with tests/lab: see ``_lesson_runs.executed``."""

from __future__ import annotations

from collections.abc import Iterator

import pytest


@pytest.fixture(scope="session", autouse=True)
def _lessons_ran_in_jupyterlab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    try:
        from tests.notebooks import _lesson_runs
    except ImportError:  # nbclient or nbformat missing: the lesson tests skip themselves
        yield
        return
    _lesson_runs.RAN_IN_JUPYTERLAB = tmp_path_factory.getbasetemp() / "lessons-ran"
    yield
