"""Sphinx configuration of interdist's documentation site (``make docs``).

Built with warnings as errors: ``sphinx-build -W --keep-going -b html docs docs/_build/html``.
Pages are MyST Markdown (``.md``), the API reference reStructuredText (``api/*.rst``), and the
lessons are ``notebooks/*.ipynb``, copied into ``docs/lessons/`` (gitignored) below and executed
by myst-nb at build time, as ``tests/notebooks/test_lessons.py`` executes them (a fresh
``python3`` kernel, the notebook's folder as its working directory).

``INTERDIST_DOCS_EXECUTE=off`` (or ``cache``) skips (or caches) the lessons' execution while
writing pages; the default, ``force``, runs every lesson at every build, as CI does.
"""

from __future__ import annotations

import json
import logging
import os
import re
import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent
ROOT = DOCS.parent
sys.path.insert(0, str(ROOT))  # the checkout's interdist, also when the venv's copy is not editable

import interdist  # noqa: E402  (after the path above)

# -- The lessons: notebooks/ copied into docs/lessons/ (Sphinx reads only its source folder) --------
# The copies differ in one way: the section "For the course's tests" (its heading and the cells tagged
# check-*, which print JSON facts for tests/notebooks/) gets myst-nb's "remove-cell" tag (or, where the
# heading ends a markdown cell of the story, is cut from that cell): the cells still run, but the pages
# show the story only.
LESSONS = DOCS / "lessons"


_FOR_TESTS = "## For the course's tests"


def _lesson_copy(source: Path) -> str:
    nb = json.loads(source.read_text(encoding="utf-8"))
    for cell in nb["cells"]:
        tags = cell.setdefault("metadata", {}).setdefault("tags", [])
        text = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
        if cell["cell_type"] == "markdown" and _FOR_TESTS in text and text[: text.index(_FOR_TESTS)].strip():
            cell["source"] = text[: text.index(_FOR_TESTS)].rstrip() + "\n"  # the story's part of the cell
            continue
        for_tests = any(t.startswith("check-") for t in tags) or (
            cell["cell_type"] == "markdown" and text.lstrip().startswith(_FOR_TESTS)
        )
        if for_tests and "remove-cell" not in tags:
            tags.append("remove-cell")
    return json.dumps(nb, indent=1, ensure_ascii=False) + "\n"


_sources = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
for _nb in _sources:
    _copy, _text = LESSONS / _nb.name, _lesson_copy(_nb)
    if not _copy.exists() or _copy.read_text(encoding="utf-8") != _text:  # unchanged copies keep their mtime
        _copy.write_text(_text, encoding="utf-8")
for _stale in LESSONS.glob("*.ipynb"):  # a lesson renamed or removed in notebooks/
    if _stale.name not in {nb.name for nb in _sources}:
        _stale.unlink()

# -- Project -------------------------------------------------------------------------------------
project = "interdist"
author = "the interdist authors"
copyright = "the interdist authors, BSD-3-Clause"
release = interdist.__version__
version = release

extensions = [
    "myst_nb",  # MyST Markdown pages and the executed notebooks
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.napoleon",  # the package's docstrings are NumPy style (Parameters / Returns / Raises)
    "sphinx.ext.viewcode",
    "sphinx_copybutton",
    "sphinx_design",
]

# .md and .ipynb are registered by myst_nb; .rst is Sphinx's default (the API reference)
root_doc = "index"
exclude_patterns = ["_build", "jupyter_execute", "**.ipynb_checkpoints", "Thumbs.db", ".DS_Store"]
templates_path = ["_templates"]

# -- MyST and myst-nb ----------------------------------------------------------------------------
myst_enable_extensions = ["colon_fence", "deflist", "fieldlist"]
myst_heading_anchors = 3  # [text](page.md#a-heading) links, as GitHub renders them
nb_execution_mode = os.environ.get("INTERDIST_DOCS_EXECUTE", "force")
nb_execution_timeout = 300  # seconds per cell (the suite allows 150 per lesson cell on a loaded machine)
nb_execution_raise_on_error = True  # a lesson that fails fails the build
nb_execution_show_tb = True
nb_execution_in_temp = False  # the lesson's folder is its working directory, as in the suite
nb_merge_streams = True  # the replicas' lines of one cell in one block, in order

# -- API reference -------------------------------------------------------------------------------
autosummary_generate = True
autosummary_imported_members = False
autodoc_default_options = {"members": True, "show-inheritance": True}
autodoc_member_order = "bysource"
autodoc_typehints = "signature"
autodoc_preserve_defaults = True
napoleon_google_docstring = False
napoleon_numpy_docstring = True
napoleon_use_rtype = False

# -- HTML ----------------------------------------------------------------------------------------
html_theme = "pydata_sphinx_theme"
html_title = f"interdist {release}"
html_static_path: list[str] = []
html_theme_options = {
    "navbar_align": "left",
    "show_toc_level": 2,
    "navigation_with_keys": False,
    "footer_start": ["copyright"],
    "footer_end": ["sphinx-version", "theme-version"],
}
html_context = {"default_mode": "auto"}
copybutton_prompt_text = r">>> |\.\.\. |\$ "
copybutton_prompt_is_regexp = True


# -- Outputs only a live JupyterLab renders --------------------------------------------------------
# The lessons' Bokeh outputs and docked dashboards are mime bundles that carry, beside the text/html or
# application/javascript a page shows, types only JupyterLab renders: BokehJS's loader and executor
# (read by jupyter_bokeh) and interdist's dock request (read by interdist's extension). myst-nb warns
# for every type of a bundle it cannot render, even when it renders another type of that bundle, so
# exactly these three warnings are dropped; any other unknown type still fails the build.
_JUPYTERLAB_ONLY = {
    "application/vnd.bokehjs_load.v0+json",
    "application/vnd.bokehjs_exec.v0+json",
    "application/vnd.interdist.dock+json",
}
_UNKNOWN_MIME = re.compile(r"skipping unknown output mime type: (\S+)")


class _JupyterLabOnlyOutputs(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        found = _UNKNOWN_MIME.search(str(record.msg))
        return not (found and found.group(1) in _JUPYTERLAB_ONLY)


def setup(app: object) -> None:
    for handler in logging.getLogger("sphinx").handlers:  # Sphinx's own, set up before extensions load
        handler.filters.insert(0, _JupyterLabOnlyOutputs())  # before the filter that counts warnings
